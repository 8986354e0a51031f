//! # Layout
//!
//! One Leasehold node: the openraft glue and the running node around the pure core
//! (`leasehold-core`). The `leasehold` binary builds its commands on this crate; nothing here
//! knows clap, and nothing in the core knows this crate.
//!
//! The arrows point one way: `node` → `raft` → `leasehold_core`; `metrics`, `gather` and
//! `proto` serve both, `tls` takes only `raft`'s node id, and every module takes its bounds from
//! `limits`, which takes nothing but `gather`'s batch shape and the core's limits.
//!
//! What the crate exports is what the `leasehold` binary and the tests outside it need: how to
//! run a node (`node::run` and its config), its bounds, the storage for the storage tests, TLS
//! files and certificates, and the wire types. The rest is the crate's own.
//!
//! - [`raft`]: openraft glue. Type config and its runtime (tokio, with a seedable generator), the
//!   segment-file log store (behind a file-system seam its crash tests replace; a purge waits
//!   for the snapshot covering it in a task of its own, not in openraft's core loop, unless an
//!   append would leave a hole behind it), the state machine adapter and the snapshot file
//!   (never behind the purged log), the peer network (votes, and the pre-votes asked before a
//!   campaign; it refuses peers running the other clock, and keeps a refused candidate's
//!   election penalty short, where openraft 0.9 keeps it until the next campaign), the peer
//!   lanes that AppendEntries and forwarded writes take (framed messages on connections of
//!   their own, not gRPC calls), the proposer that gathers concurrent writes into one entry,
//!   and the reads that share one ReadIndex.
//! - [`node`]: one running node. The one assembly (`node::start`, which `serve` and the
//!   simulation both use), its two planes (clients; peers, behind the peer gate), each port
//!   telling its lanes from gRPC and serving them (`node::lanes`; the client port's, without
//!   TLS, in `node::client_lanes`), the
//!   leader's clock (a new leader starts from the largest store time carried here or at a peer
//!   that applied the newest stamp, so store time never gains on real time; a slow commit has a
//!   fresh stamp logged after it), the gRPC services, forwarding to the leader (writes in
//!   batches; one held by a leader that no longer leads goes on to the new one), a leader that
//!   stops taking requests once its quorum is silent, when the node may campaign, bootstrap and
//!   shutdown.
//! - [`tls`]: TLS for both planes: loading the files, the accept loop (a bounded number of
//!   handshakes in flight) that logs refusals, which member a peer's certificate names, and
//!   the certificates `cluster --tls` and `certs` make.
//! - [`metrics`]: what a node counts for Prometheus (`serve --metrics-listen`).
//! - [`limits`]: every size, timeout and bound of a node, with their relations asserted when the
//!   crate compiles.
//! - `gather`: batching of concurrent requests, for the proposer, the reads and the forwarder.
//! - [`proto`]: the public API's wire types (from `leasehold-proto`) and the peer plane's,
//!   generated from `proto/` by `build.rs`.
//! - `sim` (a test): the deterministic simulation of whole clusters on tokio's paused clock,
//!   each node started by `node::start` as `serve` starts it, and judged by `leasehold-check`.

#![warn(missing_docs)]

mod gather;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod proto;
pub mod raft;
pub mod tls;

// The deterministic simulation of whole clusters, a test of this crate.
#[cfg(test)]
mod sim;
