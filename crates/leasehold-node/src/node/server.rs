//! `serve`: a node from its flags. Check them and the data dir, open the storage, start the
//! node through the one assembly (`assembly`), serve its planes (`planes`), form the cluster on
//! first start, and stop cleanly on request; and the expiry ticker the assembly runs.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

use tokio::net::TcpListener;

use openraft::error::InitializeError;
use openraft::error::RaftError;
use openraft::BasicNode;

use super::assembly::{StartError, Storage, Transport};
use super::peer::gate::PeerGate;
use super::planes::{self, Listeners, PlanesTls, Stop};
use super::{Node, NodeConfig};
use crate::limits::{HEALTH_CHECK, HEALTH_MIN_GAP, SIDE_SERVER_STOP};
use crate::metrics::Metrics;
use crate::raft::{self, Channels, ClockMode, PeerNetwork};
use crate::tls::{RefusalLog, Reloading};
use crate::NodeId;

/// A node started with `--join` waits to be added, so its data dir must be empty, or hold the
/// state of the cluster it joined before: a membership, in its log or snapshot, that names it.
/// A data dir of another cluster (a node reused, a path mistyped) would bring a foreign log and
/// store time into this one once the node is added.
fn check_join_dir(
    config: &NodeConfig,
    empty: bool,
    membership: &openraft::Membership<NodeId, openraft::BasicNode>,
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

/// What a node's flags must say, checked by `serve --check-config` on the addresses as given
/// and at start on the addresses they resolved to: its id is one of `peers`, which name 1, 3 or
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
    let io = |source| data_dir_error(dir, source);
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

/// [`check_flags`] on a node's config.
fn checked(config: &NodeConfig) -> Result<(), StartError> {
    check_flags(
        config.id,
        &config.peers,
        config.join,
        &config.listen,
        &config.peer_listen,
    )
    .map_err(StartError::Config)
}

/// Runs one node until `shutdown` resolves, on the addresses its config names.
pub async fn run(
    config: NodeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    // Checked before binding: `--listen` and `--peer-listen` the same would fail to bind, with
    // a less helpful message than the check's.
    checked(&config)?;
    let listeners = Listeners::bind(&config).await?;
    run_on(config, listeners, shutdown).await
}

/// Runs one node on `listeners`, bound by the caller, until `shutdown` resolves (as
/// mini-redis's `server::run(listener, shutdown)`): the config's `listen`, `peer_listen`,
/// `metrics_listen` and `http_listen` become the addresses they are bound to, so a caller binds
/// port 0 and names the port it got in `peers`.
pub async fn run_on(
    mut config: NodeConfig,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let bound = |l: &TcpListener| {
        l.local_addr().map_err(|error| StartError::Listen {
            addr: "a listener handed to the node".into(),
            error,
        })
    };
    config.listen = bound(&listeners.client)?;
    config.peer_listen = bound(&listeners.peer)?;
    config.metrics_listen = listeners.metrics.as_ref().map(bound).transpose()?;
    config.http_listen = listeners.http.as_ref().map(bound).transpose()?;
    checked(&config)?;
    // Caught from the start: SIGHUP's default action would end a node replaying its log.
    let hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    let clock = prepare_data_dir(&config)?;
    // TLS files are read and checked before the storage is opened: a wrong path or a key that
    // does not match its certificate stops the node before it starts Raft.
    let (tls, planes_tls) = load_tls(&config)?;
    let metrics = Metrics::new();
    let storage = open_storage(&config, metrics.clone()).await?;
    let boot = storage.boot;
    // Outgoing peer connections start from the peer plane's address.
    let listen_ip = config.peer_listen.ip();
    let incarnations = crate::raft::incarnation::Incarnations::open(&config.data_dir, config.id)
        .map_err(|source| data_dir_error(&config.data_dir, source))?;
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
    let transport = Transport {
        network: |penalty| PeerNetwork::new(channels.clone(), penalty),
        link: Arc::new(super::GrpcLink(channels.clone())),
        channels: channels.clone(),
    };
    let running = super::assembly::start(&config, raft_config, storage, transport).await?;
    let serving = Serving {
        tls: planes_tls,
        reloading: tls.clone(),
        hangups: Some(hangups),
        peers_tls: tls.is_some(),
        metrics,
        boot,
    };
    serve(&config, running, listeners, serving, shutdown).await
}

/// What the planes are served with.
struct Serving {
    tls: Option<PlanesTls>,
    /// The TLS files, loaded again on SIGHUP or a change (see `tls::reload`).
    reloading: Option<Arc<Reloading>>,
    /// SIGHUPs, caught since the node's start; taken by the task that reloads.
    hangups: Option<std::io::Result<tokio::signal::unix::Signal>>,
    /// Whether peers show certificates, for the gate.
    peers_tls: bool,
    metrics: Arc<Metrics>,
    boot: raft::BootLog,
}

/// Serves the `running` node on `listeners` until `shutdown` (or a fatal Raft error, or either
/// plane's end), forming the cluster on first start; then stops it.
async fn serve(
    config: &NodeConfig,
    running: super::Running,
    listeners: Listeners,
    mut serving: Serving,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), StartError> {
    let node = running.node().clone();
    let refusals = RefusalLog::default();
    let members = {
        let node = node.clone();
        Arc::new(move || node.member_ids()) as super::peer::gate::Members
    };
    let gate = PeerGate::new(config.id, members, serving.peers_tls, refusals.clone());
    let (health_reporter, health_service) = tonic_health::server::health_reporter();
    let stop = Stop::new();
    let background = background(&node, health_reporter, &stop, shutdown, &mut serving);
    let api = super::api::Api::client(&node, &serving.metrics, stop.stopping());
    let (client, client_lanes) = planes::client_plane(&api, health_service, &stop)?;
    let raft = Arc::new(super::peer::raft_service::RaftService::new(node.clone()));
    let lanes = super::lanes::LaneServer {
        service: raft.clone(),
        gate: gate.clone(),
        stopping: stop.stopping(),
    };
    let peer = planes::peer_router(&node, raft, gate, &stop);
    let asked = (listeners.metrics, listeners.http);
    let side = side_servers(asked, (&node, api), &serving, &stop, &refusals);
    let server = planes::serve(
        (client, listeners.client, client_lanes),
        (peer, listeners.peer, lanes),
        serving.tls,
        refusals,
        stop.clone(),
    );
    form_cluster(&node, config).await?;
    log_started(config, &node);
    let served = server.await.map_err(|e| StartError::Raft(e.to_string()))?;
    for task in background {
        task.abort();
    }
    for (what, task) in side {
        // Stopped with the planes; a failure to serve one is logged, not fatal to the node.
        // Bounded: a client that keeps a request half sent must not hold the node's exit.
        match tokio::time::timeout(SIDE_SERVER_STOP, task).await {
            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "the {what} failed"),
            Err(_) => tracing::warn!("the {what} did not stop in time; leaving it"),
            Ok(_) => {}
        }
    }
    let stopped = node.raft().metrics().borrow().running_state.clone();
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

/// The start's log line, and a warning when a node with TLS serves with authorization off.
fn log_started(config: &NodeConfig, node: &Node) {
    tracing::info!(
        id = config.id,
        listen = %config.listen,
        peer_listen = %config.peer_listen,
        manual_clock = config.manual_clock,
        runtime_threads = tokio::runtime::Handle::current().metrics().num_workers(),
        "node started"
    );
    let off = !node.state().read().table.policy().enabled();
    if config.tls.is_some() && config.auth_admin.is_none() && off {
        tracing::warn!(
            "authorization is off (--no-authorization): every client that reaches the client \
             port may make admin calls, `member remove` and `snapshot save` included, until it \
             is turned on (`leasehold auth enable`)"
        );
    }
}

/// What a node stopping on request did with its leadership.
fn log_hand_over(handed: super::HandedOver) {
    match handed {
        super::HandedOver::NotLeading => {}
        super::HandedOver::To { to, ms } => {
            tracing::info!(to, ms, "stopping: leadership handed over")
        }
        super::HandedOver::Not(why) => tracing::warn!(
            "stopping without handing leadership over ({why}): the others elect a leader once \
             this node is gone"
        ),
    }
}

/// The servers beside the two planes, those asked for: the metrics endpoint and the HTTP API.
fn side_servers(
    (metrics, http): (Option<TcpListener>, Option<TcpListener>),
    (node, api): (&Node, super::api::Api),
    serving: &Serving,
    stop: &Stop,
    refusals: &RefusalLog,
) -> Vec<(&'static str, tokio::task::JoinHandle<std::io::Result<()>>)> {
    let mut side = Vec::new();
    if let Some(listener) = metrics {
        let until = stop.until_stopped();
        let (metrics, boot) = (serving.metrics.clone(), serving.boot);
        let probes = super::probes::serve(listener, node.clone(), metrics, boot, until);
        side.push(("metrics endpoint", tokio::spawn(probes)));
    }
    if let Some(listener) = http {
        let (tls, refusals) = (serving.tls.as_ref(), refusals.clone());
        let http = planes::serve_http(listener, api, stop, tls, refusals);
        side.push(("HTTP API", http));
    }
    side
}

/// The node's work beside its servers, until they end: health reports, the watch that stops
/// them on a fatal Raft error, their stop on `shutdown` (a leader hands leadership over first),
/// the Raft and clock gauges, and TLS files loaded again on SIGHUP or a change.
fn background(
    node: &Node,
    health: tonic_health::server::HealthReporter,
    stop: &Stop,
    shutdown: impl Future<Output = ()> + Send + 'static,
    serving: &mut Serving,
) -> [tokio::task::JoinHandle<()>; 6] {
    let raft = node.raft().clone();
    let fatal = Arc::new(tokio::sync::Notify::new());
    let stop_on = {
        let (stop, fatal, node) = (stop.clone(), fatal.clone(), node.clone());
        async move {
            tokio::select! {
                () = shutdown => log_hand_over(node.hand_over().await),
                () = fatal.notified() => {}
            }
            stop.stop();
        }
    };
    [
        tokio::spawn(report_health(node.clone(), health, serving.boot)),
        tokio::spawn(watch_for_fatal(raft.clone(), fatal)),
        tokio::spawn(stop_on),
        tokio::spawn(super::probes::follow_raft(raft, serving.metrics.clone())),
        tokio::spawn(super::follow_clock(node.clone(), serving.metrics.clone())),
        tokio::spawn(reload_tls(
            serving.reloading.clone(),
            serving.hangups.take(),
        )),
    ]
}

/// Loads the TLS files again on SIGHUP and whenever they change (see `tls::reload`). Without
/// TLS, SIGHUP is only logged: its default action would end the node.
async fn reload_tls(
    tls: Option<Arc<Reloading>>,
    hangups: Option<std::io::Result<tokio::signal::unix::Signal>>,
) {
    let changes = async {
        match &tls {
            Some(tls) => tls.clone().on_change().await,
            None => std::future::pending().await,
        }
    };
    let mut hangups = match hangups {
        Some(Ok(hangups)) => hangups,
        Some(Err(e)) => {
            tracing::warn!(
                "SIGHUP cannot be caught ({e}); TLS files are still loaded again when they change"
            );
            return changes.await;
        }
        None => return changes.await,
    };
    tokio::pin!(changes);
    loop {
        tokio::select! {
            () = &mut changes => return,
            Some(()) = hangups.recv() => match &tls {
                Some(tls) => tls.reload_logged("SIGHUP"),
                None => tracing::info!("SIGHUP: nothing to load again (no TLS)"),
            },
        }
    }
}

fn data_dir_error(dir: &Path, source: std::io::Error) -> StartError {
    StartError::DataDir {
        dir: dir.display().to_string(),
        source,
    }
}

/// Creates the data dir if need be, and checks that it is this version's and this clock's.
fn prepare_data_dir(config: &NodeConfig) -> Result<ClockMode, StartError> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|source| data_dir_error(&config.data_dir, source))?;
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
    Ok(clock)
}

