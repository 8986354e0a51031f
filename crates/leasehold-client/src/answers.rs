//! The store's answers as Rust values. Refusals (the lease is held by another, the token is
//! stale) are answers, not errors: the store decided them, in the log, like any grant.

use leasehold_proto::v1 as pb;

use crate::error::ClientError;

/// An answer and where in the log it was decided. With the `serde` feature it serializes as
/// one object, the outcome's fields beside `log_index`, `store_time_ms` and `position`: for
/// outcomes that are structs or enums of them (`Acquired`, `LeaseState`, ...); one that is not
/// (the bytes of a `get`, a renewal's list) fails to serialize.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer<T> {
    /// What the store answered.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub outcome: T,
    /// Where in the log it was answered.
    #[cfg_attr(feature = "serde", serde(flatten))]
    pub applied: Applied,
}

/// Where in the log a request was answered, and the store time there.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The log entry that answered a write, or the applied index a read saw.
    pub log_index: u64,
    /// The store's time there, in ms: the clock leases expire by. A write's is its entry's; a
    /// linearizable read's the leader's when it read, so that a lease's time left
    /// (`expires_at_ms - store_time_ms`, 0 at most) counts down while nothing is logged.
    pub store_time_ms: u64,
    /// The write's place among those its log entry carries; 0 for reads.
    pub position: u32,
}

/// Another holder's grant, as a refusal names it.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldBy {
    /// Who holds the lease.
    pub holder: String,
    /// Their grant's token.
    pub token: u64,
    /// When their grant runs out, in store time, unless they renew.
    pub expires_at_ms: u64,
}

/// What an acquire got.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Acquired {
    /// The lease is the caller's.
    Granted {
        /// Larger than every earlier token of the lease, unless `renewed`.
        token: u64,
        /// When the grant runs out, in store time, unless renewed.
        expires_at_ms: u64,
        /// The caller held the lease already and keeps its token.
        renewed: bool,
    },
    /// Someone else holds it.
    HeldBy(HeldBy),
}

impl Acquired {
    /// The token granted or renewed; `None` when another holds the lease.
    pub fn token(&self) -> Option<u64> {
        match self {
            Acquired::Granted { token, .. } => Some(*token),
            Acquired::HeldBy(_) => None,
        }
    }
}

/// What a release got.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Released {
    /// The lease is free now.
    Released {
        /// The released grant's token.
        token: u64,
    },
    /// Nobody holds it (it expired, or was released already).
    NotHeld,
    /// Someone else holds it.
    HeldBy(HeldBy),
    /// The caller holds it under another token.
    WrongToken {
        /// The token the caller holds it under.
        current_token: u64,
    },
}

/// One lease of a renewal ([`LeaseClient::renew`](crate::LeaseClient::renew)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewal {
    /// The lease.
    pub lease: String,
    /// Its holder's name, as it was granted.
    pub holder: String,
    /// The token of the grant to renew.
    pub token: u64,
    /// How long the grant lasts from the renewal's store time, in ms.
    pub ttl_ms: u64,
}

/// What a renewal got for one of its leases.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Renewed {
    /// Renewed: same token, the grant runs out at this store time now.
    Until {
        /// When the grant runs out, in store time, unless renewed again.
        expires_at_ms: u64,
    },
    /// Not renewed: nobody holds the lease (it expired, or was released). A renewal never
    /// grants it again.
    NotHeld,
    /// Not renewed: someone else holds it.
    HeldBy(HeldBy),
    /// Not renewed: the holder holds it under another token.
    WrongToken {
        /// The token it is held under.
        current_token: u64,
    },
}

impl Renewed {
    /// Whether the lease was renewed (the holder still holds it).
    pub fn is_renewed(&self) -> bool {
        matches!(self, Renewed::Until { .. })
    }
}

/// What a put got.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Written {
    /// The row holds the value now.
    // `ok`, as the CLI has always printed it.
    #[cfg_attr(feature = "serde", serde(rename = "ok"))]
    Written,
    /// Refused: the store has seen a bigger token for the lease. Nothing changed.
    StaleToken {
        /// The biggest token the store has seen for the lease.
        fence: u64,
    },
}

