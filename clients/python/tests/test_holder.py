"""The Holder against a real cluster: renewals, takeover after kill -9, a leader kill during
renewals, a holder stopped past its TTL, and the asyncio twin. Figures are printed (pytest -s)."""

import asyncio
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time

import pytest

import leasehold
from leasehold.aio import AsyncHolder

from conftest import REPO, holder_process, wait_for


def read_step(proc, step):
    line = proc.stdout.readline()
    assert line, f"the holder process ended (exit {proc.wait()}) before {step}"
    said = json.loads(line)
    assert said["step"] == step, said
    return said


def test_a_holder_renews_every_third_of_its_ttl_and_stays_safe(client):
    ttl = 1.5
    with leasehold.Holder(client, "h/renew", holder="renewer", ttl=ttl) as held:
        started, first_safe = time.monotonic(), held.safe_until
        # Two TTLs: six renewals at a third of the TTL each, give or take a slow one.
        while time.monotonic() - started < 2 * ttl:
            assert held.is_safe(), held.unsafe_reason()
            time.sleep(0.01)
        elapsed = time.monotonic() - started
        assert 5 <= held.renewals <= 8, held.renewals
        assert held.safe_until > first_safe
        state = client.get_lease("h/renew")
        assert (state.holder, state.token) == (held.holder, held.token)
    print(f"\nrenewals: {held.renewals} in {elapsed:.2f} s at ttl {ttl} s: {held.renewals / elapsed:.2f}/s, one every {elapsed / held.renewals * 1000:.0f} ms (ttl/3 = {ttl / 3 * 1000:.0f} ms)")
    assert client.get_lease("h/renew").holder == ""  # released on exit
    assert held.lost_reason == "released"


def test_a_name_too_long_for_its_suffix_is_refused_naming_the_room_left(client):
    # Before, the store refused it as 30 bytes longer than given.
    with pytest.raises(ValueError, match="at most 98 bytes"):
        leasehold.Holder(client, "l", holder="h" * 99, ttl=5)
    with pytest.raises(ValueError, match="at most 128 bytes"):
        leasehold.Holder(client, "l", holder="h" * 129, ttl=5, exact_name=True)
    held = leasehold.Holder(client, "l", holder="h" * 98, ttl=5)
    assert len(held.holder.encode()) <= 128


def test_a_holder_that_may_not_wait_is_told_who_holds(client):
    with leasehold.Holder(client, "h/busy", holder="first", ttl=5) as first:
        with pytest.raises(leasehold.HeldError) as held:
            leasehold.Holder(client, "h/busy", holder="second", ttl=5).acquire()
        assert (held.value.held.holder, held.value.held.token) == (first.holder, first.token)


def test_after_kill_9_of_a_holder_process_a_waiting_standby_takes_over(fresh_cluster):
    ttl = 2.0
    proc = holder_process(fresh_cluster.endpoints, "h/takeover", ttl)
    try:
        first = read_step(proc, "granted")
        with leasehold.Client(fresh_cluster.endpoints) as client:
            standby = leasehold.Holder(client, "h/takeover", holder="standby", ttl=ttl, wait=True)
            granted_at = []
            waiting = threading.Thread(target=lambda: (standby.acquire(), granted_at.append(time.monotonic())))
            waiting.start()
            assert standby.waiting.wait(10), "the standby was refused and waits on its watch"
            assert not granted_at
            killed_at = time.monotonic()
            proc.send_signal(signal.SIGKILL)
            waiting.join(ttl * 3)
            assert granted_at, "the standby was not granted within three TTLs of the kill"
            assert standby.token > first["token"]
            stale = client.put("h/takeover/out", b"late", lease="h/takeover", token=first["token"])
            assert isinstance(stale, leasehold.StaleToken)
            standby.release()
        print(f"\nkill -9 of the holder to the standby's grant: {(granted_at[0] - killed_at) * 1000:.0f} ms (ttl {ttl * 1000:.0f} ms)")
    finally:
        proc.kill()
        proc.wait()


def test_a_leader_kill_during_renewals_loses_nothing(fresh_cluster):
    with leasehold.Client(fresh_cluster.endpoints) as client:
        leader = fresh_cluster.leader(client)
        with leasehold.Holder(client, "h/failover", holder="keeper", ttl=3.0) as held:
            fresh_cluster.kill(leader)
            before = held.renewals
            # Three renewals after the kill, each before the safe deadline.
            wait_for("three renewals after the leader's kill", lambda: held.renewals >= before + 3 or None, within=15)
            assert held.is_safe() and not held.lost.is_set(), held.unsafe_reason()
            state = client.get_lease("h/failover")
            assert (state.holder, state.token) == (held.holder, held.token)
            assert fresh_cluster.leader(client) != leader


