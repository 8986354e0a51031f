//! One running node, in rooms: the transports (`grpc`, `http`, `client_lanes`) call the typed
//! API (`api`), which calls the node itself (this module: the Raft instance, its applied state,
//! writes, reads, leadership, the leader's stamps and clock, membership, the assembly); the peer
//! plane (`peer`) serves the other members and calls them. `error` maps a `NodeError` to a gRPC
//! status, once.

mod api;
mod assembly;
mod caps;
mod client_lanes;
mod clock;
mod clock_control;
mod clock_probe;
mod election_watch;
mod error;
mod etcd;
mod forwarder;
mod grpc;
mod hand_over;
mod http;
mod lanes;
mod leadership;
mod link;
mod local_clock;
mod majority;
mod membership;
mod peer;
mod peer_clocks;
mod planes;
mod probes;
mod quorum_time;
mod quorum_watch;
mod read;
mod server;
mod stamps;
mod ticker;
mod write;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) use assembly::Running;
pub use assembly::StartError;
pub use caps::Caps;
pub(crate) use clock::LeaderClock;
pub(crate) use clock_probe::follow_clock;
use election_watch::watch_elections;
pub use error::Capped;
pub(crate) use error::{Budget, NodeError};
pub(crate) use hand_over::HandedOver;
pub use http::CONSOLE_CONTROL_ENV;
pub(crate) use link::PeerLink;
#[cfg(test)]
pub(crate) use local_clock::RATE_REAL;
pub(crate) use peer::link::GrpcLink;
pub use peer_clocks::ClockReading;
pub use planes::Listeners;
use quorum_watch::QuorumWatch;
pub use read::Reading;
pub use server::{check_clock_mode, check_flags, run, run_on};
// What only the simulation (`crate::sim`) reaches: it builds nodes as `serve` does, on its
// own transports, and reads the refusals' metadata and bounds.
#[cfg(test)]
pub(crate) use link::{EtcdRead, EtcdReadAnswering};
#[cfg(test)]
pub(crate) use {
    api::{ClusterApi, Credentials, Deadline, LeaseApi, Plane},
    assembly::{start, Storage, Transport},
    error::Code,
    error::INDETERMINATE_KEY,
    link::{Carried, ForwardAnswer, Forwarded, OnBehalf, Read, ReadAnswer},
};

use crate::raft::{BootLog, Channels, LogStore, Proposer, Raft, Reads, SharedState};
use crate::NodeId;

/// How a node is started: `leasehold serve`'s flags.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's id among the voters of `peers`.
    pub id: NodeId,
    /// The client plane's address to bind.
    pub listen: std::net::SocketAddr,
    /// The peer plane's address to bind; peers reach it at this node's entry in `peers`.
    pub peer_listen: std::net::SocketAddr,
    /// The client address this node gives out, in status.
    pub advertise: String,
    /// Where the log, the snapshots and the node's saved state live.
    pub data_dir: PathBuf,
    /// Every voter's peer address, this node included, by id. The same on every node.
    pub peers: BTreeMap<NodeId, String>,
    /// Only `Advance` moves store time; the leader stamps nothing.
    pub manual_clock: bool,
    /// Applied entries between snapshots.
    pub snapshot_every: u64,
    /// TLS on both planes (mutual on the peer plane), or none.
    pub tls: Option<crate::tls::TlsFiles>,
    /// With TLS, clients must show a certificate from the same CA as well.
    pub client_cert_auth: bool,
    /// With TLS, the identity that becomes the first admin when this node, leading, finds that
    /// the policy was never on (a new cluster). Until it is, the node serves no client (see
    /// `api::caller`).
    pub auth_admin: Option<String>,
    /// Requests worked on at once; past it, RESOURCE_EXHAUSTED (see
    /// [`crate::limits::MAX_CONCURRENT_REQUESTS`]).
    pub max_requests: usize,
    /// Watches served at once; past it, RESOURCE_EXHAUSTED (see
    /// [`crate::limits::MAX_WATCHES`]).
    pub max_watches: usize,
    /// The caps on sessions, leases and rows past which this node, leading, refuses a write
    /// (see `caps`).
    pub caps: Caps,
    /// Store time a lease stays free before this node, leading, has it forgotten.
    pub lease_retention_ms: u64,
    /// Wait to be added to a running cluster (`leasehold member add`) instead of forming one
    /// with `peers`; `peers` then names this node only.
    pub join: bool,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Where to serve the client API over HTTP/1.1 and JSON (`node::http`), if anywhere.
    pub http_listen: Option<std::net::SocketAddr>,
    /// A file that sets this node's clock's rate and makes it jump (see `clock_control`): the
    /// fault suite's, hidden from `serve --help`.
    pub clock_control: Option<PathBuf>,
}

