//! # Layout
//!
//! Leasehold is a lease store: leases that expire, fencing tokens that grow on every change of
//! holder, and fenced writes the store refuses once it has seen a bigger token. Three or five
//! nodes replicate every command through a Raft log and apply it to a pure state machine.
//!
//! The arrows point one way: `cli` → `client` / `node` → `raft` → `lease`.
//!
//! - [`lease`]: the heart, pure. Commands, outcomes, limits, and `LeaseTable::apply`.
//! - [`raft`]: openraft glue. Type config, the segment-file log store, the state machine adapter and
//!   snapshots, the peer network, the proposer that gathers concurrent writes into one entry, and
//!   the reads that share one ReadIndex.
//! - [`node`]: one running node. The leader's clock, the gRPC services, forwarding to the
//!   leader (writes in batches), bootstrap and shutdown.
//! - [`gather`]: batching of concurrent requests, for the proposer, the reads and the forwarder.
//! - [`check`]: the fault suite's checkers: linearizability, fencing, mutual exclusion, durability.
//! - [`client`]: `LeaseClient`, which finds a live node and retries; used by the CLI and tests.
//! - [`cli`]: the `leasehold` commands: serve, cluster, the client commands, demo.
//! - [`proto`]: code generated from `proto/`.

pub mod check;
pub mod cli;
pub mod client;
pub mod gather;
pub mod lease;
pub mod node;
pub mod proto;
pub mod raft;
