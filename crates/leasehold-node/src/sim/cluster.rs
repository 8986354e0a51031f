//! The simulated cluster: each node the product's one assembly (`node::start`) on an
//! in-memory disk and the router, booted, crashed and powered off as a scenario says, and the
//! waits the scenarios share.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_check::Rng;
use openraft::BasicNode;
use tokio::time::Instant;

use super::disk::MemLog;
use super::peer_calls::SimLink;
use super::router::{Net, NodeNet, Router};
use crate::node::{start, Node, NodeConfig, PeerLink, Running, Storage, Transport};
use crate::raft::{BootLog, Channels, Raft, SharedState, SlowWork, StateMachineStore};

/// Node `id` of `count`, as `serve` would configure it (the addresses are the router's names).
fn node_config(id: u64, count: u64) -> NodeConfig {
    NodeConfig {
        id,
        listen: "127.0.0.1:0".parse().unwrap(),
        peer_listen: "127.0.0.1:0".parse().unwrap(),
        advertise: format!("client-{id}"),
        data_dir: std::path::PathBuf::new(),
        peers: (1..=count).map(|id| (id, format!("node-{id}"))).collect(),
        manual_clock: false,
        snapshot_every: 200,
        tls: None,
        client_cert_auth: false,
        auth_admin: None,
        max_requests: crate::limits::MAX_CONCURRENT_REQUESTS,
        max_watches: crate::limits::MAX_WATCHES,
        caps: crate::node::Caps::default(),
        // Short, so that the schedules forget leases too.
        lease_retention_ms: 2_000,
        metrics_listen: None,
        http_listen: None,
        clock_control: None,
        join: false,
    }
}

pub(super) struct SimNode {
    pub(super) log: MemLog,
    pub(super) dir: tempfile::TempDir,
    /// The running incarnation's applied state; replaced on every boot.
    pub(super) state: Mutex<Option<Arc<SharedState>>>,
    /// What the running incarnation found on its disk when it booted.
    pub(super) boot: Mutex<BootLog>,
    /// The running incarnation, as the product's one assembly started it.
    pub(super) running: Mutex<Option<Running>>,
}

pub(super) struct Sim {
    /// The Raft config every boot uses, unless a scenario boots a node with its own.
    pub(super) config: Arc<openraft::Config>,
    pub(super) router: Router,
    pub(super) nodes: BTreeMap<u64, SimNode>,
    pub(super) started: Instant,
}

pub(super) fn sim_config() -> Arc<openraft::Config> {
    let mut config = crate::raft::config(200);
    config.heartbeat_interval = 50;
    config.election_timeout_min = 150;
    config.election_timeout_max = 300;
    Arc::new(config.validate().unwrap())
}

impl Sim {
    pub(super) async fn start(count: u64, seed: u64) -> Sim {
        Sim::start_with(count, seed, sim_config()).await
    }

    /// [`Sim::start`], every node booting with `config`.
    pub(super) async fn start_with(count: u64, seed: u64, config: Arc<openraft::Config>) -> Sim {
        let router = Router::default();
        router.0.lock().unwrap().rng = Some(Rng(seed));
        let nodes = (1..=count)
            .map(|id| {
                let node = SimNode {
                    log: MemLog::of(id),
                    dir: tempfile::TempDir::new().unwrap(),
                    state: Mutex::new(None),
                    boot: Mutex::default(),
                    running: Mutex::default(),
                };
                (id, node)
            })
            .collect();
        let sim = Sim {
            config,
            router,
            nodes,
            started: Instant::now(),
        };
        for id in 1..=count {
            sim.boot(id).await;
        }
        let members: BTreeMap<u64, BasicNode> = (1..=count)
            .map(|id| {
                (
                    id,
                    BasicNode {
                        addr: format!("node-{id}"),
                    },
                )
            })
            .collect();
        sim.raft(1).unwrap().initialize(members).await.unwrap();
        sim
    }

    /// Starts node `id` on its log and snapshot dir, as a restarted process would.
    pub(super) async fn boot(&self, id: u64) {
        self.boot_with(id, self.config.clone()).await
    }

