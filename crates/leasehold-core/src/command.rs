//! What goes into the Raft log, and what applying it answers.

use serde::{Deserialize, Serialize};

use crate::auth::{Action, AuthChange, Denied};
use crate::etcd::{EtcdOp, EtcdOutcome};
use crate::Name;

/// One logged command: an operation plus the store time the leader stamped on it.
///
/// `at_ms` is `None` under the manual clock, where only [`Op::Advance`] moves time.
/// `request` names the client request, so a retry of it is answered, not applied twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// The leader's stamp, in milliseconds of store time: applying the command first moves
    /// store time up to it (never back). `None` under the manual clock.
    pub at_ms: Option<u64>,
    /// The client request this is, within the client's session; `None` for a write outside
    /// any session, such as a registration or what the leader logs itself (ticks, forgets).
    pub request: Option<RequestId>,
    /// What the command does.
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
    /// The client's session id, handed out by the state machine when the client registers
    /// ([`Op::Register`], answered [`Outcome::Registered`]); ids are never reused.
    pub client: u64,
    /// Grows with every request of that client.
    pub sequence: u64,
}

/// What a command asks of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    /// Grant a free or expired lease, or renew it for its current holder.
    Acquire {
        /// The lease's name.
        lease: String,
        /// The holder's name, as it asks for the lease.
        holder: String,
        /// How long the grant lasts from the command's store time, in milliseconds.
        ttl_ms: u64,
    },
    /// Give the lease up at once; only its current holder with its current token may.
    Release {
        /// The lease's name.
        lease: String,
        /// The holder's name, as it was granted the lease.
        holder: String,
        /// The token of the grant being given up.
        token: u64,
    },
    /// Write a row; with a fence, only if the token is not older than the lease's fence.
    Put {
        /// The row's key.
        key: String,
        /// The bytes to store under it, replacing any there.
        value: Vec<u8>,
        /// The lease and token the write is fenced with; `None` for a plain write.
        fence: Option<Fence>,
    },
    /// Manual clock only: move store time forward.
    Advance {
        /// How far, in milliseconds.
        by_ms: u64,
    },
    /// Default clock only: carries nothing but its stamp, so leases expire in the log.
    Tick,
    /// Opens a client session: the answer names the client id its requests then carry.
    Register,
    /// Remove a row; with a fence, only if the token is not older than the lease's fence, as a
    /// fenced put.
    Delete {
        /// The row's key.
        key: String,
        /// The lease and token the delete is fenced with; `None` for a plain delete.
        fence: Option<Fence>,
    },
    /// Leader only, at a bounded rate: drop leases free for at least `retention_ms` of store
    /// time (`serve --lease-retention`), their largest token kept as the table's floor.
    Forget {
        /// How long a lease must have been free to be dropped, in milliseconds of store time.
        retention_ms: u64,
    },
    /// A client's operation with the identity its certificate names: applied only if the
    /// policy lets that identity do it, answered [`Outcome::Denied`] otherwise. An operation a
    /// client sends without an identity is logged bare, and is denied while the policy is on.
    As {
        /// The identity, as the node that took the request found it: in the client's
        /// certificate, or through its bearer token.
        identity: String,
        /// The SHA-256 of the bearer token that gave the identity, if one did: applied only
        /// while the policy still gives that token that identity, so that a revocation holds
        /// from its log index on, whatever the node that took the request had applied.
        bearer: Option<String>,
        /// What it asks; never another `As` (refused when decoded, so a peer cannot nest
        /// them deep enough to overflow a node's stack).
        #[serde(deserialize_with = "one_identity")]
        op: Box<Op>,
    },
    /// A change to who may do what: admin only, answered [`Outcome::PolicyChanged`] or
    /// [`Outcome::PolicyRefused`].
    Auth(AuthChange),
    // New variants go last: the log and snapshots name variants by their index.
    /// Renew many held leases in one command: each only for its holder under its current
    /// token, by its own TTL, answered lease by lease ([`Outcome::Renewed`]). Never grants: a
    /// lease that ran out stays free, so a holder cannot miss that it lost it.
    Renew {
        /// The leases, in the order their answers come back.
        leases: Vec<Renewal>,
    },
    /// Closes the session its request names (log format 2): its kept answers go, and its id
    /// serves no request again, as if it had expired. A client closes its session when it is
    /// done, so that sessions do not linger for their idle hour. Answered [`Outcome::Closed`],
    /// also when the session was closed or expired already; only the identity that opened a
    /// session may close it.
    Close,
    /// An etcd client's write to the etcd keyspace (log format 3), answered
    /// [`Outcome::Etcd`].
    Etcd(EtcdOp),
}