impl Written {
    /// Whether the row was written (not refused as stale).
    pub fn is_written(&self) -> bool {
        matches!(self, Written::Written)
    }
}

/// What a delete got.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// The row is gone.
    Deleted {
        /// Whether there was one.
        existed: bool,
    },
    /// Refused: the store has seen a bigger token for the lease. The row stays.
    StaleToken {
        /// The biggest token the store has seen for the lease.
        fence: u64,
    },
}

/// Whether a token is its lease's current grant.
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize),
    serde(tag = "outcome", rename_all = "snake_case")
)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenStatus {
    /// Held, not expired, this token.
    Current {
        /// Who holds it.
        holder: String,
        /// When the grant runs out, in store time, unless renewed.
        expires_at_ms: u64,
    },
    /// Not the current grant.
    Stale {
        /// The lease's latest token (0 when the store keeps no record of the lease).
        current_token: u64,
        /// Whoever holds it now.
        #[cfg_attr(feature = "serde", serde(serialize_with = "empty_when_none"))]
        holder: Option<String>,
    },
}

/// A lease as a read sees it.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseState {
    /// `None` when the lease is free or expired.
    pub holder: Option<String>,
    /// The latest grant's token; 0 when never granted.
    pub token: u64,
    /// When the latest grant runs out (or ran out), in store time.
    pub expires_at_ms: u64,
    /// The largest token seen for the lease: a fenced write below it is refused.
    pub fence: u64,
}

fn applied(applied: Option<pb::Applied>) -> Applied {
    applied.map_or_else(Applied::default, |a| Applied {
        log_index: a.log_index,
        store_time_ms: a.store_time_ms,
        position: a.position,
    })
}

/// An answer with no outcome: the node speaks a version of the API this client does not.
const NO_OUTCOME: ClientError = ClientError::Malformed("the answer carries no outcome");

fn held_by(h: pb::HeldBy) -> HeldBy {
    HeldBy {
        holder: h.holder,
        token: h.token,
        expires_at_ms: h.expires_at_ms,
    }
}

impl TryFrom<pb::AcquireResponse> for Answer<Acquired> {
    type Error = ClientError;
    fn try_from(r: pb::AcquireResponse) -> Result<Self, ClientError> {
        use pb::acquire_response::Outcome;
        let outcome = match r.outcome.ok_or(NO_OUTCOME)? {
            Outcome::Granted(g) => Acquired::Granted {
                token: g.token,
                expires_at_ms: g.expires_at_ms,
                renewed: g.renewed,
            },
            Outcome::HeldBy(h) => Acquired::HeldBy(held_by(h)),
        };
        Ok(Answer {
            outcome,
            applied: applied(r.applied),
        })
    }
}

impl TryFrom<pb::ReleaseResponse> for Answer<Released> {
    type Error = ClientError;
    fn try_from(r: pb::ReleaseResponse) -> Result<Self, ClientError> {
        use pb::release_response::Outcome;
        let outcome = match r.outcome.ok_or(NO_OUTCOME)? {
            Outcome::Released(r) => Released::Released { token: r.token },
            Outcome::NotHeld(_) => Released::NotHeld,
            Outcome::HeldBy(h) => Released::HeldBy(held_by(h)),
            Outcome::WrongToken(w) => Released::WrongToken {
                current_token: w.current_token,
            },
        };
        Ok(Answer {
            outcome,
            applied: applied(r.applied),
        })
    }
}

