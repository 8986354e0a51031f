//! # Layout
//!
//! Leasehold is a lease store: leases that expire, fencing tokens that grow on every change of
//! holder, and fenced writes the store refuses once it has seen a bigger token. Three or five
//! nodes replicate every command through a Raft log and apply it to a pure state machine.
//!
//! This package is the `leasehold` command: its [`cli`] is the only code that knows clap. The
//! workspace's other crates (`crates/`), each on the ones below it:
//!
//! - `leasehold-core`, re-exported here as [`lease`]: the heart, pure. Commands, outcomes,
//!   limits, client sessions, and `LeaseTable::apply`; no tokio, no openraft.
//! - `leasehold-node`, re-exported here as [`raft`], [`node`], [`limits`], [`tls`], [`metrics`]
//!   and [`proto`]: the openraft glue and the running node (its own `lib.rs` maps them, and
//!   its test, the simulation of whole clusters). It exports what this package and the tests
//!   need; the rest is its own.
//! - `leasehold-proto`: the public API's wire types and keys; `leasehold-client`: the Rust
//!   client and `Holder`, on the proto crate alone.
//! - `leasehold-check`, test-only: the fault suite's checkers, replaying the log through a
//!   reference model that shares no code with the table; on the core crate alone.
//!
//! The arrows point one way: `cli` → `leasehold_client` / `leasehold_node` → `leasehold_core`.
//!
//! - [`cli`]: the `leasehold` commands: serve, cluster, the client commands, demo, bench, and
//!   `hold` with the guard process that kills its command at the deadline.
//!
//! ## One fenced put, file by file
//!
//! `leasehold put K V --lease L --token T` on the leader, without TLS (on a client lane), in the
//! order the call takes:
//!
//! 1. `src/main.rs` → `src/cli/mod.rs` (parse) → `src/cli/commands.rs` (the put command).
//! 2. `leasehold-client`: `client.rs` (`put` → `write`: the session and request id → `unary`:
//!    node after node) → `batch.rs` (the call, `BatchCall`, and its answer) → `lane.rs` (a
//!    client lane to the node; else the `Batch` stream, else a unary call) → `attempts.rs` (is a
//!    failure worth another node; may it have applied).
//! 3. The wire: `proto/leasehold/v1/leasehold.proto`, compiled by `leasehold-proto`
//!    (`lib.rs`), whose `lane.rs` frames a lane's calls.
//! 4. `leasehold-node`, the edge: `node/planes.rs` and `node/lanes.rs` (the client port
//!    tells a lane from gRPC, through `tls/mod.rs`'s accept, and serves it) →
//!    `node/client_lanes.rs` (a frame, a call).
//! 5. The API: `node/api/lease.rs` (`batch_call` → `put`, counted in `metrics.rs`: the caller
//!    from `node/api/caller.rs`, admitted by `node/mod.rs` → `write`).
//! 6. The node: `node/write.rs` (`write_or_forward` → `propose`: `check_write` with
//!    `leasehold-core`'s `limits.rs`) → `node/stamps.rs` and `node/leadership.rs` (serving as
//!    the leader, the stamp from `node/clock.rs`, a quorum not silent per
//!    `node/quorum_watch.rs`) → `raft/proposer.rs` and `gather.rs` (concurrent writes become
//!    one entry) → openraft → `raft/log_store.rs`, `log_store/pipelined.rs`, `segment.rs`,
//!    `disk.rs` (the append, fsynced) and `raft/network.rs` → `raft/lane.rs` with `codec.rs` (to
//!    the followers, whose `node/lanes.rs` and `node/peer/gate.rs` let it through to
//!    `node/peer/raft_service.rs` with `raft/incarnation.rs`'s check) → `raft/state_machine.rs`
//!    and `raft/apply_thread.rs` (applied once committed).
//! 7. `leasehold-core`: `command.rs`, `auth.rs` (the caller's op), `table.rs` (`apply`: the
//!    fence checked, the row written) and `session.rs` (the answer kept for a retry).
//! 8. Back: `node/api/convert.rs` and `node/error.rs` (outcome or refusal to the wire) → the
//!    client's `answers.rs` (typed answer) → `src/cli/commands.rs` (the line printed, the exit
//!    code).
//!
//! 46 files of the product, counted as the review of 161302a counted its 43 (which it hoped to
//! see at 25): the typed API put the request's checks in one place, but `Node` split by concern
//! (write, stamps, leadership, read) adds files to the path, and the call's envelope now has a
//! file of its own on the client. Through a follower,
//! `node/write.rs` hands the write to `node/forwarder.rs`, which batches it to the leader over
//! `node/peer/link.rs`; the leader's `node/peer/raft_service.rs` takes it up at `write_many`.

#![warn(missing_docs)]

pub mod cli;
pub use leasehold_core as lease;
pub use leasehold_node::{limits, metrics, node, proto, raft, tls};

// Checked here, where both crates are seen.
const _: () = assert!(
    leasehold_client::limits::ATTEMPT_TIMEOUT.as_millis() > limits::NODE_WRITE_WORST.as_millis(),
    "a client's attempt may last as long as a node's own worst case for a write"
);
const _: () = assert!(
    leasehold_client::limits::MAX_HOLDER_BYTES == lease::Limits::MAX_NAME_BYTES,
    "a holder's name is one the store takes"
);
const _: () = assert!(
    leasehold_client::limits::MAX_RENEWALS == lease::Limits::MAX_RENEWALS,
    "a client gathers renewals into requests the store takes"
);
const _: () = assert!(
    lease::Limits::MAX_RENEWALS * (2 * lease::Limits::MAX_NAME_BYTES + 32)
        < limits::MAX_CLIENT_MESSAGE_BYTES,
    "a renewal of the most leases with the longest names fits a client's message"
);
const _: () = assert!(
    leasehold_client::limits::SEQUENCE_SPAN < lease::limits::SESSION_ANSWERS as u64,
    "a client's writes under way are never so far apart that the store forgot the oldest's answer"
);
const _: () = assert!(
    leasehold_client::limits::MAX_BATCH_CALLS == limits::MAX_BATCH_CALLS_PER_MESSAGE
        && leasehold_client::limits::MAX_BATCH_MESSAGE_BYTES == limits::MAX_CLIENT_MESSAGE_BYTES,
    "a client's Batch messages are ones a node takes"
);
