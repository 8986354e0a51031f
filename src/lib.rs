//! # Layout
//!
//! Leasehold is a lease store: leases that expire, fencing tokens that grow on every change of
//! holder, and fenced writes the store refuses once it has seen a bigger token. Three or five
//! nodes replicate every command through a Raft log and apply it to a pure state machine.
//!
//! This crate is the server and the `leasehold` command. Beside it in the workspace (`crates/`):
//! `leasehold-core` (the heart, pure, re-exported here as [`lease`]), `leasehold-proto` (the
//! public API's wire types and keys), `leasehold-client` (the Rust client and `Holder`, on the
//! proto crate alone), and the test-only `leasehold-check` (the fault suite's checkers,
//! replaying the log through a reference model that shares no code with the table; on the core
//! crate alone).
//!
//! The arrows point one way: `cli` → `leasehold_client` / `node` → `raft` → `lease`.
//!
//! - [`lease`] (the `leasehold-core` crate): the heart, pure. Commands, outcomes, limits, client
//!   sessions, and `LeaseTable::apply`; no tokio, no openraft.
//! - [`raft`]: openraft glue. Type config and its runtime (tokio, with a seedable generator), the
//!   segment-file log store (behind a file-system seam its crash tests replace), the state
//!   machine adapter and the snapshot file (never behind the purged log), the peer network (which
//!   refuses peers running the other clock, and keeps a refused candidate's election penalty
//!   short, where openraft 0.9 keeps it until the next campaign), the proposer that gathers
//!   concurrent writes into one entry, and the reads that share one ReadIndex.
//! - [`node`]: one running node. Its two planes (clients; peers, behind the peer gate), the
//!   leader's clock (a new leader starts from the largest store time carried here or at a peer
//!   that applied the newest stamp, so store time never gains on real time), the gRPC services,
//!   forwarding to the leader (writes in batches, given up once that node no longer leads), when
//!   the node may campaign, bootstrap and shutdown.
//! - [`tls`]: TLS for both planes: loading the files, the accept loop (a bounded number of
//!   handshakes in flight) that logs refusals, which member a peer's certificate names.
//! - [`metrics`]: what a node counts for Prometheus (`serve --metrics-listen`).
//! - [`gather`]: batching of concurrent requests, for the proposer, the reads and the forwarder.
//! - [`cli`]: the `leasehold` commands: serve, cluster, the client commands, demo, and `hold`
//!   with the guard process that kills its command at the deadline.
//! - [`proto`]: code generated from `proto/`.

pub mod cli;
pub mod gather;
pub use leasehold_core as lease;
pub mod metrics;
pub mod node;
pub mod proto;
pub mod raft;
pub mod tls;
