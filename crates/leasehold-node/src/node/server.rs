//! Starting a node: open its storage, start Raft, serve gRPC, form the cluster on first start,
//! tick expiring leases while leading, and stop cleanly on request.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::InitializeError;
use openraft::error::RaftError;
use openraft::BasicNode;
use tonic::transport::server::TcpIncoming;

use super::assembly::{Storage, Transport};
use super::cluster_service::ClusterService;
use super::lease_service::LeaseService;
use super::peer_gate::PeerGate;
use super::raft_service::RaftService;
use super::{Node, NodeConfig, NodeError};
use crate::metrics::Metrics;
use crate::proto::raft_v1::raft_server::RaftServer;
use crate::proto::v1::cluster_server::ClusterServer;
use crate::proto::v1::lease_store_server::LeaseStoreServer;
use crate::raft::{self, Channels, ClockMode, NodeId, PeerNetwork};
use crate::tls::{RefusalLog, Tls};
use leasehold_core::Op;
use tonic::service::interceptor::InterceptedService;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Config(String),
    #[error("data dir {dir}: {source}")]
    DataDir { dir: String, source: std::io::Error },
    #[error("storage: {0}")]
    Storage(Box<raft::StorageError>),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("raft: {0}")]
    Raft(String),
    #[error("grpc server: {0}")]
    Serve(#[from] tonic::transport::Error),
}

impl From<raft::StorageError> for StartError {
    fn from(e: raft::StorageError) -> Self {
        StartError::Storage(Box::new(e))
    }
}

/// The largest message a peer may send or be answered with: a replication message of
/// `max_payload_entries` entries of at most `MAX_ENTRY_BYTES` each, a snapshot chunk, a
/// `ReadLog` answer, each with room to spare. Anything larger is refused before it is decoded.
pub const MAX_PEER_MESSAGE_BYTES: usize = 8 * 1024 * 1024;
/// The largest request a client may send: a put of the largest value with the longest key and
/// lease name, with room to spare, so that a value just over its limit still gets the
/// field's own error, and a huge message is refused before it is decoded.
pub const MAX_CLIENT_MESSAGE_BYTES: usize = 256 * 1024;

const _: () = {
    use leasehold_core::Limits;
    let replication = raft::MAX_PAYLOAD_ENTRIES as usize * raft::MAX_ENTRY_BYTES;
    assert!(
        2 * replication <= MAX_PEER_MESSAGE_BYTES,
        "a replication message fits"
    );
    assert!(2 * raft::SNAPSHOT_CHUNK_BYTES as usize <= MAX_PEER_MESSAGE_BYTES);
    assert!(2 * super::READ_LOG_MAX_BYTES <= MAX_PEER_MESSAGE_BYTES);
    let put = Limits::MAX_VALUE_BYTES + Limits::MAX_KEY_BYTES + 2 * Limits::MAX_NAME_BYTES;
    assert!(
        2 * put <= MAX_CLIENT_MESSAGE_BYTES,
        "the largest valid put fits, with room"
    );
};
/// A connection silent this long is probed, and dropped after three unanswered probes ten
/// seconds apart: a dead client's or peer's connection goes within about a minute.
const KEEPALIVE: crate::tls::KeepAlive = crate::tls::KeepAlive {
    idle: Duration::from_secs(30),
    interval: Duration::from_secs(10),
    retries: 3,
};

/// The expiry ticker looks again at least this often, to notice a new leadership or lease.
const TICK_CHECK: Duration = Duration::from_millis(100);
/// Ticks are at least this far apart: when leases fall due one after another (thousands a
/// second after a burst of acquires), one tick expires all that fell due since the last, instead
/// of a log entry, and an fsync on every node, per lease. An expiry reaches the log up to this
/// much later than it otherwise would; never earlier.
const TICK_MIN_GAP: Duration = Duration::from_millis(50);

/// What a node's flags must say, checked by `serve --check-config` on the addresses as given
/// and at start on the addresses they resolved to: its id is one of `peers`, which name 1, 3 or
/// A node started with `--join` waits to be added, so its data dir must be empty, or hold the
/// state of the cluster it joined before: a membership, in its log or snapshot, that names it.
/// A data dir of another cluster (a node reused, a path mistyped) would bring a foreign log and
/// store time into this one once the node is added.
fn check_join_dir(
    config: &NodeConfig,
    empty: bool,
    membership: &openraft::Membership<raft::NodeId, openraft::BasicNode>,
) -> Result<(), StartError> {
    if empty || membership.get_node(&config.id).is_some() {
        return Ok(());
    }
    let members: Vec<_> = membership.nodes().map(|(id, _)| *id).collect();
    Err(StartError::Config(format!(
        "--join: data dir {} holds the state of a cluster whose members are {members:?}, which do \
         not include this node's id {}; a joining node starts on an empty data dir (or on its \
         own from an earlier join)",
        config.data_dir.display(),
        config.id
    )))
}

