//! One way to build a node.
//!
//! [`start`] turns a node's storage and its way to its peers into a running node: Raft, the
//! product's [`Node`] around it, and the node's background work (the expiry ticker and the
//! election watch). `serve` ([`super::run`]) opens the storage in a data dir, starts the node so
//! and puts it behind its listeners; the simulation (`sim/`) starts every node the
//! same way, on a log in memory and a router it controls. So what the simulation checks is the
//! node `serve` runs, short of the transports and the disk.

use std::sync::Arc;

use openraft::network::RaftNetworkFactory;
use openraft::storage::RaftLogStorage;

use super::ticker::tick_expiring_leases;
use super::{watch_elections, Node, NodeConfig, PeerLink};
use crate::raft::VotePenalty;
use crate::raft::{self, BootLog, Channels, LogStore, Raft, StateMachineStore, TypeConfig};

/// Why a node did not start, or stopped: what `serve` reports before it exits.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The flags or the data dir's saved state do not make a node; the message says which.
    #[error("{0}")]
    Config(String),
    /// The data dir could not be made, locked or read.
    #[error("data dir {dir}: {source}")]
    DataDir {
        /// The data dir, as given.
        dir: String,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The log or the state machine could not be opened or written.
    #[error("storage: {0}")]
    Storage(Box<raft::StorageError>),
    /// An address could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Listen {
        /// The address, as given.
        addr: String,
        /// What the system said: in the message, and so not a `source` too, which a caller
        /// printing the chain (anyhow's `{:#}`) would print twice.
        error: std::io::Error,
    },
    /// openraft would not start, or stopped with a fatal error.
    #[error("raft: {0}")]
    Raft(String),
    /// A gRPC server stopped with an error.
    #[error("grpc server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl From<raft::StorageError> for StartError {
    fn from(e: raft::StorageError) -> Self {
        StartError::Storage(Box::new(e))
    }
}

/// What a node keeps: its Raft log and its state machine, opened.
pub struct Storage<L> {
    /// The log: the segment files (`LogStore`), or the simulation's in memory.
    pub log: L,
    pub state_machine: StateMachineStore,
    /// What the log held at start-up (see [`BootLog`]).
    pub boot: BootLog,
    /// A reader of the same log, for `ReadLog`, where the log is a `LogStore`.
    pub reader: Option<LogStore>,
}

/// How a node reaches its peers.
pub struct Transport<F> {
    /// Raft's own messages: a network built around the vote penalty that answers pass through
    /// (see [`VotePenalty`]).
    pub network: F,
    /// The node's calls outside Raft: forwarded writes, a new leader's question for the time
    /// its peers carry.
    pub link: Arc<dyn PeerLink>,
    /// The peers' gRPC channels, for forwarded reads and status; empty where there are none.
    pub channels: Channels,
}

/// A started node and its background work.
pub struct Running {
    node: Node,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// Starts node `config.id` under `raft_config` on `storage`, reaching its peers through
/// `transport`. Forming or joining a cluster is the caller's: a restarted node is a member
/// already.
pub async fn start<L, N, F>(
    config: &NodeConfig,
    raft_config: Arc<openraft::Config>,
    storage: Storage<L>,
    transport: Transport<F>,
) -> Result<Running, StartError>
where
    L: RaftLogStorage<TypeConfig>,
    N: RaftNetworkFactory<TypeConfig>,
    F: FnOnce(Arc<VotePenalty>) -> N,
{
    let penalty = Arc::new(VotePenalty::new(&raft_config));
    let state = storage.state_machine.shared();
    let raft = Raft::new(
        config.id,
        raft_config,
        (transport.network)(penalty.clone()),
        storage.log,
        storage.state_machine,
    )
    .await
    .map_err(|e| StartError::Raft(e.to_string()))?;
    let node = Node::new(
        config,
        raft,
        storage.reader,
        state,
        transport.channels,
        transport.link,
        storage.boot,
    );
    // The ticker first, as the simulation's seeds have always run them.
    let mut tasks = Vec::new();
    if !config.manual_clock {
        tasks.push(tokio::spawn(tick_expiring_leases(node.clone())));
        tasks.push(tokio::spawn(super::clock_probe::probe_clocks(node.clone())));
    }
    if let Some(path) = &config.clock_control {
        let follow = super::clock_control::follow(node.clone(), path.clone());
        tasks.push(tokio::spawn(follow));
    }
    tasks.push(tokio::spawn(watch_elections(node.clone(), penalty)));
    if let Some(admin) = &config.auth_admin {
        tasks.push(tokio::spawn(super::api::set_up(
            node.clone(),
            admin.clone(),
        )));
    }
    Ok(Running { node, tasks })
}

impl Running {
    pub fn node(&self) -> &Node {
        &self.node
    }

    /// Stops the background work and Raft, and lets a purge of the log still waiting for its
    /// snapshot end (see [`Node::shut_down`]).
    pub async fn stop(self) {
        for task in &self.tasks {
            task.abort();
        }
        self.node.shut_down().await;
    }
}
