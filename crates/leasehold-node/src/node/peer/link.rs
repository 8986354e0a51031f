//! [`PeerLink`] over the peer plane: forwarded writes on a peer lane (see `raft::lane`), gRPC
//! for the rest or a peer that takes no lanes; forwarded reads as the `LeaseStore` calls they
//! are, on the leader's peer plane.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use leasehold_proto::wire;
use tonic::metadata::MetadataValue;

use crate::limits::FORWARD_TIMEOUT;
use crate::node::error::ForwardedError;
use crate::node::link::{
    Carried, EtcdRead, EtcdReadAnswer, EtcdReadAnswering, ForwardAnswer, Forwarded, OnBehalf,
    PeerLink, Read, ReadAnswer,
};
use crate::node::{ClockReading, NodeError};
use crate::proto::etcd::etcdserverpb::{kv_client::KvClient, lease_client::LeaseClient};
use crate::proto::raft_v1::{raft_client::RaftClient, RaftMessage};
use crate::proto::v1::batch_answer::Answer as Answered;
use crate::proto::v1::lease_store_client::LeaseStoreClient;
use crate::raft::codec::{decode, encode};
use crate::raft::lane::{LaneFailure, LaneRpc};
use crate::raft::{protocol, Applied, Channels, LogId};
use crate::NodeId;
use leasehold_core::format::FORMAT_1;
use openraft::Vote;

/// `call` made as its unary `LeaseStore` call on `client`, forwarded for `caller`: called by
/// `lease_calls!` with the service's table.
/// Only a read: a write goes to the leader through the log's forwarder, with its request id.
macro_rules! unary {
    (
        $client:ident, $call:ident, $caller:ident;
        $($name:ident $method:ident $request:ident $response:ident $kind:ident;)*
    ) => {{
        let reads = match &$call {
            $(Read::$name(_) => reads!($kind),)*
        };
        if !reads {
            return Err(NodeError::Invariant("only reads are forwarded as calls".into()));
        }
        match $call {
            $(Read::$name(m) => $client
                .$method(forwarded(m, &$caller))
                .await
                .map(|r| Answered::$name(r.into_inner())),)*
        }
    }};
}

/// Whether a row of `lease_calls!` only reads.
macro_rules! reads {
    (read) => {
        true
    };
    (write) => {
        false
    };
}

/// [`PeerLink`] over the peers' gRPC channels.
pub struct GrpcLink(pub Channels);

