#!/usr/bin/env bash
# Measures a local three-node cluster filled with live leases: resident memory per lease on each
# node, the snapshot's size and build times, acquire throughput and latency empty and full (with
# the snapshot builds during the full run: capture_ms, how long each waited for and held the
# state lock), then failover (kill -9 of the leader, time to the next acknowledged write) and a
# restarted node's catch-up (time until it has applied what the leader has, and of that, the
# opening of its storage), at the lease count printed before them (the full run adds leases).
# Usage: cluster/measure-scale.sh [LEASES] (default 1000000). Fills with `leasehold bench
# --workload acquire --ttl 3600` (64 clients, to the leader). Uses ports 7111-7113, 7211-7213
# and 7311-7313 and a temp dir; LEASEHOLD_BIN names the binary (default: target/release).
target=${1:-1000000}
base=7110
source "$(dirname "$0")/measure-lib.sh"
rss_kib() { awk '/VmRSS/{print $2}' "/proc/${pids[$1]}/status"; }

start_all
declare -A idle
for id in 1 2 3; do idle[$id]=$(rss_kib "$id"); done
echo "empty: acquire $(acquire_bench 10 | summary)"
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
since=$(date -u +%Y-%m-%dT%H:%M:%S)
# A minute, so that the leader builds a snapshot or two of the full table during it (every
# 10,000 entries).
echo "full: acquire $(acquire_bench 60 | summary)"
echo "  snapshot builds during it (every node's): $(builds "$since" | grep -c . || true)"
builds "$since"

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
