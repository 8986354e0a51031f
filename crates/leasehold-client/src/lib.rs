//! A Rust client for Leasehold, a replicated lease store with fencing tokens.
//!
//! - [`LeaseClient`] (`client`): one-shot calls to any node of a cluster. It finds a live
//!   node, retries while the cluster elects, and never applies a write twice: a write that got
//!   no answer says whether it may have been applied ([`ClientError::is_indeterminate`]).
//! - [`answers`]: what the store answered, as Rust values: [`Acquired::Granted`],
//!   [`Acquired::HeldBy`], [`Written::StaleToken`], ... With the `serde` feature they
//!   serialize as the `leasehold` CLI's `-o json` prints them: the variant as `outcome`, in
//!   snake_case, its fields beside it.
//! - [`Holder`] (`holder`): holds a lease: waits for it if asked, renews it, knows until when
//!   holding it is safe, refuses fenced writes locally past that, releases it on drop. Its
//!   instants are of [`clock`], which counts the time the host was suspended.
//! - `renewals`: the holders of one client renew together, one request for all those due.
//! - [`Watch`] (`watch`): lease events (granted, renewed, released, expired) in log order,
//!   resumed on another node when the one streaming fails.
//! - `error`, `attempts`: what a call fails with, and how one call's attempts add up to it;
//!   `failure`: what a failed attempt's status says; `dead_end`: when a one-shot caller (the
//!   CLI) knows no node can serve it, and says why.
//! - `channel`: a channel to one node, carrying the client's bearer token.
//! - `sequences`: the request ids' sequences, never so far apart that the store forgot one.
//! - `batch`: the lease calls multiplexed on one gRPC `Batch` stream per node; `lane`: the
//!   same calls on connections of their own, where a node without TLS takes them.
//!
//! The wire types are in the `leasehold-proto` crate, re-exported as [`proto`].

#![warn(missing_docs)]

pub mod answers;
mod attempts;
mod batch;
mod channel;
mod client;
pub mod clock;
mod dead_end;
mod error;
mod failure;
#[cfg(test)]
mod fake;
mod holder;
mod lane;
pub mod limits;
mod renewals;
mod sequences;
mod watch;

pub use answers::{
    Acquired, Answer, Applied, Deleted, HeldBy, LeaseState, Listing, Member, MemberRole, Members,
    Page, Released, Renewal, Renewed, TokenStatus, Written,
};
pub use client::{LeaseClient, SavedSnapshot};
pub use error::ClientError;
pub use holder::{default_margin, HoldError, Holder, HolderOptions, Lost, Standing};
pub use leasehold_proto as proto;
pub use tonic::transport::ClientTlsConfig;
pub use tonic::Code;
pub use watch::{EventKind, LeaseEvent, Watch, WatchFrom, WatchSelect};
