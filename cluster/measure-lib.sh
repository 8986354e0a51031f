# Sourced by the measure-*.sh scripts that run a local three-node cluster. Set `base` first:
# clients on ports base+1..3, peers on base+101..103, metrics on base+201..203. Gives the
# binary ($bin, LEASEHOLD_BIN or target/release), a temp dir ($dir, node logs in it), start ID,
# status PYTHON (PYTHON sees the status's nodes as `n`), leader_id, acquire_bench SECONDS and
# summary (of its JSON line), fill LEASES, metric ID NAME, and kills every node and removes the dir on exit.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${LEASEHOLD_BIN:-$here/target/release/leasehold}
[ -x "$bin" ] || (cd "$here" && cargo build --release --quiet)
dir=$(mktemp -d)
export LEASEHOLD_ENDPOINTS=127.0.0.1:$((base + 1)),127.0.0.1:$((base + 2)),127.0.0.1:$((base + 3))
peers=1=127.0.0.1:$((base + 101)),2=127.0.0.1:$((base + 102)),3=127.0.0.1:$((base + 103))
declare -A pids
start() {
  RUST_LOG=info "$bin" serve --id "$1" --listen "127.0.0.1:$((base + $1))" \
    --peer-listen "127.0.0.1:$((base + 100 + $1))" --metrics-listen "127.0.0.1:$((base + 200 + $1))" \
    --data-dir "$dir/node-$1" --peers "$peers" >/dev/null 2>>"$dir/node-$1.log" &
  pids[$1]=$!
}
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT
status() { "$bin" status -o json | python3 -c "import json,sys; n=json.load(sys.stdin)['nodes']; $1"; }
leader_id() { status 'print([x["id"] for x in n if x["role"]=="leader"][0])'; }
start_all() {
  for id in 1 2 3; do start "$id"; done
  until status 'sys.exit(0 if sum(x["role"]=="leader" for x in n)==1 else 1)' 2>/dev/null; do sleep 0.2; done
}
# Acquire throughput with long leases (each op a new live lease), 64 clients to the leader: one
# JSON line.
acquire_bench() {
  "$bin" bench --workload acquire --ttl 3600 --clients 64 --connect leader --warmup 0 --duration "$1" -o json 2>/dev/null
}
# Fills the cluster with at least TARGET live leases (acquire_bench runs), then says how many and
# how long it took; `leases` holds the count.
fill() {
  local started
  started=$(date +%s)
  while true; do
    # A status or a bench cut short by a busy node is tried again, not the end of the run.
    leases=$(status 'print(max(x["leases"] for x in n))') || { sleep 1; continue; }
    [ "$leases" -ge "$1" ] && break
    acquire_bench 10 >/dev/null || sleep 1
  done
  echo "filled: $leases leases in $(( $(date +%s) - started )) s"
}
summary() { python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("%.0f ops/s, p99 %.2f ms, p999 %.2f ms, max %.2f ms" % (r["ops_per_s"], r["p99_ms"], r["p999_ms"], r["max_ms"]))'; }
# The metrics URL of node ID.
metrics_url() { echo "http://127.0.0.1:$((base + 200 + $1))/metrics"; }
# The value of the counter or gauge NAME on node ID.
metric() {
  python3 -c 'import sys,urllib.request; t=urllib.request.urlopen(sys.argv[1]).read().decode(); print(int(float([l.split()[1] for l in t.splitlines() if l.startswith(sys.argv[2]+" ")][0])))' "$(metrics_url "$1")" "$2"
}