/// The node's TLS files, read and checked, and the server TLS of its two planes; none without
/// `--tls`.
fn load_tls(
    config: &NodeConfig,
) -> Result<(Option<Arc<Reloading>>, Option<PlanesTls>), StartError> {
    let Some(files) = &config.tls else {
        return Ok((None, None));
    };
    let setup = |e: crate::tls::TlsError| StartError::Config(e.to_string());
    let tls = Reloading::load(files, Some(config.id)).map_err(setup)?;
    // The client plane takes a client without a certificate through the handshake even with
    // `--client-cert-auth`, which the API enforces (`Caller::of`): refused there, the client
    // is told why at once, where a refused handshake reached it as a closed connection that
    // it retried for its whole deadline. A certificate it does show is checked here.
    let planes = (
        tls.server_config(false).map_err(setup)?,
        tls.server_config(true).map_err(setup)?,
    );
    Ok((Some(tls), Some(planes)))
}

/// Opens the log and the state machine in the data dir, and checks that a `--join` node's dir
/// holds nothing of another cluster.
async fn open_storage(
    config: &NodeConfig,
    metrics: Arc<Metrics>,
) -> Result<Storage<raft::LogStore>, StartError> {
    // Logs how long reading the snapshot and the log back took: what a restart costs before
    // Raft starts.
    let (mut log_store, mut state_machine) = raft::open_storage(&config.data_dir, metrics)?;
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
        check_join_dir(config, empty, membership.effective().membership())?;
    }
    let (applied_index, leases) = {
        let applied = state.read();
        let index = applied.last_applied.map_or(0, |id| id.index);
        (index, applied.table.lease_count())
    };
    tracing::info!(
        data_dir = %config.data_dir.display(),
        last_log_index = boot.last_index,
        vote_term = boot.vote_term,
        applied_index,
        manual_clock = config.manual_clock,
        leases,
        "storage opened"
    );
    Ok(Storage {
        log: log_store.clone(),
        state_machine,
        boot,
        reader: Some(log_store),
    })
}

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
/// the cluster forms by itself with no extra step. A restarted node already has its log, and a
/// `--join` node waits to be added.
async fn form_cluster(node: &Node, config: &NodeConfig) -> Result<(), StartError> {
    if config.join {
        tracing::info!(
            id = config.id,
            "waiting to be added: `leasehold member add` on the cluster"
        );
        return Ok(());
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::v1 as pb;
    use crate::proto::v1::lease_store_client::LeaseStoreClient;

    /// Node 1 of `voters`, started on listeners bound to port 0 by the test (as mini-redis's
    /// tests run its server), the others never started: its client address, its stop, and its
    /// task.
    async fn one_node(
        dir: &std::path::Path,
        voters: u64,
    ) -> (
        std::net::SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), StartError>>,
    ) {
        let client = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (client_addr, peer_addr) = (client.local_addr().unwrap(), peer.local_addr().unwrap());
        let config = NodeConfig {
            id: 1,
            // Replaced by the listeners' own addresses.
            listen: "127.0.0.1:1".parse().unwrap(),
            peer_listen: "127.0.0.1:2".parse().unwrap(),
            advertise: client_addr.to_string(),
            data_dir: dir.to_owned(),
            // The absent voters' peer ports on loopback, where nothing listens.
            peers: (1..=voters)
                .map(|id| match id {
                    1 => (1, peer_addr.to_string()),
                    id => (id, format!("127.0.0.1:{id}")),
                })
                .collect(),
            manual_clock: false,
            snapshot_every: 1_000,
            tls: None,
            client_cert_auth: false,
            auth_admin: None,
            max_requests: crate::limits::MAX_CONCURRENT_REQUESTS,
            max_watches: crate::limits::MAX_WATCHES,
            caps: crate::node::Caps::default(),
            lease_retention_ms: 3_600_000,
            join: false,
            metrics_listen: None,
            http_listen: None,
            clock_control: None,
        };
        let listeners = Listeners {
            client,
            peer,
            metrics: None,
            http: None,
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let node = tokio::spawn(run_on(config, listeners, async move {
            let _ = stopped.await;
        }));
        (client_addr, stop, node)
    }

    /// The lease service of the node at `addr`, once it has elected itself and serves a put.
    async fn serving(addr: std::net::SocketAddr) -> LeaseStoreClient<tonic::transport::Channel> {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let mut lease = LeaseStoreClient::new(channel);
        let put = pb::PutRequest {
            key: "k".into(),
            value: b"v".to_vec(),
            ..Default::default()
        };
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        while let Err(e) = lease.put(put.clone()).await {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no put within 20 s: {e}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        lease
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_serves_on_listeners_it_is_handed() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, stop, node) = one_node(dir.path(), 1).await;
        let mut lease = serving(addr).await;
        let get = pb::GetRequest { key: "k".into() };
        let got = lease.get(get).await.unwrap().into_inner();
        assert_eq!(got.value, Some(b"v".to_vec()));
        stop.send(()).unwrap();
        node.await.unwrap().unwrap();
    }

    /// A `Batch` stream opened with one call, `request` as `id` with its timeout: the sender
    /// that keeps the stream's request side open, and its answers.
    async fn batch_of_one(
        lease: &mut LeaseStoreClient<tonic::transport::Channel>,
        id: u64,
        timeout_ms: u32,
        request: pb::batch_call::Request,
    ) -> (
        tokio::sync::mpsc::Sender<pb::BatchRequest>,
        tonic::Streaming<pb::BatchResponse>,
    ) {
        let (calls, outgoing) = tokio::sync::mpsc::channel(1);
        let call = pb::BatchCall {
            id,
            timeout_ms,
            request: Some(request),
        };
        calls
            .send(pb::BatchRequest { calls: vec![call] })
            .await
            .unwrap();
        let stream = tokio_stream::wrappers::ReceiverStream::new(outgoing);
        let answers = lease.batch(stream).await.unwrap().into_inner();
        (calls, answers)
    }

    /// A client that keeps a `Batch` stream open (as `leasehold-client` does for as long as it
    /// lives) does not hold the node's shutdown: the stream ends, refused as the node stops.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_node_stops_while_a_client_holds_a_batch_stream_open() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, stop, node) = one_node(dir.path(), 1).await;
        let mut lease = serving(addr).await;
        let get = pb::batch_call::Request::Get(pb::GetRequest { key: "k".into() });
        let (calls, mut answers) = batch_of_one(&mut lease, 1, 5_000, get).await;
        let first = answers.message().await.unwrap().unwrap();
        assert_eq!(first.answers[0].id, 1);
        stop.send(()).unwrap();
        let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), node).await;
        stopped
            .expect("the node stopped within 10 s with a Batch stream open")
            .unwrap()
            .unwrap();
        let ended = answers.message().await;
        assert!(!matches!(ended, Ok(Some(_))), "{ended:?}");
        drop(calls);
    }

    /// A call still under way when the node stops is answered before its stream ends: node 1
    /// of three, alone, has no leader, so a put waits out the election wait on it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_batch_call_under_way_when_the_node_stops_is_answered_before_the_stream_ends() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, stop, node) = one_node(dir.path(), 3).await;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_lazy();
        let mut lease = LeaseStoreClient::new(channel);
        let put = pb::batch_call::Request::Put(pb::PutRequest {
            key: "k".into(),
            value: b"v".to_vec(),
            ..Default::default()
        });
        let (calls, mut answers) = batch_of_one(&mut lease, 7, 10_000, put).await;
        // The put is on its way once the node has read it; stop it then.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        stop.send(()).unwrap();
        let answered = answers.message().await;
        let answer = answered
            .expect("the put's answer, not a reset")
            .expect("an answer");
        assert_eq!(answer.answers[0].id, 7, "{answer:?}");
        let ended = answers.message().await;
        assert!(!matches!(ended, Ok(Some(_))), "{ended:?}");
        let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), node).await;
        stopped
            .expect("the node stopped within 10 s")
            .unwrap()
            .unwrap();
        drop(calls);
    }
}
