//! Peer traffic: openraft's RPCs over tonic, one cached channel per peer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_core::format::{Format, FORMAT_1, LOG_FORMAT};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{de::DeserializeOwned, Serialize};
use tonic::transport::{Channel, Endpoint};

use super::codec::{decode, encode};
use super::incarnation::{self, Incarnations};
use super::lane::{Dialer, LaneRpc, Lanes};
use super::protocol::{self, Protocols};
use super::reachability::Reachability;
use super::{TypeConfig, VotePenalty};
use crate::limits::{CONNECT_TIMEOUT, UNREACHABLE_RETRY};
use crate::proto::raft_v1::{raft_client::RaftClient, RaftMessage};
use crate::NodeId;

// A manual-clock node that led would accept `Advance` and expire every lease at once: so the
// clock travels on every peer message.
pub use leasehold_proto::wire::CLOCK_KEY;

/// How a cluster's store time moves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ClockMode {
    /// The leader stamps every command from its monotonic clock.
    #[default]
    Leader,
    /// Only `Advance` moves store time (`serve --manual-clock`).
    Manual,
}

impl ClockMode {
    /// The mode `serve --manual-clock` (or its absence) asks for.
    pub fn from_manual(manual: bool) -> Self {
        if manual {
            ClockMode::Manual
        } else {
            ClockMode::Leader
        }
    }

    /// The name written in the data dir's `clock` file and sent with every peer message.
    pub fn name(self) -> &'static str {
        match self {
            ClockMode::Leader => "leader",
            ClockMode::Manual => "manual",
        }
    }

    /// Refuses a peer message whose sender runs another clock (or does not say which): why.
    pub fn check_peer(self, metadata: &tonic::metadata::MetadataMap) -> Result<(), String> {
        let theirs = metadata.get(CLOCK_KEY).and_then(|v| v.to_str().ok());
        if theirs == Some(self.name()) {
            return Ok(());
        }
        Err(format!(
            "refused a peer message: the sender runs the {} clock, this node the {} clock; \
             every node of a cluster must be started with the same clock (--manual-clock on all \
             or none)",
            theirs.unwrap_or("(unnamed)"),
            self.name()
        ))
    }
}

/// Lazily connected channels by member and address, shared by Raft replication and request
/// forwarding. A tonic channel reconnects by itself, so one per peer serves for the life of the
/// node. AppendEntries and forwarded writes take the peer lanes kept here instead, and the
/// channel only when a peer takes no lanes.
#[derive(Clone, Default)]
pub struct Channels {
    /// Keyed by id as well as address: with TLS a channel checks the certificate name of the
    /// id it was made for, and a node added under a new id at a removed member's address shows
    /// its own.
    /// Each made with the TLS material of a generation (see `tls::Reloading`): one made
    /// before a reload is made anew, to show the renewed certificate.
    by_peer: Arc<Mutex<HashMap<(NodeId, String), Made>>>,
    /// The address outgoing connections start from: a node listening on one address of
    /// several talks from it, so a firewall rule (or the fault suite's partitions) can tell
    /// nodes apart by source address.
    local_address: Option<IpAddr>,
    /// This node's clock, named on every peer message it sends.
    clock: ClockMode,
    /// With TLS, peers are dialed with this node's certificate (as last loaded), and each
    /// must show one that names the node it was dialed as.
    tls: Option<Arc<crate::tls::Reloading>>,
    /// This node's data dir's incarnation and its peers' (see `incarnation`); unset in tests
    /// that run no data dir.
    incarnations: Option<Incarnations>,
    /// The lanes that AppendEntries and forwarded writes take (see `lane`), dialed from
    /// `local_address` with `tls`.
    lanes: Lanes,
    /// What each peer last announced of its protocol (see `protocol`).
    protocols: Protocols,
    /// Whether calls to each peer fail, said once (see `reachability`).
    reachability: Reachability,
}

/// A channel, and the generation of the TLS material it was made with (0 without TLS).
type Made = (u64, Channel);

