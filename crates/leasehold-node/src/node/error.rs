//! Why a node could not answer, and the one place that maps it to a gRPC status.

use std::time::Duration;

use std::collections::HashMap;

pub use tonic::Code;
use tonic::Status;
use tonic_types::{ErrorDetails, StatusExt};

use leasehold_core::InvalidInput;
use openraft::error::{ClientWriteError, RaftError};

use crate::raft::WriteError;
use crate::NodeId;

use crate::limits::QUORUM_SILENCE;
pub use leasehold_proto::wire::{
    DENIED_KEY, ERROR_DOMAIN, INDETERMINATE_KEY, LEASES_EXHAUSTED, NO_LEADER_REASON,
    NO_QUORUM_REASON, ORIGIN_KEY, QUORUM_SILENT_REASON, QUORUM_WENT_SILENT_REASON,
    READ_UNCONFIRMED_REASON, REMOVED_REASON, ROWS_EXHAUSTED, SESSIONS_EXHAUSTED, SESSION_KEY,
};

#[derive(Clone, Debug, thiserror::Error)]
pub enum NodeError {
    #[error("{0}")]
    Invalid(#[from] InvalidInput),
    /// This node is not the leader. `leader` is who it believes leads, with the address.
    #[error("node {me} is not the leader")]
    NotLeader {
        me: NodeId,
        leader: Option<(NodeId, String)>,
    },
    #[error("no leader was elected within {} ms; is a majority of the nodes up?", .0.as_millis())]
    NoLeader(Duration),
    /// The write was proposed but no quorum acknowledged it in time: it may still be applied.
    #[error(
        "no quorum acknowledged the write within {} ms; is a majority of the nodes up? \
         The write may or may not have been applied",
        .0.as_millis()
    )]
    NoQuorum(Duration),
    #[error("the leader could not confirm its leadership with a quorum within {} ms; is a majority of the nodes up?", .0.as_millis())]
    ReadUnconfirmed(Duration),
    #[error("leader node {leader} at {addr} is unreachable: {reason}")]
    LeaderUnreachable {
        leader: NodeId,
        addr: String,
        reason: String,
    },
    /// A forwarded write reached (or may have reached) the leader, but its answer was lost.
    #[error(
        "the write was forwarded to leader node {leader} at {addr}, but its answer was lost \
         ({reason}); it may or may not have been applied"
    )]
    ForwardLost {
        leader: NodeId,
        addr: String,
        reason: String,
    },
    /// The leader's node refused forwarded writes before proposing them (its peer gate, or a
    /// message it could not read): none was applied.
    #[error(
        "the write was forwarded to leader node {leader} at {addr}, which refused it before \
         proposing it, so it was not applied: {reason}"
    )]
    ForwardRefused {
        leader: NodeId,
        addr: String,
        reason: String,
    },
    /// A retry so late that the store no longer keeps its answer: not applied now.
    #[error(
        "this request is older than every answer the store keeps for its client, so it was not \
         applied now; an earlier attempt of it may have been. Send a new request"
    )]
    Forgotten,
    /// A request naming a session that is not open: it was not applied now.
    #[error(
        "this request's client session is not open (never registered, or expired after an hour \
         without requests), so it was not applied now; an earlier attempt of it may have been. \
         Register a new session and send a new request"
    )]
    UnknownSession,
    /// The node stopped while the write was in its proposer.
    #[error(
        "this node stopped before the write was answered; it may or may not have been applied"
    )]
    Unanswered,
    /// Raft stopped with an error after the write was handed to it: it may be in the log.
    #[error(
        "this node's Raft stopped after the write was proposed ({0}); it may or may not have \
         been applied. The node exits to be restarted: ask another node"
    )]
    ProposalFailed(String),
    /// Raft stopped with an error (a storage failure, or openraft's own): this node answers
    /// nothing until it is restarted, which it exits for.
    #[error("this node's Raft stopped ({0}); the node exits to be restarted: ask another node")]
    RaftStopped(String),
    /// Leadership moved while the write was proposed: its entry may be in the log of the
    /// nodes that elect the next leader.
    #[error(
        "leadership moved while the write was being proposed; it may or may not have been \
         applied"
    )]
    Deposed,
    /// This node leads, but its quorum has been silent for over `QUORUM_SILENCE` (twice the
    /// longest a follower waits before it campaigns): refused before anything was proposed (see
    /// `quorum_watch`).
    #[error(
        "node {me} leads, but no quorum of its peers has answered it for over {} ms: it may be \
         cut off from them and replaced; ask another node",
        QUORUM_SILENCE.as_millis()
    )]
    QuorumSilent { me: NodeId },
    /// The write was proposed, then this leader's quorum went silent: given up rather than held
    /// for the whole quorum wait, and it may still apply.
    #[error(
        "node {me} stopped waiting for the write: no quorum of its peers has answered it for \
         over {} ms, so it may be cut off from them. The write may or may not have been applied",
        QUORUM_SILENCE.as_millis()
    )]
    QuorumWentSilent { me: NodeId },
    #[error("{0}")]
    WrongClock(&'static str),
    #[error("this node is shutting down")]
    ShuttingDown,
    /// Refused before anything was queued: nothing was applied.
    #[error(
        "this node is working on its limit of {limit} {of} at once (serve --max-{of}); retry \
         shortly, or on another node"
    )]
    Overloaded { limit: usize, of: Budget },
    /// A write past a cap on sessions, leases or rows (see `node::caps`): nothing was
    /// proposed.
    #[error(
        "{holder} has {limit} {what}, the most {per} (serve {flag}); {remedy}, then retry",
        what = capped.what(),
        remedy = capped.remedy()
    )]
    AtCap {
        capped: super::Capped,
        holder: String,
        limit: usize,
        per: &'static str,
        flag: &'static str,
    },
    #[error("raft failed: {0}")]
    Raft(String),
    #[error("invariant broken: {0}")]
    Invariant(String),
    /// Refused for what the node finds (a membership change it cannot make, a peer whose data
    /// dir or clock is not the one it knows): nothing was changed. The text says what to do.
    #[error("{0}")]
    Refused(String),
    /// A peer-plane caller whose certificate does not allow what it sends.
    #[error("refused on the peer plane: {0}")]
    Forbidden(String),
    /// The policy does not let the caller do this: nothing was changed.
    #[error("{0}")]
    Denied(leasehold_core::auth::Denied),
    /// A policy change that would leave the policy invalid or the cluster without an admin.
    #[error("policy change refused: {0}")]
    PolicyRefused(String),
    /// A bearer token this follower has not applied (yet): the client asks another node.
    #[error(
        "node {0} does not know this bearer token, which may have been added a moment ago; ask \
         the leader"
    )]
    TokenUnknownHere(NodeId),
    /// A follower's policy denies what the leader's, which may be newer, could allow: the
    /// client asks another node, and the leader has the last word.
    #[error(
        "node {me}, which does not lead, finds this denied by the policy it has applied, which \
         may be behind the leader's; ask the leader ({denied})"
    )]
    DeniedHere {
        me: NodeId,
        denied: leasehold_core::auth::Denied,
    },
    /// A bearer token the node cannot take: unknown, malformed, or sent without TLS.
    #[error("{0}")]
    Unauthenticated(&'static str),
    /// Created with an admin, the cluster has not turned authorization on yet.
    #[error(
        "this cluster was created with authorization, and its leader has not turned it on yet; \
         retry shortly"
    )]
    AuthSettingUp,
    /// This node could not encode what it was to send back.
    #[error("{what}: {reason}")]
    Encoding { what: &'static str, reason: String },
    #[error("nothing is applied yet; try again once the cluster has elected a leader")]
    NothingApplied,
    /// Started with `--join`, this node waits to be added and knows no cluster to describe.
    #[error(
        "node {0} is not a member yet (started with --join, it waits for `leasehold member \
         add`); ask a member"
    )]
    NotMember(NodeId),
    /// An operation of a log format that a member does not read yet: logged, it would stop
    /// that member (see `raft::protocol`).
    #[error(
        "this request needs log format {format}, which not every member reads yet ({}): \
         upgrade every node to this version, then retry",
        behind_list(behind)
    )]
    FormatNotAgreed {
        format: leasehold_core::format::Format,
        behind: Vec<(NodeId, leasehold_core::format::Format)>,
    },
    /// The leader this node forwarded to says the cluster removed it: the others are electing
    /// another. Not the client's node's own removal, so not [`NodeError::Removed`].
    #[error(
        "leader node {0}, which this node forwarded to, was removed from the cluster; the other \
         members are electing a new leader: retry"
    )]
    LeaderRemoved(NodeId),
    /// `member remove` took this node out of the cluster: it serves nothing again.
    #[error(
        "node {0} was removed from the cluster (`leasehold member remove {0}`) and serves no \
         calls; ask another member"
    )]
    Removed(NodeId),
    /// A watch from before the first entry whose events this node keeps.
    #[error(
        "from_index: node {node} keeps events from log index {first_kept} on, not {from}; read \
         the lease with GetLease and watch from its log index + 1"
    )]
    Compacted {
        node: NodeId,
        from: u64,
        first_kept: u64,
    },
    /// A watching node that follows no leader may be far behind the cluster.
    #[error("node {node} knows no leader; resume the watch on another node from log index {next}")]
    WatchLeaderless { node: NodeId, next: u64 },
    /// `member add` of a node that does not answer at the peer address given.
    #[error(
        "node {id} at {addr} does not answer ({reason}); start it with `leasehold serve --join` \
         first, or check the peer address"
    )]
    MemberUnreachable {
        id: NodeId,
        addr: String,
        reason: String,
    },
    /// The learner added did not catch up with the log in time: it stays a learner, so the
    /// membership did change (or may have, if the learner's entry was not committed either).
    #[error(
        "node {id} did not catch up within {} s; it stays a learner: run `member add` again, or \
         `member remove {id}`",
        .within.as_secs()
    )]
    CatchUpTimeout { id: NodeId, within: Duration },
    /// Refused before anything was proposed: openraft runs one membership change at a time.
    #[error("another membership change is in progress ({0}); run it again when it is done")]
    ChangeInProgress(String),
    /// Leadership moved while the membership change was proposed: it may be in the log.
    #[error(
        "leadership moved during the membership change; it may or may not have been made: \
         see `leasehold member list`, and run it again"
    )]
    ChangeDeposed,
    /// The caller's deadline passed before the call was answered: a write may still apply.
    #[error(
        "the call's deadline ({} ms) passed before it was answered{}",
        .after.as_millis(),
        if *.write { "; it may or may not have been applied" } else { "" }
    )]
    DeadlinePassed { after: Duration, write: bool },
    /// The node failed while answering the call (its task panicked): a bug. A write may have
    /// been proposed before it did.
    #[error(
        "this node failed while answering the call ({0}); it may or may not have been applied"
    )]
    CallFailed(String),
    /// An etcd call that Leasehold does not serve, with why and what to use instead.
    #[error("{0}")]
    NotServed(&'static str),
    /// etcd's keyspace refused the request, in etcd's words: nothing changed.
    #[error("{0}")]
    Etcd(leasehold_core::etcd::EtcdRefusal),
    /// The leader's own refusal of a request this node forwarded, passed on as it was made.
    #[error("{}", .0.message)]
    Leader(ForwardedError),
}

