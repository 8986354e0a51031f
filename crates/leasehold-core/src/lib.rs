//! Leasehold's core: what the replicated state is and how one logged command changes it.
//!
//! Everything here is pure. No async, no I/O, no clock: time arrives inside the command,
//! so every replica that applies the same log reaches the same state. A crate of its own, on
//! serde, postcard and thiserror alone, so that nothing here can reach for Raft, the network
//! or the clock, and the fault suite's checkers use these types without compiling a node.
//!
//! - `command`: what is logged (commands with their stamped store time) and what a command
//!   answers ([`Outcome`]).
//! - `table`: [`LeaseTable::apply`], leases, tokens, fences, rows, and the digest kept along.
//! - [`limits`]: sizes, TTL bounds and names, validated before a command reaches the log.
//! - `session`: client sessions, so a retried request is answered, never applied twice.
//! - `event`: what a command did to leases, for watches.
//! - [`auth`]: who may do what: roles on lease and key prefixes, the admin permission, and
//!   holders bound to the identity that owns them; a pure policy, changed only by
//!   [`auth::AuthChange`].

#![warn(missing_docs)]

pub mod auth;
#[cfg(test)]
mod authorized;
mod command;
mod event;
pub mod limits;
pub(crate) mod session;
mod table;

pub use command::{
    Batch, Command, Fence, Op, Outcome, ReleaseRefusal, Renewal, Renewed, RequestId,
};
pub use event::{Event, EventKind};
pub use limits::{validate, InvalidInput, Limits, FORGET_BATCH, SESSION_IDLE_MS};
pub use table::{Lease, LeaseTable, TokenCheck};

/// FNV-1a over `bytes`: stable across processes and builds, unlike std's hasher, so replicas
/// and checkers agree on it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