impl TryFrom<pb::RenewResponse> for Answer<Vec<Renewed>> {
    type Error = ClientError;
    fn try_from(r: pb::RenewResponse) -> Result<Self, ClientError> {
        use pb::lease_renewal::Outcome;
        let lease = |l: pb::LeaseRenewal| {
            Ok(match l.outcome.ok_or(NO_OUTCOME)? {
                Outcome::Renewed(r) => Renewed::Until {
                    expires_at_ms: r.expires_at_ms,
                },
                Outcome::NotHeld(_) => Renewed::NotHeld,
                Outcome::HeldBy(h) => Renewed::HeldBy(held_by(h)),
                Outcome::WrongToken(w) => Renewed::WrongToken {
                    current_token: w.current_token,
                },
            })
        };
        Ok(Answer {
            outcome: r.leases.into_iter().map(lease).collect::<Result<_, _>>()?,
            applied: applied(r.applied),
        })
    }
}

impl TryFrom<pb::PutResponse> for Answer<Written> {
    type Error = ClientError;
    fn try_from(r: pb::PutResponse) -> Result<Self, ClientError> {
        use pb::put_response::Outcome;
        let outcome = match r.outcome.ok_or(NO_OUTCOME)? {
            Outcome::Written(_) => Written::Written,
            Outcome::StaleToken(s) => Written::StaleToken { fence: s.fence },
        };
        Ok(Answer {
            outcome,
            applied: applied(r.applied),
        })
    }
}

impl TryFrom<pb::DeleteResponse> for Answer<Deleted> {
    type Error = ClientError;
    fn try_from(r: pb::DeleteResponse) -> Result<Self, ClientError> {
        use pb::delete_response::Outcome;
        let outcome = match r.outcome.ok_or(NO_OUTCOME)? {
            Outcome::Deleted(d) => Deleted::Deleted { existed: d.existed },
            Outcome::StaleToken(s) => Deleted::StaleToken { fence: s.fence },
        };
        Ok(Answer {
            outcome,
            applied: applied(r.applied),
        })
    }
}

impl TryFrom<pb::CheckTokenResponse> for Answer<TokenStatus> {
    type Error = ClientError;
    fn try_from(r: pb::CheckTokenResponse) -> Result<Self, ClientError> {
        use pb::check_token_response::Outcome;
        let outcome = match r.outcome.ok_or(NO_OUTCOME)? {
            Outcome::Current(c) => TokenStatus::Current {
                holder: c.holder,
                expires_at_ms: c.expires_at_ms,
            },
            Outcome::Stale(s) => TokenStatus::Stale {
                current_token: s.current_token,
                holder: (!s.holder.is_empty()).then_some(s.holder),
            },
        };
        Ok(Answer {
            outcome,
            applied: applied(r.applied),
        })
    }
}

impl From<pb::GetResponse> for Answer<Option<Vec<u8>>> {
    fn from(r: pb::GetResponse) -> Self {
        Answer {
            outcome: r.value,
            applied: applied(r.applied),
        }
    }
}

impl From<pb::GetLeaseResponse> for Answer<LeaseState> {
    fn from(r: pb::GetLeaseResponse) -> Self {
        Answer {
            outcome: LeaseState {
                holder: (!r.holder.is_empty()).then_some(r.holder),
                token: r.token,
                expires_at_ms: r.expires_at_ms,
                fence: r.fence,
            },
            applied: applied(r.applied),
        }
    }
}

/// Which page of a listing (`list_leases`, `list_keys`) to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Listing {
    /// Only names (keys) that start with it; empty for all.
    pub prefix: String,
    /// The previous page's [`Page::next`], to continue after it; empty for the first page.
    pub page_token: String,
    /// At most this many entries, up to 1,000; 0 for the node's default (100).
    pub limit: u32,
    /// Read the answering node's applied state as it stands, which may be behind the leader's.
    pub serializable: bool,
}

impl Listing {
    /// The first page of the entries under `prefix`, linearizably, of the default size.
    pub fn under(prefix: &str) -> Listing {
        Listing {
            prefix: prefix.into(),
            ..Listing::default()
        }
    }

    pub(crate) fn message(&self) -> Option<pb::ListPage> {
        Some(pb::ListPage {
            prefix: self.prefix.clone(),
            page_token: self.page_token.clone(),
            limit: self.limit,
            serializable: self.serializable,
        })
    }
}

