//! The one harness for multi-process tests: real `leasehold serve` processes on loopback ports
//! held for them (`HeldPort`), in a temp dir, killed and reaped when the harness is dropped
//! (also on panic).

#![allow(dead_code)] // Each test binary uses its own part of the harness.

use std::future::Future;
use std::time::{Duration, Instant};

use leasehold::cli::local::{local_addrs, HeldPort, LocalCluster, PlaneAddrs};
use leasehold::proto::v1 as pb;
use leasehold::tls::certs;
use leasehold::tls::Tls;
use leasehold_client::{Acquired, Answer, LeaseClient, Written};
use tempfile::TempDir;

pub struct Harness {
    pub cluster: LocalCluster,
    pub client: LeaseClient,
    pub endpoints: Vec<String>,
    /// With TLS on: what every client of this harness dials with.
    pub tls: Option<tonic::transport::ClientTlsConfig>,
    // Dropped after `cluster`, so the nodes are dead before their data dirs go.
    _dir: TempDir,
}

pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_leasehold")
}

/// The `leasehold` command, talking to `endpoints`.
pub fn command(endpoints: &[String]) -> std::process::Command {
    let mut command = std::process::Command::new(binary());
    command.env("LEASEHOLD_ENDPOINTS", endpoints.join(","));
    command
}

/// A fresh virtual environment in `dir` with `packages` installed from PyPI, as their users
/// install them: its python.
pub fn python_venv(dir: &std::path::Path, packages: &[&str]) -> std::path::PathBuf {
    let made = std::process::Command::new("python3")
        .args(["-m", "venv"])
        .arg(dir)
        .status();
    assert!(
        made.is_ok_and(|s| s.success()),
        "python3 -m venv (python3-venv)"
    );
    let pip = std::process::Command::new(dir.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check"])
        .args(packages)
        .output()
        .expect("run pip");
    assert!(
        pip.status.success(),
        "pip: {}",
        String::from_utf8_lossy(&pip.stderr)
    );
    dir.join("bin/python")
}

/// The error a `leasehold` command ended with, as every CLI error ends: exit code 1 and one
/// line on stderr (`context` names the case in a failure); that line.
pub fn one_line_error(out: &std::process::Output, context: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(1), "{context}: {out:?}");
    assert_eq!(stderr.trim().lines().count(), 1, "{context}: {stderr}");
    stderr
}

/// `etcdctl` (etcd's own client, API v3) against `endpoints`.
pub fn etcdctl(endpoints: &[&str]) -> std::process::Command {
    let mut command = std::process::Command::new("etcdctl");
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={}", endpoints.join(",")))
        .arg("--command-timeout=10s");
    command
}

/// Runs `leasehold ARGS` against `endpoints` to the end.
pub fn cli(endpoints: &[String], args: &[&str]) -> std::process::Output {
    command(endpoints)
        .args(args)
        .output()
        .expect("run leasehold")
}

/// Spare node certificates that `start_tls` makes beyond the members': certificates from the
/// cluster's own CA that name no member.
pub const SPARE_NODE_CERTS: u64 = 2;

impl Harness {
    /// Starts `nodes` nodes and waits until one of them leads.
    pub async fn start(nodes: usize, manual_clock: bool) -> Harness {
        Harness::start_with(nodes, manual_clock, &[]).await
    }

