//! Writes that reach a follower go to the leader in batches (with [`crate::gather`]).
//!
//! Forwarding each request as its own gRPC call costs the follower and the leader a full call
//! per request: under load with clients spread over the nodes, that was most of the leader's
//! work. Instead a follower gathers the writes bound for the leader and sends them in one
//! internal `Propose` call, which the leader proposes together; each write still gets its own
//! answer, or its own error with the leader's status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::link::{ForwardAnswer, Forwarded, PeerLink};
use super::NodeError;
use crate::gather::Gatherer;
use crate::limits::FORWARD_BATCHES;
use crate::NodeId;

pub struct Forwarder {
    link: Arc<dyn PeerLink>,
    /// One gatherer per leader seen: a new leader gets its own batches.
    to_leader: Mutex<HashMap<(NodeId, String), Gatherer<Forwarded, ForwardAnswer>>>,
}

impl Forwarder {
    pub fn new(link: Arc<dyn PeerLink>) -> Self {
        Forwarder {
            link,
            to_leader: Mutex::default(),
        }
    }

    /// Sends `write` to `leader` at `addr` in the next batch and waits for its answer.
    pub async fn write(&self, leader: NodeId, addr: &str, write: Forwarded) -> ForwardAnswer {
        let gatherer = {
            let mut to_leader = self.to_leader.lock().unwrap_or_else(|p| p.into_inner());
            to_leader
                .entry((leader, addr.to_owned()))
                .or_insert_with(|| {
                    let (link, addr) = (self.link.clone(), addr.to_owned());
                    Gatherer::start(
                        FORWARD_BATCHES,
                        |(op, _): &Forwarded| crate::raft::weight(op),
                        move |writes| link.propose(leader, addr.clone(), writes),
                    )
                })
                .clone()
        };
        match gatherer.submit(write) {
            Some(answer) => answer.await.unwrap_or_else(|_| Err(NodeError::Unanswered)),
            None => Err(NodeError::ShuttingDown),
        }
    }
}
