#!/usr/bin/env bash
# Measures failover on a local three-node cluster: kill -9 the leader, time until the next
# acknowledged write (an acquire of a fresh lease) through the CLI, bring the node back and time
# until it has caught up (every node a leader or follower at the same applied index), repeat.
# Prints each try and the medians.
# Usage: cluster/measure-failover.sh [TRIES] (default 5). Uses ports 7101-7103 and a temp dir.
set -euo pipefail
tries=${1:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEASEHOLD_BIN:-$here/target/release/leasehold}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
dir=$(mktemp -d)
export LEASEHOLD_ENDPOINTS=127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
peers=1=127.0.0.1:7201,2=127.0.0.1:7202,3=127.0.0.1:7203
declare -A pids
start() { "$bin" serve --id "$1" --listen "127.0.0.1:710$1" --peer-listen "127.0.0.1:720$1" --data-dir "$dir/node-$1" --peers "$peers" \
            >/dev/null 2>>"$dir/node-$1.log" & pids[$1]=$!; }
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
for id in 1 2 3; do start "$id"; done
"$bin" put warmup 1 >/dev/null
times=()
catchups=()
median() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
for try in $(seq "$tries"); do
  leader=$("$bin" status -o json | python3 -c 'import json,sys; print([n["id"] for n in json.load(sys.stdin)["nodes"] if n["role"]=="leader"][0])')
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
  until "$bin" status -o json 2>/dev/null | python3 -c 'import json,sys; n=json.load(sys.stdin)["nodes"]; sys.exit(0 if all(x["role"] in ("leader","follower") for x in n) and len({x["applied_index"] for x in n})==1 else 1)'; do sleep 0.05; done
  caught=$(( ($(date +%s%N) - t0) / 1000000 ))
  catchups+=("$caught")
  echo "try $try: killed leader node $leader; next acknowledged write after $ms ms; restarted, caught up after $caught ms"
done
echo "median over $tries tries: failover $(median "${times[@]}") ms, catch-up $(median "${catchups[@]}") ms"