/// What a node bounds at once, each with its own budget: calls, and the watches readers hold
/// open (which would otherwise starve writes of their places).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Budget {
    /// Calls being worked on (`serve --max-requests`).
    Requests,
    /// Watch streams open (`serve --max-watches`).
    Watches,
}

impl std::fmt::Display for Budget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Budget::Requests => "requests",
            Budget::Watches => "watches",
        })
    }
}

impl NodeError {
    /// The refusal's name in `google.rpc.ErrorInfo.reason`: stable, for programs to match on
    /// where the message is for people.
    pub fn reason(&self) -> &str {
        match self {
            NodeError::Invalid(_) => "INVALID_INPUT",
            NodeError::NotLeader { .. } => "NOT_LEADER",
            NodeError::NoLeader(_) => NO_LEADER_REASON,
            NodeError::NoQuorum(_) => NO_QUORUM_REASON,
            NodeError::ReadUnconfirmed(_) => READ_UNCONFIRMED_REASON,
            NodeError::LeaderUnreachable { .. } => "LEADER_UNREACHABLE",
            NodeError::ForwardLost { .. } => "FORWARD_LOST",
            NodeError::ForwardRefused { .. } => "FORWARD_REFUSED",
            NodeError::Forgotten => "REQUEST_FORGOTTEN",
            NodeError::UnknownSession => "SESSION_UNKNOWN",
            NodeError::Unanswered => "NODE_STOPPED",
            NodeError::ProposalFailed(_) => "PROPOSAL_FAILED",
            NodeError::RaftStopped(_) => "RAFT_STOPPED",
            NodeError::Deposed => "DEPOSED",
            NodeError::QuorumSilent { .. } => QUORUM_SILENT_REASON,
            NodeError::QuorumWentSilent { .. } => QUORUM_WENT_SILENT_REASON,
            NodeError::WrongClock(_) => "WRONG_CLOCK",
            NodeError::ShuttingDown => "SHUTTING_DOWN",
            NodeError::Overloaded { .. } => "OVERLOADED",
            NodeError::AtCap { capped, .. } => match capped {
                Capped::Sessions => SESSIONS_EXHAUSTED,
                Capped::Leases => LEASES_EXHAUSTED,
                Capped::Rows => ROWS_EXHAUSTED,
            },
            NodeError::Raft(_) => "RAFT_FAILED",
            NodeError::Invariant(_) => "INVARIANT_BROKEN",
            NodeError::Refused(_) => "REFUSED",
            NodeError::Forbidden(_) => "PEER_FORBIDDEN",
            NodeError::Denied(_) => "DENIED",
            NodeError::PolicyRefused(_) => "POLICY_REFUSED",
            NodeError::TokenUnknownHere(_) => "TOKEN_UNKNOWN_HERE",
            NodeError::DeniedHere { .. } => "DENIED_HERE",
            NodeError::Unauthenticated(_) => "UNAUTHENTICATED",
            NodeError::AuthSettingUp => "AUTH_SETTING_UP",
            NodeError::Encoding { .. } => "ENCODING_FAILED",
            NodeError::NothingApplied => "NOTHING_APPLIED",
            NodeError::NotMember(_) => "NOT_MEMBER",
            NodeError::Removed(_) => REMOVED_REASON,
            NodeError::FormatNotAgreed { .. } => "FORMAT_NOT_AGREED",
            NodeError::LeaderRemoved(_) => "LEADER_REMOVED",
            NodeError::Compacted { .. } => "WATCH_COMPACTED",
            NodeError::Etcd(_) => "ETCD_REFUSED",
            NodeError::NotServed(_) => "NOT_SERVED",
            NodeError::WatchLeaderless { .. } => "WATCH_LEADERLESS",
            NodeError::MemberUnreachable { .. } => "MEMBER_UNREACHABLE",
            NodeError::CatchUpTimeout { .. } => "CATCH_UP_TIMEOUT",
            NodeError::ChangeInProgress(_) => "CHANGE_IN_PROGRESS",
            NodeError::ChangeDeposed => "CHANGE_DEPOSED",
            NodeError::DeadlinePassed { .. } => "DEADLINE_PASSED",
            NodeError::CallFailed(_) => "CALL_FAILED",
            NodeError::Leader(e) => &e.reason,
        }
    }