/// 5 voters unless it joins, and its two planes are apart.
pub fn check_flags<A: PartialEq + std::fmt::Display>(
    id: NodeId,
    peers: &std::collections::BTreeMap<NodeId, String>,
    join: bool,
    listen: &A,
    peer_listen: &A,
) -> Result<(), String> {
    if !peers.contains_key(&id) {
        return Err(format!("--peers must include this node's own id {id}"));
    }
    let voters = peers.len();
    if !join && ![1, 3, 5].contains(&voters) {
        return Err(format!(
            "--peers names {voters} nodes; a cluster starts with 1, 3 or 5 voters (grow it \
             with `leasehold member add`)"
        ));
    }
    if listen == peer_listen {
        return Err(format!(
            "--listen and --peer-listen are both {listen}; peers and clients need a port each"
        ));
    }
    Ok(())
}

/// The clock a data dir was created with. A node refuses to start it with the other one: the
/// two clocks' logs do not mix. (Its peers refuse it too: see [`ClockMode::check_peer`].)
pub fn check_clock_mode(dir: &Path, clock: ClockMode) -> Result<(), StartError> {
    let path = dir.join("clock");
    let io = |source| StartError::DataDir {
        dir: dir.display().to_string(),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(found) if found.trim() == clock.name() => Ok(()),
        Ok(found) => Err(StartError::Config(format!(
            "data dir {} was created with the {} clock; start it {} --manual-clock",
            dir.display(),
            found.trim(),
            if clock == ClockMode::Manual {
                "without"
            } else {
                "with"
            }
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            // Durably, and whole or not at all: an empty file after a power loss would keep
            // the node from starting.
            let tmp = dir.join("clock.tmp");
            let write = || -> std::io::Result<()> {
                let mut file = std::fs::File::create(&tmp)?;
                std::io::Write::write_all(&mut file, clock.name().as_bytes())?;
                file.sync_all()?;
                std::fs::rename(&tmp, &path)?;
                std::fs::File::open(dir)?.sync_all()
            };
            write().map_err(io)
        }
        Err(e) => Err(io(e)),
    }
}

/// Runs one node until `shutdown` resolves.
pub async fn run(
    config: NodeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    check_flags(
        config.id,
        &config.peers,
        config.join,
        &config.listen,
        &config.peer_listen,
    )
    .map_err(StartError::Config)?;
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        dir: config.data_dir.display().to_string(),
        source,
    })?;
    let clock = ClockMode::from_manual(config.manual_clock);
    check_clock_mode(&config.data_dir, clock)?;
    if config.data_dir.join("raft.redb").exists() {
        // Its vote would be forgotten, and a node that forgets its vote may vote twice.
        return Err(StartError::Config(format!(
            "data dir {} holds a log in the format of an older Leasehold (raft.redb), which this \
             version cannot read; {}",
            config.data_dir.display(),
            crate::raft::REPLACE_NODE
        )));
    }

    // TLS files are read and checked before the storage is opened: a wrong path or a key that
    // does not match its certificate stops the node before it starts Raft.
    let tls = match &config.tls {
        Some(files) => Some(Tls::load(files).map_err(|e| StartError::Config(e.to_string()))?),
        None => None,
    };
    let tls_configs = match &tls {
        Some(tls) => {
            let setup = |e: crate::tls::TlsError| StartError::Config(e.to_string());
            Some((
                tls.server_config(config.client_cert_auth).map_err(setup)?,
                tls.server_config(true).map_err(setup)?,
            ))
        }
        None => None,
    };
    let metrics = Metrics::new();
    let (mut log_store, mut state_machine) = raft::open_storage(&config.data_dir, metrics.clone())?;
    let boot = raft::BootLog {
        last_index: openraft::storage::RaftLogStorage::get_log_state(&mut log_store)
            .await?
            .last_log_id
            .map_or(0, |id| id.index),
        vote_term: openraft::storage::RaftLogStorage::read_vote(&mut log_store)
            .await?
            .map_or(0, |vote| vote.leader_id.term),
    };
    let state = state_machine.shared();
    if config.join {
        // Read from the storage as openraft will at start-up: its metrics are filled in only
        // once its core has started.
        let membership = openraft::StorageHelper::new(&mut log_store, &mut state_machine)
            .get_membership()
            .await?;
        let empty =
            boot.last_index == 0 && boot.vote_term == 0 && state.read().last_applied.is_none();
        check_join_dir(&config, empty, membership.effective().membership())?;
    }
    tracing::info!(
        data_dir = %config.data_dir.display(),
        last_log_index = boot.last_index,
        vote_term = boot.vote_term,
        applied_index = state.read().last_applied.map_or(0, |id| id.index),
        manual_clock = config.manual_clock,
        "storage opened"
    );
    // Outgoing peer connections start from the peer plane's address.
    let listen_ip = config.peer_listen.ip();
    let incarnations = crate::raft::incarnation::Incarnations::open(&config.data_dir, config.id)
        .map_err(|source| StartError::DataDir {
            dir: config.data_dir.display().to_string(),
            source,
        })?;
    let channels = Channels::new(
        (!listen_ip.is_unspecified()).then_some(listen_ip),
        clock,
        tls.clone(),
    )
    .with_incarnations(incarnations);
    let raft_config = Arc::new(
        raft::config(config.snapshot_every)
            .validate()
            .map_err(|e| StartError::Raft(e.to_string()))?,
    );
    let link = Arc::new(super::GrpcLink(channels.clone()));
    let storage = Storage {
        log: log_store.clone(),
        state_machine,
        boot,
        reader: Some(log_store),
    };
    let transport = Transport {
        network: |penalty| PeerNetwork::new(channels.clone(), penalty),
        link,
        channels: channels.clone(),
    };
    let running = super::assembly::start(&config, raft_config, storage, transport).await?;
    let node = running.node().clone();
    let raft = node.raft().clone();

    // Bind before anything else can fail late: a taken port is the commonest start-up error.
    let client_listener = bind(config.listen).await?;
    let peer_listener = bind(config.peer_listen).await?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(bind(addr).await?),
        None => None,
    };
    let refusals = RefusalLog::default();
    let members = {
        let node = node.clone();
        Arc::new(move || node.member_ids()) as super::peer_gate::Members
    };
    let gate = PeerGate::new(config.id, members, tls.is_some(), refusals.clone());

    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let health = tokio::spawn(report_health(node.clone(), health_reporter, boot));
    // Both reflection versions: grpcurl and older tools still ask v1alpha. They list the
    // public API only.
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection()
        .build_v1()
        .map_err(|e| StartError::Config(e.to_string()))?;
    let reflection_v1alpha = reflection()
        .build_v1alpha()
        .map_err(|e| StartError::Config(e.to_string()))?;
    let fatal = Arc::new(tokio::sync::Notify::new());
    let watchdog = tokio::spawn(watch_for_fatal(raft.clone(), fatal.clone()));
    // Either plane's server ending (on request, on a fatal Raft error, or failing) stops both.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stop_on = {
        let stop = stop.clone();
        async move {
            tokio::select! {
                () = shutdown => {}
                () = fatal.notified() => {}
            }
            let _ = stop.send(true);
        }
    };
    let stop_watch = tokio::spawn(stop_on);
    let stopping = stopped.clone();
    let until_stopped = move || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    // No HTTP/2 keepalive on the servers: with it on, the leader's AppendEntries to followers
    // timed out hundreds of times a minute and put throughput fell by 12 to 20 % (p99 two to
    // three times higher) on this machine. Peers' channels ping the server from their side, and
    // TCP keepalive ([`KEEPALIVE`]) drops connections whose other end died.
    let client_router = tonic::transport::Server::builder()
        .add_service(
            LeaseStoreServer::new(
                LeaseService::new(node.clone())
                    .stopping_on(stopping.clone())
                    .counting_in(metrics.clone()),
            )
            .max_decoding_message_size(MAX_CLIENT_MESSAGE_BYTES),
        )
        .add_service(ClusterServer::new(ClusterService::new(node.clone())))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha);
    // The peer plane: Raft, forwarded writes and log read-back; the lease API for reads a
    // follower forwards to the leader; and each node's own status for `Status`, which asks
    // every member over this plane. Every call passes the gate first.
    let peer_router = tonic::transport::Server::builder()
        .add_service(InterceptedService::new(
            RaftServer::new(RaftService::new(node.clone()))
                .max_decoding_message_size(MAX_PEER_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_PEER_MESSAGE_BYTES),
            gate.clone(),
        ))
        .add_service(InterceptedService::new(
            LeaseStoreServer::new(LeaseService::new(node.clone()).stopping_on(stopping))
                .max_decoding_message_size(MAX_CLIENT_MESSAGE_BYTES),
            gate.clone(),
        ))
        .add_service(InterceptedService::new(
            ClusterServer::new(ClusterService::new(node.clone())),
            gate,
        ));
    type Serving =
        std::pin::Pin<Box<dyn Future<Output = Result<(), tonic::transport::Error>> + Send>>;
    let (client_server, peer_server): (Serving, Serving) = match tls_configs {
        Some((client_tls, peer_tls)) => (
            Box::pin(client_router.serve_with_incoming_shutdown(
                crate::tls::incoming(
                    client_listener,
                    client_tls,
                    "client",
                    refusals.clone(),
                    KEEPALIVE,
                ),
                until_stopped(),
            )),
            Box::pin(peer_router.serve_with_incoming_shutdown(
                crate::tls::incoming(peer_listener, peer_tls, "peer", refusals, KEEPALIVE),
                until_stopped(),
            )),
        ),
        None => (
            Box::pin(
                client_router.serve_with_incoming_shutdown(plain(client_listener), until_stopped()),
            ),
            Box::pin(
                peer_router.serve_with_incoming_shutdown(plain(peer_listener), until_stopped()),
            ),
        ),
    };
    let server = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let (client, peer) = tokio::join!(
                async {
                    let served = client_server.await;
                    let _ = stop.send(true);
                    served
                },
                async {
                    let served = peer_server.await;
                    let _ = stop.send(true);
                    served
                }
            );
            client.and(peer)
        })
    };

    let raft_gauges = tokio::spawn(super::probes::follow_raft(raft.clone(), metrics.clone()));
    let probes = metrics_listener.map(|listener| {
        tokio::spawn(super::probes::serve(
            listener,
            node.clone(),
            metrics.clone(),
            boot,
            until_stopped(),
        ))
    });

    if config.join {
        tracing::info!(
            id = config.id,
            "waiting to be added: `leasehold member add` on the cluster"
        );
    } else {
        form_cluster(&node, &config).await?;
    }
    tracing::info!(
        id = config.id,
        listen = %config.listen,
        peer_listen = %config.peer_listen,
        manual_clock = config.manual_clock,
        "node started"
    );

    let served = server.await.map_err(|e| StartError::Raft(e.to_string()))?;
    watchdog.abort();
    stop_watch.abort();
    health.abort();
    raft_gauges.abort();
    if let Some(probes) = probes {
        // Stopped with the servers; a failure to serve it is logged, not fatal to the node.
        if let Ok(Err(e)) = probes.await {
            tracing::warn!(error = %e, "the metrics endpoint failed");
        }
    }
    let stopped = raft.metrics().borrow().running_state.clone();
    running.stop().await;
    served?;
    if let Err(fatal) = stopped {
        return Err(StartError::Raft(format!(
            "raft stopped on node {}: {fatal}; the node exits so that it can be restarted \
             (its data dir is intact unless the error names the disk)",
            config.id
        )));
    }
    tracing::info!(id = config.id, "node stopped");
    Ok(())
}

