//! What applying a command did to a lease, for watchers: derived from the table's change, so
//! every replica notes the same events for the same log.

use crate::Name;

/// What happened to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A new holder, with a new token.
    Granted,
    /// The holder extended its grant: same token, later expiry.
    Renewed,
    /// The holder gave the lease up.
    Released,
    /// Store time reached the grant's expiry.
    Expired,
}

/// One lease's change in one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The lease's name, shared with the table while the lease is in it.
    pub lease: Name,
    /// The holder it happened to: the new or renewing one, or the one whose grant ended.
    pub holder: Name,
    /// The token of that holder's grant.
    pub token: u64,
    /// The grant's expiry; for a release, the store time of the release.
    pub expires_at_ms: u64,
}
