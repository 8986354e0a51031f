#!/usr/bin/env bash
# Measures a page of `ListLeases` (100 leases, linearizable) on a local three-node cluster filled
# with live leases: `leasehold bench --workload list`, each client walking the whole listing page
# after page, at 1 and at 16 clients, to the leader and spread over the nodes.
# Usage: cluster/measure-listing.sh [LEASES] (default 1000000). Fills with `leasehold bench
# --workload acquire --ttl 3600` (64 clients, to the leader). Uses ports 7161-7163, 7261-7263 and
# 7361-7363 and a temp dir; LEASEHOLD_BIN names the binary (default: target/release).
target=${1:-1000000}
base=7160
source "$(dirname "$0")/measure-lib.sh"

start_all
fill "$target"
# The filled cluster is left to finish its snapshot builds first.
sleep 10
list_bench() {
  "$bin" bench --workload list --clients "$1" --connect "$2" --warmup 1 --duration 10 -o json 2>/dev/null
}
for clients in 1 16; do
  for connect in leader spread; do
    line=$(list_bench "$clients" "$connect") || { echo "  $clients clients, $connect: the run failed"; continue; }
    python3 -c 'import json,sys; r=json.loads(sys.argv[1]); print("  %s clients, %s: %.0f pages/s, p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (sys.argv[2], sys.argv[3], r["ops_per_s"], r["p50_ms"], r["p99_ms"], r["max_ms"]))' "$line" "$clients" "$connect"
  done
done
