//! Writes that reach a follower go to the leader in batches (with [`crate::gather`]).
//!
//! Forwarding each request as its own gRPC call costs the follower and the leader a full call
//! per request: under load with clients spread over the nodes, that was most of the leader's
//! work. Instead a follower gathers the writes bound for the leader and sends them in one
//! internal `Propose` call, which the leader proposes together; each write still gets its own
//! answer, or its own error with the leader's status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tonic::Status;

use super::error::ForwardedError;
use super::peer_link::PeerLink;
use super::NodeError;
use crate::gather::Gatherer;
use crate::lease::{Op, RequestId};
use crate::proto::raft_v1::{raft_client::RaftClient, RaftMessage};
use crate::raft::codec::{decode, encode};
use crate::raft::{Applied, Channels, NodeId, WRITE_BATCHES};

/// Covers the leader's own waits (for an election, 2 s; to confirm a new term, 3 s; for a
/// quorum, 3 s), with room for the hop.
pub const FORWARD_TIMEOUT: Duration = Duration::from_millis(10_000);

/// One forwarded write: the op and the client's name for it.
pub type Forwarded = (Op, Option<RequestId>);
/// What the leader answered one forwarded write, or why it could not.
pub type Answer = Result<Applied, Status>;

pub struct Forwarder {
    link: Arc<dyn PeerLink>,
    /// One gatherer per leader seen: a new leader gets its own batches.
    to_leader: Mutex<HashMap<(NodeId, String), Gatherer<Forwarded, Answer>>>,
}

impl Forwarder {
    pub fn new(link: Arc<dyn PeerLink>) -> Self {
        Forwarder {
            link,
            to_leader: Mutex::default(),
        }
    }

    /// Sends `write` to `leader` at `addr` in the next batch and waits for its answer.
    pub async fn write(&self, leader: NodeId, addr: &str, write: Forwarded) -> Answer {
        let gatherer = {
            let mut to_leader = self.to_leader.lock().unwrap_or_else(|p| p.into_inner());
            to_leader
                .entry((leader, addr.to_owned()))
                .or_insert_with(|| {
                    let (link, addr) = (self.link.clone(), addr.to_owned());
                    Gatherer::start(
                        WRITE_BATCHES,
                        |(op, _): &Forwarded| crate::raft::weight(op),
                        move |writes| link.propose(leader, addr.clone(), writes),
                    )
                })
                .clone()
        };
        match gatherer.submit(write) {
            Some(answer) => answer
                .await
                .unwrap_or_else(|_| Err(NodeError::Unanswered.into())),
            None => Err(NodeError::ShuttingDown.into()),
        }
    }
}

/// One batch to the leader: its answers, or the same failure for each write.
pub(super) async fn send(
    channels: Channels,
    leader: NodeId,
    addr: String,
    writes: Vec<Forwarded>,
) -> Vec<Answer> {
    let count = writes.len();
    let fail = |error: NodeError| -> Vec<Answer> { vec![Err(Status::from(error)); count] };
    // Before the call the writes certainly did not apply; after it, they may have.
    let unreachable = |reason: String| {
        fail(NodeError::LeaderUnreachable {
            leader,
            addr: addr.clone(),
            reason,
        })
    };
    let lost = |reason: String| {
        fail(NodeError::ForwardLost {
            leader,
            addr: addr.clone(),
            reason,
        })
    };
    let data = match encode(&writes) {
        Ok(data) => data,
        Err(e) => return unreachable(format!("encoding the forwarded writes: {e}")),
    };
    let channel = match channels.get(leader, &addr) {
        Ok(channel) => channel,
        Err(e) => return unreachable(e.to_string()),
    };
    let request = channels.peer_request(RaftMessage { data }, FORWARD_TIMEOUT);
    let reply = match RaftClient::new(channel).propose(request).await {
        Ok(reply) => reply.into_inner(),
        Err(status) => return lost(status.message().to_owned()),
    };
    match decode::<Vec<Result<Applied, ForwardedError>>>(&reply.data) {
        Ok(answers) if answers.len() == count => answers
            .into_iter()
            .map(|a| a.map_err(Status::from))
            .collect(),
        Ok(answers) => lost(format!(
            "the leader answered {} of {count} forwarded writes",
            answers.len()
        )),
        Err(e) => lost(format!("decoding the leader's answers: {e}")),
    }
}
