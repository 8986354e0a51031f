#!/usr/bin/env bash
# Leasehold against etcd on this machine, in one run: a three-node etcd (default heartbeat 100 ms,
# election 1000 ms) and a three-node Leasehold on loopback, each with its data dirs on the same disk
# and fsync on. Every workload at 1, 16 and 64 clients on both, interleaved, in one table with the
# ratio per row: one client twice, talking to the leader and to a follower of each (spread over
# the nodes, it would talk to the first endpoint, whichever role each system's election gave it),
# more clients spread over the nodes (client i to node i mod 3); then failover both ways (a writer on the followers, kill -9 of the leader, time to
# the next acknowledged write), and the same with SIGTERM, where each leader hands leadership over
# first (a rolling restart); then resident memory per node, idle and under 64-client load.
# Each one-client row of this build's also measures the floor under its latency in the same run
# (the data dirs' disk's fdatasync p50 plus two loopback round trips; and the same with the second
# of three fdatasyncs made at once, as the three nodes sharing this disk make them) and sets its
# p50 beside both.
# It installs etcd-server from Debian if missing and stops everything it started.
#
# Settings (environment): BENCH_SECS (10), BENCH_WARMUP (1), BENCH_CLIENTS ("1 16 64"),
# BENCH_WORKLOADS ("acquire renew fenced-put put get mixed"), FAILOVER_TRIES (5), BENCH_TLS (0;
# 1 runs both with TLS on client and peer traffic and client certificates demanded, from one
# CA made by `leasehold certs`), BENCH_RETENTION (Leasehold's --lease-retention, 3600 s),
# BENCH_CHURN (0; 1 adds a lease-churn run: resident memory before, at the peak of and 15 s
# after `bench --workload acquire --ttl 1 --clients 64` for BENCH_CHURN_SECS, 30, on each;
# BENCH_CHURN_ETCD_SECS, if set, runs etcd's longer, to grant as many leases as Leasehold did;
# BENCH_BEFORE=PATH adds a third three-node cluster of the leasehold binary at PATH (absolute, and
# not target/release/leasehold, which the build below replaces), an earlier build, benchmarked in
# the same interleaved loop by its own load generator (its client, as its users had it), with its
# own columns and a ratio of this build to it: a change's before and after in one run);
# BENCH_LH_API=etcd drives this build's Leasehold (and the earlier build, which must speak it)
# through its etcd API, with the etcd-client crate that drives etcd, instead of its own client:
# one client against every system (the earlier build's bench drives it with the etcd-client
# version that build has).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
secs=${BENCH_SECS:-10}
warmup=${BENCH_WARMUP:-1}
clients_list=${BENCH_CLIENTS:-"1 16 64"}
workloads=${BENCH_WORKLOADS:-"acquire renew fenced-put put get mixed"}
tries=${FAILOVER_TRIES:-5}
tls=${BENCH_TLS:-0}
retention=${BENCH_RETENTION:-3600}
churn=${BENCH_CHURN:-0}
churn_secs=${BENCH_CHURN_SECS:-30}
churn_etcd_secs=${BENCH_CHURN_ETCD_SECS:-$churn_secs}
before_bin=${BENCH_BEFORE:-}
lh_api=${BENCH_LH_API:-leasehold}
if [ -n "$before_bin" ]; then
  case $before_bin in
    /*) ;;
    *) echo "BENCH_BEFORE=$before_bin: give an absolute path" >&2; exit 2 ;;
  esac
  if [ ! -x "$before_bin" ] || [ "$before_bin" -ef "$here/target/release/leasehold" ]; then
    echo "BENCH_BEFORE=$before_bin: not an executable leasehold binary apart from this build's" >&2
    exit 2
  fi
fi

if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
  echo "installing etcd-server and etcd-client from Debian..." >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq etcd-server etcd-client >/dev/null
fi
# The etcd side is driven through the etcd-client crate, which compiles etcd's protos with the
# protoc that PROTOC names (protox's, see cluster/protoc.sh).
protox=$(bash "$here/cluster/protoc.sh")
echo "building leasehold with the etcd client..." >&2
PROTOC=$protox cargo build --release --features etcd --quiet
bin=$here/target/release/leasehold

mkdir -p "$here/target"
work=$(mktemp -d -p "$here/target" bench-vs-etcd.XXXXXX)
declare -A etcd_pid lh_pid before_pid
cleanup() {
  for p in "${etcd_pid[@]}" "${lh_pid[@]}" "${before_pid[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

scheme=http
etcd_tls=() lh_tls=() ctl_tls=()
if [ "$tls" = 1 ]; then
  "$bin" certs --dir "$work/tls" --nodes 3 >/dev/null
  export LEASEHOLD_TLS_CA=$work/tls/ca.pem LEASEHOLD_TLS_CERT=$work/tls/client.pem LEASEHOLD_TLS_KEY=$work/tls/client-key.pem
  scheme=https
  ctl_tls=(--cacert "$LEASEHOLD_TLS_CA" --cert "$LEASEHOLD_TLS_CERT" --key "$LEASEHOLD_TLS_KEY")
fi
tls_args() { # id: sets etcd_tls and lh_tls for node id
  [ "$tls" = 1 ] || return 0
  local c=$work/tls/node-$1.pem k=$work/tls/node-$1-key.pem ca=$work/tls/ca.pem
  etcd_tls=(--cert-file "$c" --key-file "$k" --trusted-ca-file "$ca" --client-cert-auth
            --peer-cert-file "$c" --peer-key-file "$k" --peer-trusted-ca-file "$ca" --peer-client-cert-auth)
  lh_tls=(--tls-cert "$c" --tls-key "$k" --tls-ca "$ca" --client-cert-auth)
}
etcd_cluster=e1=$scheme://127.0.0.1:12380,e2=$scheme://127.0.0.1:22380,e3=$scheme://127.0.0.1:32380
etcd_endpoints=127.0.0.1:12379,127.0.0.1:22379,127.0.0.1:32379
lh_peers=1=127.0.0.1:7401,2=127.0.0.1:7402,3=127.0.0.1:7403
lh_endpoints=127.0.0.1:7301,127.0.0.1:7302,127.0.0.1:7303
before_peers=1=127.0.0.1:7601,2=127.0.0.1:7602,3=127.0.0.1:7603
before_endpoints=127.0.0.1:7501,127.0.0.1:7502,127.0.0.1:7503

start_etcd() { # id
  local i=$1
  tls_args "$i"
  etcd --name "e$i" --data-dir "$work/etcd-$i" \
    --listen-client-urls "$scheme://127.0.0.1:${i}2379" --advertise-client-urls "$scheme://127.0.0.1:${i}2379" \
    --listen-peer-urls "$scheme://127.0.0.1:${i}2380" --initial-advertise-peer-urls "$scheme://127.0.0.1:${i}2380" \
    --initial-cluster "$etcd_cluster" --initial-cluster-state new --initial-cluster-token bench \
    --heartbeat-interval 100 --election-timeout 1000 "${etcd_tls[@]}" >>"$work/etcd-$i.log" 2>&1 &
  etcd_pid[$i]=$!
}
# Each Leasehold node's runtime gets its share of this machine's cores, as `leasehold cluster`
# gives it (see `with_shared_cores` in src/cli/local.rs): three runtimes as wide as the machine
# add threads that contend for the same cores. etcd keeps its default (GOMAXPROCS = the cores),
# its best here: with GOMAXPROCS=1 it did put 0.94-0.98x and acquire 0.72-0.91x of that.
share=$(( $(nproc) / 3 > 1 ? $(nproc) / 3 : 1 ))
start_lh() { # id
  local i=$1
  tls_args "$i"
  # Under TLS every bench client is one identity, whose fresh lease names (acquire, churn) would
  # meet the default cap of a million leases per identity within a minute: lifted.
  "$bin" serve --id "$i" --listen "127.0.0.1:730$i" --peer-listen "127.0.0.1:740$i" --data-dir "$work/lh-$i" --peers "$lh_peers" \
    --lease-retention "$retention" --max-leases-per-identity 100000000 --runtime-threads "$share" \
    "${lh_tls[@]}" ${lh_tls:+--no-authorization} >/dev/null 2>>"$work/lh-$i.log" &
  lh_pid[$i]=$!
}
start_before() { # id: the earlier build's node, beside this build's
  local i=$1
  tls_args "$i"
  # A build that is secure by default starts with TLS only given a choice of authorization;
  # earlier builds know no such flag. Its runtime gets the same share where it knows the flag.
  local extra=() help
  help=$("$before_bin" serve --help)
  if [ -n "${lh_tls[*]}" ] && [[ $help == *--no-authorization* ]]; then
    extra=(--no-authorization)
  fi
  if [[ $help == *--runtime-threads* ]]; then extra+=(--runtime-threads "$share"); fi
  "$before_bin" serve --id "$i" --listen "127.0.0.1:750$i" --peer-listen "127.0.0.1:760$i" --data-dir "$work/before-$i" \
    --peers "$before_peers" --lease-retention "$retention" "${lh_tls[@]}" "${extra[@]}" >/dev/null 2>>"$work/before-$i.log" &
  before_pid[$i]=$!
}
etcd_ctl() { ETCDCTL_API=3 etcdctl --command-timeout=2s "${ctl_tls[@]}" "$@"; }
etcd_ready() { etcd_ctl --endpoints "$etcd_endpoints" endpoint health >/dev/null 2>&1; }
lh_ready() { # [endpoints]
  "$bin" status -o json --endpoints "${1:-$lh_endpoints}" 2>/dev/null | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["nodes"]
sys.exit(0 if sum(n["role"] == "leader" for n in nodes) == 1 and all(n["role"] in ("leader", "follower") for n in nodes) else 1)'
}
wait_until() { # what, command...
  local what=$1; shift
  for _ in $(seq 300); do "$@" && return 0; sleep 0.1; done
  echo "timed out waiting for $what" >&2; return 1
}

for i in 1 2 3; do start_etcd "$i"; start_lh "$i"; done
if [ -n "$before_bin" ]; then for i in 1 2 3; do start_before "$i"; done; fi
wait_until "etcd" etcd_ready
wait_until "leasehold" lh_ready
if [ -n "$before_bin" ]; then wait_until "the earlier leasehold" lh_ready "$before_endpoints"; fi

# One benchmark run: prints "ops_per_s p50_ms p99_ms errors floor", the floor "-" unless measured:
# one client of this build measures, in the same run, the floor under its latency, the data
# dirs' disk's fdatasync plus two loopback round trips, and the same with the second shortest of
# three fdatasyncs made at once, as the three nodes on this disk make them (`bench --floor-dir`),
# and sets its p50 beside both, in words.
bench() { # target endpoints workload clients connect [binary]
  local floor=()
  if [ "$1" = leasehold ] && [ "$4" = 1 ] && [ -z "${6:-}" ]; then floor=(--floor-dir "$work"); fi
  "${6:-$bin}" bench --api "$1" --endpoints "$2" --workload "$3" --clients "$4" --connect "$5" \
    --duration "$secs" --warmup "$warmup" "${floor[@]}" -o json 2>/dev/null |
    python3 -c '
import json, sys
r = json.load(sys.stdin)
f = r.get("floor")
floor = "-"
if f:
    floor = "floor %.2f ms, p50 %.2fx it; on a shared disk %.2f ms, %.2fx" % (
        f["put_floor_ms"], r["p50_vs_floor"], f["shared_put_floor_ms"], r["p50_vs_shared_floor"])
print("%.0f %.2f %.2f %d %s" % (r["ops_per_s"], r["p50_ms"], r["p99_ms"], r["errors"], floor))'
}

echo
echo "Throughput and p50/p99 latency, ${secs} s per run after ${warmup} s warm-up (etcd's renew is LeaseKeepAlive), TLS $([ "$tls" = 1 ] && echo on || echo off):"
ratio() { python3 -c "print(f'{$1 / max($2, 1):.2f}x')"; }
if [ -n "$before_bin" ]; then
  printf '%-11s %7s %-8s | %11s %6s %7s | %11s %6s %7s | %10s %6s %7s | %7s %7s\n' workload clients \
    to "leasehold/s" "p50" "p99 ms" "before/s" "p50" "p99 ms" "etcd/s" "p50" "p99 ms" "vs etcd" "vs bfr"
else
  printf '%-11s %7s %-8s | %11s %6s %7s | %10s %6s %7s | %7s\n' workload clients \
    to "leasehold/s" "p50" "p99 ms" "etcd/s" "p50" "p99 ms" "vs etcd"
fi
for w in $workloads; do
  for c in $clients_list; do
    to_list=spread
    if [ "$c" = 1 ]; then to_list="leader follower"; fi
    for to in $to_list; do
      read -r lh_ops lh_p50 lh_p99 lh_err lh_floor <<<"$(bench "$lh_api" "$lh_endpoints" "$w" "$c" "$to")"
      if [ -n "$before_bin" ]; then
        read -r bf_ops bf_p50 bf_p99 bf_err _ <<<"$(bench "$lh_api" "$before_endpoints" "$w" "$c" "$to" "$before_bin")"
      fi
      read -r et_ops et_p50 et_p99 et_err _ <<<"$(bench etcd "$etcd_endpoints" "$w" "$c" "$to")"
      note=""
      if [ "$lh_floor" != - ]; then
        note=" $lh_floor"
      fi
      if [ "$lh_err" != 0 ]; then note="$note leasehold errors: $lh_err"; fi
      if [ -n "$before_bin" ] && [ "$bf_err" != 0 ]; then note="$note before errors: $bf_err"; fi
      if [ "$et_err" != 0 ]; then note="$note etcd errors: $et_err"; fi
      if [ -n "$before_bin" ]; then
        printf '%-11s %7s %-8s | %11s %6s %7s | %11s %6s %7s | %10s %6s %7s | %7s %7s%s\n' "$w" "$c" "$to" \
          "$lh_ops" "$lh_p50" "$lh_p99" "$bf_ops" "$bf_p50" "$bf_p99" "$et_ops" "$et_p50" "$et_p99" \
          "$(ratio "$lh_ops" "$et_ops")" "$(ratio "$lh_ops" "$bf_ops")" "$note"
      else
        printf '%-11s %7s %-8s | %11s %6s %7s | %10s %6s %7s | %7s%s\n' "$w" "$c" "$to" \
          "$lh_ops" "$lh_p50" "$lh_p99" "$et_ops" "$et_p50" "$et_p99" "$(ratio "$lh_ops" "$et_ops")" "$note"
      fi
    done
  done
done

# Resident memory per node, in MiB.
rss() { awk '/VmRSS/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
memory() { # label
  printf '%-24s leasehold %s MiB, etcd %s MiB\n' "$1" \
    "$(for i in 1 2 3; do rss "${lh_pid[$i]}"; echo -n ' '; done)" \
    "$(for i in 1 2 3; do rss "${etcd_pid[$i]}"; echo -n ' '; done)"
}
echo
echo "Resident memory per node:"
memory "idle after the runs"
"$bin" bench --api leasehold --endpoints "$lh_endpoints" --workload fenced-put --clients 64 --duration 6 --warmup 0 >/dev/null 2>&1 &
load=$!
sleep 4
lh_loaded=$(for i in 1 2 3; do rss "${lh_pid[$i]}"; echo -n ' '; done)
wait "$load"
"$bin" bench --api etcd --endpoints "$etcd_endpoints" --workload fenced-put --clients 64 --duration 6 --warmup 0 >/dev/null 2>&1 &
load=$!
sleep 4
et_loaded=$(for i in 1 2 3; do rss "${etcd_pid[$i]}"; echo -n ' '; done)
wait "$load"
printf '%-24s leasehold %s MiB, etcd %s MiB\n' "64-client fenced-put" "$lh_loaded" "$et_loaded"

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

lh_leader() {
  "$bin" status -o json --endpoints "$lh_endpoints" | python3 -c 'import json,sys; print([n["id"] for n in json.load(sys.stdin)["nodes"] if n["role"]=="leader"][0])'
}
et_leader() {
  etcd_ctl --endpoints "$etcd_endpoints" endpoint status -w json | python3 -c '
import json, sys
s = json.load(sys.stdin)
lead = s[0]["Status"]["leader"]
print([e["Endpoint"] for e in s if e["Status"]["header"]["member_id"] == lead][0].split(":")[-1][0])'
}
# failover SYSTEM SIGNAL: the leader sent SIGNAL, the time to the next acknowledged write from
# a writer on the followers, FAILOVER_TRIES times; the node restarted and caught up after each.
failover() {
  local system=$1 signal=$2 times=() t i leader followers t0 leader_of endpoint start ready pause
  if [ "$system" = leasehold ]; then
    local -n pids=lh_pid
    leader_of=lh_leader endpoint=127.0.0.1:730%s, start=start_lh ready=lh_ready pause=1
  else
    local -n pids=etcd_pid
    leader_of=et_leader endpoint=127.0.0.1:%s2379, start=start_etcd ready=etcd_ready pause=2
  fi
  for t in $(seq "$tries"); do
    leader=$("$leader_of")
    # shellcheck disable=SC2059 # the format is one of the two above
    followers=$(for i in 1 2 3; do if [ "$i" != "$leader" ]; then printf "$endpoint" "$i"; fi; done)
    t0=$(now_ms)
    kill -s "$signal" "${pids[$leader]}"
    until put_failover "$system" "${followers%,}" "$t"; do :; done
    times+=($(($(now_ms) - t0)))
    wait "${pids[$leader]}" 2>/dev/null || true
    "$start" "$leader"
    wait_until "$system to recover" "$ready"
    sleep "$pause"
  done
  printf '%-10s %s ms; median %s ms, longest %s ms\n' "$system:" "${times[*]}" \
    "$(printf '%s\n' "${times[@]}" | median)" "$(printf '%s\n' "${times[@]}" | sort -n | tail -1)"
}
# put_failover SYSTEM ENDPOINTS VALUE: one write of the failover key, quietly.
put_failover() {
  if [ "$1" = leasehold ]; then
    "$bin" put failover "$3" --endpoints "$2"
  else
    etcd_ctl --endpoints "$2" put failover "$3"
  fi >/dev/null 2>&1
}

echo
echo "Failover: kill -9 of the leader, time to the next acknowledged write from a writer on the followers:"
failover leasehold KILL
failover etcd KILL
echo
echo "Rolling restart: SIGTERM to the leader (each hands leadership over before it exits), time to the next acknowledged write from a writer on the followers:"
failover leasehold TERM
failover etcd TERM

if [ "$churn" = 1 ]; then
  # The largest resident memory of one node of each, sampled every half second.
  peak_of() { # pid-array-name seconds
    local -n pids=$1
    local peak=0 end=$(($(date +%s) + $2))
    while [ "$(date +%s)" -lt "$end" ]; do
      for p in "${pids[@]}"; do
        local kb; kb=$(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)
        [ "${kb:-0}" -gt "$peak" ] && peak=$kb
      done
      sleep 0.5
    done
    awk -v kb="$peak" 'BEGIN {printf "%.1f", kb / 1024}'
  }
  echo
  echo "Lease churn: bench --workload acquire --ttl 1 --clients 64 for ${churn_secs} s on Leasehold (--lease-retention ${retention}), ${churn_etcd_secs} s on etcd; resident memory of the largest node, MiB:"
  for target in leasehold etcd; do
    if [ "$target" = leasehold ]; then endpoints=$lh_endpoints; pids_name=lh_pid; secs_now=$churn_secs; else endpoints=$etcd_endpoints; pids_name=etcd_pid; secs_now=$churn_etcd_secs; fi
    before=$(peak_of "$pids_name" 1)
    "$bin" bench --api "$target" --endpoints "$endpoints" --workload acquire --ttl 1 --clients 64 \
      --duration "$secs_now" --warmup 0 -o json >"$work/churn-$target.json" 2>/dev/null &
    load=$!
    peak=$(peak_of "$pids_name" "$secs_now")
    wait "$load"
    sleep 15
    after=$(peak_of "$pids_name" 1)
    granted=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["ops"] - r["refused"])' "$work/churn-$target.json" 2>/dev/null || echo "?")
    printf '%-10s before %6s, peak %6s, 15 s after %6s (acquires granted: %s)\n' "$target" "$before" "$peak" "$after" "$granted"
  done
  echo "leasehold state after: $("$bin" status -o json --endpoints "$lh_endpoints" | python3 -c 'import json,sys; print(", ".join("node %d: %d leases" % (n["id"], n["leases"]) for n in json.load(sys.stdin)["nodes"]))')"
fi
