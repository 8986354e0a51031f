//! Why a node could not answer, and the one place that maps it to a gRPC status.

use std::time::Duration;

use tonic::{Code, Status};

use crate::lease::InvalidInput;
use crate::raft::NodeId;

/// Metadata key set on a status when the write may or may not have been applied.
pub const INDETERMINATE_KEY: &str = "leasehold-indeterminate";
/// Metadata key set on every status a node produced itself, as opposed to a transport failure.
pub const ORIGIN_KEY: &str = "leasehold-origin";

#[derive(Debug, thiserror::Error)]
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
    #[error("{0}")]
    WrongClock(&'static str),
    #[error("this node is shutting down")]
    ShuttingDown,
    #[error("raft failed: {0}")]
    Raft(String),
    #[error("invariant broken: {0}")]
    Invariant(String),
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
            | NodeError::ShuttingDown => Code::Unavailable,
            NodeError::Raft(_) | NodeError::Invariant(_) => Code::Internal,
        };
        let mut status = Status::new(code, e.to_string());
        status.metadata_mut().insert(
            ORIGIN_KEY,
            tonic::metadata::MetadataValue::from_static("node"),
        );
        if matches!(e, NodeError::NoQuorum(_)) {
            status.metadata_mut().insert(
                INDETERMINATE_KEY,
                tonic::metadata::MetadataValue::from_static("true"),
            );
        }
        status
    }
}
