#!/usr/bin/env bash
# Writes the golden data dirs of one build: tests/golden/<name>/{default,manual}, the data dirs
# of two one-node clusters that BINARY ran: `default` with its whole log (every kind of entry
# that build writes but `advance`), `manual` with a snapshot of leases, fences, rows and
# sessions and the log after it (`advance` among it); and expected.json beside them, what that
# build's `status` said of each (its applied index and state digest) before it stopped.
#
#   tests/golden/make.sh BINARY NAME      # e.g. a build of 161302a, and "161302a"
#
# The state digests are read with this checkout's CLI (target/debug/leasehold, or
# $LEASEHOLD_CLI), whose `status -o json` shows them.
#
# tests/golden.rs starts this build on copies of them and checks that it reaches the same
# state (tests/golden/README.md). Loopback addresses only; the nodes are stopped however the
# script ends.
set -euo pipefail

BIN=$(realpath "$1")
NAME=$2
HERE=$(cd "$(dirname "$0")" && pwd)
CLI=$(realpath "${LEASEHOLD_CLI:-$HERE/../../target/debug/leasehold}")
OUT=$HERE/$NAME
WORK=$(mktemp -d)
PIDS=()
cleanup() {
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start DIR EXTRA...: one node, its client port in $CLIENT.
start() {
    local dir=$1
    shift
    CLIENT=127.0.0.1:$(port)
    local peer=127.0.0.1:$(port)
    "$BIN" serve --id 1 --data-dir "$dir" --listen "$CLIENT" --peer-listen "$peer" \
        --peers "1=$peer" --lease-retention 1 "$@" \
        >"$dir.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 100); do
        if "$BIN" --endpoints "$CLIENT" "${TLS[@]}" status >/dev/null 2>&1; then return; fi
        sleep 0.1
    done
    echo "the node at $CLIENT did not start:" >&2
    cat "$dir.log" >&2
    exit 1
}

# The node's applied index and state digest, once two readings a second apart agree.
settled() {
    local before="" now
    while true; do
        now=$("$CLI" --endpoints "$CLIENT" "${TLS[@]}" status -o json |
            python3 -c 'import json,sys; n=json.load(sys.stdin)["nodes"][0]; print(json.dumps({"applied_index": n["applied_index"], "state_digest": n["state_digest"]}))')
        [[ "$now" == "$before" ]] && { echo "$now"; return; }
        before=$now
        sleep 1
    done
}

stop() {
    kill "${PIDS[-1]}"
    wait "${PIDS[-1]}" || true
    unset 'PIDS[-1]'
}

L() { "$BIN" --endpoints "$CLIENT" "${TLS[@]}" "$@"; }

# Default clock, TLS, authorization on: policy changes, operations as an identity (`As`),
# ticks, forgets, a renewal batch from `hold`, plain and fenced writes and deletes.
"$BIN" certs --dir "$WORK/tls" --nodes 1 >/dev/null
"$BIN" certs --dir "$WORK/tls" --client team >/dev/null
"$BIN" certs --dir "$WORK/tls" --client admin >/dev/null
NODE_TLS=(--tls-cert "$WORK/tls/node-1.pem" --tls-key "$WORK/tls/node-1-key.pem" --tls-ca "$WORK/tls/ca.pem")
TLS=(--tls-ca "$WORK/tls/ca.pem" --tls-cert "$WORK/tls/admin.pem" --tls-key "$WORK/tls/admin-key.pem")
mkdir -p "$WORK/default"
start "$WORK/default" "${NODE_TLS[@]}" --auth-admin admin --snapshot-every 100000
for _ in $(seq 100); do L auth whoami 2>/dev/null | grep -q admin && break; sleep 0.1; done
# The admin administers; to write it needs a role like anyone.
L auth role put all hold: write: delete: check: read-keys: read-leases: >/dev/null
L auth bind admin all >/dev/null
for i in $(seq 45); do L put "k$i" "v$i" >/dev/null; done
L auth role put team hold:team/ write:team/ delete:team/ check:team/ read-keys:team/ read-leases:team/ >/dev/null
L auth bind team team >/dev/null
L auth token add team >/dev/null
L put plain v1 >/dev/null
L delete plain >/dev/null
L put plain v2 >/dev/null
TEAM=(--tls-ca "$WORK/tls/ca.pem" --tls-cert "$WORK/tls/team.pem" --tls-key "$WORK/tls/team-key.pem")
T() { "$BIN" --endpoints "$CLIENT" "${TEAM[@]}" "$@"; }
token=$(T -o json acquire team/lock --holder team --ttl 30 | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
T put team/row v --lease team/lock --token "$token" >/dev/null
T delete team/row --lease team/lock --token "$token" >/dev/null
T put team/row w --lease team/lock --token "$token" >/dev/null
T release team/lock --holder team --token "$token" >/dev/null
T hold team/job --holder team/worker --ttl 1 -- sleep 2.5
T acquire team/expiring --holder team --ttl 1 >/dev/null
L auth unbind team team >/dev/null
sleep 3 # a tick to expire team/expiring, and forgets of the leases free for --lease-retention
DEFAULT=$(settled)
stop

# Manual clock, no TLS, a snapshot every 40 entries: leases, a fence and rows in the snapshot;
# after it, `advance`, a renewal by acquiring again, a release and an expiry.
TLS=()
mkdir -p "$WORK/manual"
start "$WORK/manual" --manual-clock --snapshot-every 40
token=$(L -o json acquire m/lock --holder a --ttl 10 | python3 -c 'import json,sys; print(json.load(sys.stdin)["token"])')
L put m/row v --lease m/lock --token "$token" >/dev/null
L acquire m/other --holder b --ttl 100 >/dev/null
for i in $(seq 45); do L put "m$i" "v$i" >/dev/null; done
L acquire m/lock --holder a --ttl 10 >/dev/null
L advance 5 >/dev/null
L release m/lock --holder a --token "$token" >/dev/null
L acquire m/short --holder c --ttl 1 >/dev/null
L advance 3 >/dev/null
MANUAL=$(settled)
stop

rm -rf "$OUT"
mkdir -p "$OUT"
# The certificates too (a throwaway CA, for these tests alone): the default dir's node serves
# TLS with authorization on.
cp -r "$WORK/default" "$WORK/manual" "$WORK/tls" "$OUT/"
rm -f "$OUT"/*/*.log
cat >"$OUT/expected.json" <<EOF
{"built_from": "$NAME", "default": $DEFAULT, "manual": $MANUAL}
EOF
echo "wrote $OUT: $(du -sh "$OUT" | cut -f1)"
cat "$OUT/expected.json"
