#!/usr/bin/env bash
# Measures a local three-node cluster filled with live leases: resident memory per lease on each
# node, the snapshot's size and build times, acquire throughput and latency empty and full (with
# the snapshot builds during the full runs: capture_ms, how long each waited for and held the
# state lock), failover (kill -9 of the leader, time to the next acknowledged write) and a restarted node's
# catch-up (time until it has applied what the leader has, and of that, the opening of its
# storage), at the lease count printed before them; then the throughput (the full runs add
# leases: each of them is at least LEASES full).
# Usage: cluster/measure-scale.sh [LEASES] (default 1000000). Fills with `leasehold bench
# --workload acquire --ttl 3600` (64 clients, to the leader). Uses ports 7111-7113, 7211-7213
# and 7311-7313 and a temp dir; LEASEHOLD_BIN names the binary (default: target/release).
#
# Empty and full are measured in turns, ROUNDS (default 5) of each, 20 s a run: the empty runs on
# a fresh cluster of its own each time (ports 7141-7143, 7241-7243 and 7341-7343, removed after
# its run), the full one on the filled cluster, so that both see the machine as it is that
# minute. Before each run the filled cluster is left to finish what it was doing (a snapshot
# build), so that no run pays for another's work.
target=${1:-1000000}
rounds=${ROUNDS:-5}
base=7110
source "$(dirname "$0")/measure-lib.sh"
rss_kib() { awk '/VmRSS/{print $2}' "/proc/${pids[$1]}/status"; }
# CPU time (clock ticks) the cluster's nodes have used.
cpu_ticks() {
  local total=0 p
  for p in "${pids[@]}"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo "$total"
}
# Waits (at most a minute) until the nodes together use under a tenth of a core over a second.
wait_idle() {
  local hz before tries
  hz=$(getconf CLK_TCK)
  for tries in $(seq 60); do
    before=$(cpu_ticks)
    sleep 1
    [ $(( $(cpu_ticks) - before )) -lt $(( hz / 10 )) ] && return 0
  done
  echo "  (the filled cluster was still busy after a minute)"
}
# One acquire run of SECONDS on a fresh three-node cluster of its own, removed after: one JSON line.
empty_bench() {
  (
    unset pids
    base=7140
    source "$(dirname "$0")/measure-lib.sh"
    start_all
    acquire_bench "$1"
  )
}
# The mean of the numbers on standard input.
mean() { awk '{t += $1} END {printf "%.2f", t / NR}'; }
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }

start_all
declare -A idle
for id in 1 2 3; do idle[$id]=$(rss_kib "$id"); done
started=$(date +%s)
while true; do
  # A status or a bench cut short by a busy node is tried again, not the end of the run.
  leases=$(status 'print(max(x["leases"] for x in n))') || { sleep 1; continue; }
  [ "$leases" -ge "$target" ] && break
  acquire_bench 10 >/dev/null || sleep 1
done
echo "filled: $leases leases in $(( $(date +%s) - started )) s"
sleep 5
for id in 1 2 3; do
  rss=$(rss_kib "$id")
  echo "node $id: resident $((rss / 1024)) MiB ($(( idle[$id] / 1024 )) MiB empty): $(( (rss - idle[$id]) * 1024 / leases )) bytes per lease"
done
status 'x=n[0]; print("snapshot: %d bytes, %.1f bytes per lease; %d client sessions open" % (x["snapshot_bytes"], x["snapshot_bytes"] / max(x["leases"], 1), x["sessions"]))'
# Every node's snapshot builds logged since the time SINCE (each line starts with its time).
builds() {
  grep -h "snapshot build timed" "$dir"/node-*.log | awk -v since="$1" '$1 >= since' |
    grep -o "capture_ms=[0-9]* total_ms=[0-9]*" | sed 's/^/  /' || true
}
echo "last builds while filling:"
builds "" | tail -3

leader=$(leader_id)
echo "failover and catch-up at $(status 'print(max(x["leases"] for x in n))') leases"
t0=$(date +%s%N)
kill -9 "${pids[$leader]}"
"$bin" acquire "after-kill" --holder h --ttl 10 >/dev/null
echo "failover: killed leader node $leader; next acknowledged write after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
wait "${pids[$leader]}" 2>/dev/null || true
t0=$(date +%s%N)
start "$leader"
until status "l=[x for x in n if x['role']=='leader'][0]; me=[x for x in n if x['id']==$leader][0]; sys.exit(0 if me['applied_index']>=l['applied_index'] and me['role']=='follower' else 1)" 2>/dev/null; do sleep 0.05; done
echo "catch-up: node $leader restarted and applied what the leader had after $(( ($(date +%s%N) - t0) / 1000000 )) ms"
# Of which reading its snapshot and its log back (side by side), at the leases it loaded:
grep -h "snapshot and log read back" "$dir/node-$leader.log" | tail -1 | grep -o "snapshot_ms=[0-9]* log_ms=[0-9]*" | sed 's/^/  /' || true
grep -h "storage opened" "$dir/node-$leader.log" | tail -1 | grep -o "leases=[0-9]*" | sed 's/^/  /' || true

since=$(date -u +%Y-%m-%dT%H:%M:%S)
echo "acquire, empty and full in turns ($rounds rounds of 20 s runs):"
results="$dir/results"
for round in $(seq "$rounds"); do
  wait_idle
  line=$(empty_bench 20)
  echo "  empty: $(summary <<<"$line")"
  echo "empty $line" >>"$results"
  wait_idle
  line=$(acquire_bench 20)
  echo "  full:  $(summary <<<"$line")"
  echo "full $line" >>"$results"
done
for kind in empty full; do
  # The runs are equally long, so the mean of their rates is the rate over all of them.
  ops=$(grep "^$kind " "$results" | cut -d' ' -f2- | while read -r l; do field ops_per_s <<<"$l"; done | mean)
  p99=$(grep "^$kind " "$results" | cut -d' ' -f2- | while read -r l; do field p99_ms <<<"$l"; done | mean)
  declare "${kind}_ops=$ops" "${kind}_p99=$p99"
  echo "$kind, over its runs: $ops ops/s, p99 $p99 ms (the mean of the runs' p99)"
done
python3 -c 'import sys; e, f, pe, pf = map(float, sys.argv[1:]); print("full/empty: throughput %.2f, p99 %.2f" % (f / e, pf / pe))' \
  "$empty_ops" "$full_ops" "$empty_p99" "$full_p99"
echo "  snapshot builds during the full runs (every node's): $(builds "$since" | grep -c . || true)"
builds "$since"