    /// What `ErrorInfo.metadata` says beside the indeterminate mark: the facts a program acts on.
    pub fn facts(&self) -> Vec<(String, String)> {
        let fact = |k: &str, v: String| (k.to_owned(), v);
        match self {
            NodeError::Leader(e) => e.facts.clone(),
            NodeError::Invalid(e) => vec![fact("field", e.field.to_string())],
            NodeError::NotLeader {
                leader: Some((id, addr)),
                ..
            } => vec![
                fact("leader_id", id.to_string()),
                fact("leader_address", addr.clone()),
            ],
            NodeError::Denied(d) => vec![
                fact("identity", d.identity.clone()),
                fact("action", d.action.clone()),
                fact("resource", d.resource.clone()),
            ],
            NodeError::Compacted { first_kept, .. } => {
                vec![fact("first_kept_index", first_kept.to_string())]
            }
            NodeError::WatchLeaderless { next, .. } => vec![fact("next_index", next.to_string())],
            NodeError::AtCap { limit, flag, .. } => vec![
                fact("limit", limit.to_string()),
                fact("flag", flag.to_string()),
            ],
            _ => Vec::new(),
        }
    }

    /// What Raft's failure of a write handed to it says: never that it was not applied.
    pub(super) fn proposal_failed(e: WriteError) -> NodeError {
        match e {
            // openraft gives this answer both to a write it refused before appending it and to
            // one whose entry a new leader's log cut off (0.9's `raft_core.rs`,
            // `DeleteConflictLog`). A cut-off entry may survive on the nodes that elect a later
            // leader, which then commits it; the two cannot be told apart.
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => NodeError::Deposed,
            // The node is stopping (a shutdown, or its proposer gone with it): no fault of the
            // store, so UNAVAILABLE and the client tries another node.
            RaftError::Fatal(openraft::error::Fatal::Stopped) => NodeError::Unanswered,
            // Storage failed, Raft panicked or stopped: after the append, for all we know.
            other => NodeError::ProposalFailed(other.to_string()),
        }
    }
}

