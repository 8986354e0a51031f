//! The fault suite's deterministic layer: the nodes of one cluster in one process, on tokio's
//! paused clock, talking through a router that the test controls: seeded partitions, delays,
//! dropped messages, crashes and power losses. Time only moves when every task waits, so a
//! schedule of many virtual seconds runs in a fraction of a real one, and hundreds of seeds run
//! in CI.
//!
//! Each node is the product's `node::Node` (its leader clock stamping every write, the proposer,
//! the forwarder, the read path with its boot wait, and the expiry ticker) around openraft with
//! Leasehold's state machine. Only the transports are the test's: Raft messages and forwarded
//! write batches go through the router (a `RaftNetwork` and a `PeerLink`), and the log is kept
//! in memory (the segment-file store has its own crash tests and the real-process suite),
//! surviving a crash as a disk would. Clients record a history that the checkers judge against
//! the log, in real (here, virtual) time as well as store time; one of them checks that store
//! time never gains on the clients' clock. Besides single faults, the nemesis composes them: a
//! node cut off across the others' power loss, and a leader killed while a member's log is
//! stalled (as during a snapshot install).
//!
//! `LEASEHOLD_SIM_SEEDS=N` runs N seeds (default 200); `LEASEHOLD_SIM_SEED=S` runs only seed S.
//! A failing seed is printed, and replays: everything random follows the seed (the router's
//! choices, openraft's election timeouts through `raft::runtime`, tokio's own `select!` order
//! through its seeded runtime), and every task runs on one thread on the virtual clock,
//! snapshot files included. Add a seed to `REGRESSION_SEEDS` once its bug is fixed.

// A failing seed is a reproduction only if it replays, and it replays only on a runtime whose
// own draws are seeded (`Builder::rng_seed`, behind `tokio_unstable`). `.cargo/config.toml` sets
// the cfg; an explicit RUSTFLAGS replaces that setting, and then the simulation refuses to build
// rather than run unseeded.
#[cfg(not(tokio_unstable))]
compile_error!(
    "the simulation needs `--cfg tokio_unstable` (set in .cargo/config.toml; add it to an \
     explicit RUSTFLAGS)"
);

mod harness;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use harness::Rng;
use leasehold::lease::{Batch, Command, Fence, Op, Outcome, RequestId};
use leasehold::node::{
    start, Carried, ForwardAnswer, Forwarded, Node, NodeConfig, NodeError, PeerLink, Running,
    Storage, Transport, INDETERMINATE_KEY, QUORUM_SILENCE,
};
use leasehold::raft::Channels;
use leasehold::raft::{
    Applied, BootLog, Raft, SharedState, SlowWork, StateMachineStore, TypeConfig, VotePenalty,
};
use leasehold_check::{self as check, Answer, Completion, Log, Operation, Request};
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{BasicNode, Entry, EntryPayload, LogId, RaftLogReader, StorageError, Vote};
use std::future::Future;
use std::pin::Pin;
use tokio::time::Instant;

/// Seeds that once failed; they run first, every time. 4: a leader restarted within its lease
/// served a read behind its acknowledged writes while the committed index was not fsynced.
/// 107: a node that installed a snapshot had archived a never-committed entry (the harness's
/// log assembly, now by highest term).
const REGRESSION_SEEDS: &[u64] = &[4, 107];
/// Virtual time per schedule.
const SCHEDULE: Duration = Duration::from_secs(8);

// ---------------------------------------------------------------------------------------------
// A log store in memory that outlives its node, as a disk does.

/// What one node's disk holds.
#[derive(Clone, Default)]
struct Disk {
    vote: Option<Vote<u64>>,
    committed: Option<LogId<u64>>,
    purged: Option<LogId<u64>>,
    entries: BTreeMap<u64, Entry<TypeConfig>>,
}

/// Set to true, as a temporary patch, to check that the suite catches a log store that tells
/// openraft an append is saved before it is synced: power loss then loses acknowledged writes.
const SKIP_FSYNC: bool = false;

#[derive(Default)]
struct MemLogInner {
    /// What the node reads and writes.
    live: Disk,
    /// What survives a power loss: `live` as of the last sync.
    synced: Disk,
    /// Purged entries, kept for the checkers only (they read the log from index 1); Raft never
    /// sees them again. Purged entries are applied, so they are the cluster's for good.
    archive: BTreeMap<u64, Entry<TypeConfig>>,
}

impl MemLogInner {
    fn sync(&mut self) {
        self.synced = self.live.clone();
    }
}

#[derive(Clone, Default)]
struct MemLog(Arc<Mutex<MemLogInner>>);

impl MemLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, MemLogInner> {
        self.0.lock().unwrap()
    }

    /// Power loss: whatever was not synced is gone.
    fn lose_power(&self) {
        let mut inner = self.lock();
        inner.live = inner.synced.clone();
    }

    /// Every entry this node holds or purged, from index 1 to `upto` (openraft's own first
    /// entry, at 0, carries no command), with its term.
    fn entries(&self, upto: u64) -> Vec<(u64, u64, Vec<Command>)> {
        let inner = self.lock();
        inner
            .archive
            .range(1..=upto)
            .chain(inner.live.entries.range(1..=upto))
            .map(|(index, entry)| {
                let commands = match &entry.payload {
                    EntryPayload::Normal(Batch(commands)) => commands.clone(),
                    _ => Vec::new(),
                };
                (*index, entry.log_id.leader_id.term, commands)
            })
            .collect()
    }
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .lock()
            .live
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let disk = &self.lock().live;
        let last = disk
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(disk.purged);
        Ok(LogState {
            last_purged_log_id: disk.purged,
            last_log_id: last,
        })
    }
    async fn get_log_reader(&mut self) -> MemLog {
        self.clone()
    }
    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.vote = Some(*vote);
        inner.sync();
        Ok(())
    }
    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().live.vote)
    }
    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        // Not synced, as in the real store: reads wait for the log found at start-up instead.
        self.lock().live.committed = committed;
        Ok(())
    }
    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().live.committed)
    }
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        {
            let mut inner = self.lock();
            for entry in entries {
                inner.live.entries.insert(entry.log_id.index, entry);
            }
            if !SKIP_FSYNC {
                inner.sync();
            }
        }
        // Saved: synced above, before openraft hears of it.
        callback.log_io_completed(Ok(()));
        Ok(())
    }
    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.entries.split_off(&log_id.index);
        inner.sync();
        Ok(())
    }
    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.purged = Some(log_id);
        let kept = inner.live.entries.split_off(&(log_id.index + 1));
        let purged = std::mem::replace(&mut inner.live.entries, kept);
        inner.archive.extend(purged);
        inner.sync();
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The router: the network the test controls.