std::thread_local! {
    /// Whether this thread is decoding the operation inside an [`Op::As`].
    static DECODING_AS: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Decodes the operation inside an [`Op::As`], refusing one that is itself an `As`: decoding
/// is recursive, and a record of nested `As`, a few bytes each, would overflow the stack.
fn one_identity<'de, D: serde::Deserializer<'de>>(decoder: D) -> Result<Box<Op>, D::Error> {
    if DECODING_AS.with(|inside| inside.replace(true)) {
        return Err(serde::de::Error::custom(
            "an operation acts as one identity, not as one inside another",
        ));
    }
    let op = Op::deserialize(decoder);
    DECODING_AS.with(|inside| inside.set(false));
    op.map(Box::new)
}

impl Op {
    /// The operation itself, out of an [`Op::As`]; `self` for any other.
    pub fn bare(&self) -> &Op {
        match self {
            Op::As { op, .. } => op,
            op => op,
        }
    }

    /// The identity it is logged with, if any.
    pub fn identity(&self) -> Option<&str> {
        match self {
            Op::As { identity, .. } => Some(identity),
            _ => None,
        }
    }

    /// The SHA-256 of the bearer token that gave its identity, if one did.
    pub fn bearer(&self) -> Option<&str> {
        match self {
            Op::As { bearer, .. } => bearer.as_deref(),
            _ => None,
        }
    }

    /// The operation with every TTL it carries (an acquire's, each renewal's) longer by
    /// `margin_ms`: what a leader logs under the default clock
    /// ([`Limits::GRANT_MARGIN_MS`](crate::Limits::GRANT_MARGIN_MS)), after the TTLs asked were
    /// checked, so that the log holds what every replica applies.
    pub fn held_longer(self, margin_ms: u64) -> Op {
        match self {
            Op::Acquire {
                lease,
                holder,
                ttl_ms,
            } => Op::Acquire {
                lease,
                holder,
                ttl_ms: ttl_ms.saturating_add(margin_ms),
            },
            Op::Renew { mut leases } => {
                for renewal in &mut leases {
                    renewal.ttl_ms = renewal.ttl_ms.saturating_add(margin_ms);
                }
                Op::Renew { leases }
            }
            Op::As {
                identity,
                bearer,
                op,
            } => Op::As {
                identity,
                bearer,
                op: Box::new(op.held_longer(margin_ms)),
            },
            op => op,
        }
    }

    /// What the policy must allow for a client to ask this, every one of it: none for what
    /// any identity may do (opening a session) or what only a node logs (ticks, forgetting);
    /// one hold per lease for a renewal.
    pub fn actions(&self) -> impl Iterator<Item = Action<'_>> {
        let renewals = match self {
            Op::Renew { leases } => leases.as_slice(),
            _ => &[],
        };
        self.action()
            .into_iter()
            .chain(renewals.iter().map(|r| Action::Hold {
                lease: &r.lease,
                holder: &r.holder,
            }))
    }

    /// What the policy must allow of an operation on one lease or row.
    fn action(&self) -> Option<Action<'_>> {
        match self {
            Op::Acquire { lease, holder, .. } | Op::Release { lease, holder, .. } => {
                Some(Action::Hold { lease, holder })
            }
            Op::Put { key, .. } => Some(Action::Write(key)),
            Op::Delete { key, .. } => Some(Action::Delete(key)),
            Op::Advance { .. } => Some(Action::Admin("advance the clock")),
            Op::Auth(_) => Some(Action::Admin("change the policy")),
            // Acting as another identity is an admin's (a node never logs one inside another).
            Op::As { .. } => Some(Action::Admin("act as another identity")),
            // An etcd write's keys are the etcd module's to name (`EtcdOp::needs`).
            Op::Register
            | Op::Tick
            | Op::Forget { .. }
            | Op::Renew { .. }
            | Op::Close
            | Op::Etcd(_) => None,
        }
    }
}

/// One lease of an [`Op::Renew`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renewal {
    /// The lease's name.
    pub lease: String,
    /// The holder's name, as it was granted the lease.
    pub holder: String,
    /// The token of the grant being renewed.
    pub token: u64,
    /// How long the grant lasts from the command's store time, in milliseconds.
    pub ttl_ms: u64,
}

/// What an [`Op::Renew`] answered for one of its leases.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Renewed {
    /// Renewed: the grant, token unchanged, now runs out at this store time (ms).
    Until {
        /// When the grant runs out, in store time (ms), unless its holder renews it again.
        expires_at_ms: u64,
    },
    /// Not renewed, and why: that lease is unchanged. The holder has lost it (or never held
    /// it under that token).
    Refused(ReleaseRefusal),
}