/// "node 3 reads up to format 1, node 4 has not been heard from": the members a refusal
/// names.
fn behind_list(behind: &[(NodeId, leasehold_core::format::Format)]) -> String {
    let named: Vec<String> = behind
        .iter()
        .map(|(id, format)| format!("node {id} reads up to format {format}"))
        .collect();
    match named.is_empty() {
        true => "a member has not been heard from since this node led".to_owned(),
        false => named.join(", "),
    }
}

/// A node's error on its way back to the node that forwarded the request: the status it is.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForwardedError {
    code: i32,
    message: String,
    indeterminate: bool,
    /// The ErrorInfo's reason and facts, so the client of the forwarding node reads what the
    /// leader's client would.
    reason: String,
    facts: Vec<(String, String)>,
}

impl From<NodeError> for ForwardedError {
    fn from(e: NodeError) -> Self {
        if let NodeError::Leader(passed_on) = e {
            return passed_on;
        }
        ForwardedError {
            code: e.code() as i32,
            message: e.to_string(),
            indeterminate: e.indeterminate(),
            reason: e.reason().to_owned(),
            facts: e.facts(),
        }
    }
}

/// The code etcd answers a refusal of its keyspace with (its clients map some codes and
/// messages back to their own errors).
fn etcd_code(refusal: &leasehold_core::etcd::EtcdRefusal) -> Code {
    use leasehold_core::etcd::EtcdRefusal as R;
    match refusal {
        R::LeaseNotFound => Code::NotFound,
        R::LeaseExists => Code::FailedPrecondition,
        R::KeyNotFound => Code::InvalidArgument,
        R::Compacted { .. } | R::FutureRevision => Code::OutOfRange,
        R::NotLeaseOwner { .. } => Code::PermissionDenied,
        R::TooManyKeys { .. } | R::TooManyDeletes { .. } | R::TooManyLeaseKeys { .. } => {
            Code::ResourceExhausted
        }
    }
}