/// A handle to the running node, cheap to clone into every service.
#[derive(Clone)]
pub(crate) struct Node {
    inner: Arc<NodeInner>,
}

struct NodeInner {
    id: NodeId,
    raft: Raft,
    /// Gathers concurrent writes into shared log entries.
    proposer: Proposer,
    /// Confirms leadership for reads, one ReadIndex for all that arrive together.
    reads: Reads,
    /// Sends the writes this node gets while it follows to the leader, in batches.
    forwarder: forwarder::Forwarder,
    /// Calls to peers outside openraft: the forwarder's batches, a new leader's question for
    /// the time its peers carry.
    link: Arc<dyn PeerLink>,
    /// A reader of the same log Raft writes, for `ReadLog`; `None` where the log is not a
    /// `LogStore` (the simulation's, in memory).
    log: Option<LogStore>,
    state: Arc<SharedState>,
    clock: LeaderClock,
    /// What this node makes of its own clock against its peers' (see `clock_probe`).
    own_clock: clock_probe::OwnClock,
    channels: Channels,
    manual_clock: bool,
    peers: BTreeMap<NodeId, String>,
    /// This node's client address, as given out in status.
    advertise: String,
    /// Where it serves HTTP/JSON and its console, as given out in status (`http_address`).
    http_address: Option<String>,
    /// Where this node keeps its log, vote and snapshot.
    data_dir: std::path::PathBuf,
    lease_retention_ms: u64,
    auth_admin: Option<String>,
    tls: bool,
    client_certificates: bool,
    /// Whether the policy has been set up, for [`NodeConfig::auth_admin`].
    auth_set_up: api::SetUp,
    /// One permit per request being worked on, up to `NodeConfig::max_requests`.
    requests: RequestSlots,
    /// One permit per open watch, up to `NodeConfig::max_watches`: a budget apart, so that
    /// readers holding watches never take the places of writes.
    watches: RequestSlots,
    /// Whether this node may campaign, as [`Node::set_elections`] last said (at first, the
    /// config's `enable_elect`): openraft's own switch cannot be read back from a running Raft.
    elections: std::sync::atomic::AtomicBool,
    /// Whether this node leads a quorum that stopped answering it.
    quorum: QuorumWatch,
    /// Whether this node has been a member: from the start, unless it was started with
    /// `--join`, when it is once it first finds itself in a membership. Until then a
    /// membership without it is one from before its addition, which a joining node applies on
    /// its way to the one that adds it, not its removal.
    was_member: std::sync::atomic::AtomicBool,
    /// Closed while this node, leading, hands leadership over before it stops (see
    /// `hand_over`): proposals then wait for the next leader.
    proposals: hand_over::ProposalGate,
    /// The caps on what one client keeps in the state, and the writes this node, leading,
    /// has proposed under them and not yet seen answered (see `caps`).
    caps: Caps,
    opening: caps::Opening,
}

/// A bound on what a node works on at once: its requests, or its watches.
struct RequestSlots {
    permits: Arc<tokio::sync::Semaphore>,
    limit: usize,
    of: Budget,
}

impl RequestSlots {
    fn new(limit: usize, of: Budget) -> Self {
        RequestSlots {
            permits: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
            of,
        }
    }

    /// Room for `count` more requests, held until the permit is dropped; refused at once, with
    /// nothing queued, when that would pass the limit.
    fn admit(&self, count: usize) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        u32::try_from(count)
            .ok()
            .and_then(|n| self.permits.clone().try_acquire_many_owned(n).ok())
            .ok_or(NodeError::Overloaded {
                limit: self.limit,
                of: self.of,
            })
    }
}

