//! How a node calls its peers outside openraft's own RPCs: forwarded writes to the leader, and a
//! new leader's question for the store time each peer carries (see `clock`).
//!
//! Over gRPC on the peer plane in a node ([`GrpcLink`]); in the simulation, a call into the peer
//! through its router.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::clock::Carried;
use super::forwarder::{self, Answer, Forwarded};
use crate::proto::raft_v1::{raft_client::RaftClient, RaftMessage};
use crate::raft::codec::{decode, encode};
use crate::raft::{Channels, LogId, NodeId};

pub trait PeerLink: Send + Sync + 'static {
    /// Sends a batch of forwarded writes to `leader` at `addr`. One answer per write, in order;
    /// before the call the writes certainly did not apply, after it they may have.
    fn propose(
        &self,
        leader: NodeId,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<Answer>> + Send>>;

    /// The store time `peer` at `addr` carries now and the entry it counts from
    /// (`Node::carried_time`), or why it did not
    /// answer within `timeout`.
    /// The peer first waits a moment to apply `oldest`, the entry the answer must count from
    /// (see `Node::carried_time_from`).
    fn carried_time(
        &self,
        peer: NodeId,
        addr: String,
        oldest: Option<LogId>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Carried, String>> + Send>>;
}

/// [`PeerLink`] over the peers' gRPC channels.
pub struct GrpcLink(pub Channels);

impl PeerLink for GrpcLink {
    fn propose(
        &self,
        leader: NodeId,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<Answer>> + Send>> {
        Box::pin(forwarder::send(self.0.clone(), leader, addr, writes))
    }

    fn carried_time(
        &self,
        peer: NodeId,
        addr: String,
        oldest: Option<LogId>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Carried, String>> + Send>> {
        let channels = self.0.clone();
        Box::pin(async move {
            let channel = channels.get(peer, &addr).map_err(|e| e.to_string())?;
            let data = encode(&oldest).map_err(|e| e.to_string())?;
            let request = channels.peer_request(RaftMessage { data }, timeout);
            let reply = RaftClient::new(channel)
                .carried_time(request)
                .await
                .map_err(|status| status.message().to_owned())?;
            decode::<Carried>(&reply.into_inner().data).map_err(|e| e.to_string())
        })
    }
}