/// A status this node produced itself (not the transport), marked so in metadata and in a
/// `google.rpc.ErrorInfo` detail (`reason`, and `indeterminate` with the `facts` in its
/// metadata), which any gRPC client can read where it cannot read our metadata keys.
fn node_status(
    code: Code,
    message: String,
    indeterminate: bool,
    reason: &str,
    mut facts: Vec<(String, String)>,
) -> Status {
    facts.push(("indeterminate".into(), indeterminate.to_string()));
    let details = ErrorDetails::with_error_info(
        reason,
        ERROR_DOMAIN,
        facts.into_iter().collect::<HashMap<_, _>>(),
    );
    let mut status = <Status as StatusExt>::with_error_details(code, message, details);
    status.metadata_mut().insert(
        ORIGIN_KEY,
        tonic::metadata::MetadataValue::from_static("node"),
    );
    if indeterminate {
        status.metadata_mut().insert(
            INDETERMINATE_KEY,
            tonic::metadata::MetadataValue::from_static("true"),
        );
    }
    match reason {
        // Told apart from the peer gate's refusal of a forwarding node (`Forbidden`): this one
        // is the client's answer.
        "DENIED" => {
            status.metadata_mut().insert(
                DENIED_KEY,
                tonic::metadata::MetadataValue::from_static("policy"),
            );
        }
        // The node cannot know whether an earlier attempt was applied; the client can, and
        // needs to tell this refusal apart to open a new session.
        "SESSION_UNKNOWN" => {
            status.metadata_mut().insert(
                SESSION_KEY,
                tonic::metadata::MetadataValue::from_static("unknown"),
            );
        }
        _ => {}
    }
    status
}

impl NodeError {
    /// The gRPC code every transport reports this refusal with (HTTP maps it once more).
    pub fn code(&self) -> Code {
        match self {
            NodeError::Invalid(_) => Code::InvalidArgument,
            NodeError::WrongClock(_) => Code::FailedPrecondition,
            NodeError::NotLeader { .. }
            | NodeError::NoLeader(_)
            | NodeError::NoQuorum(_)
            | NodeError::QuorumSilent { .. }
            | NodeError::QuorumWentSilent { .. }
            | NodeError::ReadUnconfirmed(_)
            | NodeError::LeaderUnreachable { .. }
            | NodeError::ForwardLost { .. }
            | NodeError::ForwardRefused { .. }
            | NodeError::Unanswered
            | NodeError::Deposed
            | NodeError::ProposalFailed(_)
            | NodeError::RaftStopped(_)
            | NodeError::ShuttingDown
            | NodeError::NothingApplied
            | NodeError::NotMember(_)
            | NodeError::Removed(_)
            | NodeError::LeaderRemoved(_)
            | NodeError::WatchLeaderless { .. }
            | NodeError::ChangeInProgress(_)
            | NodeError::ChangeDeposed
            | NodeError::AuthSettingUp
            | NodeError::TokenUnknownHere(_)
            | NodeError::DeniedHere { .. } => Code::Unavailable,
            NodeError::Forgotten | NodeError::UnknownSession => Code::Aborted,
            NodeError::Overloaded { .. } | NodeError::AtCap { .. } => Code::ResourceExhausted,
            NodeError::Raft(_)
            | NodeError::Invariant(_)
            | NodeError::Encoding { .. }
            | NodeError::CallFailed(_) => Code::Internal,
            NodeError::Refused(_)
            | NodeError::FormatNotAgreed { .. }
            | NodeError::MemberUnreachable { .. }
            | NodeError::PolicyRefused(_) => Code::FailedPrecondition,
            NodeError::Forbidden(_) | NodeError::Denied(_) => Code::PermissionDenied,
            NodeError::Unauthenticated(_) => Code::Unauthenticated,
            NodeError::Compacted { .. } => Code::OutOfRange,
            NodeError::Etcd(refusal) => etcd_code(refusal),
            NodeError::NotServed(_) => Code::Unimplemented,
            NodeError::CatchUpTimeout { .. } | NodeError::DeadlinePassed { .. } => {
                Code::DeadlineExceeded
            }
            NodeError::Leader(e) => Code::from_i32(e.code),
        }
    }

