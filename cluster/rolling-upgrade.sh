#!/usr/bin/env bash
# Rolling upgrade from REV to this checkout, and back, under load:
#
#   cluster/rolling-upgrade.sh REV        # REV: 0.2.0's commit (README, "Upgrades") or later
#
# Builds REV (release, in a worktree, into target/upgrade-from), then runs the fault suite's
# `a_rolling_upgrade_and_back_under_load_loses_nothing`: three nodes of REV's build under the
# suite's workload and checkers, each replaced in turn by this build, then taken back to REV's,
# and so on, for LEASEHOLD_FAULT_SECS (120 by default; LEASEHOLD_FAULT_TLS=1 for TLS). It
# prints the anomalies the checkers found (it fails on any) and the longest unavailability of
# a step (the report's `Upgrade` row). Like the fault suite, it runs in a network namespace of
# its own: as root, or where unprivileged user namespaces are allowed, with nftables.
set -euo pipefail

REV=${1:?usage: cluster/rolling-upgrade.sh REV (a commit of 0.2.0 or later)}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
SHORT=$(git rev-parse --short "$REV^{commit}")
if ! git cat-file -e "$SHORT:crates/leasehold-node/src/raft/protocol.rs" 2>/dev/null; then
    echo "rolling-upgrade: $REV predates 0.2.0, the first build with the peer handshake; a" \
        "cluster of it is upgraded by stopping every node (README, \"Upgrades\")" >&2
    exit 2
fi
TARGET=${UPGRADE_TARGET_DIR:-$ROOT/target/upgrade-from}
WORKTREE=$(mktemp -d)
trap 'git worktree remove --force "$WORKTREE" >/dev/null 2>&1 || rm -rf "$WORKTREE"' EXIT
git worktree add --detach -q "$WORKTREE" "$SHORT"
echo "building $SHORT (release) in $WORKTREE"
(cd "$WORKTREE" && CARGO_TARGET_DIR=$TARGET cargo build --release --quiet --bin leasehold)
OLDER=$ROOT/target/leasehold-$SHORT
cp "$TARGET/release/leasehold" "$OLDER"
echo "upgrading from $SHORT ($("$OLDER" --version)) to $(git rev-parse --short HEAD)"
LEASEHOLD_UPGRADE_FROM=$OLDER cargo test --release --test faults \
    a_rolling_upgrade_and_back_under_load_loses_nothing -- --ignored --exact --nocapture
