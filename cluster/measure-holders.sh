#!/usr/bin/env bash
# Measures what holding a lease costs and how fast a standby takes over, through `leasehold hold`
# on a local three-node cluster (release build):
#   1. the renewals one holder logs: `hold --ttl TTL` for HOLD_SECS seconds, counted by `watch`;
#   2. a clean handover: the holder's command ends, `hold` releases, and a standby waiting in
#      `hold --wait` starts its command: from the first command's last instant to the second's
#      first, TRIES times;
#   3. a crash: the holder's `hold` is killed (kill -9; its command dies with it);
#      the standby starts once the lease expires in store time: from the kill to the standby's
#      command, TRIES times.
# Usage: cluster/measure-holders.sh [TRIES] (default 5); TTL (3), HOLD_SECS (30) in the
# environment. Uses ports 7701-7703 (clients) and 7801-7803 (peers), and a temp dir.
set -euo pipefail
tries=${1:-5}
ttl=${TTL:-3}
hold_secs=${HOLD_SECS:-30}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEASEHOLD_BIN:-$here/target/release/leasehold}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
dir=$(mktemp -d)
export LEASEHOLD_ENDPOINTS=127.0.0.1:7701,127.0.0.1:7702,127.0.0.1:7703
peers=1=127.0.0.1:7801,2=127.0.0.1:7802,3=127.0.0.1:7803
pids=()
for id in 1 2 3; do
  "$bin" serve --id "$id" --listen "127.0.0.1:770$id" --peer-listen "127.0.0.1:780$id" \
    --data-dir "$dir/node-$id" --peers "$peers" >/dev/null 2>>"$dir/node-$id.log" &
  pids+=($!)
done
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
until "$bin" put ready yes >/dev/null 2>&1; do sleep 0.1; done
now_ms() { echo $(($(date +%s%N) / 1000000)); }
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

# 1. Renewals of one holder.
"$bin" watch m/renew -o json >"$dir/events" &
watcher=$!
before=$("$bin" status -o json | python3 -c 'import json,sys; print(max(n["last_log_index"] for n in json.load(sys.stdin)["nodes"]))')
"$bin" hold m/renew --holder h --ttl "$ttl" -- sleep "$hold_secs"
after=$("$bin" status -o json | python3 -c 'import json,sys; print(max(n["last_log_index"] for n in json.load(sys.stdin)["nodes"]))')
sleep 0.5
kill "$watcher"; wait "$watcher" 2>/dev/null || true
renewals=$(grep -c '"renewed"' "$dir/events" || true)
echo "one holder, ${ttl} s TTL, ${hold_secs} s: ${renewals} renewals ($(python3 -c "print(round($renewals/$hold_secs, 2))")/s); log grew by $((after - before)) entries (renewals, the grant, the release and the leader's expiry ticks)"

# 2. Clean handover: release on exit, the standby woken by its watch.
handovers=()
for try in $(seq "$tries"); do
  lease="m/clean-$try"
  "$bin" hold "$lease" --holder first --ttl "$ttl" -- sh -c "sleep 1; date +%s%3N > $dir/end" &
  first=$!
  sleep 0.3
  "$bin" hold "$lease" --holder second --ttl "$ttl" --wait -- sh -c "date +%s%3N > $dir/start"
  wait "$first"
  handovers+=($(( $(cat "$dir/start") - $(cat "$dir/end") )))
done
echo "clean handover (command ends, hold releases, standby's command starts): ${handovers[*]} ms; median $(printf '%s\n' "${handovers[@]}" | median) ms"

# 3. Crash: the holder dies without releasing; the standby waits for the expiry.
crashes=()
for try in $(seq "$tries"); do
  lease="m/crash-$try"
  # The command dies with its `hold` (the kernel's parent-death signal): a crash of both.
  "$bin" hold "$lease" --holder first --ttl "$ttl" -- sleep 600 >/dev/null 2>&1 &
  first=$!
  until "$bin" lease "$lease" -o json | grep -q '"holder":"first'; do sleep 0.05; done
  "$bin" hold "$lease" --holder second --ttl "$ttl" --wait -- sh -c "date +%s%3N > $dir/start" &
  second=$!
  sleep 1
  killed=$(now_ms)
  kill -9 "$first"
  wait "$first" 2>/dev/null || true
  wait "$second"
  crashes+=($(( $(cat "$dir/start") - killed )))
done
echo "crash handover (holder killed ${ttl} s TTL, standby's command starts): ${crashes[*]} ms; median $(printf '%s\n' "${crashes[@]}" | median) ms"