    /// Whether this node cannot answer now, where another node, or this one later, may.
    pub fn unavailable(&self) -> bool {
        self.code() == Code::Unavailable
    }

    /// Whether the refused write may or may not have been applied.
    pub fn indeterminate(&self) -> bool {
        match self {
            NodeError::NoQuorum(_)
            | NodeError::QuorumWentSilent { .. }
            | NodeError::ForwardLost { .. }
            | NodeError::Unanswered
            | NodeError::Deposed
            | NodeError::ProposalFailed(_)
            | NodeError::Forgotten
            | NodeError::UnknownSession
            | NodeError::ChangeDeposed
            | NodeError::CatchUpTimeout { .. }
            | NodeError::DeadlinePassed { write: true, .. }
            | NodeError::CallFailed(_) => true,
            NodeError::Leader(e) => e.indeterminate,
            _ => false,
        }
    }

    /// The leader's refusal `e`, passed on to this node's client as the leader's: but for the
    /// leader's word that it was removed, which is about the leader, not this node, and would
    /// make the client stop asking this node.
    pub fn passed_on(leader: NodeId, e: ForwardedError) -> Self {
        match e.reason == REMOVED_REASON {
            true => NodeError::LeaderRemoved(leader),
            false => NodeError::Leader(e),
        }
    }

    /// The leader's answer to a read this node forwarded, as its gRPC client got it: the
    /// leader's own refusal passes through (its policy's among them); anything else failed on
    /// the way there, and so did a refusal by the leader's peer gate (PERMISSION_DENIED without
    /// the policy's mark), which refused this node, not the client's request.
    pub fn from_leader(
        leader: NodeId,
        status: Status,
        unreachable: impl FnOnce(String) -> NodeError,
    ) -> Self {
        let info = status.get_details_error_info();
        let gate_refused =
            status.code() == Code::PermissionDenied && status.metadata().get(DENIED_KEY).is_none();
        match info {
            Some(info)
                if status.metadata().get(ORIGIN_KEY).is_some()
                    && info.domain == ERROR_DOMAIN
                    && !gate_refused =>
            {
                let mut facts: Vec<_> = info.metadata.into_iter().collect();
                let indeterminate = facts
                    .iter()
                    .any(|(k, v)| k == "indeterminate" && v == "true");
                facts.retain(|(k, _)| k != "indeterminate");
                facts.sort();
                NodeError::passed_on(
                    leader,
                    ForwardedError {
                        code: status.code() as i32,
                        message: status.message().to_owned(),
                        indeterminate,
                        reason: info.reason,
                        facts,
                    },
                )
            }
            _ => unreachable(status.message().to_owned()),
        }
    }
}

impl From<NodeError> for Status {
    fn from(e: NodeError) -> Status {
        node_status(
            e.code(),
            e.to_string(),
            e.indeterminate(),
            e.reason(),
            e.facts(),
        )
    }
}

/// A refusal on a `Batch` stream: what the unary call's status would say, in fields.
impl From<NodeError> for crate::proto::v1::BatchError {
    /// The same words a forwarded refusal carries between nodes, in the public message's fields.
    fn from(e: NodeError) -> Self {
        let e = ForwardedError::from(e);
        crate::proto::v1::BatchError {
            code: e.code,
            message: e.message,
            reason: e.reason,
            indeterminate: e.indeterminate,
            facts: e.facts.into_iter().collect(),
        }
    }
}