/// What a fenced write carries: the lease it writes under and the token its holder was granted.
/// The write goes ahead only if the token is not older than the lease's fence, so a holder
/// that lost the lease without knowing it cannot overwrite its successor's writes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fence {
    /// The lease's name.
    pub lease: String,
    /// The token of the writer's grant of that lease.
    pub token: u64,
}

/// What applying a command answered. Refusals are values, not errors: they travel to the client.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The lease is the asker's: a new grant, or a renewal of its own.
    Granted {
        /// The grant's token: each new grant of the lease gets a larger one than any before
        /// it, a renewal keeps its own.
        token: u64,
        /// When the grant runs out, in store time (ms).
        expires_at_ms: u64,
        /// True when the asker already held the lease and only its expiry moved.
        renewed: bool,
    },
    /// Someone else holds the lease: nothing changed.
    HeldBy {
        /// The current holder's name, shared with the table.
        holder: Name,
        /// The current grant's token.
        token: u64,
        /// When the current grant runs out, in store time (ms), unless its holder renews it.
        expires_at_ms: u64,
    },
    /// The lease is free from the release's store time on.
    Released {
        /// The token of the grant given up.
        token: u64,
    },
    /// A release refused, and why: nothing changed.
    ReleaseRefused(ReleaseRefusal),
    /// A put applied: the row holds the new value.
    Written,
    /// A fenced write (put or delete) whose token is older than the largest token the store has
    /// seen for the lease.
    StaleToken {
        /// The lease's fence, which the token was below; for a forgotten lease, the table's
        /// floor.
        fence: u64,
    },
    /// A fenced write (put or delete) with a token this lease never handed out: invalid input,
    /// nothing changed.
    UnknownToken {
        /// The lease the write was fenced with.
        lease: Name,
        /// The largest token the lease has handed out (the table's floor for a lease not in
        /// it): the write's token was above it.
        latest_token: u64,
    },
    /// An advance applied: store time moved forward by it.
    Advanced,
    /// A tick applied: it brought the expiries due by its stamp, and nothing else.
    Ticked,
    /// A retried request older than every answer its client's session keeps: it is not applied
    /// again (it may have been applied once, with an answer since forgotten).
    Forgotten,
    /// A session opened: the client's requests carry this id from now on.
    Registered {
        /// The new session's client id.
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
        /// True when there was a row under the key to remove.
        existed: bool,
    },
    /// How many free leases a `Forget` dropped.
    Forgot {
        /// How many; at most [`FORGET_BATCH`](crate::FORGET_BATCH).
        leases: usize,
    },
    /// The policy does not let the asker do this: nothing changed. Boxed: every session keeps
    /// its last answers, and this rare answer, at four strings, would make each of them the
    /// size of four strings.
    Denied(Box<Denied>),
    /// A policy change applied.
    PolicyChanged,
    /// A policy change refused: it would leave the policy invalid or the cluster without an
    /// admin. Nothing changed.
    PolicyRefused {
        /// Why, naming the field and the rule.
        reason: String,
    },
    // New variants go last: session answers in snapshots name variants by their index.
    /// What a renewal did to each of its leases, in the order it named them.
    Renewed(Vec<Renewed>),
    /// The session is closed.
    Closed,
    /// What an etcd write did, at the etcd keyspace's revision after it. Boxed, as `Denied`.
    Etcd(Box<EtcdOutcome>),
}

impl Outcome {
    /// True when the command was granted or accepted; false for every refusal.
    pub fn accepted(&self) -> bool {
        if let Outcome::Etcd(etcd) = self {
            return !matches!(etcd.answer, crate::etcd::EtcdAnswer::Refused(_));
        }
        !matches!(
            self,
            Outcome::HeldBy { .. }
                | Outcome::ReleaseRefused(_)
                | Outcome::StaleToken { .. }
                | Outcome::UnknownToken { .. }
                | Outcome::Forgotten
                | Outcome::UnknownSession
                | Outcome::RequestIdReused
                | Outcome::Denied(_)
                | Outcome::PolicyRefused { .. }
        )
    }
}

/// Why a release (or the renewal of one lease) was refused.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReleaseRefusal {
    /// Nobody holds the lease: it was never granted, was released, or has expired.
    NotHeld,
    /// Someone else holds it.
    HeldByOther {
        /// The current holder's name, shared with the table.
        holder: Name,
        /// The current grant's token.
        token: u64,
        /// When the current grant runs out, in store time (ms), unless its holder renews it.
        expires_at_ms: u64,
    },
    /// The right holder, but not the token of the current grant.
    WrongToken {
        /// The current grant's token.
        current_token: u64,
    },
}
