//! Linearizable reads share their ReadIndex (with [`crate::gather`]).
//!
//! Each ReadIndex costs a round of messages to a quorum. A read only needs one that started
//! after the read arrived: so the reads that arrive while a confirmation is out wait for the next
//! one, and all share it. A lone read still gets its own at once.

use openraft::error::{CheckIsLeaderError, Fatal, RaftError};
use openraft::BasicNode;

use super::{read_index, BootLog, Raft};
use crate::gather::Gatherer;
use crate::limits::{READ_BATCHES, READ_QUORUM_TRIES};
use crate::NodeId;

/// What openraft answers a read it could not confirm.
pub type ReadError = RaftError<NodeId, CheckIsLeaderError<NodeId, BasicNode>>;

/// A handle to one node's read confirmations: cheap to clone; stops with the last handle.
#[derive(Clone)]
pub struct Reads {
    gatherer: Gatherer<(), Result<(), ReadError>>,
}

impl Reads {
    /// Starts confirming reads for `raft`; see [`read_index`] for `boot`.
    pub fn start(raft: Raft, boot: BootLog) -> Self {
        let gatherer = Gatherer::start(
            READ_BATCHES,
            |(): &()| 1,
            move |waiting: Vec<()>| {
                let raft = raft.clone();
                async move {
                    let mut confirmed = read_index(&raft, boot).await;
                    // Under load a follower can miss the heartbeat's deadline (one heartbeat
                    // interval): ask again rather than fail every read that shares this round.
                    for _ in 1..READ_QUORUM_TRIES {
                        match confirmed {
                            Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_))) => {
                                confirmed = read_index(&raft, boot).await;
                            }
                            _ => break,
                        }
                    }
                    vec![confirmed; waiting.len()]
                }
            },
        );
        Reads { gatherer }
    }

    /// Returns once a ReadIndex that began after this call has confirmed this node's leadership
    /// and everything committed before it is applied.
    pub async fn confirm(&self) -> Result<(), ReadError> {
        let stopped = || RaftError::Fatal(Fatal::Stopped);
        let answer = self.gatherer.submit(()).ok_or_else(stopped)?;
        answer.await.map_err(|_| stopped())?
    }
}