/// Connections on `listener` without TLS, without Nagle's delay, with [`KEEPALIVE`].
fn plain(listener: tokio::net::TcpListener) -> TcpIncoming {
    TcpIncoming::from(listener)
        .with_nodelay(Some(true))
        .with_keepalive(Some(KEEPALIVE.idle))
        .with_keepalive_interval(Some(KEEPALIVE.interval))
        .with_keepalive_retries(Some(KEEPALIVE.retries))
}

/// How often health is looked at again when nothing changes (a leader's quorum ages without a
/// metrics change).
const HEALTH_CHECK: Duration = Duration::from_millis(250);
/// At most this often: metrics change with every applied entry under load.
const HEALTH_MIN_GAP: Duration = Duration::from_millis(50);

/// Keeps the gRPC health of `leasehold.v1.LeaseStore` (and of the whole server) at SERVING
/// while [`health`] holds, NOT_SERVING otherwise; each change is logged once.
async fn report_health(
    node: Node,
    reporter: tonic_health::server::HealthReporter,
    boot: raft::BootLog,
) {
    let mut metrics = node.raft().metrics();
    let mut last: Option<bool> = None;
    loop {
        let now = super::probes::health(&metrics.borrow_and_update(), boot);
        if last != Some(now.is_ok()) {
            let status = if now.is_ok() {
                tonic_health::ServingStatus::Serving
            } else {
                tonic_health::ServingStatus::NotServing
            };
            for service in ["", "leasehold.v1.LeaseStore"] {
                reporter.set_service_status(service, status).await;
            }
            match &now {
                Ok(()) => tracing::info!("health: serving"),
                Err(why) => tracing::warn!(reason = %why, "health: not serving"),
            }
            last = Some(now.is_ok());
        }
        tokio::time::sleep(HEALTH_MIN_GAP).await;
        tokio::select! {
            changed = metrics.changed() => if changed.is_err() { return },
            () = tokio::time::sleep(HEALTH_CHECK) => {}
        }
    }
}

