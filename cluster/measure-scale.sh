#!/usr/bin/env bash
# Measures a local three-node cluster filled with live leases: resident memory per lease on each
# node, the snapshot's size and build times, failover (kill -9 of the leader, time to the next
# acknowledged write) and a restarted node's catch-up (time until it has applied what the leader
# has, and of that, the opening of its storage) at the lease count printed before them; then
# acquire throughput and latency empty and full, with the snapshot builds during the full runs
# (capture_ms: how long each waited for and held the state lock). The full runs add leases: each
# starts at least LEASES full.
# Usage: cluster/measure-scale.sh [LEASES] (default 1000000). Fills with `leasehold bench
# --workload acquire --ttl 3600` (64 clients, to the leader). Uses ports 7111-7113, 7211-7213
# and 7311-7313 and a temp dir; LEASEHOLD_BIN names the binary (default: target/release).
#
# Empty and full are measured in turns, ROUNDS (default 5) of each, 20 s a run: the empty runs on
# a fresh cluster of its own each time (ports 7141-7143, 7241-7243 and 7341-7343, removed after
# its run), the full one on the filled cluster, so that both see the machine as it is that
# minute. Before each run the filled cluster is left to finish what it was doing (a snapshot
# build, its CPU and its writes), so that no run pays for another's work.
target=${1:-1000000}
rounds=${ROUNDS:-5}
[ "$rounds" -ge 1 ] || { echo "ROUNDS must be at least 1" >&2; exit 2; }
base=7110
source "$(dirname "$0")/measure-lib.sh"
rss_kib() { awk '/VmRSS/{print $2}' "/proc/${pids[$1]}/status"; }
# The sum over the cluster's nodes of what the awk PROGRAM prints from /proc/PID/FILE.
nodes_total() {
  local total=0 p
  for p in "${pids[@]}"; do total=$((total + $(awk "$2" "/proc/$p/$1"))); done
  echo "$total"
}
# CPU time (clock ticks) the cluster's nodes have used, and bytes they have written.
cpu_ticks() { nodes_total stat '{print $14 + $15}'; }
written() { nodes_total io '/^write_bytes/{print $2}'; }
# Waits (at most a minute) until, over a second, the nodes together use under a tenth of a core
# and write under 64 KiB: a snapshot write is mostly waiting on the disk.
wait_idle() {
  local hz ticks bytes tries
  hz=$(getconf CLK_TCK)
  for tries in $(seq 60); do
    ticks=$(cpu_ticks) bytes=$(written)
    sleep 1
    if [ $(( $(cpu_ticks) - ticks )) -lt $(( hz / 10 )) ] && [ $(( $(written) - bytes )) -lt 65536 ]; then
      return 0
    fi
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

start_all
declare -A idle
for id in 1 2 3; do idle[$id]=$(rss_kib "$id"); done
fill "$target"
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

echo "acquire, empty and full in turns ($rounds rounds of 20 s runs):"
results="$dir/results"
: >"$results"
# One 20 s run of BENCH (empty_bench or acquire_bench), noted as KIND. A run cut short (a busy
# node, a leader not found) is reported and left out.
turn() {
  local kind=$1 line
  if line=$("$2" 20); then
    printf '  %-6s %s\n' "$kind:" "$(summary <<<"$line")"
    echo "$kind $line" >>"$results"
  else
    echo "  $kind: the run failed"
  fi
}
wait_idle
since=$(date -u +%Y-%m-%dT%H:%M:%S)
for round in $(seq "$rounds"); do
  [ "$round" -gt 1 ] && wait_idle
  turn empty empty_bench
  wait_idle
  turn full acquire_bench
done
# The runs are equally long, so the mean of their rates is the rate over all of them.
python3 - "$results" <<'EOF'
import json, sys
runs = {"empty": [], "full": []}
for line in open(sys.argv[1]):
    kind, run = line.split(" ", 1)
    runs[kind].append(json.loads(run))
if not runs["empty"] or not runs["full"]:
    sys.exit("no empty or no full run succeeded")
mean = {k: {f: sum(r[f] for r in v) / len(v) for f in ("ops_per_s", "p99_ms")} for k, v in runs.items()}
for kind, m in mean.items():
    print("%s, over its %d runs: %.0f ops/s, p99 %.2f ms (the mean of the runs' p99)"
          % (kind, len(runs[kind]), m["ops_per_s"], m["p99_ms"]))
print("full/empty: throughput %.2f, p99 %.2f" % (mean["full"]["ops_per_s"] / mean["empty"]["ops_per_s"],
                                                 mean["full"]["p99_ms"] / mean["empty"]["p99_ms"]))
EOF
echo "  snapshot builds during the full runs (every node's): $(builds "$since" | grep -c . || true)"
builds "$since"
