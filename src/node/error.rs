//! Why a node could not answer, and the one place that maps it to a gRPC status.

use std::time::Duration;

use tonic::{Code, Status};

use crate::lease::InvalidInput;
use openraft::error::{ClientWriteError, RaftError};

use crate::raft::{NodeId, WriteError};

pub use leasehold_proto::{INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};

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
    #[error("{0}")]
    WrongClock(&'static str),
    #[error("this node is shutting down")]
    ShuttingDown,
    /// Refused before anything was queued: nothing was applied.
    #[error(
        "this node is working on its limit of {limit} requests at once; retry shortly, or on \
         another node"
    )]
    Overloaded { limit: usize },
    #[error("raft failed: {0}")]
    Raft(String),
    #[error("invariant broken: {0}")]
    Invariant(String),
}

impl NodeError {
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

/// A node's error on its way back to the node that forwarded the request: the status it is.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ForwardedError {
    code: i32,
    message: String,
    indeterminate: bool,
}

impl From<NodeError> for ForwardedError {
    fn from(e: NodeError) -> Self {
        let status = Status::from(e);
        ForwardedError {
            code: status.code() as i32,
            message: status.message().to_owned(),
            indeterminate: status.metadata().get(INDETERMINATE_KEY).is_some(),
        }
    }
}

impl From<ForwardedError> for Status {
    fn from(e: ForwardedError) -> Status {
        node_status(Code::from_i32(e.code), e.message, e.indeterminate)
    }
}

/// A status this node produced itself (not the transport), marked so.
fn node_status(code: Code, message: String, indeterminate: bool) -> Status {
    let mut status = Status::new(code, message);
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
    status
}

impl From<NodeError> for Status {
    fn from(e: NodeError) -> Status {
        let code = match &e {
            NodeError::Invalid(_) => Code::InvalidArgument,
            NodeError::WrongClock(_) => Code::FailedPrecondition,
            NodeError::NotLeader { .. }
            | NodeError::NoLeader(_)
            | NodeError::NoQuorum(_)
            | NodeError::ReadUnconfirmed(_)
            | NodeError::LeaderUnreachable { .. }
            | NodeError::ForwardLost { .. }
            | NodeError::Unanswered
            | NodeError::Deposed
            | NodeError::ProposalFailed(_)
            | NodeError::RaftStopped(_)
            | NodeError::ShuttingDown => Code::Unavailable,
            NodeError::Forgotten | NodeError::UnknownSession => Code::Aborted,
            NodeError::Overloaded { .. } => Code::ResourceExhausted,
            NodeError::Raft(_) | NodeError::Invariant(_) => Code::Internal,
        };
        let indeterminate = matches!(
            e,
            NodeError::NoQuorum(_)
                | NodeError::ForwardLost { .. }
                | NodeError::Unanswered
                | NodeError::Deposed
                | NodeError::ProposalFailed(_)
                | NodeError::Forgotten
                | NodeError::UnknownSession
        );
        let mut status = node_status(code, e.to_string(), indeterminate);
        if matches!(e, NodeError::UnknownSession) {
            // The node cannot know whether an earlier attempt was applied; the client can, and
            // needs to tell this refusal apart to open a new session.
            status.metadata_mut().insert(
                SESSION_KEY,
                tonic::metadata::MetadataValue::from_static("unknown"),
            );
        }
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crossed(e: NodeError) -> Status {
        let forwarded = ForwardedError::from(e);
        let bytes = crate::raft::codec::encode(&forwarded).unwrap();
        Status::from(crate::raft::codec::decode::<ForwardedError>(&bytes).unwrap())
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

    #[test]
    fn only_a_write_that_may_have_applied_is_marked_indeterminate() {
        let maybe = [
            NodeError::ForwardLost {
                leader: 1,
                addr: "127.0.0.1:1".into(),
                reason: "reset".into(),
            },
            NodeError::Unanswered,
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
