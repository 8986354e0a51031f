"""Renewals over TLS from Python beside the Rust client's, on one local three-node cluster:
PROCS processes, each with its own Client, acquire LEASES leases each and renew them all in one
request after another for SECS seconds; then `leasehold bench --workload renew --leases LEASES
--clients PROCS` on the same cluster. Prints requests and leases renewed a second, and the
latency of a request, for both.

Usage: python cluster/measure-python-renewals.py; PROCS (16), LEASES (100), SECS (10) in the
environment; LEASEHOLD_BIN (default target/release/leasehold). Needs the package installed
(pip install ./clients/python). Uses ports 7711-7713 and 7721-7723 on 127.0.0.1.
"""

import json
import multiprocessing
import os
import pathlib
import statistics
import subprocess
import sys
import time

from python_tls_cluster import tls_cluster

HERE = pathlib.Path(__file__).resolve().parent.parent
BIN = os.environ.get("LEASEHOLD_BIN", str(HERE / "target" / "release" / "leasehold"))
PROCS = int(os.environ.get("PROCS", "16"))
LEASES = int(os.environ.get("LEASES", "100"))
SECS = float(os.environ.get("SECS", "10"))
ENDPOINTS = [f"127.0.0.1:771{i}" for i in (1, 2, 3)]


def renewer(args):
    """One process: its leases acquired, then renewed together until the time is up."""
    import leasehold

    index, tls_dir = args
    tls = leasehold.TLS.from_files(f"{tls_dir}/ca.pem", f"{tls_dir}/client.pem", f"{tls_dir}/client-key.pem")
    with leasehold.Client(ENDPOINTS[index % 3:] + ENDPOINTS[: index % 3], tls=tls) as client:
        holder = f"renewer-{index}"
        renewals = []
        for n in range(LEASES):
            lease = f"py-renew/{index}/{n}"
            granted = client.acquire(lease, holder=holder, ttl=60)
            renewals.append(leasehold.Renewal(lease=lease, holder=holder, token=granted.token, ttl=60))
        latencies = []
        until = time.monotonic() + SECS
        while time.monotonic() < until:
            sent = time.monotonic()
            outcomes = client.renew(renewals)
            latencies.append(time.monotonic() - sent)
            assert all(isinstance(o, leasehold.Renewed) for o in outcomes), outcomes
        return latencies


def main() -> int:
    with tls_cluster(BIN, ENDPOINTS, [7721, 7722, 7723]) as (tls_dir, env):
        with multiprocessing.Pool(PROCS) as pool:
            runs = pool.map(renewer, [(i, tls_dir) for i in range(PROCS)])
        latencies = sorted(l for run in runs for l in run)
        requests = len(latencies) / SECS
        print(f"python: {PROCS} processes x {LEASES} leases, TLS: {requests:.0f} requests/s, "
              f"{requests * LEASES:.0f} leases renewed/s; request p50 "
              f"{statistics.median(latencies) * 1000:.2f} ms, p99 "
              f"{latencies[int(len(latencies) * 0.99)] * 1000:.2f} ms")
        bench = subprocess.run(
            [BIN, "bench", "--workload", "renew", "--leases", str(LEASES), "--clients", str(PROCS),
             "--duration", str(int(SECS)), "--endpoints", ",".join(ENDPOINTS), "-o", "json"],
            env=env, capture_output=True, text=True, check=True)
        r = json.loads(bench.stdout)
        print(f"rust:   {PROCS} clients x {LEASES} leases, TLS: {r['ops_per_s']:.0f} requests/s, "
              f"{r['ops_per_s'] * LEASES:.0f} leases renewed/s; request p50 {r['p50_ms']:.2f} ms, "
              f"p99 {r['p99_ms']:.2f} ms; errors {r['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