    /// Like `start`, with more `serve` flags for every node.
    pub async fn start_with(nodes: usize, manual_clock: bool, serve_args: &[&str]) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let addrs = local_addrs(nodes).expect("held ports");
        let cluster = LocalCluster::new(binary().as_ref(), dir.path(), &addrs, manual_clock)
            .with_serve_args(serve_args);
        Harness::launch(cluster, None, dir).await
    }

    /// Like `start`, with `prepare` run on the cluster before its nodes start (to fill their
    /// data dirs, say).
    pub async fn start_prepared(
        nodes: usize,
        manual_clock: bool,
        prepare: impl FnOnce(&LocalCluster),
    ) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let addrs = local_addrs(nodes).expect("held ports");
        let cluster = LocalCluster::new(binary().as_ref(), dir.path(), &addrs, manual_clock);
        prepare(&cluster);
        Harness::launch(cluster, None, dir).await
    }

    /// Like `start`, with the cluster configured by `configure` first (flags for some nodes).
    pub async fn start_configured(
        nodes: usize,
        configure: impl FnOnce(LocalCluster) -> LocalCluster,
    ) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let addrs = local_addrs(nodes).expect("held ports");
        let cluster = configure(LocalCluster::new(
            binary().as_ref(),
            dir.path(),
            &addrs,
            false,
        ));
        Harness::launch(cluster, None, dir).await
    }

    /// Like `start`, with TLS on both planes and client certificates demanded, as
    /// `cluster --tls` runs it; the certificates are in the harness's dir, under `tls/`.
    pub async fn start_tls(nodes: usize, manual_clock: bool) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let addrs = local_addrs(nodes).expect("held ports");
        let certs = certs::ensure(dir.path(), nodes as u64 + SPARE_NODE_CERTS).unwrap();
        let cluster =
            LocalCluster::new(binary().as_ref(), dir.path(), &addrs, manual_clock).with_tls(&certs);
        let tls = Tls::load(&certs.client()).unwrap().client_config(None);
        Harness::launch(cluster, Some(tls), dir).await
    }

    /// Like `start_tls`, with authorization on from the cluster's creation, `admin` its admin
    /// (`serve --auth-admin admin`, as `cluster --tls` runs it). The harness's client is the
    /// admin's; [`Harness::client_as`] makes others. Waits until the policy is on.
    pub async fn start_authorized(nodes: usize, manual_clock: bool) -> Harness {
        Harness::start_authorized_with(nodes, manual_clock, |cluster| cluster).await
    }

    /// Like `start_authorized`, with client certificates optional: a client without one may
    /// bring a bearer token.
    pub async fn start_authorized_for_tokens(nodes: usize) -> Harness {
        Harness::start_authorized_with(nodes, false, LocalCluster::with_client_certs_optional).await
    }

    /// Like `start_authorized`, with the cluster configured by `configure` first.
    pub async fn start_authorized_with(
        nodes: usize,
        manual_clock: bool,
        configure: impl FnOnce(LocalCluster) -> LocalCluster,
    ) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let addrs = local_addrs(nodes).expect("held ports");
        let certs = certs::ensure(dir.path(), nodes as u64 + SPARE_NODE_CERTS).unwrap();
        let admin = certs.admin().expect("an admin certificate");
        let cluster = configure(
            LocalCluster::new(binary().as_ref(), dir.path(), &addrs, manual_clock)
                .with_tls(&certs)
                .with_auth(certs::ADMIN_NAME),
        );
        let tls = Tls::load(&admin).unwrap().client_config(None);
        let harness = Harness::launch(cluster, Some(tls), dir).await;
        wait_for(
            "authorization to be on",
            Duration::from_secs(10),
            || async {
                let me = harness.client.who_am_i().await.ok()?;
                me.auth_enabled.then_some(())
            },
        )
        .await;
        harness
    }

    /// The certificate files for identity `name`, issued from the cluster's CA the first time.
    pub fn identity_files(&self, name: &str) -> leasehold::tls::TlsFiles {
        let set = certs::ClusterCerts::open(&self.dir().join("tls"));
        match name {
            certs::CLIENT_NAME => set.client(),
            certs::ADMIN_NAME => set.admin().expect("an admin certificate"),
            _ => set.issue_client(name).expect("issue a client certificate"),
        }
    }

    /// Runs `leasehold ARGS` to the end, showing identity `name`'s certificate.
    pub fn cli_as(&self, name: &str, args: &[&str]) -> std::process::Output {
        let files = self.identity_files(name);
        command(&self.endpoints)
            .arg("--tls-ca")
            .arg(&files.ca)
            .arg("--tls-cert")
            .arg(&files.cert)
            .arg("--tls-key")
            .arg(&files.key)
            .args(args)
            .output()
            .expect("run leasehold")
    }

    /// A client of every node showing the certificate of identity `name` (see
    /// [`Harness::identity_files`]).
    pub fn client_as(&self, name: &str) -> LeaseClient {
        let ids: Vec<u64> = (1..=self.endpoints.len() as u64).collect();
        self.client_of_nodes_as(&ids, name)
    }

    /// A client of nodes `ids`, in that order, showing identity `name`'s certificate.
    pub fn client_of_nodes_as(&self, ids: &[u64], name: &str) -> LeaseClient {
        let tls = Tls::load(&self.identity_files(name))
            .unwrap()
            .client_config(None);
        let endpoints: Vec<String> = ids
            .iter()
            .map(|id| self.endpoints[(id - 1) as usize].clone())
            .collect();
        client_for(&endpoints, Some(&tls))
    }

    /// Like `start_tls`, for one node per pair of `addrs` (two may share a peer address, for
    /// a node that takes a removed one's place), with the cluster configured by `configure`
    /// first; only nodes 1 to `started` are started, the others when the test `restart`s them.
    pub async fn start_tls_at(
        addrs: &[PlaneAddrs],
        started: u64,
        configure: impl FnOnce(LocalCluster) -> LocalCluster,
    ) -> Harness {
        let dir = TempDir::new().expect("temp dir");
        let certs = certs::ensure(dir.path(), addrs.len() as u64 + SPARE_NODE_CERTS).unwrap();
        let cluster = configure(
            LocalCluster::new(binary().as_ref(), dir.path(), addrs, false).with_tls(&certs),
        );
        let tls = Tls::load(&certs.client()).unwrap().client_config(None);
        Harness::launch_some(cluster, Some(tls), dir, started).await
    }

    async fn launch(
        cluster: LocalCluster,
        tls: Option<tonic::transport::ClientTlsConfig>,
        dir: TempDir,
    ) -> Harness {
        let all = cluster.nodes().len() as u64;
        Harness::launch_some(cluster, tls, dir, all).await
    }

    /// Starts nodes 1 to `started` and waits until one of them leads.
    async fn launch_some(
        mut cluster: LocalCluster,
        tls: Option<tonic::transport::ClientTlsConfig>,
        dir: TempDir,
        started: u64,
    ) -> Harness {
        let endpoints = cluster.endpoints();
        for id in 1..=started {
            cluster.start(id).expect("start nodes");
        }
        let harness = Harness {
            client: client_for(&endpoints, tls.as_ref()),
            cluster,
            endpoints,
            tls,
            _dir: dir,
        };
        if std::env::var_os(KEEP_DIRS).is_some() {
            eprintln!(
                "node logs and data kept in {}",
                harness._dir.path().display()
            );
        }
        harness.formed(started).await;
        harness
    }

    /// Waits until the members among nodes 1 to `started` all answer and follow one leader in
    /// one term (a node started to `--join` later is no member yet). Every node of a new
    /// cluster campaigns as it forms it, so one that starts a little after the others can still
    /// unseat their first leader: a test that began as soon as the nodes up so far agreed saw
    /// its first write wait out that second election (a lease's measured life gained 0.4 s).
    async fn formed(&self, started: u64) {
        wait_for("the cluster to form", Duration::from_secs(20), || async {
            let nodes = self.status().await;
            let leader = nodes.iter().find(|n| n.role == pb::Role::Leader as i32)?;
            nodes
                .iter()
                .filter(|n| n.id <= started)
                .all(|n| n.leader == leader.id && n.term == leader.term)
                .then_some(())
        })
        .await
    }

    /// Where the harness keeps its nodes' dirs and logs (and, with TLS, `tls/`).
    pub fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// A connection to node `id`'s peer plane, as another node (or an attacker on the peers'
    /// network) would open it.
    pub async fn peer_channel(&self, id: u64) -> tonic::transport::Channel {
        connect(&self.cluster.nodes()[(id - 1) as usize].peer_addr).await
    }

    /// A connection to node `id`'s peer plane as another member: with TLS, showing the next
    /// node's certificate, as that member would.
    pub async fn member_channel(&self, id: u64) -> tonic::transport::Channel {
        let addr = &self.cluster.nodes()[(id - 1) as usize].peer_addr;
        if self.tls.is_none() {
            return connect(addr).await;
        }
        let count = self.endpoints.len() as u64;
        let set = certs::ClusterCerts::open(&self.dir().join("tls"));
        let other = Tls::load(&set.node(id % count + 1)).unwrap();
        let name = leasehold::tls::node_name(id);
        tonic::transport::Endpoint::from_shared(format!("https://{addr}"))
            .unwrap()
            .tls_config(other.client_config(Some(&name)))
            .unwrap()
            .connect()
            .await
            .unwrap()
    }

    /// Node `id`'s applied log from index 1, read back over its peer plane (`ReadLog`), for
    /// checkers that replay it. The node must not have purged any of it.
    pub async fn applied_log(&self, id: u64) -> Vec<(u64, Vec<leasehold::lease::Command>)> {
        use leasehold::proto::raft_v1::{raft_client::RaftClient, RaftMessage};
        use leasehold::raft::codec;
        let chunk = leasehold::limits::READ_LOG_MAX_ENTRIES;
        let mut client =
            RaftClient::new(self.member_channel(id).await).max_decoding_message_size(usize::MAX);
        let mut log: Vec<(u64, Vec<leasehold::lease::Command>)> = Vec::new();
        loop {
            let from = log.last().map_or(1, |(index, _)| index + 1);
            let request = RaftMessage {
                data: codec::encode(&(from, from + chunk - 1)).unwrap(),
            };
            let reply = client.read_log(request).await.expect("read the log");
            let entries: Vec<(u64, Vec<leasehold::lease::Command>)> =
                codec::decode(&reply.into_inner().data).unwrap();
            if entries.is_empty() {
                return log;
            }
            log.extend(entries);
        }
    }

    /// Waits until `lease` is free in the store (its expiry logged by the leader's tick, or a
    /// release).
    pub async fn until_free(&self, lease: &str) {
        wait_for("the lease to be free", Duration::from_secs(10), || async {
            let state = self.client.get_lease(lease).await.ok()?.outcome;
            state.holder.is_none().then_some(())
        })
        .await
    }

    /// The leader's applied log, replayed through the checkers' reference model: panics on an
    /// anomaly of fencing (a stale token accepted, tokens not growing) or of mutual exclusion
    /// (two holders at once in store time, a lease shorter than its TTL).
    pub async fn checked_log(&self) -> Vec<leasehold_check::Replayed> {
        let leader = self.leader().await;
        let log = self.applied_log(leader).await;
        let applied = leasehold_check::replay(&log).expect("the log replays");
        let mut anomalies = leasehold_check::fencing(&applied);
        anomalies.extend(leasehold_check::mutual_exclusion(&applied));
        assert!(anomalies.is_empty(), "{anomalies:#?}");
        applied
    }

    /// A plain connection to node `id`'s client port, for calls no `LeaseClient` makes.
    pub async fn client_channel(&self, id: u64) -> tonic::transport::Channel {
        connect(&self.endpoints[(id - 1) as usize]).await
    }

    /// A client that talks to node `id` only.
    pub fn client_of(&self, id: u64) -> LeaseClient {
        client_for(
            &[self.endpoints[(id - 1) as usize].clone()],
            self.tls.as_ref(),
        )
    }

    /// A client that knows nodes `ids`, in that order.
    pub fn client_of_nodes(&self, ids: &[u64]) -> LeaseClient {
        let endpoints: Vec<String> = ids
            .iter()
            .map(|id| self.endpoints[(id - 1) as usize].clone())
            .collect();
        client_for(&endpoints, self.tls.as_ref())
    }

    pub async fn status(&self) -> Vec<pb::NodeStatus> {
        self.client.status().await.unwrap_or_default()
    }

    /// The leader's id, once every live node agrees on one.
    pub async fn leader(&self) -> u64 {
        wait_for("a leader", Duration::from_secs(20), || async {
            let nodes = self.status().await;
            let leaders: Vec<u64> = nodes
                .iter()
                .filter(|n| n.role == pb::Role::Leader as i32)
                .map(|n| n.id)
                .collect();
            (leaders.len() == 1).then(|| leaders[0])
        })
        .await
    }

    /// A leader other than `old`.
    pub async fn new_leader(&self, old: u64) -> u64 {
        wait_for("a new leader", Duration::from_secs(20), || async {
            let leader = self.leader().await;
            (leader != old).then_some(leader)
        })
        .await
    }

    /// Node `id`'s status, if it has applied as far as the leader and holds the same state
    /// there (the same state digest, not only the same index).
    pub async fn caught_up(&self, id: u64) -> Option<pb::NodeStatus> {
        let nodes = self.status().await;
        let leader = nodes.iter().find(|n| n.role == pb::Role::Leader as i32)?;
        let node = nodes.iter().find(|n| n.id == id)?;
        (node.applied_index == leader.applied_index && node.state_digest == leader.state_digest)
            .then(|| node.clone())
    }

    /// Makes node `id` of three the leader, with no race: the third node is paused while a write
    /// reaches the leader and `id`, so that `id`'s log is longer than the third's; then the
    /// leader is killed and the third resumes. Of the two left, only `id` can win: the third
    /// asks for a pre-vote and `id` says no to its shorter log, while `id` asks once its leader
    /// has been silent for a lease and a timeout, and the third says yes. The old leader then
    /// restarts and follows. Costs one write (with the key `MAKE_LEADER_KEY`) and one election.
    pub async fn make_leader(&mut self, id: u64) {
        assert_eq!(self.endpoints.len(), 3, "make_leader handles three nodes");
        let leader = self.leader().await;
        if leader == id {
            return;
        }
        let third = (1..=3).find(|n| *n != id && *n != leader).unwrap();
        self.cluster.signal(third, libc::SIGSTOP);
        let put = self
            .client_of(leader)
            .put(MAKE_LEADER_KEY, b"the third node misses this", None)
            .await
            .unwrap();
        assert!(written(&put), "a write the third node misses: {put:?}");
        self.kill(leader);
        self.cluster.signal(third, libc::SIGCONT);
        let alone = self.client_of(id);
        wait_for(
            &format!("node {id} to lead"),
            Duration::from_secs(20),
            || async {
                let status = alone.node_status().await.ok()?;
                (status.role == pb::Role::Leader as i32).then_some(())
            },
        )
        .await;
        self.restart(leader);
        wait_for(
            "the old leader to follow",
            Duration::from_secs(20),
            || async {
                self.caught_up(leader)
                    .await
                    .filter(|s| s.role == pb::Role::Follower as i32 && s.leader == id)
            },
        )
        .await;
        assert_eq!(self.leader().await, id, "node {id} leads");
    }

    /// Once another node than the dead `id` leads, restarts `id` and waits until it holds the
    /// leader's state.
    pub async fn rejoin_after_failover(&mut self, id: u64) {
        self.new_leader(id).await;
        self.restart(id);
        wait_for(
            "the restarted node to catch up",
            Duration::from_secs(20),
            || self.caught_up(id),
        )
        .await;
    }

    pub fn kill(&mut self, id: u64) {
        self.cluster.kill(id);
    }

    /// Stops node `id` as a service manager does, with SIGTERM, and reaps it once it exits.
    pub async fn stop(&mut self, id: u64) -> std::process::ExitStatus {
        self.cluster.signal(id, libc::SIGTERM);
        wait_for(
            &format!("node {id} to exit on SIGTERM"),
            Duration::from_secs(10),
            || std::future::ready(self.cluster.try_reap(id)),
        )
        .await
    }

    /// Everything node `id` has logged so far.
    pub fn log_of(&self, id: u64) -> String {
        let node = self.cluster.nodes().iter().find(|n| n.id == id).unwrap();
        std::fs::read_to_string(&node.log).unwrap_or_default()
    }

    pub fn restart(&mut self, id: u64) {
        self.cluster.start(id).expect("restart node");
    }
}