/// One page of a listing, in name order. A page of rows may hold fewer entries than asked for
/// and still have a next one: it ends at 1 MiB of keys and values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page<T> {
    /// The entries, each with its name.
    pub entries: Vec<(String, T)>,
    /// Where the next page continues ([`Listing::page_token`]); `None` at the end.
    pub next: Option<String>,
}

fn next_page(token: String) -> Option<String> {
    (!token.is_empty()).then_some(token)
}

impl From<pb::ListLeasesResponse> for Answer<Page<LeaseState>> {
    fn from(r: pb::ListLeasesResponse) -> Self {
        let lease = |l: pb::LeaseEntry| {
            let state = LeaseState {
                holder: (!l.holder.is_empty()).then_some(l.holder),
                token: l.token,
                expires_at_ms: l.expires_at_ms,
                fence: l.fence,
            };
            (l.lease, state)
        };
        Answer {
            outcome: Page {
                entries: r.leases.into_iter().map(lease).collect(),
                next: next_page(r.next_page_token),
            },
            applied: applied(r.applied),
        }
    }
}

impl From<pb::ListKeysResponse> for Answer<Page<Vec<u8>>> {
    fn from(r: pb::ListKeysResponse) -> Self {
        Answer {
            outcome: Page {
                entries: r.keys.into_iter().map(|k| (k.key, k.value)).collect(),
                next: next_page(r.next_page_token),
            },
            applied: applied(r.applied),
        }
    }
}

impl From<pb::ChangePolicyResponse> for Applied {
    fn from(r: pb::ChangePolicyResponse) -> Self {
        applied(r.applied)
    }
}

impl From<pb::AdvanceResponse> for Applied {
    fn from(r: pb::AdvanceResponse) -> Self {
        applied(r.applied)
    }
}

/// Whether a member votes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberRole {
    /// Counts toward every quorum.
    Voter,
    /// Receives the log, counts toward no quorum: a node catching up before it votes.
    Learner,
}

impl MemberRole {
    /// `voter` or `learner`.
    pub fn as_str(self) -> &'static str {
        match self {
            MemberRole::Voter => "voter",
            MemberRole::Learner => "learner",
        }
    }
}

/// Serialized by its name as [`MemberRole::as_str`] spells it, the one spelling.
#[cfg(feature = "serde")]
impl serde::Serialize for MemberRole {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One member of the cluster, as the leader knows it.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its node id.
    pub id: u64,
    /// Voter or learner.
    pub role: MemberRole,
    /// Where the other nodes reach it.
    #[cfg_attr(feature = "serde", serde(rename = "peer"))]
    pub peer_address: String,
    /// Where clients reach it, as it gives it out; empty when it could not be asked.
    #[cfg_attr(feature = "serde", serde(rename = "client"))]
    pub client_address: String,
    /// The last log index the leader knows it holds.
    pub match_index: u64,
}

/// The cluster's members, and the log index of the membership they are from.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Members {
    /// By id.
    pub members: Vec<Member>,
    /// Where in the log this membership was decided.
    pub log_index: u64,
}

impl TryFrom<pb::MembersResponse> for Members {
    type Error = ClientError;
    fn try_from(r: pb::MembersResponse) -> Result<Self, ClientError> {
        let members = r
            .members
            .into_iter()
            .map(|m| {
                let role = match pb::MemberRole::try_from(m.role) {
                    Ok(pb::MemberRole::Voter) => MemberRole::Voter,
                    Ok(pb::MemberRole::Learner) => MemberRole::Learner,
                    _ => return Err(ClientError::Malformed("a member of an unknown role")),
                };
                Ok(Member {
                    id: m.id,
                    role,
                    peer_address: m.peer_address,
                    client_address: m.client_address,
                    match_index: m.match_index,
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Members {
            members,
            log_index: r.log_index,
        })
    }
}

/// A holder that may be absent, as the CLI has always printed it: `""` for none.
#[cfg(feature = "serde")]
fn empty_when_none<S: serde::Serializer>(holder: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(holder.as_deref().unwrap_or(""))
}
