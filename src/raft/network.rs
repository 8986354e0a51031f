//! Peer traffic: openraft's RPCs over tonic, one cached channel per peer.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
use super::{NodeId, TypeConfig};
use crate::proto::raft_v1::{raft_client::RaftClient, RaftMessage};

/// How long a connection attempt to a peer may take before it counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Lazily connected channels by address, shared by Raft replication and request forwarding.
/// A tonic channel reconnects by itself, so one per peer serves for the life of the node.
#[derive(Clone, Default)]
pub struct Channels {
    by_addr: Arc<Mutex<HashMap<String, Channel>>>,
    /// The address outgoing connections start from: a node listening on one address of
    /// several talks from it, so a firewall rule (or the fault suite's partitions) can tell
    /// nodes apart by source address.
    local_address: Option<IpAddr>,
}

impl Channels {
    pub fn bound_to(local_address: Option<IpAddr>) -> Self {
        Channels {
            local_address,
            ..Channels::default()
        }
    }

    pub fn get(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mut by_addr = self.by_addr.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(channel) = by_addr.get(addr) {
            return Ok(channel.clone());
        }
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(5))
            .keep_alive_timeout(Duration::from_secs(5))
            .local_address(self.local_address)
            .connect_lazy();
        by_addr.insert(addr.to_owned(), channel.clone());
        Ok(channel)
    }
}

/// openraft's network factory: hands out a client per target over the shared channels.
#[derive(Clone)]
pub struct PeerNetwork {
    channels: Channels,
}

impl PeerNetwork {
    pub fn new(channels: Channels) -> Self {
        PeerNetwork { channels }
    }
}

impl RaftNetworkFactory<TypeConfig> for PeerNetwork {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        PeerClient {
            target,
            client: self
                .channels
                .get(&node.addr)
                .map(RaftClient::new)
                .map_err(|e| e.to_string()),
        }
    }
}

pub struct PeerClient {
    target: NodeId,
    /// An address that does not parse stays an error, reported as unreachable on every call.
    client: Result<RaftClient<Channel>, String>,
}

#[derive(Clone, Copy)]
enum Rpc {
    AppendEntries,
    Vote,
    InstallSnapshot,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct PeerFailure(String);

impl PeerClient {
    async fn call<Req, Resp, E>(
        &mut self,
        rpc: Rpc,
        request: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let client = match &mut self.client {
            Ok(client) => client,
            Err(e) => {
                return Err(RPCError::Unreachable(Unreachable::new(&PeerFailure(
                    e.clone(),
                ))))
            }
        };
        let data = encode(request).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let mut message = tonic::Request::new(RaftMessage { data });
        message.set_timeout(option.hard_ttl());
        let reply = match rpc {
            Rpc::AppendEntries => client.append_entries(message).await,
            Rpc::Vote => client.vote(message).await,
            Rpc::InstallSnapshot => client.install_snapshot(message).await,
        };
        let reply = reply.map_err(|status| {
            let failure = PeerFailure(format!("{}: {}", status.code(), status.message()));
            if status.code() == tonic::Code::Unavailable {
                RPCError::Unreachable(Unreachable::new(&failure))
            } else {
                RPCError::Network(NetworkError::new(&failure))
            }
        })?;
        let result: Result<Resp, RaftError<NodeId, E>> = decode(&reply.into_inner().data)
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        result.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::AppendEntries, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Rpc::InstallSnapshot, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call(Rpc::Vote, &rpc, &option).await
    }
}