impl PeerLink for GrpcLink {
    fn propose(
        &self,
        leader: NodeId,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<ForwardAnswer>> + Send>> {
        Box::pin(send(self.0.clone(), leader, addr, writes))
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

    fn clock_reading(
        &self,
        peer: NodeId,
        addr: String,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<ClockReading, String>> + Send>> {
        let channels = self.0.clone();
        Box::pin(async move {
            let channel = channels.get(peer, &addr).map_err(|e| e.to_string())?;
            let request = channels.peer_request(RaftMessage { data: Vec::new() }, timeout);
            let reply = RaftClient::new(channel)
                .clock_reading(request)
                .await
                .map_err(|status| status.message().to_owned())?;
            // The answer announces what the peer serves: a follower hears no Raft message from
            // the other followers, and would not know they read clocks otherwise.
            channels.protocols().heard(peer, reply.metadata());
            decode::<ClockReading>(&reply.into_inner().data).map_err(|e| e.to_string())
        })
    }

    fn hand_over(
        &self,
        peer: NodeId,
        addr: String,
        from: Vote<NodeId>,
        to: NodeId,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let channels = self.0.clone();
        Box::pin(async move {
            let channel = channels.get(peer, &addr).map_err(|e| e.to_string())?;
            let data = encode(&(from, to)).map_err(|e| e.to_string())?;
            let request = channels.peer_request(RaftMessage { data }, timeout);
            let told = RaftClient::new(channel).hand_over(request).await;
            told.map(drop).map_err(|status| status.message().to_owned())
        })
    }

    fn status(
        &self,
        id: NodeId,
        addr: String,
    ) -> Pin<Box<dyn Future<Output = crate::proto::v1::NodeStatus> + Send>> {
        Box::pin(super::status::remote_status(self.0.clone(), id, addr))
    }

    fn etcd_read(
        &self,
        leader: NodeId,
        addr: String,
        caller: OnBehalf,
        read: EtcdRead,
    ) -> EtcdReadAnswering {
        let channels = self.0.clone();
        Box::pin(async move {
            let unreachable = |reason: String| NodeError::LeaderUnreachable {
                leader,
                addr: addr.clone(),
                reason,
            };
            let channel = channels
                .get(leader, &addr)
                .map_err(|e| unreachable(e.to_string()))?;
            let answered = match read {
                EtcdRead::Range(m) => KvClient::new(channel)
                    .max_decoding_message_size(usize::MAX)
                    .range(forwarded(m, &caller))
                    .await
                    .map(|r| EtcdReadAnswer::Range(r.into_inner())),
                EtcdRead::TimeToLive(m) => LeaseClient::new(channel)
                    .lease_time_to_live(forwarded(m, &caller))
                    .await
                    .map(|r| EtcdReadAnswer::TimeToLive(r.into_inner())),
                EtcdRead::Leases(m) => LeaseClient::new(channel)
                    .max_decoding_message_size(usize::MAX)
                    .lease_leases(forwarded(m, &caller))
                    .await
                    .map(|r| EtcdReadAnswer::Leases(r.into_inner())),
            };
            answered.map_err(|status| NodeError::from_leader(leader, status, unreachable))
        })
    }

    fn read(&self, leader: NodeId, addr: String, caller: OnBehalf, call: Read) -> ReadAnswer {
        let channels = self.0.clone();
        Box::pin(async move {
            let unreachable = |reason: String| NodeError::LeaderUnreachable {
                leader,
                addr: addr.clone(),
                reason,
            };
            let channel = channels
                .get(leader, &addr)
                .map_err(|e| unreachable(e.to_string()))?;
            let mut client = LeaseStoreClient::new(channel).max_decoding_message_size(usize::MAX);
            let answered = leasehold_proto::lease_calls!(unary, client, call, caller);
            answered.map_err(|status| NodeError::from_leader(leader, status, unreachable))
        })
    }
}

/// Forwarded writes that reached the leader, or may have, without an answer back.
fn lost(leader: NodeId, addr: &str, reason: String) -> NodeError {
    NodeError::ForwardLost {
        leader,
        addr: addr.to_owned(),
        reason,
    }
}

/// Whether a failed `Propose` was refused by the leader's handler before it proposed anything:
/// its gate (PERMISSION_DENIED) or the message's decoding (INVALID_ARGUMENT, OUT_OF_RANGE), the
/// node's own words (the origin mark, on gRPC; a lane's refusal is its handler's always). Any
/// other failure, an answer that could not be encoded after the writes were made included, may
/// follow a write that applied.
fn refused_before_proposing(
    code: tonic::Code,
    metadata: Option<&tonic::metadata::MetadataMap>,
) -> bool {
    use tonic::Code::{InvalidArgument, OutOfRange, PermissionDenied};
    let the_nodes = metadata.is_none_or(|m| m.get(wire::ORIGIN_KEY).is_some());
    the_nodes && matches!(code, PermissionDenied | InvalidArgument | OutOfRange)
}

/// `message` as a read forwarded to the leader: bounded by [`FORWARD_TIMEOUT`], marked as
/// forwarded (so that a node that no longer leads answers instead of forwarding it again), and
/// carrying the caller this node found.
fn forwarded<T>(message: T, caller: &OnBehalf) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(FORWARD_TIMEOUT);
    let metadata = request.metadata_mut();
    metadata.insert(wire::FORWARDED_KEY, MetadataValue::from_static("1"));
    let (identity, bearer) = (caller.identity.as_deref(), caller.bearer.as_deref());
    for (key, value) in [(wire::IDENTITY_KEY, identity), (wire::BEARER_KEY, bearer)] {
        if let Some(value) = value.and_then(|v| MetadataValue::try_from(v).ok()) {
            metadata.insert(key, value);
        }
    }
    request
}

/// One batch to the leader: its answers, or the same failure for each write.
async fn send(
    channels: Channels,
    leader: NodeId,
    addr: String,
    writes: Vec<Forwarded>,
) -> Vec<ForwardAnswer> {
    let count = writes.len();
    let lost = |reason: String| lost(leader, &addr, reason);
    let answered = propose(&channels, leader, &addr, &writes)
        .await
        .and_then(
            |data| match decode::<Vec<Result<Applied, ForwardedError>>>(&data) {
                Ok(answers) if answers.len() == count => Ok(answers),
                Ok(answers) => Err(lost(format!(
                    "the leader answered {} of {count} forwarded writes",
                    answers.len()
                ))),
                Err(e) => Err(lost(format!("decoding the leader's answers: {e}"))),
            },
        );
    match answered {
        Ok(answers) => answers
            .into_iter()
            .map(|a| a.map_err(|e| NodeError::passed_on(leader, e)))
            .collect(),
        Err(error) => vec![Err(error); count],
    }
}

/// The leader's reply to `writes`, or why there is none: the leader unreachable before the
/// call (they certainly did not apply), its handler's refusal before it proposed (its gate, a
/// message it cannot read: determinate too), or the call lost on its way or failed after the
/// writes were made (they may have applied).
async fn propose(
    channels: &Channels,
    leader: NodeId,
    addr: &str,
    writes: &Vec<Forwarded>,
) -> Result<Vec<u8>, NodeError> {
    let addr_ = || addr.to_owned();
    let unreachable = |reason: String| NodeError::LeaderUnreachable {
        leader,
        addr: addr_(),
        reason,
    };
    let refused = |reason: String| NodeError::ForwardRefused {
        leader,
        addr: addr_(),
        reason,
    };
    let lost = |reason: String| lost(leader, addr, reason);
    let data =
        encode(writes).map_err(|e| unreachable(format!("encoding the forwarded writes: {e}")))?;
    let channel = channels
        .get(leader, addr)
        .map_err(|e| unreachable(e.to_string()))?;
    let mut request = channels.peer_request(RaftMessage { data }, FORWARD_TIMEOUT);
    let format = writes.iter().map(|(op, _)| op.format()).max();
    protocol::mark_format(request.metadata_mut(), format.unwrap_or(FORMAT_1));
    let lanes = channels.lanes();
    let reply = match lanes
        .call(leader, addr, LaneRpc::Propose, request, FORWARD_TIMEOUT)
        .await
    {
        Ok(Ok(reply)) => reply,
        Ok(Err(LaneFailure::Refused { code, message })) if refused_before_proposing(code, None) => {
            return Err(refused(message))
        }
        // No lane could be opened: nothing was sent.
        Ok(Err(LaneFailure::Unreachable(why))) => return Err(unreachable(why)),
        Ok(Err(failure)) => return Err(lost(failure.to_string())),
        Err(request) => match RaftClient::new(channel).propose(request).await {
            Ok(reply) => reply,
            Err(status) if refused_before_proposing(status.code(), Some(status.metadata())) => {
                return Err(refused(status.message().to_owned()))
            }
            Err(status) => return Err(lost(status.message().to_owned())),
        },
    };
    Ok(reply.into_inner().data)
}
