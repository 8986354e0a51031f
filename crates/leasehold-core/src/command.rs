//! What goes into the Raft log, and what applying it answers.

use serde::{Deserialize, Serialize};

/// One logged command: an operation plus the store time the leader stamped on it.
///
/// `at_ms` is `None` under the manual clock, where only [`Op::Advance`] moves time.
/// `request` names the client request, so a retry of it is answered, not applied twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    pub at_ms: Option<u64>,
    pub request: Option<RequestId>,
    pub op: Op,
}

/// What one log entry carries: the commands the leader gathered while its earlier entries were
/// on their way to a quorum, applied in order. Requests that arrive together share one entry,
/// so they share one fsync on every node instead of waiting for one each.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch(pub Vec<Command>);

/// A client's name for one request: the same on every retry of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct RequestId {
    /// Chosen at random by each client.
    pub client: u64,
    /// Grows with every request of that client.
    pub sequence: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Grant a free or expired lease, or renew it for its current holder.
    Acquire {
        lease: String,
        holder: String,
        ttl_ms: u64,
    },
    /// Give the lease up at once; only its current holder with its current token may.
    Release {
        lease: String,
        holder: String,
        token: u64,
    },
    /// Write a row; with a fence, only if the token is not older than the lease's fence.
    Put {
        key: String,
        value: Vec<u8>,
        fence: Option<Fence>,
    },
    /// Manual clock only: move store time forward.
    Advance { by_ms: u64 },
    /// Default clock only: carries nothing but its stamp, so leases expire in the log.
    Tick,
    /// Opens a client session: the answer names the client id its requests then carry.
    Register,
    /// Remove a row; with a fence, only if the token is not older than the lease's fence, as a
    /// fenced put.
    Delete { key: String, fence: Option<Fence> },
    /// Leader only, at a bounded rate: drop leases free for at least `retention_ms` of store
    /// time (`serve --lease-retention`), their largest token kept as the table's floor.
    Forget { retention_ms: u64 },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    pub lease: String,
    pub token: u64,
}

/// What applying a command answered. Refusals are values, not errors: they travel to the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    Granted {
        token: u64,
        expires_at_ms: u64,
        renewed: bool,
    },
    HeldBy {
        holder: String,
        token: u64,
        expires_at_ms: u64,
    },
    Released {
        token: u64,
    },
    ReleaseRefused(ReleaseRefusal),
    Written,
    /// A fenced put whose token is older than the largest token the store has seen for the lease.
    StaleToken {
        fence: u64,
    },
    /// A fenced put with a token this lease never handed out: invalid input, nothing changed.
    UnknownToken {
        lease: String,
        latest_token: u64,
    },
    Advanced,
    Ticked,
    /// A retried request older than every answer its client's session keeps: it is not applied
    /// again (it may have been applied once, with an answer since forgotten).
    Forgotten,
    /// A session opened: the client's requests carry this id from now on.
    Registered {
        client: u64,
    },
    /// A request naming a session the store does not have: never opened, or expired after an
    /// hour of silence. Not applied: it may be a late retry of one applied before the session
    /// expired.
    UnknownSession,
    /// A request id already used for another operation: refused, not answered with the other
    /// operation's answer.
    RequestIdReused,
    /// Raft's own entries (blank, membership) carry no command.
    Nothing,
    /// A delete applied: whether the row was there.
    Deleted {
        existed: bool,
    },
    /// How many free leases a `Forget` dropped.
    Forgot {
        leases: usize,
    },
}

impl Outcome {
    /// True when the command was granted or accepted; false for every refusal.
    pub fn accepted(&self) -> bool {
        !matches!(
            self,
            Outcome::HeldBy { .. }
                | Outcome::ReleaseRefused(_)
                | Outcome::StaleToken { .. }
                | Outcome::UnknownToken { .. }
                | Outcome::Forgotten
                | Outcome::UnknownSession
                | Outcome::RequestIdReused
        )
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseRefusal {
    /// Nobody holds the lease: it was never granted, was released, or has expired.
    NotHeld,
    /// Someone else holds it.
    HeldByOther {
        holder: String,
        token: u64,
        expires_at_ms: u64,
    },
    /// The right holder, but not the token of the current grant.
    WrongToken { current_token: u64 },
}
