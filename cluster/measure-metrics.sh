#!/usr/bin/env bash
# What the metrics show through a leader kill: a local three-node cluster (release build) with
# metrics on ports 7951-7953, a `leasehold bench --workload mixed` load, every node scraped just
# before the leader is killed (kill -9) and SETTLE seconds after. Prints, per node, each metric
# before -> after (histograms as count and mean). SECS (20), KILL_AT (8), SETTLE (4) in the
# environment. Uses ports 7911-7913 (clients) and 7921-7923 (peers), and a temp dir.
set -euo pipefail
secs=${SECS:-20}
kill_at=${KILL_AT:-8}
settle=${SETTLE:-4}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${LEASEHOLD_BIN:-$here/target/release/leasehold}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
dir=$(mktemp -d)
export LEASEHOLD_ENDPOINTS=127.0.0.1:7911,127.0.0.1:7912,127.0.0.1:7913
peers=1=127.0.0.1:7921,2=127.0.0.1:7922,3=127.0.0.1:7923
declare -A pids
for id in 1 2 3; do
  "$bin" serve --id "$id" --listen "127.0.0.1:791$id" --peer-listen "127.0.0.1:792$id" \
    --metrics-listen "127.0.0.1:795$id" --data-dir "$dir/node-$id" --peers "$peers" \
    >/dev/null 2>>"$dir/node-$id.log" &
  pids[$id]=$!
done
cleanup() { for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
until "$bin" put ready yes >/dev/null 2>&1; do sleep 0.1; done
scrape() { for id in 1 2 3; do curl -s --max-time 1 "http://127.0.0.1:795$id/metrics" > "$dir/$1-$id" || true; done; }
"$bin" bench --workload mixed --clients 16 --duration "$secs" --warmup 0 >"$dir/bench" 2>&1 &
bench=$!
sleep "$kill_at"
scrape before
leader=$("$bin" status -o json | python3 -c 'import json,sys; print([n["id"] for n in json.load(sys.stdin)["nodes"] if n["role"]=="leader"][0])')
kill -9 "${pids[$leader]}"
sleep "$settle"
scrape after
wait "$bench" || true
echo "leader node $leader killed ${kill_at} s into a ${secs} s mixed load; metrics just before and ${settle} s after:"
python3 - "$dir" "$leader" <<'PY'
import re, sys, collections
d, leader = sys.argv[1], int(sys.argv[2])
def parse(path):
    out = collections.OrderedDict()
    try:
        text = open(path).read()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith('#') or not line.strip():
            continue
        name, value = line.rsplit(' ', 1)
        out[name] = float(value)
    return out
def summary(m):
    s = collections.OrderedDict()
    for key in ['leasehold_raft_term', 'leasehold_raft_is_leader', 'leasehold_raft_leader_changes_total',
                'leasehold_raft_last_log_index', 'leasehold_raft_applied_index', 'leasehold_leases_held',
                'leasehold_expiries_total']:
        if key in m: s[key] = int(m[key])
    for hist in ['leasehold_log_fsync_duration_seconds', 'leasehold_batch_commands']:
        c, t = m.get(hist + '_count'), m.get(hist + '_sum')
        if c: s[hist] = f"count {int(c)}, mean {t / c * (1000 if 'seconds' in hist else 1):.2f}{' ms' if 'seconds' in hist else ''}"
    req = collections.Counter()
    for k, v in m.items():
        g = re.match(r'leasehold_requests_total\{rpc="(\w+)",outcome="(\w+)"\}', k)
        if g and v: req[f"{g.group(1)}:{g.group(2)}"] += int(v)
        g = re.match(r'leasehold_refusals_total\{reason="(\w+)"\}', k)
        if g and v: req[f"refused:{g.group(1)}"] += int(v)
    s['requests'] = ', '.join(f"{k} {v}" for k, v in sorted(req.items())) or '-'
    return s
for node in (1, 2, 3):
    b, a = summary(parse(f"{d}/before-{node}")), summary(parse(f"{d}/after-{node}"))
    print(f"node {node}{' (killed)' if node == leader else ''}:")
    for key in list(b) + [k for k in a if k not in b]:
        print(f"  {key}: {b.get(key, '-')} -> {a.get(key, '(gone)')}")
PY
tail -1 "$dir/bench"