impl Node {
    /// The node around a started `raft`: `state` is its state machine's, `log` a reader of its
    /// log, `link` how this node's writes reach the leader while it follows, `channels` the
    /// peers' channels (reads forwarded to the leader, status), `boot` what it found on disk.
    pub fn new(
        config: &NodeConfig,
        raft: Raft,
        log: Option<LogStore>,
        state: Arc<SharedState>,
        channels: Channels,
        link: Arc<dyn PeerLink>,
        boot: BootLog,
    ) -> Self {
        Node {
            inner: Arc::new(NodeInner {
                id: config.id,
                proposer: Proposer::start(raft.clone()),
                // Everything this node acknowledged before a restart is at or below the last
                // index it found on disk: it serves no read (and starts no clock) before it has
                // applied that far.
                reads: Reads::start(raft.clone(), boot),
                forwarder: forwarder::Forwarder::new(link.clone()),
                elections: std::sync::atomic::AtomicBool::new(raft.config().enable_elect),
                quorum: QuorumWatch::start(raft.clone()),
                was_member: std::sync::atomic::AtomicBool::new(!config.join),
                proposals: hand_over::ProposalGate::default(),
                caps: config.caps,
                opening: caps::Opening::default(),
                link,
                raft,
                log,
                state,
                clock: LeaderClock::default(),
                own_clock: clock_probe::OwnClock::default(),
                channels,
                manual_clock: config.manual_clock,
                peers: config.peers.clone(),
                advertise: config.advertise.clone(),
                http_address: (config.http_listen)
                    .and_then(|at| http_address(at, &config.advertise)),
                data_dir: config.data_dir.clone(),
                lease_retention_ms: config.lease_retention_ms,
                auth_admin: config.auth_admin.clone(),
                tls: config.tls.is_some(),
                client_certificates: config.tls.is_some() && config.client_cert_auth,
                auth_set_up: api::SetUp::default(),
                requests: RequestSlots::new(config.max_requests, Budget::Requests),
                watches: RequestSlots::new(config.max_watches, Budget::Watches),
            }),
        }
    }

    /// Room for `count` more requests, held until the permit is dropped; refused at once when
    /// the node already works on `NodeConfig::max_requests`.
    pub fn admit(&self, count: usize) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        self.inner.requests.admit(count)
    }

    /// Room for one more watch, held for as long as it runs; refused at once when the node
    /// already serves `NodeConfig::max_watches`.
    pub fn admit_watch(&self) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        self.inner.watches.admit(1)
    }

    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    pub fn raft(&self) -> &Raft {
        &self.inner.raft
    }

    /// Runs this node's own clock at `rate_ppm` parts per million of real time from now on,
    /// after a jump of `jump_ms` (see `local_clock`): the simulation's and the fault suite's
    /// clock that lies.
    pub fn set_clock(&self, rate_ppm: u64, jump_ms: i64) {
        self.inner.clock.local().set(rate_ppm, jump_ms);
    }

    /// Lets this node campaign, or stops it. Stopping takes effect at once; campaigning again
    /// within a heartbeat, once [`watch_elections`] sees no vote penalty holding. The
    /// simulation's scenarios choose who may lead next with it.
    #[cfg(test)]
    pub fn set_elections(&self, enabled: bool) {
        self.inner
            .elections
            .store(enabled, std::sync::atomic::Ordering::Relaxed);
        if !enabled {
            self.inner.raft.runtime_config().elect(false);
        }
    }

    /// How this node calls its peers outside openraft (forwarded writes and reads).
    pub fn link(&self) -> &Arc<dyn PeerLink> {
        &self.inner.link
    }

    pub fn channels(&self) -> &Channels {
        &self.inner.channels
    }

    /// Whether this node is in a membership yet (a node started with `--join` is not, until it
    /// is added).
    /// Ok while this node is a member; otherwise why not: it waits to be added (`--join`), or
    /// the cluster removed it.
    pub fn membership_standing(&self) -> Result<(), NodeError> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        self.standing_in(&m.membership_config)
    }

    /// Every member's id, voters and learners: [`members`](Self::members) without the
    /// addresses, for the peer gate, which asks on every call.
    pub fn member_ids(&self) -> Vec<NodeId> {
        let ids: Vec<NodeId> = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow();
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, _)| *id)
                .collect()
        };
        if ids.is_empty() {
            self.inner.peers.keys().copied().collect()
        } else {
            ids
        }
    }

    /// Every member's peer address, by id, voters and learners: the membership this node
    /// knows, or `--peers` before it knows one.
    pub fn members(&self) -> BTreeMap<NodeId, String> {
        let members: BTreeMap<NodeId, String> = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow();
            m.membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (*id, node.addr.clone()))
                .collect()
        };
        if members.is_empty() {
            self.inner.peers.clone()
        } else {
            members
        }
    }

    /// This node's client address, as given out in status.
    pub fn advertise(&self) -> &str {
        &self.inner.advertise
    }

    /// Where this node serves HTTP/JSON and its console, if it does.
    pub fn http_address(&self) -> Option<&str> {
        self.inner.http_address.as_deref()
    }

    /// Where this node keeps its log, vote and snapshot.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.inner.data_dir
    }

    /// The filesystem of the data dir, in bytes, as this node's user sees it (blocks free to
    /// it, not to root): free and whole; `None` where it cannot be read.
    pub fn disk_space(&self) -> Option<DiskSpace> {
        let fs = rustix::fs::statvfs(self.data_dir()).ok()?;
        let bytes = |blocks: u64| blocks.saturating_mul(fs.f_frsize);
        Some(DiskSpace {
            free: bytes(fs.f_bavail),
            size: bytes(fs.f_blocks),
        })
    }

    /// The size of its snapshot file, 0 when it has none.
    pub fn snapshot_bytes(&self) -> u64 {
        std::fs::metadata(crate::raft::snapshot_path(self.data_dir())).map_or(0, |m| m.len())
    }

    /// Store time a lease stays free before this node, leading, has it forgotten.
    pub fn lease_retention_ms(&self) -> u64 {
        self.inner.lease_retention_ms
    }

    /// The first admin this node turns authorization on with, on a new cluster.
    pub fn auth_admin(&self) -> Option<&str> {
        self.inner.auth_admin.as_deref()
    }

    /// Refuses while the cluster, created with an admin, has not turned authorization on.
    pub fn auth_set_up(&self) -> Result<(), NodeError> {
        self.inner.auth_set_up.check(self)
    }

    /// Whether this node serves its clients over TLS.
    pub fn tls(&self) -> bool {
        self.inner.tls
    }

    /// Whether this node's clients must show a certificate, and so have an identity.
    pub fn client_certificates(&self) -> bool {
        self.inner.client_certificates
    }

    pub fn manual_clock(&self) -> bool {
        self.inner.manual_clock
    }

    pub fn state(&self) -> &SharedState {
        &self.inner.state
    }

    /// Stops Raft, then lets a purge of the log still waiting for its snapshot end (see
    /// `LogStore::settled`), so that nothing of the node writes to its data dir afterwards.
    pub async fn shut_down(&self) {
        let _ = self.inner.raft.shutdown().await;
        if let Some(log) = &self.inner.log {
            if let Err(e) = log.settled().await {
                // The state machine stopped before the snapshot it waited for was durable: the
                // log keeps the entries, which the next start recovers from.
                tracing::info!(error = %e, "a purge of the log was left for the next start");
            }
        }
    }
}