#[derive(Default)]
struct Net {
    /// The product's node around each running Raft: its clock, proposer, forwarder and reads.
    nodes: BTreeMap<u64, Node>,
    /// Directed links that drop everything.
    cut: BTreeSet<(u64, u64)>,
    /// Directed links on which the log does not move: AppendEntries and InstallSnapshot are
    /// dropped, votes and peer calls pass. A member being caught up looks so to its leader
    /// while a snapshot streams to it, or while probes look for where its log matches.
    stalled: BTreeSet<(u64, u64)>,
    /// Time added to every message on a directed link.
    slow: BTreeMap<(u64, u64), Duration>,
    /// Percent of messages dropped on every link.
    loss_pct: u64,
    /// Every message takes the same time, as on one machine's loopback; otherwise each takes a
    /// random 0 to 14 ms, which by itself pulls apart nodes that act at the same instant.
    uniform_latency: bool,
    rng: Option<Rng>,
}

impl Net {
    /// Cuts node `id` off from the other nodes of `1..=count`, both ways.
    fn isolate(&mut self, id: u64, count: u64) {
        for other in (1..=count).filter(|other| *other != id) {
            self.cut.insert((id, other));
            self.cut.insert((other, id));
        }
    }
}

/// A message's travel time when every link takes the same.
const UNIFORM_LATENCY: Duration = Duration::from_millis(1);

#[derive(Clone, Default)]
struct Router(Arc<Mutex<Net>>);

impl Router {
    /// The target's node and a delay for this message, or why it does not arrive.
    fn route(&self, from: u64, to: u64) -> Result<(Node, Duration), Unreachable> {
        let mut net = self.0.lock().unwrap();
        let lost = |why: &str| Unreachable::new(&std::io::Error::other(why.to_owned()));
        if net.cut.contains(&(from, to)) {
            return Err(lost("partitioned"));
        }
        let loss = net.loss_pct;
        let uniform = net.uniform_latency;
        let rng = net.rng.as_mut().expect("seeded");
        if rng.below(100) < loss {
            return Err(lost("dropped"));
        }
        let delay = if uniform {
            UNIFORM_LATENCY
        } else {
            Duration::from_millis(rng.below(15))
        } + net.slow.get(&(from, to)).copied().unwrap_or_default();
        let node = net
            .nodes
            .get(&to)
            .cloned()
            .ok_or_else(|| lost("node down"))?;
        Ok((node, delay))
    }

    fn reply_lost(&self, from: u64, to: u64) -> bool {
        self.0.lock().unwrap().cut.contains(&(to, from))
    }

    /// Runs `call` on node `to` as a message from `from` reaches it: dropped or delayed on the
    /// way there, its reply lost if the way back is cut.
    async fn deliver<T>(
        &self,
        from: u64,
        to: u64,
        call: impl AsyncFnOnce(Node) -> T,
    ) -> Result<T, Undelivered> {
        let (node, delay) = self.route(from, to).map_err(Undelivered::Dropped)?;
        tokio::time::sleep(delay).await;
        let reply = call(node).await;
        if self.reply_lost(from, to) {
            return Err(Undelivered::ReplyLost);
        }
        Ok(reply)
    }
}

/// Why a call through the router has no answer.
enum Undelivered {
    /// Dropped on the way there: the target never saw it.
    Dropped(Unreachable),
    /// Lost on the way back: the target may have acted on it.
    ReplyLost,
}

impl std::fmt::Display for Undelivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Undelivered::Dropped(e) => write!(f, "{e}"),
            Undelivered::ReplyLost => f.write_str("reply partitioned"),
        }
    }
}

struct NodeNet {
    from: u64,
    router: Router,
    penalty: Arc<VotePenalty>,
}

impl RaftNetworkFactory<TypeConfig> for NodeNet {
    type Network = Link;
    async fn new_client(&mut self, target: u64, _node: &BasicNode) -> Link {
        Link {
            from: self.from,
            to: target,
            router: self.router.clone(),
            penalty: self.penalty.clone(),
        }
    }
}

struct Link {
    from: u64,
    to: u64,
    router: Router,
    penalty: Arc<VotePenalty>,
}

impl Link {
    /// Whether the log does not move on this link now (see `Net::stalled`).
    fn stalled(&self) -> Result<(), Unreachable> {
        match self
            .router
            .0
            .lock()
            .unwrap()
            .stalled
            .contains(&(self.from, self.to))
        {
            true => Err(Unreachable::new(&std::io::Error::other("stalled"))),
            false => Ok(()),
        }
    }

    async fn send<Resp, E: std::error::Error>(
        &self,
        call: impl AsyncFnOnce(Node) -> Result<Resp, RaftError<u64, E>>,
    ) -> Result<Resp, RPCError<u64, BasicNode, RaftError<u64, E>>> {
        match self.router.deliver(self.from, self.to, call).await {
            Ok(reply) => reply.map_err(|e| RPCError::RemoteError(RemoteError::new(self.to, e))),
            Err(Undelivered::Dropped(e)) => Err(e.into()),
            Err(lost) => Err(Unreachable::new(&std::io::Error::other(lost.to_string())).into()),
        }
    }
}

impl RaftNetwork<TypeConfig> for Link {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _: RPCOption,
    ) -> Result<AppendEntriesResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.stalled()?;
        self.send(async |node| node.raft().append_entries(rpc).await)
            .await
    }
    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<u64>,
        RPCError<u64, BasicNode, RaftError<u64, InstallSnapshotError>>,
    > {
        self.stalled()?;
        self.send(async |node| node.raft().install_snapshot(rpc).await)
            .await
    }
    async fn vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        // The answer passes the sender's vote penalty, as in the product's network.
        let mut answer = self
            .send(async |node| node.raft().vote(rpc.clone()).await)
            .await?;
        self.penalty.answered(&rpc, &mut answer);
        Ok(answer)
    }
}

// ---------------------------------------------------------------------------------------------
// Peer calls: a follower's batch of writes reaches the leader's node through the router, as the
// internal Propose call does between processes, and so does a new leader's CarriedTime.

struct SimLink {
    from: u64,
    router: Router,
}

impl PeerLink for SimLink {
    fn propose(
        &self,
        leader: u64,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<ForwardAnswer>> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let count = writes.len();
            let error = match router
                .deliver(from, leader, async |node| node.write_many(writes).await)
                .await
            {
                Ok(answers) => {
                    return answers
                        .into_iter()
                        .map(|answer| answer.map_err(tonic::Status::from))
                        .collect()
                }
                // Certainly not applied.
                Err(Undelivered::Dropped(e)) => NodeError::LeaderUnreachable {
                    leader,
                    addr,
                    reason: e.to_string(),
                },
                // They may have applied.
                Err(lost) => NodeError::ForwardLost {
                    leader,
                    addr,
                    reason: lost.to_string(),
                },
            };
            vec![Err(tonic::Status::from(error)); count]
        })
    }

    fn carried_time(
        &self,
        peer: u64,
        _addr: String,
        oldest: Option<LogId<u64>>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Carried, String>> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let asked = router.deliver(from, peer, async |node| {
                node.carried_time_from(oldest).await
            });
            match tokio::time::timeout(timeout, asked).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err("timed out".into()),
            }
        })
    }
}

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
        max_requests: leasehold::node::MAX_CONCURRENT_REQUESTS,
        // Short, so that the schedules forget leases too.
        lease_retention_ms: 2_000,
        metrics_listen: None,
        join: false,
    }
}