/// A listener on `addr`.
async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| StartError::Listen {
            addr: addr.to_string(),
            source,
        })
}

/// Notifies `fatal` once Raft has stopped with an error. A node whose Raft stopped can answer
/// nothing but errors, forever: it stops serving and exits instead, so that clients move to
/// the other nodes at once and a supervisor (or `leasehold cluster`) restarts it, which
/// recovers it from its disk. (openraft 0.9 can stop a leader so when a replication stream
/// ends while a snapshot is being sent to it: a fault run with snapshots on saw every request to
/// that node answered INTERNAL until the run ended.)
async fn watch_for_fatal(raft: raft::Raft, fatal: Arc<tokio::sync::Notify>) {
    let mut metrics = raft.metrics();
    loop {
        let stopped = metrics.borrow_and_update().running_state.clone();
        if let Err(e) = stopped {
            tracing::error!(error = %e, "raft stopped with an error; the node stops");
            fatal.notify_one();
            return;
        }
        if metrics.changed().await.is_err() {
            return;
        }
    }
}

/// On a pristine data dir every node proposes the same membership; openraft makes that safe, so
/// the cluster forms by itself with no extra step. A restarted node already has its log.
async fn form_cluster(node: &Node, config: &NodeConfig) -> Result<(), StartError> {
    let raft = node.raft();
    if raft
        .is_initialized()
        .await
        .map_err(|e| StartError::Raft(e.to_string()))?
    {
        return Ok(());
    }
    let members: std::collections::BTreeMap<u64, BasicNode> = config
        .peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    match raft.initialize(members).await {
        Ok(()) => Ok(()),
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => Ok(()),
        Err(e) => Err(StartError::Raft(e.to_string())),
    }
}

