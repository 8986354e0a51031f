//! # Layout
//!
//! One Leasehold node: the openraft glue and the running node around the pure core
//! (`leasehold-core`). The `leasehold` binary builds its commands on this crate; nothing here
//! knows clap, and nothing in the core knows this crate.
//!
//! The arrows point one way: `node` → `raft` → `leasehold_core`; `tls`, `metrics`, `gather`
//! and `proto` serve both, as [`NodeId`] (defined here) does, and every module takes its
//! bounds from `limits`, which takes nothing but `gather`'s batch shape and the core's limits.
//!
//! What the crate exports is what the `leasehold` binary and the tests outside it need: how to
//! run a node (`node::run` and its config), its bounds, the storage for the storage tests, TLS
//! files and certificates, and the wire types. The rest is the crate's own.
//!
//! - [`raft`]: openraft glue. Type config and its runtime (tokio, with a seedable generator), the
//!   segment-file log store (behind a file-system seam its crash tests replace, whose opens a
//!   shortage of descriptors delays but never fails, `raft::descriptors`; a purge waits
//!   for the snapshot covering it in a task of its own, not in openraft's core loop, unless an
//!   append would leave a hole behind it), the state machine adapter and the snapshot file
//!   (never behind the purged log), the peer network (votes, and the pre-votes asked before a
//!   campaign; it refuses peers running the other clock, and keeps a refused candidate's
//!   election penalty short, where openraft 0.9 keeps it until the next campaign), the peer
//!   lanes that AppendEntries and forwarded writes take (framed messages on connections of
//!   their own, not gRPC calls), the proposer that gathers concurrent writes into one entry,
//!   the reads that share one ReadIndex, and the peer handshake (`raft::protocol`: what each
//!   node announces of its protocol and log formats on every peer message, so that a leader
//!   sends nothing a member cannot read and a rolling upgrade needs no downtime).
//! - [`node`]: one running node, in rooms whose arrows point from the transports down to the
//!   API and from the API down to the node itself:
//!   - `node::grpc` (the `LeaseStore` and `Cluster` services, and the `Batch` stream),
//!     `node::etcd` (etcd's v3 services, under etcd's own names), `node::http` (HTTP/JSON, and
//!     etcd's JSON gateway) and `node::client_lanes` (the client port's lanes without TLS):
//!     thin edges that find the caller's credentials and deadline, call the API, and map a
//!     `NodeError` to their wire once each;
//!   - `node::api`: the typed API, one plain async method per RPC, `(credentials, deadline,
//!     request) -> Result<answer, NodeError>`: checks, admission, authorization, forwarding of
//!     reads, metrics and the denial log, written once (`node::api::etcd` for etcd's calls, its
//!     streams, lock and election);
//!   - `node::peer`: the peer plane (the gate that lets only members through, the Raft service,
//!     and the calls this node makes to its peers); `node::lanes`: the accept split and serve
//!     loop of both ports' lanes (the peer's, and the client's without TLS);
//!   - the node itself: the one assembly (`node::start`, which `serve` and the simulation both
//!     use, and `serve`'s planes), writes (`write.rs`: proposed here or forwarded in batches;
//!     one held by a leader that no longer leads goes on to the new one), reads (`read.rs`),
//!     leadership (`leadership.rs`: a leader that stops taking requests once its quorum is
//!     silent), the leader's stamps and clock (`stamps.rs`, `clock.rs`: a new leader starts
//!     from the largest store time carried here or at a peer that applied the newest stamp, so
//!     store time never gains on real time; a slow commit has a fresh stamp logged after it),
//!     membership, when the node may campaign, bootstrap and shutdown. `node::error` is the one
//!     place a `NodeError` becomes a gRPC status (and a `Batch` refusal).
//! - `connections`: each listener's bound on its established connections, its share of the
//!   open-files limit, so that clients cannot take the descriptors the log needs; the TCP
//!   keepalive every accepted connection gets; a client connection's deadline for its first
//!   bytes. `http1`: the HTTP and metrics listeners' HTTP/1 server, which closes a connection
//!   idle between requests.
//! - [`tls`]: TLS for both planes: loading the files, the accept loop (a bounded number of
//!   handshakes in flight) that logs refusals, which member a peer's certificate names, and
//!   the certificates `cluster --tls` and `certs` make.
//! - [`metrics`]: what a node counts for Prometheus (`serve --metrics-listen`).
//! - [`limits`]: every size, timeout and bound of a node, with their relations asserted when the
//!   crate compiles.
//! - `gather`: batching of concurrent requests, for the proposer, the reads and the forwarder.
//! - [`proto`]: the public API's wire types (from `leasehold-proto`, whose `wire` names every
//!   metadata key, greeting and ALPN name) and the peer plane's, generated from `proto/` by
//!   `build.rs`.
//! - `sim` (a test): the deterministic simulation of whole clusters on tokio's paused clock,
//!   each node started by `node::start` as `serve` starts it, and judged by `leasehold-check`.

#![warn(missing_docs)]

mod connections;
mod gather;
mod http1;
pub mod limits;
pub mod metrics;
pub mod node;
pub mod proto;
pub mod raft;
pub mod tls;

/// A node's id, as the cluster's members, `serve --id` and a node's certificate name it. Here,
/// not in `raft`, so that `tls` (which `raft` uses) takes it from below.
pub type NodeId = u64;

// The deterministic simulation of whole clusters, a test of this crate.
#[cfg(test)]
mod sim;
