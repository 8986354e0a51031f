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
//! `leasehold put K V --lease L --token T` on the leader, in the order the call takes:
//!
//! 1. `src/main.rs` → `src/cli/mod.rs` (parse) → `src/cli/commands.rs` (the put command).
//! 2. `leasehold-client`: `client.rs` (`put` → `write`: the session and request id → `unary`:
//!    node after node) → `lane.rs` (a client lane to the node, or gRPC where it takes none) →
//!    `attempts.rs` (is a failure worth another node; may it have applied).
//! 3. The wire: `proto/leasehold/v1/leasehold.proto`, compiled by `leasehold-proto`, whose
//!    `lane.rs` frames a lane's calls.
//! 4. `leasehold-node`: `node/planes.rs` and `node/lanes.rs` (the client port tells a lane
//!    from gRPC) → `node/client_lanes.rs` (a lane's call, refused over `limits.rs`'s bound,
//!    handed to the handler a gRPC call reaches) →
//!    `node/lease_service.rs` (`put`: fields checked at the edge → `answer_put`) →
//!    `node/mod.rs` (`write_or_forward` → `write_many` → `check_write`, with
//!    `leasehold-core`'s `limits.rs` → `leader_stamp` → `ensure_leader` and `stamp`) →
//!    `node/clock.rs` (the term's base, and the stamp) → `raft/reads.rs` and `raft/mod.rs` (the
//!    first stamp of a term confirms leadership) → `raft/proposer.rs` and `gather.rs`
//!    (concurrent writes become one entry) → openraft → `raft/log_store.rs`,
//!    `log_store/segment.rs`, `log_store/disk.rs` (the append, fsynced) and `raft/network.rs`
//!    (to the followers, whose `node/raft_service.rs` takes it) → `raft/state_machine.rs`
//!    (applied once committed).
//! 5. `leasehold-core`: `table.rs` (`apply`: the fence checked, the row written) and
//!    `session.rs` (the answer kept for a retry).
//! 6. Back: `node/convert.rs` and `node/error.rs` (outcome or refusal to the wire) → the
//!    client's `answers.rs` (typed answer) → `src/cli/commands.rs` (the line printed, the exit
//!    code).
//!
//! Through a follower, `node/mod.rs` hands the write to `node/forwarder.rs`, which batches it
//! to the leader over `node/peer_link.rs`; the leader's `node/raft_service.rs` takes it up at
//! `write_many`.

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
    leasehold_client::limits::MAX_RENEWALS == lease::Limits::MAX_RENEWALS,
    "a client gathers renewals into requests the store takes"
);
const _: () = assert!(
    lease::Limits::MAX_RENEWALS * (2 * lease::Limits::MAX_NAME_BYTES + 32)
        < limits::MAX_CLIENT_MESSAGE_BYTES,
    "a renewal of the most leases with the longest names fits a client's message"
);
