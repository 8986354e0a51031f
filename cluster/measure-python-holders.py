"""Measures the Python Holder on a local three-node cluster, as cluster/measure-holders.sh does
for `leasehold hold`:
  1. renewals: one Holder (ttl TTL) kept HOLD_SECS seconds: renewals a second, and the interval;
  2. a clean handover: the holder's `with` block ends (release), and a standby waiting in
     Holder(wait=True) is granted: from the release's start to the standby's grant, TRIES times;
  3. a crash: a holder process is killed (kill -9); the standby is granted once the lease
     expires in store time: from the kill to the grant, TRIES times.

Usage: python cluster/measure-python-holders.py [TRIES] (default 5); TTL (3), HOLD_SECS (30) in
the environment; LEASEHOLD_BIN (default target/release/leasehold). Needs the package installed
(pip install ./clients/python).
"""

import os
import pathlib
import signal
import statistics
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(HERE / "clients" / "python" / "tests"))
os.environ.setdefault("LEASEHOLD_BIN", str(HERE / "target" / "release" / "leasehold"))

import leasehold  # noqa: E402
from conftest import LocalCluster, holder_process  # noqa: E402


def standby_granted(client, lease, ttl):
    """A standby waiting for ``lease`` in a thread: the thread, and where its grant time goes."""
    granted = []
    standby = leasehold.Holder(client, lease, holder="standby", ttl=ttl, wait=True)

    def wait():
        standby.acquire()
        granted.append(time.monotonic())

    thread = threading.Thread(target=wait)
    thread.start()
    return standby, thread, granted


def summary(name, values):
    ms = sorted(v * 1000 for v in values)
    print(f"{name}: " + ", ".join(f"{v:.0f}" for v in ms) + f" ms (median {statistics.median(ms):.0f})")


def main():
    tries = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ttl = float(os.environ.get("TTL", "3"))
    hold_secs = float(os.environ.get("HOLD_SECS", "30"))
    with tempfile.TemporaryDirectory() as root:
        cluster = LocalCluster(pathlib.Path(root))
        for i in cluster.ids:
            cluster.start(i)
        try:
            with leasehold.Client(cluster.endpoints) as client:
                cluster.leader(client)
                with leasehold.Holder(client, "measure/renew", holder="renewer", ttl=ttl) as held:
                    started = time.monotonic()
                    time.sleep(hold_secs)
                    elapsed, renewals = time.monotonic() - started, held.renewals
                print(f"renewals: {renewals} in {elapsed:.1f} s at ttl {ttl} s: {renewals / elapsed:.2f}/s, "
                      f"one every {elapsed / renewals * 1000:.0f} ms (ttl/3 = {ttl / 3 * 1000:.0f} ms)")

                handovers = []
                for n in range(tries):
                    lease = f"measure/handover-{n}"
                    first = leasehold.Holder(client, lease, holder="first", ttl=ttl).acquire()
                    standby, thread, granted = standby_granted(client, lease, ttl)
                    time.sleep(0.5)  # the standby is refused and waits on its watch
                    released_at = time.monotonic()
                    first.release()
                    thread.join(ttl * 3)
                    handovers.append(granted[0] - released_at)
                    standby.release()
                summary("release to the standby's grant", handovers)

                crashes = []
                for n in range(tries):
                    lease = f"measure/crash-{n}"
                    proc = holder_process(cluster.endpoints, lease, ttl)
                    assert proc.stdout.readline(), "the holder process did not start"
                    standby, thread, granted = standby_granted(client, lease, ttl)
                    time.sleep(0.5)
                    killed_at = time.monotonic()
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    thread.join(ttl * 3)
                    crashes.append(granted[0] - killed_at)
                    standby.release()
                summary(f"kill -9 of the holder process to the standby's grant (ttl {ttl * 1000:.0f} ms)", crashes)
        finally:
            cluster.stop()


if __name__ == "__main__":
    main()