// ---------------------------------------------------------------------------------------------
// The simulated cluster.

struct SimNode {
    log: MemLog,
    dir: tempfile::TempDir,
    /// The running incarnation's applied state; replaced on every boot.
    state: Mutex<Option<Arc<SharedState>>>,
    /// What the running incarnation found on its disk when it booted.
    boot: Mutex<BootLog>,
    /// The running incarnation, as the product's one assembly started it.
    running: Mutex<Option<Running>>,
}

struct Sim {
    /// The Raft config every boot uses, unless a scenario boots a node with its own.
    config: Arc<openraft::Config>,
    router: Router,
    nodes: BTreeMap<u64, SimNode>,
    started: Instant,
}

fn sim_config() -> Arc<openraft::Config> {
    let mut config = leasehold::raft::config(200);
    config.heartbeat_interval = 50;
    config.election_timeout_min = 150;
    config.election_timeout_max = 300;
    Arc::new(config.validate().unwrap())
}

impl Sim {
    async fn start(count: u64, seed: u64) -> Sim {
        Sim::start_with(count, seed, sim_config()).await
    }

    /// [`Sim::start`], every node booting with `config`.
    async fn start_with(count: u64, seed: u64, config: Arc<openraft::Config>) -> Sim {
        let router = Router::default();
        router.0.lock().unwrap().rng = Some(Rng(seed));
        let nodes = (1..=count)
            .map(|id| {
                let node = SimNode {
                    log: MemLog::default(),
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
    async fn boot(&self, id: u64) {
        self.boot_with(id, self.config.clone()).await
    }

    /// [`Sim::boot`] with a Raft config of the test's choosing.
    async fn boot_with(&self, id: u64, raft_config: Arc<openraft::Config>) {
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
            channels: Channels::default(),
        };
        let config = node_config(id, self.nodes.len() as u64);
        let running = start(&config, raft_config, storage, transport)
            .await
            .unwrap();
        let product = running.node().clone();
        *node.running.lock().unwrap() = Some(running);
        self.router.0.lock().unwrap().nodes.insert(id, product);
    }

    async fn crash(&self, id: u64) {
        self.router.0.lock().unwrap().nodes.remove(&id);
        let running = self.nodes[&id].running.lock().unwrap().take();
        if let Some(running) = running {
            running.stop().await;
        }
    }

    fn raft(&self, id: u64) -> Option<Raft> {
        self.node(id).map(|node| node.raft().clone())
    }

    fn node(&self, id: u64) -> Option<Node> {
        self.router.0.lock().unwrap().nodes.get(&id).cloned()
    }

    fn state(&self, id: u64) -> Arc<SharedState> {
        self.nodes[&id]
            .state
            .lock()
            .unwrap()
            .clone()
            .expect("booted")
    }

    fn up(&self) -> Vec<u64> {
        self.router
            .0
            .lock()
            .unwrap()
            .nodes
            .keys()
            .copied()
            .collect()
    }

    fn now_ns(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    fn net(&self) -> std::sync::MutexGuard<'_, Net> {
        self.router.0.lock().unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Clients.

type History = Arc<Mutex<Vec<Operation>>>;

/// What a client sees of a node's answer: an outcome, a refusal of bad input (it did not
/// happen), or anything else (it may have happened).
fn completion(answer: Result<Applied, tonic::Status>) -> Completion {
    match answer {
        Ok(Applied {
            log_index,
            position,
            store_time_ms,
            outcome,
        }) => Completion::Ok {
            log_index,
            position,
            store_time_ms,
            answer: Answer::Outcome(outcome),
        },
        Err(status)
            if matches!(
                status.code(),
                tonic::Code::InvalidArgument | tonic::Code::FailedPrecondition
            ) =>
        {
            Completion::Failed(status.message().to_owned())
        }
        Err(status) => Completion::Indeterminate(status.message().to_owned()),
    }
}

/// Sends `op` to `node` as a client of the product does: the node stamps it with its leader
/// clock and proposes it, or forwards it to the leader in a batch. Waits at most until
/// `deadline`.
async fn write(
    sim: &Sim,
    node: u64,
    op: Op,
    request: Option<RequestId>,
    deadline: Instant,
) -> Completion {
    let Some(node) = sim.node(node) else {
        return Completion::Indeterminate("node down".into());
    };
    match tokio::time::timeout_at(deadline, node.write_or_forward(op, request)).await {
        Err(_) => Completion::Indeterminate("timed out".into()),
        Ok(answer) => completion(answer),
    }
}

/// A linearizable read through the product's read path on `node`, or on the leader it names.
async fn read(sim: &Sim, node: u64, request: &Request) -> Completion {
    let mut asked = node;
    for _ in 0..2 {
        let Some(node) = sim.node(asked) else {
            return Completion::Indeterminate("node down".into());
        };
        let answer = node.read(|state| {
            let answer = check::read_answer(&state.table, request).expect("a read, not a write");
            (answer, state.last_applied.map_or(0, |id| id.index))
        });
        match tokio::time::timeout(Duration::from_secs(1), answer).await {
            Ok(Ok(((answer, _), at))) => {
                return Completion::Ok {
                    log_index: at.log_index,
                    position: 0,
                    store_time_ms: at.store_time_ms,
                    answer,
                }
            }
            Ok(Err(leasehold::node::NodeError::NotLeader {
                leader: Some((leader, _)),
                ..
            })) => asked = leader,
            Ok(Err(e)) => return Completion::Indeterminate(e.to_string()),
            Err(_) => return Completion::Indeterminate("timed out".into()),
        }
    }
    Completion::Indeterminate("leadership moved".into())
}

async fn client(id: u32, sim: Arc<Sim>, history: History, seed: u64, until: Instant) {
    let mut rng = Rng(seed);
    let holder = format!("c{id}");
    let mut tokens: BTreeMap<&str, u64> = BTreeMap::new();
    let mut sequence = 0;
    // A session first, through the log, as the client library opens one.
    let session = loop {
        if Instant::now() >= until {
            return;
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let node = match sim.up().first() {
            Some(node) => *node,
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Completion::Ok {
            answer: Answer::Outcome(Outcome::Registered { client }),
            ..
        } = write(&sim, node, Op::Register, None, deadline).await
        {
            break client;
        }
    };
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.between(1, 30))).await;
        let lease = ["L0", "L1"][rng.below(2) as usize];
        let up = sim.up();
        if up.is_empty() {
            continue;
        }
        let node = up[rng.below(up.len() as u64) as usize];
        sequence += 1;
        let value = format!("{holder}-{sequence}").into_bytes();
        let op = match rng.below(10) {
            0..=2 => Op::Acquire {
                lease: lease.into(),
                holder: holder.clone(),
                ttl_ms: rng.between(100, 1_000),
            },
            3 => match tokens.get(lease) {
                Some(token) => Op::Release {
                    lease: lease.into(),
                    holder: holder.clone(),
                    token: *token,
                },
                None => continue,
            },
            4..=5 => match tokens.get(lease) {
                Some(token) => Op::Put {
                    key: format!("f{}", &lease[1..]),
                    value,
                    fence: Some(Fence {
                        lease: lease.into(),
                        token: *token,
                    }),
                },
                None => continue,
            },
            6 if rng.below(3) == 0 => Op::Delete {
                key: "p".into(),
                fence: None,
            },
            6 => Op::Put {
                key: "p".into(),
                value,
                fence: None,
            },
            read_choice => {
                let request = if read_choice <= 8 {
                    Request::Get {
                        key: ["f0", "f1", "p"][rng.below(3) as usize].into(),
                    }
                } else {
                    Request::GetLease {
                        lease: lease.into(),
                    }
                };
                let invoked = sim.now_ns();
                let completion = read(&sim, node, &request).await;
                let completed = sim.now_ns();
                history.lock().unwrap().push(Operation {
                    client: id,
                    request,
                    invoked_ns: invoked,
                    completed_ns: completed,
                    completion,
                });
                continue;
            }
        };
        let invoked = sim.now_ns();
        let request = Some(RequestId {
            client: session,
            sequence,
        });
        let deadline = Instant::now() + Duration::from_secs(2);
        let completion = write(&sim, node, op.clone(), request, deadline).await;
        if let Completion::Ok {
            answer: Answer::Outcome(outcome),
            ..
        } = &completion
        {
            match (outcome, &op) {
                (Outcome::Granted { token, .. }, _) => {
                    tokens.insert(lease, *token);
                }
                (Outcome::Released { .. } | Outcome::StaleToken { .. }, _) => {
                    tokens.remove(lease);
                }
                _ => {}
            }
        }
        let completed = sim.now_ns();
        history.lock().unwrap().push(Operation {
            client: id,
            request: Request::Write(op),
            invoked_ns: invoked,
            completed_ns: completed,
            completion,
        });
    }
}

// ---------------------------------------------------------------------------------------------
// One schedule.

/// What one schedule found and did.
struct Run {
    anomalies: Vec<check::Anomaly>,
    acknowledged: usize,
    /// Commands in the committed log that shared their entry with another.
    batched: usize,
    /// Everything the clients did and saw, for replays to compare.
    history: Vec<Operation>,
}

/// Runs one seeded schedule.
async fn schedule(seed: u64) -> Run {
    // openraft's own draws (election timeouts) follow the seed too: the whole cluster runs on
    // this one thread.
    leasehold::raft::runtime::seed_this_thread(seed);
    let mut rng = Rng(seed);
    let sim = Arc::new(Sim::start(3, rng.next()).await);
    let history: History = Arc::default();
    let until = Instant::now() + SCHEDULE;
    let clients: Vec<_> = (0..4)
        .map(|id| tokio::spawn(client(id, sim.clone(), history.clone(), rng.next(), until)))
        .collect();

    // The nemesis: crashes with restarts, isolations, one-way loss, random loss, heals.
    let mut down: Vec<(u64, Instant)> = Vec::new();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.between(50, 400))).await;
        let now = Instant::now();
        for (id, _) in down.iter().filter(|(_, back_at)| *back_at <= now) {
            sim.boot(*id).await;
        }
        down.retain(|(_, back_at)| *back_at > now);
        match rng.below(9) {
            6 => {
                // Power loss: every node at once, unsynced writes gone.
                for id in 1..=3 {
                    sim.crash(id).await;
                    sim.nodes[&id].log.lose_power();
                }
                for id in 1..=3 {
                    if !down.iter().any(|(d, _)| *d == id) {
                        sim.boot(id).await;
                    }
                }
            }
            0 => {
                let id = rng.between(1, 4);
                if !down.iter().any(|(d, _)| *d == id) {
                    sim.crash(id).await;
                    down.push((id, now + Duration::from_millis(rng.between(100, 1_500))));
                }
            }
            1 => sim.net().isolate(rng.between(1, 4), 3),
            7 => {
                // Composite: a node cut off across the others' power loss, so that it still
                // carries the lead store time had before the restart under-counted it.
                let cut_off = rng.between(1, 4);
                sim.net().isolate(cut_off, 3);
                for id in (1..=3).filter(|id| *id != cut_off) {
                    if !down.iter().any(|(d, _)| *d == id) {
                        sim.crash(id).await;
                        sim.nodes[&id].log.lose_power();
                        down.push((id, now + Duration::from_millis(rng.between(300, 1_500))));
                    }
                }
            }
            8 => {
                // Composite: the leader dies while a member's log does not move (a snapshot
                // streams to it, or probes look for where it matches); the member still
                // answers the next leader's question for its carried time.
                let behind = rng.between(1, 4);
                {
                    let mut net = sim.net();
                    for other in (1..=3).filter(|other| *other != behind) {
                        net.stalled.insert((other, behind));
                    }
                }
                let leader = sim.up().into_iter().find(|id| {
                    sim.raft(*id).is_some_and(|raft| {
                        raft.metrics().borrow().state == openraft::ServerState::Leader
                    })
                });
                if let Some(leader) = leader.filter(|leader| *leader != behind) {
                    sim.crash(leader).await;
                    down.push((leader, now + Duration::from_millis(rng.between(100, 1_500))));
                }
            }
            2 => {
                let (from, to) = (rng.between(1, 4), rng.between(1, 4));
                if from != to {
                    sim.net().cut.insert((from, to));
                }
            }
            3 => sim.net().loss_pct = rng.below(30),
            _ => {
                let mut net = sim.net();
                net.cut.clear();
                net.stalled.clear();
                net.loss_pct = 0;
            }
        }
    }
    for client in clients {
        client.await.unwrap();
    }

    // Heal everything, restart everyone, and let the cluster settle.
    {
        let mut net = sim.net();
        net.cut.clear();
        net.stalled.clear();
        net.loss_pct = 0;
    }
    // The final restart is a power loss too.
    for id in 1..=3 {
        sim.crash(id).await;
        sim.nodes[&id].log.lose_power();
    }
    for id in 1..=3 {
        sim.boot(id).await;
    }
    // A final write commits everything before it; every replica must reach it.
    let settle = Op::Put {
        key: "settle".into(),
        value: Vec::new(),
        fence: None,
    };
    let mut settled = None;
    // Every attempt is a client's send: one that failed may still have applied.
    let mut attempts = 0;
    for _ in 0..20 {
        let deadline = Instant::now() + Duration::from_secs(2);
        attempts += 1;
        if let Completion::Ok { log_index, .. } =
            write(&sim, 1, settle.clone(), None, deadline).await
        {
            settled = Some(log_index);
            break;
        }
    }
    let Some(settled) = settled else {
        return Run {
            anomalies: vec![check::Anomaly::new(
                "liveness",
                "no write applied after healing",
            )],
            acknowledged: 0,
            batched: 0,
            history: history.lock().unwrap().clone(),
        };
    };
    let mut history = history.lock().unwrap().clone();
    for _ in 0..attempts {
        history.push(Operation {
            client: 99,
            request: Request::Write(settle.clone()),
            invoked_ns: sim.now_ns(),
            completed_ns: sim.now_ns(),
            completion: Completion::Indeterminate(
                "the settling write, sent until it applied".into(),
            ),
        });
    }
    let mut digests = BTreeSet::new();
    for _ in 0..200 {
        digests = (1..=3)
            .map(|id| {
                let state = sim.state(id);
                let state = state.read();
                (
                    state.last_applied.map_or(0, |id| id.index),
                    state.table.digest(),
                )
            })
            .collect();
        if digests.len() == 1 && digests.iter().all(|(index, _)| *index >= settled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (log, mut anomalies) = cluster_log(&sim, settled);
    anomalies.extend(check::check_all(&history, &log));
    if digests.len() != 1 {
        anomalies.push(check::Anomaly::new(
            "convergence",
            format!("replicas differ: {digests:?}"),
        ));
    }
    let acknowledged = history
        .iter()
        .filter(|op| matches!(op.completion, Completion::Ok { .. }))
        .count();
    let batched = log
        .iter()
        .map(|(_, commands)| commands.len())
        .filter(|&n| n > 1)
        .sum();
    Run {
        anomalies,
        acknowledged,
        batched,
        history,
    }
}

/// The committed log up to `upto`, pieced together from every node: one that installed a
/// snapshot lacks the entries before it, and may have purged (so archived) an entry that was
/// never committed. At each index the committed entry is the one of the highest term: a leader
/// of a later term holds the committed entry and never overwrites it. Two entries of the same
/// index and term must be the same (Raft's log matching); the anomalies say where not.
fn cluster_log(sim: &Sim, upto: u64) -> (Log, Vec<check::Anomaly>) {
    let mut merged: BTreeMap<u64, (u64, Vec<Command>)> = BTreeMap::new();
    let mut anomalies = Vec::new();
    for (id, node) in &sim.nodes {
        for (index, term, commands) in node.log.entries(upto) {
            match merged.get(&index) {
                Some((known_term, known)) if *known_term == term && *known != commands => {
                    anomalies.push(check::Anomaly::new(
                        "convergence",
                        format!("node {id} holds {commands:?} at index {index} of term {term}, another node {known:?}"),
                    ))
                }
                Some((known_term, _)) if *known_term >= term => {}
                _ => {
                    merged.insert(index, (term, commands));
                }
            }
        }
    }
    let log = merged
        .into_iter()
        .map(|(index, (_, commands))| (index, commands))
        .collect();
    (log, anomalies)
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("LEASEHOLD_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("LEASEHOLD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    REGRESSION_SEEDS.iter().copied().chain(1..=count).collect()
}

#[test]
fn seeded_schedules_of_crashes_partitions_and_loss_keep_every_invariant() {
    let started = std::time::Instant::now();
    let (mut acknowledged, mut batched) = (0, 0);
    let seeds = seeds();
    for &seed in &seeds {
        let run = run_schedule(seed);
        assert!(
            run.anomalies.is_empty(),
            "seed {seed}: {:#?}",
            run.anomalies
        );
        assert!(
            run.acknowledged >= 20,
            "seed {seed} exercised nothing: {} operations acknowledged",
            run.acknowledged
        );
        acknowledged += run.acknowledged;
        batched += run.batched;
    }
    println!(
        "{} schedules of {} virtual seconds, {acknowledged} operations acknowledged \
         ({batched} commands logged in shared entries), in {:?}",
        seeds.len(),
        SCHEDULE.as_secs(),
        started.elapsed()
    );
    // The proposer's gathering must be exercised, not just present.
    assert!(batched > 0, "no two commands ever shared a log entry");
}

// ---------------------------------------------------------------------------------------------
// Scenarios: one fault sequence each, built by hand, on the same simulated cluster.

/// Waits until `id` leads, up to `limit` of virtual time.
async fn until_leader(sim: &Sim, id: u64, limit: Duration) -> bool {
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
async fn any_leader(sim: &Sim, limit: Duration) -> Option<u64> {
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

fn last_log_index(sim: &Sim, id: u64) -> u64 {
    let inner = sim.nodes[&id].log.lock();
    inner.live.entries.keys().next_back().copied().unwrap_or(0)
}

fn plain_put(key: &str) -> Command {
    Command {
        at_ms: Some(0),
        request: None,
        op: Op::Put {
            key: key.into(),
            value: b"v".to_vec(),
            fence: None,
        },
    }
}

/// Review finding 1: a leader's uncommitted tail, lost while it was down, must not make the
/// node wait forever for it once it leads again in a later term. A leads and appends entries
/// nobody else gets; it dies; B leads and appends only its blank entry; A restarts, follows and
/// loses its tail; B dies; A leads with a blank entry below the index it found at boot. Its
/// reads must still be served.
async fn restarted_leader_with_a_lost_tail(seed: u64) {
    let sim = Sim::start(3, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(matches!(
        write(&sim, a, plain_put("before").op, None, deadline).await,
        Completion::Ok { .. }
    ));
    // Cut A off, and let it append entries of its own that reach nobody.
    {
        let mut net = sim.net();
        for other in (1..=3).filter(|other| *other != a) {
            net.cut.insert((a, other));
            net.cut.insert((other, a));
        }
    }
    let before_tail = last_log_index(&sim, a);
    let raft_a = sim.raft(a).unwrap();
    for i in 0..6 {
        let raft = raft_a.clone();
        tokio::spawn(async move {
            let _ = raft
                .client_write(Batch(vec![plain_put(&format!("lost{i}"))]))
                .await;
        });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(&sim, a) < before_tail + 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tail_end = last_log_index(&sim, a);
    assert!(
        tail_end >= before_tail + 3,
        "A appended its tail: {before_tail}..{tail_end}"
    );
    sim.crash(a).await;
    sim.net().cut.clear();

    // B leads without A's tail; A comes back, follows and drops its tail.
    let b = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a leader among the other two");
    sim.boot(a).await;
    let booted_at = sim.nodes[&a].boot.lock().unwrap().last_index;
    assert_eq!(booted_at, tail_end, "A booted with its uncommitted tail");
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(&sim, a) != last_log_index(&sim, b) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        last_log_index(&sim, a) < tail_end,
        "A's tail was truncated: {} < {tail_end}",
        last_log_index(&sim, a)
    );

    // The third node only votes from now on, so that A is the one to lead next.
    let c = 6 - a - b;
    sim.crash(c).await;
    let mut passive = (*sim_config()).clone();
    passive.enable_elect = false;
    sim.boot_with(c, Arc::new(passive)).await;
    // B dies; A campaigns at once and wins with the third node's vote.
    sim.crash(b).await;
    sim.raft(a).unwrap().trigger().elect().await.unwrap();
    if !until_leader(&sim, a, Duration::from_secs(5)).await {
        let m = sim.raft(a).unwrap().metrics().borrow().clone();
        panic!("seed {seed}: A={a} B={b} does not lead again: {m:?}");
    }
    assert!(
        last_log_index(&sim, a) < tail_end,
        "A leads with its log below the index it found at boot"
    );
    let state = sim.state(a);
    let completion = read(
        &sim,
        a,
        &Request::Get {
            key: "before".into(),
        },
    )
    .await;
    assert!(
        matches!(completion, Completion::Ok { .. }),
        "A, leading in a later term, must serve reads: {completion:?}"
    );
    assert!(state.read().table.row("before").is_some());
}

/// Runs schedule `seed` on a fresh paused runtime.
fn run_schedule(seed: u64) -> Run {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // tokio's own draws (which `select!` branch is polled first, inside openraft) follow the
    // seed too; `tokio_unstable` comes from .cargo/config.toml.
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().unwrap();
    runtime.block_on(schedule(seed))
}

/// A failing seed is a reproduction only if it replays: the same seed, run again, must give
/// the same history, operation by operation, to the virtual nanosecond.
#[test]
fn a_seed_replays_the_same_history() {
    for seed in [1, 4, 107] {
        let first = run_schedule(seed);
        let again = run_schedule(seed);
        assert!(first.history.len() > 20, "seed {seed} did too little");
        let diverged = first
            .history
            .iter()
            .zip(&again.history)
            .position(|(a, b)| a != b);
        assert!(
            diverged.is_none() && first.history.len() == again.history.len(),
            "seed {seed} replayed differently from operation {diverged:?} of {} (then {}): {:?} \
             then {:?}",
            first.history.len(),
            again.history.len(),
            diverged.map(|i| &first.history[i]),
            diverged.map(|i| &again.history[i]),
        );
    }
}

/// A runtime on one thread and tokio's paused clock, for one hand-built scenario.
fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn a_restarted_leader_whose_tail_was_truncated_still_serves_reads() {
    for seed in 1..=10 {
        paused_runtime().block_on(restarted_leader_with_a_lost_tail(seed));
    }
}

/// After a leader dies, its two survivors must elect one of them, every time, within a few
/// election timeouts. openraft 0.9 draws a node's election timeout once per process and checks
/// it on a fixed tick, so two survivors can campaign in the same instant, again and again (a
/// known livelock of openraft's single-term-leader mode). Leasehold uses its default mode, where
/// a leader id is the term and the node id, so a candidate grants a same-term candidate with a
/// higher id and a tie ends at once. Here every node draws the same timeout and every message
/// takes the same time, the worst case for ties, and three leaders in a row die.
async fn survivors_of_a_dead_leader_elect(seed: u64) {
    // Every node draws the same timeout: the worst case of draws that round to the same tick.
    let mut same_draw = (*sim_config()).clone();
    same_draw.election_timeout_min = same_draw.election_timeout_max - 1;
    let sim = Sim::start_with(3, seed, Arc::new(same_draw.validate().unwrap())).await;
    sim.net().uniform_latency = true;
    for round in 0..3 {
        let old = any_leader(&sim, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("seed {seed} round {round}: no leader to kill"));
        sim.crash(old).await;
        // The longest seen in 600 such failovers was about two seconds.
        let new = any_leader(&sim, Duration::from_secs(5)).await;
        assert!(
            new.is_some(),
            "seed {seed} round {round}: the two nodes left after node {old} died elected \
             nobody within 5 s (terms now {:?})",
            sim.up()
                .iter()
                .map(|id| sim.raft(*id).unwrap().metrics().borrow().current_term)
                .collect::<Vec<_>>()
        );
        sim.boot(old).await;
        // The restarted node may boot believing it still leads (openraft restores a leader's
        // own vote); the next round starts once it follows the new leader.
        let new = new.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sim.raft(old).unwrap().metrics().borrow().current_leader != Some(new) {
            assert!(
                Instant::now() < deadline,
                "seed {seed} round {round}: node {old} never followed node {new}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[test]
fn the_survivors_of_a_dead_leader_always_elect_one_of_them() {
    for seed in 1..=50 {
        paused_runtime().block_on(survivors_of_a_dead_leader_elect(seed));
    }
}

/// A node that once lost a campaign for its shorter log must still campaign in time when a
/// later leader dies. openraft 0.9 marks such a node ("seen a greater log") and adds
/// `2 × election_timeout_max` to its election timeout until it next campaigns on its own timer,
/// however long it has been caught up since; with both survivors marked, the fault suite saw
/// leases live 3.4 to 4.5 s for a 2 s TTL. Here C is refused for its log, then follows a new
/// leader B until it is level with it; B dies and C, the only one allowed to campaign, must lead
/// before a marked openraft would have started (1,050 to 1,200 ms after B's last heartbeat).
///
/// Returns how long after B died C led.
async fn outvoted_node_campaigns_in_time(seed: u64) -> Duration {
    let sim = Sim::start(3, seed).await;
    let first = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    for id in 1..=3 {
        sim.node(id).unwrap().set_elections(false);
    }
    let (a, c) = match first {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    // C falls behind.
    for other in [first, a] {
        sim.net().cut.extend([(c, other), (other, c)]);
    }
    for key in ["x", "y", "z"] {
        let done = write(
            &sim,
            first,
            plain_put(key).op,
            None,
            Instant::now() + Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(done, Completion::Ok { .. }),
            "seed {seed}: {done:?}"
        );
    }
    // The leader dies; C, back in touch with A only, campaigns and is refused for its log.
    sim.crash(first).await;
    sim.net().cut.clear();
    assert!(last_log_index(&sim, c) < last_log_index(&sim, a));
    sim.raft(c).unwrap().trigger().elect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !until_leader(&sim, c, Duration::ZERO).await,
        "seed {seed}: C won with less log"
    );

    // A leads next, its log as long as any; C follows it until level with it. Nobody else
    // campaigns (a restarted leader may boot believing it leads, until A's term reaches it).
    sim.boot(first).await;
    sim.node(first).unwrap().set_elections(false);
    let b = a;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !until_leader(&sim, b, Duration::from_millis(500)).await {
        assert!(Instant::now() < deadline, "seed {seed}: A never led");
        sim.raft(b).unwrap().trigger().elect().await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(&sim, c) < last_log_index(&sim, b) {
        assert!(Instant::now() < deadline, "seed {seed}: C never caught up");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // C follows, level, for a while: openraft keeps its mark all the same.
    sim.node(c).unwrap().set_elections(true);
    tokio::time::sleep(Duration::from_secs(1)).await;

    sim.crash(b).await;
    let died = Instant::now();
    assert!(
        until_leader(&sim, c, Duration::from_secs(10)).await,
        "seed {seed}: C never led after B died"
    );
    died.elapsed()
}

#[test]
fn a_node_once_outvoted_for_its_log_still_campaigns_in_time() {
    for seed in 1..=5 {
        let took = paused_runtime().block_on(outvoted_node_campaigns_in_time(seed));
        // Unpenalised, C campaigns 450 to 600 ms after B's last heartbeat (a leader lease of
        // 300 ms and a timeout of 150 to 300), which came a heartbeat or less before B died.
        assert!(
            took <= Duration::from_millis(750),
            "seed {seed}: C led {took:?} after the leader died; openraft's own timer alone, \
             penalised for the lost campaign, takes 1,050 to 1,200 ms"
        );
    }
}

/// The lease a leader grants just before it dies, and how long it lasts when that same leader
/// comes back after `down` and leads again before anyone else does.
const CARRIED_TTL: Duration = Duration::from_secs(2);

/// An acquire of the probe lease for `holder`, for [`CARRIED_TTL`].
fn probe_acquire(holder: &str) -> Op {
    Op::Acquire {
        lease: "probe".into(),
        holder: holder.into(),
        ttl_ms: CARRIED_TTL.as_millis() as u64,
    }
}

/// `count` nodes started with `seed`, and their first leader, once a first write has started
/// the store's clock.
async fn clocked(count: u64, seed: u64) -> (Sim, u64) {
    let sim = Sim::start(count, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = write(&sim, a, plain_put("start").op, None, deadline).await;
    assert!(matches!(first, Completion::Ok { .. }), "{first:?}");
    (sim, a)
}

/// A leader grants a lease and dies. Its followers do not campaign here, so it leads again once
/// it restarts, `down` later. The restarted process measured nothing of that time; its
/// followers did, on their monotonic clocks, from when they appended the grant. The lease must
/// be free about its TTL after its acquire was sent, not its TTL plus the downtime. The fault
/// suite's lease-life probe caught this twice in CI (3.2 and 3.7 s for a 2 s TTL), when a killed
/// leader, restarted within a second or two, won the next election.
///
/// Returns when the restarted leader led, and when the rival was granted the lease, both since
/// the acquire was sent.
async fn restarted_leader_carries_its_followers_time(
    seed: u64,
    down: Duration,
) -> (Duration, Duration) {
    let (sim, a) = clocked(3, seed).await;
    // The grant comes a second after the first write, so that it moves the store time its
    // followers carry.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = Instant::now();
    let granted = write(
        &sim,
        a,
        probe_acquire("first"),
        None,
        sent + Duration::from_secs(5),
    )
    .await;
    let Completion::Ok { log_index, .. } = granted else {
        panic!("seed {seed}: the first acquire failed: {granted:?}");
    };
    let followers: Vec<u64> = (1..=3).filter(|id| *id != a).collect();
    // Both followers hold the grant, so both measure from it; neither campaigns.
    for &id in &followers {
        while last_log_index(&sim, id) < log_index {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sim.node(id).unwrap().set_elections(false);
    }
    sim.crash(a).await;
    tokio::time::sleep(down).await;
    sim.boot(a).await;
    let raft_a = sim.raft(a).unwrap();
    if !until_leader(&sim, a, Duration::ZERO).await {
        raft_a.trigger().elect().await.unwrap();
    }
    assert!(
        until_leader(&sim, a, Duration::from_secs(5)).await,
        "seed {seed}: node {a} leads again"
    );
    let leads = sent.elapsed();
    let life = until_granted(
        &sim,
        a,
        probe_acquire("rival"),
        sent,
        Duration::from_secs(30),
        seed,
    )
    .await;
    (leads, life)
}

/// Polls `rival`, an acquire, at node `via` every 50 ms until it is granted; how long after
/// `sent` that was. Panics, naming `seed`, once `limit` has passed since `sent`.
async fn until_granted(
    sim: &Sim,
    via: u64,
    rival: Op,
    sent: Instant,
    limit: Duration,
    seed: u64,
) -> Duration {
    loop {
        let answer = write(
            sim,
            via,
            rival.clone(),
            None,
            Instant::now() + Duration::from_secs(5),
        );
        if let Completion::Ok {
            answer: Answer::Outcome(Outcome::Granted { .. }),
            ..
        } = answer.await
        {
            return sent.elapsed();
        }
        assert!(
            sent.elapsed() < limit,
            "seed {seed}: the lease was never free"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn a_restarted_leader_counts_the_time_its_followers_measured_while_it_was_down() {
    for (seed, down) in [(1, 1_000), (2, 3_000), (3, 10_000)] {
        let down = Duration::from_millis(down);
        let (leads, life) =
            paused_runtime().block_on(restarted_leader_carries_its_followers_time(seed, down));
        // Free at its TTL, or as soon as a leader is back if that is later. The grant's stamp
        // follows the send by a message delay or two, and the rival polls every 50 ms: 300 ms
        // covers both.
        let due = CARRIED_TTL.max(leads);
        assert!(
            life >= CARRIED_TTL && life <= due + Duration::from_millis(300),
            "seed {seed}: a {CARRIED_TTL:?} lease lived {life:?} across its leader's {down:?} \
             down time (it led again {leads:?} after the acquire was sent)"
        );
    }
}

/// The lease of the stale-member scenario, long enough that an early expiry stands out.
const STALE_TTL: Duration = Duration::from_secs(10);

/// Review of e8637e4, finding 1: a member cut off before the latest grants carries the lead
/// store time had when it was cut off. Five nodes; `s` is isolated while writes flow; the other
/// four lose power for 30 s and restart, so their store time now under-counts real time by
/// those 30 s (a restart has no instant for what it replays). A lease is granted. `s` is back,
/// but its log does not move yet (a snapshot streams to it, say), and the leader dies. The next
/// leader hears `s` first, since its links to the others are slower. `s`'s answer counts from an
/// entry older than the grant: taking it would start the new term 30 s ahead of the grant's
/// time, and the lease would be free at once.
///
/// Returns how long after the acquire was sent a rival was granted the lease.
async fn stale_member_across_a_majority_restart(seed: u64) -> Duration {
    let sim = Sim::start(5, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let stale = if a == 5 { 4 } else { 5 };
    sim.node(stale).unwrap().set_elections(false);
    // A first write starts the store's clock; one a second later moves it, and `s` applies it,
    // so that `s` carries time from then on.
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = write(&sim, a, plain_put("start").op, None, deadline).await;
    assert!(matches!(first, Completion::Ok { .. }), "{first:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let second = write(&sim, a, plain_put("second").op, None, deadline).await;
    let Completion::Ok { log_index, .. } = second else {
        panic!("seed {seed}: {second:?}");
    };
    while sim
        .state(stale)
        .read()
        .last_applied
        .map_or(0, |id| id.index)
        < log_index
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.net().isolate(stale, 5);
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        let put = write(&sim, a, plain_put(&format!("k{i}")).op, None, deadline).await;
        assert!(matches!(put, Completion::Ok { .. }), "{put:?}");
    }
    let majority: Vec<u64> = (1..=5).filter(|id| *id != stale).collect();
    for &id in &majority {
        sim.crash(id).await;
        sim.nodes[&id].log.lose_power();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    for &id in &majority {
        sim.boot(id).await;
    }
    let first_leader = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("the restarted four elect");
    let acquire = |holder: &str| Op::Acquire {
        lease: "probe".into(),
        holder: holder.into(),
        ttl_ms: STALE_TTL.as_millis() as u64,
    };
    let sent = Instant::now();
    let granted = write(
        &sim,
        first_leader,
        acquire("first"),
        None,
        sent + Duration::from_secs(5),
    )
    .await;
    let Completion::Ok {
        answer: Answer::Outcome(Outcome::Granted { .. }),
        log_index,
        ..
    } = granted
    else {
        panic!("seed {seed}: the first acquire failed: {granted:?}");
    };
    // `s` answers again, but nothing moves its log; the leader dies once the other three hold
    // the grant, so that any of them may lead next.
    let survivors: Vec<u64> = majority
        .iter()
        .copied()
        .filter(|id| *id != first_leader)
        .collect();
    for &id in &survivors {
        while last_log_index(&sim, id) < log_index {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let next = survivors[0];
    {
        let mut net = sim.net();
        net.cut.clear();
        for other in (1..=5).filter(|other| *other != stale) {
            net.stalled.insert((other, stale));
        }
        // Slower than any message to `s`, yet quick enough for openraft's leadership check,
        // which waits a heartbeat interval for the answers.
        for &other in &survivors[1..] {
            net.slow.insert((next, other), Duration::from_millis(20));
        }
    }
    for &other in &survivors[1..] {
        sim.node(other).unwrap().set_elections(false);
    }
    sim.crash(first_leader).await;
    sim.raft(next).unwrap().trigger().elect().await.unwrap();
    assert!(
        until_leader(&sim, next, Duration::from_secs(5)).await,
        "seed {seed}: node {next} leads"
    );
    until_granted(
        &sim,
        next,
        acquire("rival"),
        sent,
        Duration::from_secs(60),
        seed,
    )
    .await
}

#[test]
fn a_member_cut_off_across_a_majority_restart_does_not_run_store_time_ahead() {
    for seed in 1..=3 {
        let life = paused_runtime().block_on(stale_member_across_a_majority_restart(seed));
        // Free at its TTL: the survivors carried the time since the grant. The rival polls
        // every 50 ms, and the leader change takes a few hundred.
        assert!(
            life >= STALE_TTL && life <= STALE_TTL + Duration::from_millis(500),
            "seed {seed}: a {STALE_TTL:?} lease was granted to a rival {life:?} after its \
             acquire was sent"
        );
    }
}

/// A leader grants a lease while its log does not reach its followers: they append the grant
/// 700 ms after it was stamped. The links recover, and the leader dies 1.5 s after the acquire was sent. Its
/// followers carry store time from when they appended the grant, so, with nothing stamped
/// since, the next leader's clock starts the 700 ms behind, and the lease lives its TTL plus
/// that. CI saw it on real processes: a 5 s lease lived 5.9 s across a leader kill, its grant
/// slow to replicate on a loaded machine just after the cluster formed.
///
/// Returns how long after the acquire was sent a rival was granted the lease.
async fn slow_grant_then_leader_killed(seed: u64) -> Duration {
    let (sim, a) = clocked(3, seed).await;
    // The log does not move to the followers for 700 ms (as when AppendEntries time out on a
    // loaded machine and are sent again), heartbeats included: they must not campaign.
    let followers: Vec<u64> = (1..=3).filter(|id| *id != a).collect();
    for &id in &followers {
        sim.node(id).unwrap().set_elections(false);
        sim.net().stalled.insert((a, id));
    }
    let sent = Instant::now();
    let recover = async {
        tokio::time::sleep(SLOW_GRANT).await;
        sim.net().stalled.clear();
    };
    let (granted, ()) = tokio::join!(
        write(
            &sim,
            a,
            probe_acquire("first"),
            None,
            sent + Duration::from_secs(5)
        ),
        recover
    );
    assert!(
        matches!(granted, Completion::Ok { .. }),
        "seed {seed}: the first acquire failed: {granted:?}"
    );
    assert!(sent.elapsed() >= SLOW_GRANT, "the grant was slow to commit");
    for &id in &followers {
        sim.node(id).unwrap().set_elections(true);
    }
    tokio::time::sleep_until(sent + Duration::from_millis(1_500)).await;
    sim.crash(a).await;
    until_granted(
        &sim,
        followers[0],
        probe_acquire("rival"),
        sent,
        Duration::from_secs(30),
        seed,
    )
    .await
}

/// How late the slow links deliver the grant.
const SLOW_GRANT: Duration = Duration::from_millis(700);

#[test]
fn a_grant_slow_to_replicate_is_not_carried_late_across_a_leader_kill() {
    for seed in 1..=3 {
        let life = paused_runtime().block_on(slow_grant_then_leader_killed(seed));
        // Free at its TTL: the leader had its followers carry a time stamped after the slow
        // grant. The rival polls every 50 ms; the election ends before the TTL.
        assert!(
            life >= CARRIED_TTL && life <= CARRIED_TTL + Duration::from_millis(300),
            "seed {seed}: a {CARRIED_TTL:?} lease whose grant took {SLOW_GRANT:?} to replicate \
             was granted to a rival {life:?} after its acquire was sent"
        );
    }
}

/// What a cut-off leader answered: how long after it was sent, and the status.
struct CutOffAnswer {
    after: Duration,
    status: tonic::Status,
}

/// A leader cut off from every peer, its clients still reaching it (the fault suite's
/// IsolateLeader and OneWayFromLeader). openraft 0.9 has no CheckQuorum step-down: such a
/// leader leads its term until it hears of a newer one, which it cannot. Returns its answer to a
/// write it held when it was cut off, and to one sent once its quorum had been silent for a
/// while.
async fn cut_off_leader_answers(seed: u64) -> (CutOffAnswer, CutOffAnswer) {
    let (sim, a) = clocked(3, seed).await;
    let node = sim.node(a).unwrap();
    let answer = async |key: &str| {
        let sent = Instant::now();
        let status = tokio::time::timeout(
            Duration::from_secs(10),
            node.write_or_forward(plain_put(key).op, None),
        )
        .await
        .expect("an answer within 10 s")
        .expect_err("no quorum to write with");
        CutOffAnswer {
            after: sent.elapsed(),
            status,
        }
    };
    sim.net().isolate(a, 3);
    let cut = Instant::now();
    let held = answer("held").await;
    tokio::time::sleep_until(cut + QUORUM_SILENCE + Duration::from_millis(500)).await;
    let later = answer("later").await;
    (held, later)
}

#[test]
fn a_leader_cut_off_from_its_quorum_gives_writes_up_and_then_refuses_them_at_once() {
    for seed in 1..=3 {
        let (held, later) = paused_runtime().block_on(cut_off_leader_answers(seed));
        let indeterminate = |s: &tonic::Status| s.metadata().get(INDETERMINATE_KEY).is_some();
        // Given up once the quorum was silent for QUORUM_SILENCE (the last answer came a
        // heartbeat or so before the cut), not held for the whole quorum wait; it may have
        // been applied.
        assert!(
            held.after <= QUORUM_SILENCE + Duration::from_millis(200)
                && indeterminate(&held.status),
            "seed {seed}: a write held by the cut-off leader ended after {:?}: {:?}",
            held.after,
            held.status
        );
        // Refused before it was proposed: the client knows it was not applied.
        assert!(
            later.after <= Duration::from_millis(10)
                && later.status.code() == tonic::Code::Unavailable
                && !indeterminate(&later.status),
            "seed {seed}: a write sent to the cut-off leader later ended after {:?}: {:?}",
            later.after,
            later.status
        );
    }
}
