"""Whether the Python client gains from the Batch stream: puts over TLS through
`leasehold.Client`, with every call a unary call (`batch=False`) and as shipped (calls under
way together share the node's Batch stream), on one local three-node TLS cluster, in turn.
Each setting runs PROCS processes of THREADS threads sharing one Client a process, every
thread putting one key after another for SECS seconds (process i asks node i mod 3 first).
Prints puts a second and the latency of a put for each way and setting.

Usage: python cluster/measure-python-batch.py; SETTINGS ("16x1 4x16 1x64": PROCSxTHREADS),
SECS (8) in the environment; LEASEHOLD_BIN (default target/release/leasehold). Needs the
package installed (pip install ./clients/python). Uses ports 7731-7733 and 7741-7743 on
127.0.0.1.
"""

import itertools
import multiprocessing
import os
import pathlib
import statistics
import sys
import threading
import time

from python_tls_cluster import tls_cluster

HERE = pathlib.Path(__file__).resolve().parent.parent
BIN = os.environ.get("LEASEHOLD_BIN", str(HERE / "target" / "release" / "leasehold"))
SETTINGS = os.environ.get("SETTINGS", "16x1 4x16 1x64").split()
SECS = float(os.environ.get("SECS", "8"))
ENDPOINTS = [f"127.0.0.1:773{i}" for i in (1, 2, 3)]


def process(args):
    """One process: THREADS threads putting for SECS seconds through one Client; their
    latencies."""
    import leasehold

    index, way, threads, tls_dir = args
    tls = leasehold.TLS.from_files(f"{tls_dir}/ca.pem", f"{tls_dir}/client.pem", f"{tls_dir}/client-key.pem")
    endpoints = ENDPOINTS[index % 3:] + ENDPOINTS[: index % 3]
    with leasehold.Client(endpoints, tls=tls, batch=way == "batch") as client:
        client.put(f"py-batch/{index}/warm", b"v")
        start = threading.Barrier(threads)
        latencies = [[] for _ in range(threads)]

        def run(t):
            start.wait()
            until = time.monotonic() + SECS
            for n in itertools.count():
                sent = time.monotonic()
                if sent >= until:
                    return
                client.put(f"py-batch/{index}/{t}/{n % 100}", b"v" * 64)
                latencies[t].append(time.monotonic() - sent)

        workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        return [l for per_thread in latencies for l in per_thread]


def measure(way, procs, threads, tls_dir):
    with multiprocessing.Pool(procs) as pool:
        runs = pool.map(process, [(i, way, threads, tls_dir) for i in range(procs)])
    latencies = sorted(l for run in runs for l in run)
    return len(latencies) / SECS, statistics.median(latencies) * 1000, latencies[int(len(latencies) * 0.99)] * 1000


def main() -> int:
    with tls_cluster(BIN, ENDPOINTS, [7741, 7742, 7743]) as (tls_dir, env):
        print(f"puts from Python over TLS, {SECS:.0f} s each: puts/s, p50 and p99 ms")
        for setting in SETTINGS:
            procs, threads = (int(n) for n in setting.split("x"))
            row = []
            for way in ("unary", "batch"):
                ops, p50, p99 = measure(way, procs, threads, tls_dir)
                row.append(ops)
                print(f"{procs:3} processes x {threads:3} threads, {way:5}: {ops:8.0f}/s, p50 {p50:6.2f}, p99 {p99:6.2f}")
            print(f"{'':31} batch/unary: {row[1] / row[0]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
