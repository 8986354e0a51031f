#!/usr/bin/env bash
# Measures failover on a local three-node cluster: kill -9 the leader, time until the next
# acknowledged write (an acquire of a fresh lease) through the CLI, bring the node back and time
# until it has caught up (every node a leader or follower at the same applied index), repeat.
# Prints each try and the medians.
# Usage: cluster/measure-failover.sh [TRIES] (default 5). Uses ports 7101-7103, 7201-7203 and
# 7301-7303 and a temp dir; LEASEHOLD_BIN names the binary (default: target/release).
tries=${1:-5}
base=7100
source "$(dirname "$0")/measure-lib.sh"
start_all
"$bin" put warmup 1 >/dev/null
times=()
catchups=()
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for try in $(seq "$tries"); do
  leader=$(leader_id)
  t0=$(date +%s%N)
  kill -9 "${pids[$leader]}"
  "$bin" acquire "after-kill-$try" --holder h --ttl 10 >/dev/null
  t1=$(date +%s%N)
  ms=$(( (t1 - t0) / 1000000 ))
  times+=("$ms")
  wait "${pids[$leader]}" 2>/dev/null || true
  t0=$(date +%s%N)
  start "$leader"
  # The restarted node catches up and the cluster settles before the next kill.
  until status 'sys.exit(0 if all(x["role"] in ("leader","follower") for x in n) and len({x["applied_index"] for x in n})==1 else 1)' 2>/dev/null; do sleep 0.05; done
  caught=$(( ($(date +%s%N) - t0) / 1000000 ))
  catchups+=("$caught")
  echo "try $try: killed leader node $leader; next acknowledged write after $ms ms; restarted, caught up after $caught ms"
done
echo "median over $tries tries: failover $(median "${times[@]}") ms, catch-up $(median "${catchups[@]}") ms"