    /// [`Sim::boot`] with a Raft config of the test's choosing.
    pub(super) async fn boot_with(&self, id: u64, raft_config: Arc<openraft::Config>) {
        let node = &self.nodes[&id];
        // Snapshot files are read and written on this thread: the blocking pool would finish
        // them in real time, and the virtual clock would not replay.
        let sm = StateMachineStore::open_with(node.dir.path(), SlowWork::Inline).unwrap();
        *node.state.lock().unwrap() = Some(sm.shared());
        let last = node
            .log
            .lock()
            .live
            .entries
            .keys()
            .next_back()
            .copied()
            .unwrap_or(0);
        let vote_term = node.log.lock().live.vote.map_or(0, |v| v.leader_id.term);
        *node.boot.lock().unwrap() = BootLog {
            last_index: last,
            vote_term,
        };
        let boot = *node.boot.lock().unwrap();
        let storage = Storage {
            log: node.log.clone(),
            state_machine: sm,
            boot,
            reader: None,
        };
        let transport = Transport {
            network: |penalty| NodeNet {
                from: id,
                router: self.router.clone(),
                penalty,
            },
            link: Arc::new(SimLink {
                from: id,
                router: self.router.clone(),
            }) as Arc<dyn PeerLink>,
            channels: heard_everyone(id, self.nodes.len() as u64),
        };
        let config = node_config(id, self.nodes.len() as u64);
        let running = start(&config, raft_config, storage, transport)
            .await
            .unwrap();
        let product = running.node().clone();
        *node.running.lock().unwrap() = Some(running);
        self.router.0.lock().unwrap().nodes.insert(id, product);
    }

    pub(super) async fn crash(&self, id: u64) {
        self.router.0.lock().unwrap().nodes.remove(&id);
        let running = self.nodes[&id].running.lock().unwrap().take();
        if let Some(running) = running {
            running.stop().await;
        }
    }

    pub(super) fn raft(&self, id: u64) -> Option<Raft> {
        self.node(id).map(|node| node.raft().clone())
    }

    pub(super) fn node(&self, id: u64) -> Option<Node> {
        self.router.0.lock().unwrap().nodes.get(&id).cloned()
    }

    pub(super) fn state(&self, id: u64) -> Arc<SharedState> {
        self.nodes[&id]
            .state
            .lock()
            .unwrap()
            .clone()
            .expect("booted")
    }

    pub(super) fn up(&self) -> Vec<u64> {
        self.router
            .0
            .lock()
            .unwrap()
            .nodes
            .keys()
            .copied()
            .collect()
    }

    pub(super) fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    pub(super) fn net(&self) -> std::sync::MutexGuard<'_, Net> {
        self.router.0.lock().unwrap()
    }
}

/// Channels for node `id` of `count` that have heard every other node announce this build's
/// protocol and features, as the peer plane's first messages would tell it (the simulation's
/// router carries no metadata): every simulated node is this build.
fn heard_everyone(id: u64, count: u64) -> Channels {
    let channels = Channels::default();
    let mut metadata = tonic::metadata::MetadataMap::new();
    crate::raft::protocol::announce(&mut metadata);
    for other in (1..=count).filter(|other| *other != id) {
        channels.protocols().heard(other, &metadata);
    }
    channels
}

// ---------------------------------------------------------------------------------------------

/// Waits until `id` leads, up to `limit` of virtual time.
pub(super) async fn until_leader(sim: &Sim, id: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(raft) = sim.raft(id) {
            let (leader, state) = {
                let m = raft.metrics();
                let m = m.borrow();
                (m.current_leader, m.state)
            };
            if leader == Some(id) && state == openraft::ServerState::Leader {
                return true;
            }
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Who leads now, as the first live node that names a leader says.
pub(super) async fn any_leader(sim: &Sim, limit: Duration) -> Option<u64> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        for id in sim.up() {
            if until_leader(sim, id, Duration::ZERO).await {
                return Some(id);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}

pub(super) fn last_log_index(sim: &Sim, id: u64) -> u64 {
    let inner = sim.nodes[&id].log.lock();
    inner.live.entries.keys().next_back().copied().unwrap_or(0)
}

/// A runtime on one thread and tokio's paused clock, for one hand-built scenario.
pub(super) fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}