/// What a cap bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capped {
    /// Open sessions.
    Sessions,
    /// Leases created and not forgotten.
    Leases,
    /// Rows created and not deleted.
    Rows,
}

impl Capped {
    /// What the holder of the cap has, as the refusal says it.
    pub fn what(self) -> &'static str {
        match self {
            Capped::Sessions => "open sessions",
            Capped::Leases => "leases it created",
            Capped::Rows => "rows it created",
        }
    }

    /// How to get under the cap again.
    pub fn remedy(self) -> &'static str {
        match self {
            Capped::Sessions => {
                "close the sessions no longer used (the clients' close_session; a session left \
                 idle expires after an hour)"
            }
            Capped::Leases => {
                "acquire the names it has again, or release the leases no longer used: a free \
                 lease is forgotten, and counted no more, --lease-retention after it was freed"
            }
            Capped::Rows => "delete the rows no longer used",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crossed(e: NodeError) -> Status {
        let forwarded = ForwardedError::from(e);
        let bytes = crate::raft::codec::encode(&forwarded).unwrap();
        Status::from(NodeError::Leader(
            crate::raft::codec::decode::<ForwardedError>(&bytes).unwrap(),
        ))
    }

    #[test]
    fn a_forwarded_error_keeps_its_code_message_and_indeterminacy() {
        let lost = crossed(NodeError::NoQuorum(Duration::from_millis(3_000)));
        assert_eq!(lost.code(), Code::Unavailable);
        assert!(
            lost.message().contains("may or may not"),
            "{}",
            lost.message()
        );
        assert!(lost.metadata().get(INDETERMINATE_KEY).is_some());
        assert!(lost.metadata().get(ORIGIN_KEY).is_some());

        let refused = crossed(NodeError::WrongClock("tick is refused"));
        assert_eq!(refused.code(), Code::FailedPrecondition);
        assert_eq!(refused.message(), "tick is refused");
        assert!(refused.metadata().get(INDETERMINATE_KEY).is_none());
    }

    /// The ErrorInfo detail of `status`: its reason and metadata.
    fn error_info(status: &Status) -> (String, HashMap<String, String>) {
        let info = status
            .get_details_error_info()
            .unwrap_or_else(|| panic!("no ErrorInfo on {status:?}"));
        assert_eq!(info.domain, ERROR_DOMAIN);
        (info.reason, info.metadata)
    }

    #[test]
    fn every_status_carries_an_error_info_with_its_reason_and_indeterminate_mark() {
        let invalid = Status::from(NodeError::Invalid(InvalidInput::new("ttl_ms", "too long")));
        let (reason, facts) = error_info(&invalid);
        assert_eq!(reason, "INVALID_INPUT");
        assert_eq!(facts["field"], "ttl_ms");
        assert_eq!(facts["indeterminate"], "false");

        let lost = Status::from(NodeError::NoQuorum(Duration::from_millis(3_000)));
        let (reason, facts) = error_info(&lost);
        assert_eq!(reason, "NO_QUORUM");
        assert_eq!(facts["indeterminate"], "true");

        // Through the peer plane, as a follower hands its client the leader's refusal.
        let (reason, facts) = error_info(&crossed(NodeError::NotLeader {
            me: 2,
            leader: Some((1, "127.0.0.1:7001".into())),
        }));
        assert_eq!(reason, "NOT_LEADER");
        assert_eq!(facts["leader_address"], "127.0.0.1:7001");
        assert_eq!(facts["indeterminate"], "false");
        let (reason, facts) = error_info(&crossed(NodeError::Deposed));
        assert_eq!(reason, "DEPOSED");
        assert_eq!(facts["indeterminate"], "true");
    }

    /// The clients give back at once what carries a cap's reason, from the leader or through
    /// a follower.
    #[test]
    fn a_write_at_a_cap_is_refused_for_its_reason_naming_its_limit_and_flag() {
        for (capped, named) in [
            (Capped::Sessions, SESSIONS_EXHAUSTED),
            (Capped::Leases, LEASES_EXHAUSTED),
            (Capped::Rows, ROWS_EXHAUSTED),
        ] {
            let at_cap = || NodeError::AtCap {
                capped,
                holder: "identity \"team-a\"".into(),
                limit: 2,
                per: "per identity",
                flag: "--max-them",
            };
            for status in [Status::from(at_cap()), crossed(at_cap())] {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                let (reason, facts) = error_info(&status);
                assert_eq!(reason, named);
                assert_eq!((&*facts["limit"], &*facts["flag"]), ("2", "--max-them"));
                assert_eq!(facts["indeterminate"], "false");
                let wanted = format!("identity \"team-a\" has 2 {}", capped.what());
                assert!(
                    status.message().starts_with(&wanted),
                    "{}",
                    status.message()
                );
            }
        }
    }

    #[test]
    fn a_write_raft_failed_after_it_was_proposed_is_indeterminate() {
        use openraft::error::{ClientWriteError, Fatal, ForwardToLeader, RaftError};
        use openraft::{AnyError, StorageError, StorageIOError};

        let disk = std::io::Error::other("disk gone");
        let after_append = [
            RaftError::Fatal(Fatal::StorageError(StorageError::from(
                StorageIOError::write_logs(AnyError::new(&disk)),
            ))),
            RaftError::Fatal(Fatal::Stopped),
            RaftError::Fatal(Fatal::Panicked),
            // openraft answers so a write whose entry a new leader's log cut off; that entry
            // may still be committed by a later leader that has it (raft_core.rs,
            // DeleteConflictLog).
            RaftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader::empty())),
        ];
        for e in after_append {
            let status = Status::from(NodeError::proposal_failed(e.clone()));
            assert!(
                status.metadata().get(INDETERMINATE_KEY).is_some(),
                "{e}: {status:?}"
            );
            assert!(
                status.message().contains("may or may not"),
                "{e}: {status:?}"
            );
        }
    }

    /// Review of this session's diff, 1: a leader removed mid-forward answered REMOVED, which
    /// passed on as the forwarding node's own would make its clients stop asking it.
    #[test]
    fn a_removed_leaders_word_is_not_passed_on_as_the_forwarding_nodes_removal() {
        let removed = ForwardedError::from(NodeError::Removed(3));
        let passed = NodeError::passed_on(3, removed);
        assert!(matches!(passed, NodeError::LeaderRemoved(3)), "{passed}");
        assert_ne!(passed.reason(), REMOVED_REASON);
        assert_eq!(passed.code(), Code::Unavailable);
        assert!(!passed.indeterminate());
        let other = ForwardedError::from(NodeError::NotMember(3));
        assert!(matches!(
            NodeError::passed_on(3, other),
            NodeError::Leader(_)
        ));
    }

    #[test]
    fn a_refusal_is_determinate_and_marked_the_nodes_own() {
        let refusals = [
            NodeError::MemberUnreachable {
                id: 7,
                addr: "127.0.0.1:1".into(),
                reason: "connection refused".into(),
            },
            NodeError::Refused("node 2 is a voter already".into()),
            NodeError::Forbidden("the caller showed no certificate".into()),
            NodeError::Invalid(InvalidInput::new("id", "node ids start at 1")),
            NodeError::NotMember(4),
            NodeError::Removed(4),
            NodeError::QuorumSilent { me: 1 },
        ];
        for e in refusals {
            let status = Status::from(e.clone());
            assert!(status.metadata().get(ORIGIN_KEY).is_some(), "{e}");
            assert!(status.metadata().get(INDETERMINATE_KEY).is_none(), "{e}");
        }
        let unreachable = Status::from(NodeError::MemberUnreachable {
            id: 7,
            addr: "127.0.0.1:1".into(),
            reason: "connection refused".into(),
        });
        // Final: another node would give the same answer.
        assert_eq!(unreachable.code(), Code::FailedPrecondition);
        assert!(unreachable.message().contains("serve --join"));
        // A change that leadership moved under may have been made.
        for maybe in [
            NodeError::ChangeDeposed,
            NodeError::CatchUpTimeout {
                id: 4,
                within: Duration::from_secs(60),
            },
        ] {
            let status = Status::from(maybe.clone());
            assert!(
                status.metadata().get(INDETERMINATE_KEY).is_some(),
                "{maybe}"
            );
        }
    }

    #[test]
    fn only_a_write_that_may_have_applied_is_marked_indeterminate() {
        let maybe = [
            NodeError::ForwardLost {
                leader: 1,
                addr: "127.0.0.1:1".into(),
                reason: "reset".into(),
            },
            NodeError::Unanswered,
            NodeError::QuorumWentSilent { me: 1 },
        ];
        for e in maybe {
            assert!(Status::from(e).metadata().get(INDETERMINATE_KEY).is_some());
        }
        let not_sent = NodeError::LeaderUnreachable {
            leader: 1,
            addr: "127.0.0.1:1".into(),
            reason: "connection refused".into(),
        };
        assert!(Status::from(not_sent)
            .metadata()
            .get(INDETERMINATE_KEY)
            .is_none());
    }
}
