//! How a node calls its peers outside openraft's own RPCs: forwarded writes and reads to the
//! leader, a new leader's question for the store time each peer carries (see `clock`), a
//! question for a peer's clock (see `clock_probe`), and a member's own status. The calls as the
//! node makes them; their transports are the peer plane's (`peer::link`, between processes) and
//! the simulation's router.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::NodeError;
use crate::proto::etcd::etcdserverpb as etcd;
use crate::proto::v1 as pb;
use crate::raft::{Applied, LogId};
use crate::NodeId;
use leasehold_core::{Op, RequestId};
use openraft::Vote;

/// The store time a node carries now, and the entry it counts from: its answer to a new leader.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Carried {
    pub ms: u64,
    /// The newest stamped entry applied there, whose append the time is counted from; `None`
    /// when the node has no instant for its applied time, which is then all it carries.
    pub from: Option<LogId>,
}

/// One forwarded write: the op and the client's name for it.
pub type Forwarded = (Op, Option<RequestId>);
/// What the leader answered one forwarded write, or why it could not.
pub type ForwardAnswer = Result<Applied, NodeError>;

/// A read forwarded to the leader: one of the `LeaseStore` service's calls.
pub type Read = pb::batch_call::Request;
/// What forwarding a read to the leader answers.
pub type ReadAnswer =
    Pin<Box<dyn Future<Output = Result<pb::batch_answer::Answer, NodeError>> + Send>>;

/// An etcd read forwarded to the leader (see `api::etcd`): one of etcd's reads.
#[derive(Clone, Debug)]
pub enum EtcdRead {
    Range(etcd::RangeRequest),
    TimeToLive(etcd::LeaseTimeToLiveRequest),
    Leases(etcd::LeaseLeasesRequest),
}

/// What the leader answered a forwarded etcd read.
#[derive(Clone, Debug)]
pub enum EtcdReadAnswer {
    Range(etcd::RangeResponse),
    TimeToLive(etcd::LeaseTimeToLiveResponse),
    Leases(etcd::LeaseLeasesResponse),
}

/// What forwarding an etcd read to the leader answers.
pub type EtcdReadAnswering =
    Pin<Box<dyn Future<Output = Result<EtcdReadAnswer, NodeError>> + Send>>;

/// Who a forwarded request is for, as the forwarding member found the caller: the identity, and
/// the SHA-256 of the bearer token that gave it (checked again where the request is decided).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OnBehalf {
    pub identity: Option<String>,
    pub bearer: Option<String>,
}

pub trait PeerLink: Send + Sync + 'static {
    /// Sends a batch of forwarded writes to `leader` at `addr`. One answer per write, in order;
    /// before the call the writes certainly did not apply, after it they may have.
    fn propose(
        &self,
        leader: NodeId,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<ForwardAnswer>> + Send>>;

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

    /// `peer`'s clock's reading (see `clock_probe`), or why it did not answer within `timeout`.
    fn clock_reading(
        &self,
        peer: NodeId,
        addr: String,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<super::ClockReading, String>> + Send>>;

    /// Tells voter `peer` at `addr` that this leader, of vote `from`, hands leadership over to
    /// `to` (see `hand_over`), or why it could not within `timeout`.
    fn hand_over(
        &self,
        peer: NodeId,
        addr: String,
        from: Vote<NodeId>,
        to: NodeId,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;

    /// Forwards `call`, a read this node could not answer as it does not lead, to `leader` at
    /// `addr` for `caller`: the leader's answer, its own refusal, or why it could not be had
    /// (then `LeaderUnreachable`: a read changes nothing).
    fn read(&self, leader: NodeId, addr: String, caller: OnBehalf, call: Read) -> ReadAnswer;

    /// Forwards `read`, an etcd read this node could not answer as it does not lead, to
    /// `leader` at `addr` for `caller`, as [`read`](Self::read) forwards Leasehold's.
    fn etcd_read(
        &self,
        leader: NodeId,
        addr: String,
        caller: OnBehalf,
        read: EtcdRead,
    ) -> EtcdReadAnswering;

    /// Member `id`'s own view of itself, asked at its peer address `addr`; a status of role
    /// `Unreachable`, saying why, where it could not be had.
    fn status(
        &self,
        id: NodeId,
        addr: String,
    ) -> Pin<Box<dyn Future<Output = pb::NodeStatus> + Send>>;
}