/// The filesystem of a node's data dir ([`Node::disk_space`]), in bytes.
#[derive(Clone, Copy, Debug)]
pub struct DiskSpace {
    /// Free to the node's user.
    pub free: u64,
    /// The whole filesystem.
    pub size: u64,
}

/// The address people reach HTTP bound at `at` by: `at` itself, or, bound to every address, the
/// client address's host (`advertise`, `host:port`) with `at`'s port; none when that host names
/// every address too (nothing to link to).
fn http_address(at: std::net::SocketAddr, advertise: &str) -> Option<String> {
    if !at.ip().is_unspecified() {
        return Some(at.to_string());
    }
    let (host, _) = advertise.rsplit_once(':')?;
    let every = match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<std::net::IpAddr>()
    {
        Ok(ip) => ip.is_unspecified(),
        Err(_) => false,
    };
    (!every).then(|| format!("{host}:{}", at.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A node bound to every address is reached by its client address's host.
    #[test]
    fn the_http_address_names_a_host_people_reach() {
        let at = |a: &str| a.parse().unwrap();
        let given = |bound: &str, advertise: &str| super::http_address(at(bound), advertise);
        let named = given("0.0.0.0:7201", "db1.example:7001");
        assert_eq!(named.as_deref(), Some("db1.example:7201"));
        let v6 = given("[::]:7201", "[::1]:7001");
        assert_eq!(v6.as_deref(), Some("[::1]:7201"));
        let bound = given("127.0.0.1:7202", "127.0.0.1:7002");
        assert_eq!(bound.as_deref(), Some("127.0.0.1:7202"));
        assert_eq!(
            given("0.0.0.0:7201", "0.0.0.0:7001"),
            None,
            "no host to link"
        );
        assert_eq!(given("[::]:7201", "[::]:7001"), None, "no host to link");
    }

    #[test]
    fn requests_past_the_limit_are_refused_at_once_and_admitted_again_once_room_is_made() {
        let admission = RequestSlots::new(3, Budget::Requests);
        let first = admission.admit(2).unwrap();
        let refused = admission.admit(2).unwrap_err();
        assert!(
            matches!(
                refused,
                NodeError::Overloaded {
                    limit: 3,
                    of: Budget::Requests
                }
            ),
            "{refused}"
        );
        let status = tonic::Status::from(refused);
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(
            status.message().contains("limit of 3"),
            "{}",
            status.message()
        );
        assert!(
            status.metadata().get(INDETERMINATE_KEY).is_none(),
            "nothing was queued"
        );
        drop(first);
        assert!(
            admission.admit(3).is_ok(),
            "room again once the first requests are done"
        );
        assert!(admission.admit(usize::MAX).is_err());
    }
}