/// A failed test shows the end of every node's log, so that a failure seen only in CI can
/// still be explained from its output.
impl Drop for Harness {
    fn drop(&mut self) {
        if std::env::var_os(KEEP_DIRS).is_some() {
            // Killed now, while the dir is still ours to leave behind.
            for id in 1..=self.endpoints.len() as u64 {
                self.cluster.kill(id);
            }
            let dir = std::mem::replace(&mut self._dir, TempDir::new().expect("temp dir"));
            let _ = dir.keep();
        }
        if !std::thread::panicking() {
            return;
        }
        for node in self.cluster.nodes() {
            let log = std::fs::read_to_string(&node.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!("---- node {} log, last {} lines ----", node.id, tail.len());
            for line in tail {
                eprintln!("{line}");
            }
        }
    }
}

/// The key of the write [`Harness::make_leader`] makes.
pub const MAKE_LEADER_KEY: &str = "make-leader";

/// Set (to anything), the harness leaves its nodes' data dirs and whole logs behind.
const KEEP_DIRS: &str = "LEASEHOLD_KEEP_TEST_DIRS";

/// How many lines of each node's log a failed test prints.
const LOG_TAIL_LINES: usize = 60;

/// A plain connection to `addr`.
async fn connect(addr: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

/// A client of `endpoints`, over TLS when `tls` is given.
fn client_for(
    endpoints: &[String],
    tls: Option<&tonic::transport::ClientTlsConfig>,
) -> LeaseClient {
    let client = LeaseClient::new(endpoints).unwrap();
    match tls {
        Some(tls) => client.with_tls(tls.clone()).unwrap(),
        None => client,
    }
}

/// `cluster` with an HTTP listener on a held loopback port for each node (`--http-listen`),
/// and their addresses.
pub fn with_http(cluster: LocalCluster) -> (LocalCluster, Vec<String>) {
    let ports = HeldPort::any(cluster.nodes().len()).expect("held ports");
    let addrs: Vec<String> = ports.iter().map(HeldPort::addr).collect();
    let cluster = addrs
        .iter()
        .enumerate()
        .fold(cluster, |cluster, (i, addr)| {
            cluster.with_node_args(i as u64 + 1, &["--http-listen", addr])
        });
    (cluster.holding(ports), addrs)
}

/// Polls `check` until it yields a value; panics naming `what` after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            started.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long a lease lived, bracketed from outside as the fault suite's probe brackets it: the
/// lease's grant fell between its acquire's send and answer, and its end between a rival's last
/// refused acquire and the one granted.
#[derive(Clone, Copy, Debug)]
pub struct LeaseLife {
    /// From the acquire's send to the rival's grant's answer: the lease lived no longer.
    pub at_most: Duration,
    /// From the acquire's answer to the send of the rival's last refused acquire: the lease
    /// lived at least this long (`None` if the rival was never refused).
    pub at_least: Option<Duration>,
}

impl LeaseLife {
    /// Whether the lease may have lived its `ttl`, and no more than `over` past it: it fails
    /// only where the bracket shows a life shorter than `ttl` or longer than `ttl + over`.
    pub fn within(&self, ttl: Duration, over: Duration) -> bool {
        self.at_most >= ttl && self.at_least.is_none_or(|least| least <= ttl + over)
    }
}

/// A rival's acquires of `lease` through `rival`, every 50 ms until one is granted (for at
/// most `give_up`), bracketing the life of the grant whose acquire was sent at `sent` and
/// answered at `answered`. A call that fails says nothing of the lease and is not counted.
pub async fn rival_until_granted(
    rival: &LeaseClient,
    lease: &str,
    (sent, answered): (Instant, Instant),
    give_up: Duration,
) -> LeaseLife {
    let mut at_least = None;
    loop {
        let asked = Instant::now();
        if let Ok(answer) = rival.acquire(lease, "rival", 60_000).await {
            if granted(&answer).is_some() {
                let at_most = sent.elapsed();
                return LeaseLife { at_most, at_least };
            }
            at_least = Some(asked.saturating_duration_since(answered));
        }
        assert!(sent.elapsed() < give_up, "the lease {lease} was never free");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn granted(response: &Answer<Acquired>) -> Option<u64> {
    response.outcome.token()
}

pub fn written(response: &Answer<Written>) -> bool {
    response.outcome.is_written()
}

/// The value of the sample `name` (with its labels, if any) in a Prometheus text.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        line.strip_prefix(name)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// A three-node cluster with each node's metrics endpoint on a held port.
pub async fn with_metrics() -> (Harness, Vec<String>) {
    let ports = HeldPort::any(3).unwrap();
    let addrs: Vec<String> = ports.iter().map(HeldPort::addr).collect();
    let h = Harness::start_configured(3, |mut cluster| {
        for (id, addr) in (1..).zip(&addrs) {
            cluster = cluster.with_node_args(id, &["--metrics-listen", addr]);
        }
        cluster.holding(ports)
    })
    .await;
    (h, addrs)
}

/// A plain HTTP/1.0 GET of `path` from `addr`: the status code and the body.
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply.split_once("\r\n\r\n").unwrap_or((&reply, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}

/// Waits up to 10 s for a process that is not our child to exit; panics if it does not.
pub fn wait_until_dead(pid: i32) {
    let started = Instant::now();
    while alive(pid) {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "pid {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether `pid` runs: it exists and is not a zombie waiting for a parent to reap it.
pub fn alive(pid: i32) -> bool {
    process_state(pid).is_some_and(|state| state != 'Z')
}

/// The state `/proc` gives process `pid` (`R`, `S`, `T` when stopped, `Z` a zombie...), if it
/// exists.
pub fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The state follows the command name, which is in parentheses and may hold spaces.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.trim_start().chars().next()
}

/// How long `stream` stays open once the test stops writing to it: read until the node closes
/// it (end of stream, or reset), ignoring what it sends. `Err` with what it sent if it is still
/// open after `limit`.
pub fn closed_within(
    mut stream: impl std::io::Read,
    started: std::time::Instant,
    limit: Duration,
) -> Result<Duration, String> {
    let mut buf = [0u8; 4096];
    let mut seen = 0usize;
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(started.elapsed()),
            Ok(n) => seen += n,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => return Ok(started.elapsed()),
        }
        if started.elapsed() > limit {
            return Err(format!(
                "still open after {} ms ({seen} bytes received)",
                started.elapsed().as_millis()
            ));
        }
    }
}
