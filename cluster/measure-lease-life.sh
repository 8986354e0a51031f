#!/usr/bin/env bash
# Measures a lease's life through the CLI on a local three-node cluster: the time from sending
# `acquire --ttl TTL` to a rival's acquire being granted, polled every 50 ms. TRIES times with no
# fault, then TRIES times with the leader killed (kill -9) KILL_AFTER seconds after the grant.
# Usage: cluster/measure-lease-life.sh [TRIES] (default 5); TTL (5), KILL_AFTER (2) in the
# environment. Uses ports 7501-7503 (clients) and 7601-7603 (peers), and a temp dir.
set -euo pipefail
tries=${1:-5}
ttl=${TTL:-5}
kill_after=${KILL_AFTER:-2}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEASEHOLD_BIN:-$here/target/release/leasehold}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
dir=$(mktemp -d)
export LEASEHOLD_ENDPOINTS=127.0.0.1:7501,127.0.0.1:7502,127.0.0.1:7503
peers=1=127.0.0.1:7601,2=127.0.0.1:7602,3=127.0.0.1:7603
declare -A pids
start() { "$bin" serve --id "$1" --listen "127.0.0.1:750$1" --peer-listen "127.0.0.1:760$1" --data-dir "$dir/node-$1" --peers "$peers" \
            >/dev/null 2>>"$dir/node-$1.log" & pids[$1]=$!; }
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
settled() { "$bin" status -o json | python3 -c 'import json,sys; n=json.load(sys.stdin)["nodes"]; sys.exit(0 if sum(x["role"]=="leader" for x in n)==1 and all(x["role"] in ("leader","follower") for x in n) and len({x["applied_index"] for x in n})==1 else 1)'; }
for id in 1 2 3; do start "$id"; done
until settled 2>/dev/null; do sleep 0.1; done
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

measure() { # name kill(0|1): sets life (ms); with kill, kills the leader and brings it back
  local name=$1 kill=$2 leader=""
  local t0; t0=$(now_ms)
  "$bin" acquire "$name" --holder a --ttl "$ttl" >/dev/null
  if [ "$kill" = 1 ]; then
    sleep "$kill_after"
    leader=$("$bin" status -o json | python3 -c 'import json,sys; print([n["id"] for n in json.load(sys.stdin)["nodes"] if n["role"]=="leader"][0])')
    kill -9 "${pids[$leader]}"
    wait "${pids[$leader]}" 2>/dev/null || true
  fi
  until "$bin" acquire "$name" --holder rival --ttl "$ttl" >/dev/null 2>&1; do sleep 0.05; done
  life=$(( $(now_ms) - t0 ))
  if [ -n "$leader" ]; then
    start "$leader"
    until settled 2>/dev/null; do sleep 0.1; done
  fi
}

for kill in 0 1; do
  lives=()
  for try in $(seq "$tries"); do
    measure "life-$kill-$try-$$" "$kill"
    lives+=("$life")
  done
  label=$([ "$kill" = 1 ] && echo "leader killed ${kill_after} s after the grant" || echo "no fault")
  echo "${ttl} s lease, ${label}: ${lives[*]} ms; median $(printf '%s\n' "${lives[@]}" | median) ms"
done