impl Channels {
    pub fn new(
        local_address: Option<IpAddr>,
        clock: ClockMode,
        tls: Option<Arc<crate::tls::Reloading>>,
    ) -> Self {
        let dialer = Dialer {
            local_address,
            tls: tls.clone(),
        };
        Channels {
            local_address,
            clock,
            tls,
            lanes: Lanes::new(Some(dialer)),
            ..Channels::default()
        }
    }

    /// Names this node's incarnation on every peer message, and checks its peers' on their
    /// replies to Raft messages.
    pub fn with_incarnations(mut self, incarnations: Incarnations) -> Self {
        self.incarnations = Some(incarnations);
        self
    }

    pub fn incarnations(&self) -> Option<&Incarnations> {
        self.incarnations.as_ref()
    }

    /// The lanes to the peers.
    pub fn lanes(&self) -> &Lanes {
        &self.lanes
    }

    /// What each peer last announced of its protocol.
    pub fn protocols(&self) -> &Protocols {
        &self.protocols
    }

    /// A peer message, carrying what its receiver checks before it looks inside.
    pub fn peer_request<T>(&self, message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        request.metadata_mut().insert(
            CLOCK_KEY,
            tonic::metadata::MetadataValue::from_static(self.clock.name()),
        );
        protocol::announce(request.metadata_mut());
        if let Some(incarnations) = &self.incarnations {
            incarnation::write(
                request.metadata_mut(),
                incarnation::FROM_KEY,
                incarnations.mine(),
            );
        }
        request
    }

    /// The channel to node `id`'s peer plane at `addr`.
    pub fn get(&self, id: NodeId, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let key = (id, addr.to_owned());
        let generation = self.tls.as_ref().map_or(0, |tls| tls.generation());
        match by_peer.get(&key) {
            Some((made, channel)) if *made == generation => return Ok(channel.clone()),
            _ => {}
        }
        let endpoint = match &self.tls {
            Some(tls) => Endpoint::from_shared(format!("https://{addr}"))?
                .tls_config(tls.tls().client_config(Some(&crate::tls::node_name(id))))?,
            None => Endpoint::from_shared(format!("http://{addr}"))?,
        };
        let channel = endpoint
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .local_address(self.local_address)
            .connect_lazy();
        // Two members never share an address, so another id's channel here is a removed
        // member's: dropped from the cache (a client that holds it keeps its clone).
        by_peer.retain(|(_, at), _| at != addr);
        by_peer.insert(key, (generation, channel.clone()));
        Ok(channel)
    }

    /// The peers this node holds channels to, for tests.
    #[cfg(test)]
    fn cached(&self) -> Vec<(NodeId, String)> {
        let by_peer = self.by_peer.lock().unwrap_or_else(|p| p.into_inner());
        let mut peers: Vec<_> = by_peer.keys().cloned().collect();
        peers.sort();
        peers
    }
}

/// openraft's network factory: hands out a client per target over the shared channels.
#[derive(Clone)]
pub struct PeerNetwork {
    channels: Channels,
    penalty: Arc<VotePenalty>,
}