def test_a_holder_stopped_past_its_ttl_is_refused_when_it_wakes(fresh_cluster):
    ttl = 1.0
    proc = holder_process(fresh_cluster.endpoints, "h/paused", ttl)
    try:
        first = read_step(proc, "granted")
        proc.send_signal(signal.SIGSTOP)
        with leasehold.Client(fresh_cluster.endpoints) as client:
            successor = wait_for("the lease to pass to a successor", lambda: (lambda g: g if isinstance(g, leasehold.Granted) else None)(client.acquire("h/paused", holder="successor", ttl=30)))
            assert successor.token > first["token"]
            assert isinstance(client.put("h/paused/out", b"successor", lease="h/paused", token=successor.token), leasehold.Written)
            proc.send_signal(signal.SIGCONT)
            proc.stdin.write("write\n")
            woke = read_step(proc, "woke")
            assert woke["local"].startswith("refused"), woke
            assert (woke["store"], woke["fence"]) == ("StaleToken", successor.token)
            assert client.get("h/paused/out") == b"successor"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()


def test_a_holder_counts_the_time_its_host_was_suspended(client, monkeypatch):
    """Safety review 161302a, finding 5: the Holder's clock counts a suspended host, as the
    store's does. Its clock jumps as a resume makes CLOCK_BOOTTIME jump (a minute asleep,
    twenty TTLs) while time.monotonic() does not: the holding is unsafe at once and a fenced
    write is refused without being sent. Before, the Holder read time.monotonic()."""
    from leasehold import _holder

    with leasehold.Holder(client, "h/suspended", holder="sleeper", ttl=3) as held:
        assert held.is_safe()
        real = _holder.now
        monkeypatch.setattr(_holder, "now", lambda: real() + 60)
        assert not held.is_safe(), "safe after a minute asleep"
        with pytest.raises(leasehold.NotSafeError):
            held.fenced_put("h/suspended-row", b"late")
        assert held.wait_lost(timeout=1) is not None
    assert client.get("h/suspended-row") is None


def test_fenced_put_is_refused_locally_once_released(client):
    held = leasehold.Holder(client, "h/lost", holder="loser", ttl=1.0).acquire()
    assert isinstance(held.release(), leasehold.Released)
    assert held.wait_lost(timeout=1) == "released" and not held.is_safe()
    with pytest.raises(leasehold.NotSafeError):
        held.fenced_put("h/lost/out", b"x")
    assert client.get("h/lost/out") is None


def test_the_asyncio_holder_holds_renews_and_releases(client):
    async def run():
        async with AsyncHolder(client, "h/async", holder="looped", ttl=1.0) as held:
            assert isinstance(await held.fenced_put("h/async/out", b"v"), leasehold.Written)
            start = held.sync.renewals
            while held.sync.renewals < start + 2:
                assert held.is_safe()
                await asyncio.sleep(0.05)
            assert await held.wait_lost(timeout=0.1) is None
            return held.holder

    holder = asyncio.run(run())
    state = client.get_lease("h/async")
    assert state.holder == "" and holder.startswith("looped~")



def test_the_singleton_example_runs_one_copy_at_a_time_and_a_standby_takes_over(cluster):
    """examples/python/singleton.py as its docstring runs it: two copies, one leads; kill -9
    the leader and the other leads under a bigger token."""
    example = REPO / "examples" / "python" / "singleton.py"
    env = dict(os.environ, LEASEHOLD_ENDPOINTS=",".join(cluster.endpoints))
    said: "queue.Queue[tuple[subprocess.Popen, str]]" = queue.Queue()

    def start():
        proc = subprocess.Popen([sys.executable, str(example)], stdout=subprocess.PIPE, text=True, env=env)
        threading.Thread(target=lambda: [said.put((proc, line)) for line in proc.stdout], daemon=True).start()
        return proc

    def leads(within):
        """The copy that says it leads next, and its token."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            try:
                proc, line = said.get(timeout=0.2)
            except queue.Empty:
                continue
            if line.startswith("leading with token"):
                return proc, int(line.split()[-1])
        raise AssertionError(f"no copy led within {within} s")

    copies = [start(), start()]
    try:
        leader, token = leads(20)
        leader.send_signal(signal.SIGKILL)
        leader.wait()
        successor, taken = leads(20)
        assert successor is not leader and taken > token, (token, taken)
    finally:
        for proc in copies:
            proc.kill()
            proc.wait()


def test_a_holder_process_told_to_stop_gives_its_lease_up_at_once(fresh_cluster):
    """SIGTERM, as a service manager stops a process: with release_on_signals the lease is
    free as the process ends, not a TTL later, and the process ends as SIGTERM ends it."""
    ttl = 30
    proc = holder_process(fresh_cluster.endpoints, "h/sigterm", ttl, "--release-on-sigterm")
    try:
        granted = json.loads(proc.stdout.readline())
        assert granted["step"] == "granted", granted
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == -signal.SIGTERM
        with leasehold.Client(fresh_cluster.endpoints) as client:
            state = client.get_lease("h/sigterm")
        assert state.holder == "" and state.token == granted["token"], state
        assert time.monotonic() - stopped < ttl / 3
    finally:
        proc.kill()
        proc.wait()