/// Default clock only. When the leader's clock passes the earliest expiry of a held lease, it
/// logs a `Tick`, so that expiry is in the replicated state (at most [`TICK_MIN_GAP`] late); when
/// a lease has been free for the node's lease retention, it logs a `Forget` instead (at most
/// `FORGET_BATCH` leases each, at most one per [`TICK_MIN_GAP`]). An idle cluster with nothing
/// due logs nothing. Runs until aborted.
pub async fn tick_expiring_leases(node: Node) {
    let retention_ms = node.lease_retention_ms();
    loop {
        let (next_expiry, next_forget) = {
            let state = node.state().read();
            (
                state.table.next_expiry_ms(),
                state.table.next_forget_ms(retention_ms),
            )
        };
        let due = next_expiry.into_iter().chain(next_forget).min();
        let now = node.peek_stamp();
        let due_in = match (due, now) {
            (Some(due_ms), Some(now_ms)) if now_ms >= due_ms => Duration::ZERO,
            (Some(due_ms), Some(now_ms)) => Duration::from_millis(due_ms - now_ms).min(TICK_CHECK),
            // A new leader's clock starts with its first proposal: this tick, if anything is due
            // some time.
            (Some(_), None) if node.is_leader() => Duration::ZERO,
            _ => TICK_CHECK,
        };
        if !due_in.is_zero() {
            tokio::time::sleep(due_in).await;
            continue;
        }
        // A forget is stamped as a tick is, so it brings expiries too.
        let op = match (next_forget, now) {
            (Some(forget_ms), Some(now_ms)) if now_ms >= forget_ms => Op::Forget { retention_ms },
            _ => Op::Tick,
        };
        match node.write(op, None).await {
            Ok(_) => tokio::time::sleep(TICK_MIN_GAP).await,
            Err(NodeError::NotLeader { .. }) => {}
            Err(e) => {
                tracing::debug!(error = %e, "expiry tick not applied");
                tokio::time::sleep(TICK_CHECK).await;
            }
        }
    }
}