impl PeerNetwork {
    /// Clients over `channels`; every vote answer passes through `penalty` (see
    /// [`VotePenalty`]).
    pub fn new(channels: Channels, penalty: Arc<VotePenalty>) -> Self {
        PeerNetwork { channels, penalty }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            addr: node.addr.clone(),
            channels: self.channels.clone(),
            penalty: self.penalty.clone(),
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    addr: String,
    channels: Channels,
    penalty: Arc<VotePenalty>,
}

impl PeerClient {
    /// `rpc` as a gRPC call, on the channel asked for now: one made before the TLS files were
    /// loaded again is made anew (a lane's call needs none). A failure as its code and words;
    /// an address that does not parse is unreachable on every call.
    async fn by_grpc(
        &self,
        rpc: Rpc,
        message: tonic::Request<RaftMessage>,
    ) -> Result<tonic::Response<RaftMessage>, (tonic::Code, String)> {
        let channel = self.channels.get(self.target, &self.addr);
        let mut client =
            RaftClient::new(channel.map_err(|e| (tonic::Code::Unavailable, e.to_string()))?);
        let reply = match rpc {
            Rpc::AppendEntries => client.append_entries(message).await,
            Rpc::Vote => client.vote(message).await,
            Rpc::PreVote => client.pre_vote(message).await,
            Rpc::InstallSnapshot => client.install_snapshot(message).await,
        };
        reply.map_err(|status| (status.code(), status.message().to_owned()))
    }
}

#[derive(Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    PreVote,
    InstallSnapshot,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PeerFailure(String);

impl PeerClient {
    /// `rpc` to the target. `older` is the answer that a peer of the version before stands for
    /// when it does not know `rpc` (it answers UNIMPLEMENTED); `None` where every version does.
    /// `format` is the newest log format among what `request` carries, marked on the message;
    /// the reply's announcement is noted, and a reply of a format this build cannot read is
    /// refused.
    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
        older: Option<Resp>,
        format: Format,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let data = encode(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut message = self
            .channels
            .peer_request(RaftMessage { data }, option.hard_ttl());
        protocol::mark_format(message.metadata_mut(), format);
        let incarnations = self.channels.incarnations.clone();
        if let Some(known) = incarnations.as_ref().and_then(|i| i.known(self.target)) {
            incarnation::write(message.metadata_mut(), incarnation::TO_KEY, known);
        }
        let attempt = self
            .channels
            .reachability
            .attempt(self.target, option.hard_ttl());
        let reply = match rpc {
            Rpc::AppendEntries => {
                let (lanes, timeout) = (self.channels.lanes(), option.hard_ttl());
                let lane = LaneRpc::AppendEntries;
                match lanes
                    .call(self.target, &self.addr, lane, message, timeout)
                    .await
                {
                    Ok(reply) => reply.map_err(|failure| (failure.code(), failure.to_string())),
                    Err(message) => self.by_grpc(rpc, message).await,
                }
            }
            _ => self.by_grpc(rpc, message).await,
        };
        let reply = match (reply, older) {
            (Err((tonic::Code::Unimplemented, _)), Some(older)) => {
                attempt.answered();
                return Ok(older);
            }
            (Ok(reply), _) => reply,
            (Err((code, message)), _) => {
                // It may come back as another build: what it announced no longer holds.
                self.channels.protocols.forget(self.target);
                let failure = PeerFailure(format!("{code}: {message}"));
                attempt.failed(&failure.0);
                return Err(if code == tonic::Code::Unavailable {
                    RPCError::Unreachable(Unreachable::new(&failure))
                } else {
                    RPCError::Network(NetworkError::new(&failure))
                });
            }
        };
        attempt.answered();
        self.check_reply(reply.metadata(), incarnations.as_ref())?;
        let result: Result<Resp, RaftError<NodeId, E>> = decode(&reply.into_inner().data)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }

    /// What a reply carries outside its body: the target's announcement, noted; the format of
    /// what it holds, refused if this build cannot read it; the target's incarnation, refused if
    /// it is not the one it showed first.
    fn check_reply<E: std::error::Error>(
        &self,
        metadata: &tonic::metadata::MetadataMap,
        incarnations: Option<&Incarnations>,
    ) -> Result<(), RPCError<NodeId, BasicNode, RaftError<NodeId, E>>> {
        self.channels.protocols.heard(self.target, metadata);
        if let Err(why) = protocol::check_format(metadata, LOG_FORMAT) {
            return Err(RPCError::Network(NetworkError::new(&PeerFailure(why))));
        }
        if let Some(incarnations) = incarnations {
            let theirs = incarnation::read(metadata, incarnation::FROM_KEY);
            if let Err(why) = incarnations.check_peer(self.target, theirs) {
                // Its vote or its ack would count a disk that forgot what it promised.
                incarnations.log_refusal(&why);
                return Err(RPCError::Unreachable(Unreachable::new(&PeerFailure(why))));
            }
        }
        Ok(())
    }
}

/// How a leader waits before it tries a peer it found unreachable again: every
/// [`UNREACHABLE_RETRY`]. The simulation's network waits the same.
pub(crate) fn unreachable_backoff() -> openraft::network::Backoff {
    openraft::network::Backoff::new(std::iter::repeat(UNREACHABLE_RETRY))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    fn backoff(&self) -> openraft::network::Backoff {
        unreachable_backoff()
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let format = (rpc.entries.iter())
            .map(protocol::entry_format)
            .max()
            .unwrap_or(FORMAT_1);
        self.call(Rpc::AppendEntries, &rpc, &option, None, format)
            .await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        // A snapshot is of its table's layout, numbered apart from the log's formats, which
        // its id names.
        let format = super::snapshot_file::table_format(&rpc.meta);
        self.call(Rpc::InstallSnapshot, &rpc, &option, None, format)
            .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let mut answer = self.call(Rpc::Vote, &rpc, &option, None, FORMAT_1).await?;
        self.penalty.answered(&rpc, &mut answer);
        Ok(answer)
    }

    /// A pre-vote's answer does not pass the vote penalty: openraft reads no log id from it, so
    /// it sets no mark to undo. A peer of the version before, which knows no pre-vote, counts as
    /// a yes: it still judges the vote itself as before, and counting it as a no could leave no
    /// quorum of yeses in a cluster being upgraded (a new node whose only live peer is an old one
    /// with a shorter log, which no one votes for, would never campaign).
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        let older = VoteResponse::new(rpc.vote, rpc.last_log_id, true);
        self.call(Rpc::PreVote, &rpc, &option, Some(older), FORMAT_1)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_channel_is_made_for_the_id_it_dials_and_a_reused_address_drops_the_old_ids() {
        let channels = Channels::new(None, ClockMode::Leader, None);
        channels.get(3, "127.0.0.1:7003").unwrap();
        channels.get(2, "127.0.0.1:7002").unwrap();
        channels.get(3, "127.0.0.1:7003").unwrap();
        assert_eq!(
            channels.cached(),
            [(2, "127.0.0.1:7002".into()), (3, "127.0.0.1:7003".into())]
        );
        // Node 3 removed, node 4 added at its address: dialed as node 4 (with TLS, checking
        // node 4's certificate name), and node 3's channel is gone.
        channels.get(4, "127.0.0.1:7003").unwrap();
        assert_eq!(
            channels.cached(),
            [(2, "127.0.0.1:7002".into()), (4, "127.0.0.1:7003".into())]
        );
    }

    /// A peer of the version before knows no PreVote: tonic answers a method a server lacks
    /// with UNIMPLEMENTED, as the server here (no services at all) answers every method. Its
    /// pre-vote counts as a yes; a vote it does not know stays an error.
    #[tokio::test]
    async fn a_peer_that_knows_no_pre_vote_counts_as_a_yes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let older = tonic::transport::Server::builder()
            .add_routes(tonic::service::Routes::default())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        tokio::spawn(older);
        let penalty = Arc::new(VotePenalty::new(&openraft::Config::default()));
        let mut network = PeerNetwork::new(Channels::new(None, ClockMode::Leader, None), penalty);
        let mut peer = network
            .new_client(2, &BasicNode::new(addr.to_string()))
            .await;
        let request = VoteRequest::new(openraft::Vote::new(5, 1), None);
        let option = RPCOption::new(Duration::from_secs(5));

        let answer = peer
            .pre_vote(request.clone(), option.clone())
            .await
            .unwrap();
        assert!(answer.vote_granted, "{answer:?}");
        let vote = peer.vote(request, option).await.unwrap_err();
        assert!(vote.to_string().contains("not implemented"), "{vote}");
    }

    #[test]
    fn a_peer_message_is_admitted_only_with_the_same_clock() {
        let sent_by = |clock: ClockMode| {
            Channels::new(None, clock, None)
                .peer_request((), Duration::from_secs(1))
                .metadata()
                .clone()
        };
        assert!(ClockMode::Leader
            .check_peer(&sent_by(ClockMode::Leader))
            .is_ok());
        assert!(ClockMode::Manual
            .check_peer(&sent_by(ClockMode::Manual))
            .is_ok());
        let refused = ClockMode::Leader
            .check_peer(&sent_by(ClockMode::Manual))
            .unwrap_err();
        assert!(refused.contains("--manual-clock"), "{refused}");
        // A sender that names no clock (an older build, a stray client) is refused too.
        assert!(ClockMode::Leader
            .check_peer(&tonic::metadata::MetadataMap::new())
            .is_err());
    }
}
