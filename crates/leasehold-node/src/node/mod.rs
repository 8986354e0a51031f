//! One running node: the Raft instance, its applied state, the leader's clock, and the gRPC
//! services that turn requests into proposals and linearizable reads.

mod api;
mod assembly;
mod client_lanes;
mod clock;
mod election_watch;
mod error;
mod forwarder;
mod grpc;
mod http;
mod lanes;
mod membership;
mod peer_gate;
mod peer_link;
mod planes;
mod probes;
mod quorum_watch;
mod raft_service;
mod server;
mod status;
mod ticker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use openraft::error::{CheckIsLeaderError, ForwardToLeader, RaftError};
use openraft::{BasicNode, ServerState};

pub(crate) use assembly::Running;
pub use assembly::StartError;
pub(crate) use clock::LeaderClock;
use election_watch::watch_elections;
pub(crate) use error::NodeError;
pub(crate) use peer_link::Carried;
pub(crate) use peer_link::{GrpcLink, PeerLink};
use quorum_watch::QuorumWatch;
pub use server::{check_clock_mode, check_flags, run};
// What only the simulation (`crate::sim`) reaches: it builds nodes as `serve` does, on its
// own transports, and reads the refusals' metadata and bounds.
#[cfg(test)]
pub(crate) use {
    api::{Call, Caller, Credentials, Deadline, LeaseApi, Plane},
    assembly::{start, Storage, Transport},
    error::Code,
    error::INDETERMINATE_KEY,
    peer_link::{ForwardAnswer, Forwarded, ReadAnswer},
};

use crate::limits::{
    CARRY_REFRESH_AFTER, LEADERS_FOLLOWED, LEADER_WAIT, PEER_APPLY_WAIT, QUORUM_WAIT,
    READ_LOG_MAX_BYTES, READ_LOG_MAX_ENTRIES,
};
use crate::raft::state_machine::Applying;
use crate::raft::{
    Applied, BootLog, Channels, LogId, LogStore, NodeId, Proposer, Raft, Reads, SharedState,
};
use leasehold_core::{validate, Batch, Command, Op, RequestId};

/// The last index a `ReadLog` call for `from..=to` reads, with `applied` entries applied: no
/// further than what is applied, nor than [`READ_LOG_MAX_ENTRIES`] entries.
fn read_log_end(from: u64, to: u64, applied: u64) -> u64 {
    to.min(applied)
        .min(from.saturating_add(READ_LOG_MAX_ENTRIES - 1))
}

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
    /// `authz`).
    pub auth_admin: Option<String>,
    /// Requests worked on at once; past it, RESOURCE_EXHAUSTED (see
    /// [`crate::limits::MAX_CONCURRENT_REQUESTS`]).
    pub max_requests: usize,
    /// Store time a lease stays free before this node, leading, has it forgotten.
    pub lease_retention_ms: u64,
    /// Wait to be added to a running cluster (`leasehold member add`) instead of forming one
    /// with `peers`; `peers` then names this node only.
    pub join: bool,
    /// Where to serve `/metrics`, `/healthz` and `/readyz`, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Where to serve the client API over HTTP/1.1 and JSON (`http_api`), if anywhere.
    pub http_listen: Option<std::net::SocketAddr>,
}

/// Whether a write slow to commit has a tick logged after it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refresh {
    WhenSlow,
    /// The refreshing tick itself.
    Never,
}

/// The refresh of carried time claimed from the leader clock, released however its task ends.
struct RefreshClaim(Node);

impl Drop for RefreshClaim {
    fn drop(&mut self) {
        self.0.inner.clock.refreshed();
    }
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
    channels: Channels,
    manual_clock: bool,
    peers: BTreeMap<NodeId, String>,
    /// This node's client address, as given out in status.
    advertise: String,
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
    /// Whether this node may campaign, as [`Node::set_elections`] last said (at first, the
    /// config's `enable_elect`): openraft's own switch cannot be read back from a running Raft.
    elections: std::sync::atomic::AtomicBool,
    /// Whether this node leads a quorum that stopped answering it.
    quorum: QuorumWatch,
}

/// A bound on the requests a node works on at once.
struct RequestSlots {
    permits: Arc<tokio::sync::Semaphore>,
    limit: usize,
}

impl RequestSlots {
    fn new(limit: usize) -> Self {
        RequestSlots {
            permits: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
        }
    }

    /// Room for `count` more requests, held until the permit is dropped; refused at once, with
    /// nothing queued, when that would pass the limit.
    fn admit(&self, count: usize) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        u32::try_from(count)
            .ok()
            .and_then(|n| self.permits.clone().try_acquire_many_owned(n).ok())
            .ok_or(NodeError::Overloaded { limit: self.limit })
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
                link,
                raft,
                log,
                state,
                clock: LeaderClock::default(),
                channels,
                manual_clock: config.manual_clock,
                peers: config.peers.clone(),
                advertise: config.advertise.clone(),
                data_dir: config.data_dir.clone(),
                lease_retention_ms: config.lease_retention_ms,
                auth_admin: config.auth_admin.clone(),
                tls: config.tls.is_some(),
                client_certificates: config.tls.is_some() && config.client_cert_auth,
                auth_set_up: api::SetUp::default(),
                requests: RequestSlots::new(config.max_requests),
            }),
        }
    }

    /// Room for `count` more requests, held until the permit is dropped; refused at once when
    /// the node already works on `NodeConfig::max_requests`.
    pub fn admit(&self, count: usize) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        self.inner.requests.admit(count)
    }

    pub fn id(&self) -> NodeId {
        self.inner.id
    }

    pub fn raft(&self) -> &Raft {
        &self.inner.raft
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
    pub fn is_member(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config
            .membership()
            .get_node(&self.inner.id)
            .is_some()
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

    /// Where this node keeps its log, vote and snapshot.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.inner.data_dir
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

    fn address_of(&self, id: NodeId) -> Option<String> {
        let metrics = self.inner.raft.metrics();
        let from_membership = metrics
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|node: &BasicNode| node.addr.clone());
        from_membership.or_else(|| self.inner.peers.get(&id).cloned())
    }

    fn not_leader(&self, leader: Option<NodeId>) -> NodeError {
        NodeError::NotLeader {
            me: self.inner.id,
            leader: leader.and_then(|id| self.address_of(id).map(|addr| (id, addr))),
        }
    }

    /// Ok when this node leads; `NotLeader` naming the leader otherwise. Waits out an
    /// election.
    pub(super) async fn leading(&self) -> Result<(), NodeError> {
        self.ensure_leader().await.map(|_| ())
    }

    /// Ok when this node leads; the leader to forward to otherwise. Waits out an election.
    async fn ensure_leader(&self) -> Result<u64, NodeError> {
        let mut metrics = self.inner.raft.metrics();
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        loop {
            // Copy out and drop the borrow at once: it holds the metrics channel's read lock,
            // and taking it again below (`not_leader` reads the membership) while openraft waits
            // to publish new metrics deadlocks the runtime's threads. The fault suite and the
            // etcd comparison each found a node hung exactly so, after a leader change.
            let (running, leader, state, term) = {
                let m = metrics.borrow_and_update();
                (
                    m.running_state.clone(),
                    m.current_leader,
                    m.state,
                    m.current_term,
                )
            };
            if let Err(fatal) = running {
                return Err(NodeError::RaftStopped(fatal.to_string()));
            }
            match leader {
                Some(leader) if leader == self.inner.id && state == ServerState::Leader => {
                    return Ok(term)
                }
                Some(leader) if leader != self.inner.id => {
                    return Err(self.not_leader(Some(leader)))
                }
                _ => {}
            }
            match tokio::time::timeout_at(deadline, metrics.changed()).await {
                Err(_) => return Err(NodeError::NoLeader(LEADER_WAIT)),
                Ok(Err(_)) => return Err(NodeError::ShuttingDown),
                Ok(Ok(())) => {}
            }
        }
    }

    /// The store time to stamp on a command proposed now in `term`; `None` under the manual clock.
    async fn stamp(&self, term: u64) -> Result<Option<u64>, NodeError> {
        if self.inner.manual_clock {
            return Ok(None);
        }
        if let Some(ms) = self.inner.clock.stamp(term) {
            return Ok(Some(ms));
        }
        // First proposal of this term: continue from the last time in the log, which is the
        // applied time once this term's first entry, and so every earlier one, is applied, plus
        // the time measured since it was appended, here or, if more, at a peer (see `clock`).
        self.confirm_leadership().await?;
        // The confirmation is shared by the writes that arrive together; the question to the
        // peers is asked by the first of them, and the rest find the term started.
        let _starting = self.inner.clock.starting().await;
        if let Some(ms) = self.inner.clock.stamp(term) {
            return Ok(Some(ms));
        }
        let own = self.carried_time();
        let oldest = clock::counts_from(own, self.inner.state.read().last_applied);
        let members = self.members();
        let voters = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow();
            m.membership_config.membership().voter_ids().count()
        };
        let peers = members
            .into_iter()
            .filter(|(id, _)| *id != self.inner.id)
            .collect();
        let answers = clock::ask_peers(&self.inner.link, peers, voters / 2, oldest).await;
        // Measured again after the wait for the peers (up to `PEER_CARRY_WAIT`): the same
        // entry's time plus what this node's clock measured since its append, now, so that the
        // wait is carried and not lost from every lease the old leader granted.
        let own = self.carried_time();
        let base = clock::term_base(
            own,
            oldest,
            answers.values().filter_map(|a| a.as_ref().ok()),
        );
        tracing::info!(
            term,
            base_ms = base,
            own_ms = own.ms,
            ?oldest,
            peers = ?answers,
            "stamps of this term start from the largest store time carried here or at a peer \
             that applied the newest stamp"
        );
        Ok(Some(self.inner.clock.start_term(term, base)))
    }

    /// [`Node::carried_time`], once this node has applied `oldest` (the entry a new leader's
    /// answers must count from) or [`PEER_APPLY_WAIT`] passed: a follower learns that
    /// the leader's last entries are committed with its next message.
    pub async fn carried_time_from(&self, oldest: Option<LogId>) -> Carried {
        if let Some(oldest) = oldest {
            let mut applied = self.inner.state.applied_index();
            let wait = applied.wait_for(|index| *index >= oldest.index);
            let _ = tokio::time::timeout(PEER_APPLY_WAIT, wait).await;
        }
        self.carried_time()
    }

    /// The store time this node carries now: the newest it applied plus what its monotonic
    /// clock measured since it appended the entry that brought it (see `clock::carried_base`),
    /// and that entry. A new leader asks its peers for theirs.
    pub fn carried_time(&self) -> Carried {
        let applied_now_ms = self.inner.state.read().table.now_ms();
        clock::carried_base(
            applied_now_ms,
            self.inner.state.stamp_seen(),
            tokio::time::Instant::now(),
        )
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

    fn is_leader(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.inner.id)
    }

    /// The current stamp if this node leads with a started clock: for the expiry ticker.
    fn peek_stamp(&self) -> Option<u64> {
        let term = self.inner.raft.metrics().borrow().current_term;
        self.inner.clock.stamp(term)
    }

    /// [`Node::write`] here or, when another node leads, sent there with the other writes
    /// bound for it (see [`forwarder::Forwarder`]). The leader answers a forwarded write itself
    /// and never forwards it again. What the client-facing service calls.
    ///
    /// A leader that stopped answering without closing its connections (paused, or cut off)
    /// holds a forwarded write until the call times out, long after this node knows it no
    /// longer leads. So once this node sees another leader, it sends the write on to that one
    /// (or applies it, if it leads now): under its request id the write applies once however
    /// many leaders it reached. Handing it back to the client instead cost a whole client
    /// attempt whenever the client's next node was the stopped leader (the fault suite's
    /// five-node probe: leases living 0.5 to 1.3 s past their TTL). A write without a request
    /// id could apply twice, so it is given up (indeterminate) instead, except a registration,
    /// where that costs only an unused session.
    pub async fn write_or_forward(
        &self,
        op: Op,
        request: Option<RequestId>,
    ) -> Result<Applied, NodeError> {
        let follows = request.is_some() || matches!(op.bare(), Op::Register);
        let mut op = op;
        let mut leaders_followed = 0;
        loop {
            // Only a follower needs the op after a refusal, to forward it: the leader copies
            // nothing.
            let spare = (!self.is_leader()).then(|| op.clone());
            let (leader, addr, spare) = match (self.write(op, request).await, spare) {
                (Ok(applied), _) => return Ok(applied),
                (
                    Err(NodeError::NotLeader {
                        leader: Some((leader, addr)),
                        ..
                    }),
                    Some(spare),
                ) => (leader, addr, spare),
                (Err(e), _) => return Err(e),
            };
            let forwarded = self
                .inner
                .forwarder
                .write(leader, &addr, (spare.clone(), request));
            tokio::select! {
                answer = forwarded => return answer,
                () = self.leader_moves_from(leader) => {}
            }
            leaders_followed += 1;
            if !follows || leaders_followed == LEADERS_FOLLOWED {
                // The write may have reached the old leader: indeterminate, and the client
                // retries it by name, here or where the leader is now.
                return Err(NodeError::ForwardLost {
                    leader,
                    addr,
                    reason: "this node no longer sees it lead".into(),
                });
            }
            op = spare;
        }
    }

    /// Resolves once this node sees another node than `leader` lead (itself included): not on
    /// an election alone, which the old leader may survive.
    async fn leader_moves_from(&self, leader: NodeId) {
        let mut metrics = self.inner.raft.metrics();
        let moved = metrics
            .wait_for(|m| m.current_leader.is_some_and(|now| now != leader))
            .await
            .map(drop);
        if moved.is_err() {
            // Raft stopped: the forwarded call ends by itself then.
            std::future::pending::<()>().await;
        }
    }

    /// Proposes `op` through the log and returns what applying it answered. A `request` that
    /// was applied before is answered as it was then.
    pub async fn write(&self, op: Op, request: Option<RequestId>) -> Result<Applied, NodeError> {
        self.write_many(vec![(op, request)])
            .await
            .pop()
            .unwrap_or_else(|| Err(NodeError::Invariant("a write got no answer".into())))
    }

    /// Proposes `writes` together, so that they share log entries, and answers each in order.
    pub async fn write_many(
        &self,
        writes: Vec<(Op, Option<RequestId>)>,
    ) -> Vec<Result<Applied, NodeError>> {
        self.propose(writes, Refresh::WhenSlow).await
    }

    /// [`Node::write_many`]; `refresh` says whether a slow commit has a tick logged after it
    /// (see [`Node::refresh_carried_time`]).
    async fn propose(
        &self,
        writes: Vec<(Op, Option<RequestId>)>,
        refresh: Refresh,
    ) -> Vec<Result<Applied, NodeError>> {
        let checked: Vec<_> = writes
            .into_iter()
            .map(|(op, request)| self.check_write(&op).map(|()| (op, request)))
            .collect();
        if checked.iter().all(Result::is_err) {
            // Nothing to propose: no need to wait for a leader.
            return checked
                .into_iter()
                .filter_map(Result::err)
                .map(Err)
                .collect();
        }
        let (term, at_ms) = match self.leader_stamp().await {
            Ok(stamped) => stamped,
            Err(e) => return checked.into_iter().map(|w| w.and(Err(e.clone()))).collect(),
        };
        let stamped = tokio::time::Instant::now();
        let deadline = tokio::time::Instant::now() + QUORUM_WAIT;
        let answers: Vec<_> = checked
            .into_iter()
            .map(|w| {
                w.map(|(op, request)| self.inner.proposer.submit(Command { at_ms, request, op }))
            })
            .collect();
        let mut silent = std::pin::pin!(self.inner.quorum.until_silent(term));
        let mut given_up = false;
        let mut results = Vec::with_capacity(answers.len());
        for answer in answers {
            results.push(match answer {
                Err(e) => Err(e),
                Ok(_) if given_up => Err(NodeError::QuorumWentSilent { me: self.inner.id }),
                Ok(answer) => tokio::select! {
                    biased;
                    answer = tokio::time::timeout_at(deadline, answer) => match answer {
                        Err(_) => Err(NodeError::NoQuorum(QUORUM_WAIT)),
                        Ok(Err(_)) => Err(NodeError::Unanswered),
                        Ok(Ok(Ok(applied))) => Ok(applied),
                        // Handed to Raft: whatever it answers, the write may be in the log.
                        Ok(Ok(Err(e))) => Err(NodeError::proposal_failed(e)),
                    },
                    () = &mut silent => {
                        given_up = true;
                        Err(NodeError::QuorumWentSilent { me: self.inner.id })
                    }
                },
            });
        }
        if refresh == Refresh::WhenSlow
            && at_ms.is_some()
            && stamped.elapsed() > CARRY_REFRESH_AFTER
            && results.iter().any(Result::is_ok)
        {
            self.refresh_carried_time();
        }
        results
    }

    /// Logs a tick, a fresh stamp, in the background: after a write slow to commit, the
    /// followers would otherwise carry its stamp from when they appended it, late (see
    /// [`CARRY_REFRESH_AFTER`]). One tick at a time; a slow write that commits while one
    /// is on its way has another logged after it, since it may be newer than the tick. The
    /// tick's own commit asks for none, so a cluster whose every commit is slow logs at most
    /// one tick per slow write, never a stream of them.
    fn refresh_carried_time(&self) {
        if !self.inner.clock.claim_refresh() {
            return;
        }
        let claim = RefreshClaim(self.clone());
        tokio::spawn(async move {
            loop {
                // A node that no longer leads, or lost its quorum, has nothing to refresh.
                let _ = claim
                    .0
                    .propose(vec![(Op::Tick, None)], Refresh::Never)
                    .await;
                if !claim.0.inner.clock.asked_again() {
                    return;
                }
            }
        });
    }

    /// Refuses what no node would propose: bad input, or an op for the other clock.
    fn check_write(&self, op: &Op) -> Result<(), NodeError> {
        validate(op)?;
        match (op.bare(), self.inner.manual_clock) {
            (Op::Advance { .. }, false) => Err(NodeError::WrongClock(
                "advance is refused: this cluster runs the default clock; \
                 start it with --manual-clock to move time by hand",
            )),
            (Op::Tick, true) => Err(NodeError::WrongClock(
                "tick is refused under the manual clock",
            )),
            _ => Ok(()),
        }
    }

    /// [`Node::ensure_leader`], refusing too while this node leads a quorum that has gone
    /// silent (see `quorum_watch`): what a write or a read asks before anything is proposed.
    /// Membership listings and watches ask `ensure_leader` alone: an operator diagnosing the
    /// outage still sees the members.
    async fn serving_leader(&self) -> Result<u64, NodeError> {
        let term = self.ensure_leader().await?;
        if self.inner.quorum.is_silent(term) {
            return Err(NodeError::QuorumSilent { me: self.inner.id });
        }
        Ok(term)
    }

    /// Waits until this node leads (or names who does), then stamps a proposal: the term and
    /// the stamp.
    async fn leader_stamp(&self) -> Result<(u64, Option<u64>), NodeError> {
        let term = self.serving_leader().await?;
        Ok((term, self.stamp(term).await?))
    }

    fn forward_error(&self, f: ForwardToLeader<NodeId, BasicNode>) -> NodeError {
        match (f.leader_id, f.leader_node) {
            (Some(id), Some(node)) if id != self.inner.id => NodeError::NotLeader {
                me: self.inner.id,
                leader: Some((id, node.addr)),
            },
            (leader, _) => self.not_leader(leader.filter(|id| *id != self.inner.id)),
        }
    }

    /// Confirms with a quorum that this node still leads, and waits until everything committed
    /// before now is applied (Raft's ReadIndex, shared with the reads that arrive together).
    async fn confirm_leadership(&self) -> Result<(), NodeError> {
        let confirmed = self.inner.reads.confirm();
        match tokio::time::timeout(QUORUM_WAIT, confirmed).await {
            Err(_) => Err(NodeError::ReadUnconfirmed(QUORUM_WAIT)),
            Ok(Ok(())) => Ok(()),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)))) => {
                Err(self.forward_error(f))
            }
            // Followers slow to answer, or gone: a quorum did not confirm in time.
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(_)))) => {
                Err(NodeError::ReadUnconfirmed(QUORUM_WAIT))
            }
            Ok(Err(RaftError::Fatal(fatal))) => Err(NodeError::RaftStopped(fatal.to_string())),
        }
    }

    /// The applied entries of this node's log with indexes in `from..=to`: each index with its
    /// commands, none for Raft's own entries. Purged entries are absent.
    pub async fn applied_log(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<Command>)>, NodeError> {
        let applied = self
            .inner
            .state
            .read()
            .last_applied
            .map_or(0, |id| id.index);
        let to = read_log_end(from, to, applied);
        if from > to {
            return Ok(Vec::new());
        }
        let Some(mut reader) = self.inner.log.clone() else {
            return Err(NodeError::Raft(
                "this node keeps no log reader (an in-memory log)".into(),
            ));
        };
        let entries = openraft::RaftLogReader::try_get_log_entries(&mut reader, from..=to)
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        let mut bytes = 0;
        let mut answer = Vec::with_capacity(entries.len());
        for entry in entries {
            let commands = match entry.payload {
                openraft::EntryPayload::Normal(Batch(commands)) => commands,
                _ => Vec::new(),
            };
            // The first entry always goes, so that every call makes progress.
            if !answer.is_empty() && bytes >= READ_LOG_MAX_BYTES {
                break;
            }
            bytes += commands
                .iter()
                .map(|c| crate::raft::weight(&c.op))
                .sum::<usize>();
            answer.push((entry.log_id.index, commands));
        }
        Ok(answer)
    }

    /// A linearizable read: never served from a stale follower or a deposed leader.
    pub async fn read<T>(
        &self,
        read: impl FnOnce(&Applying) -> T,
    ) -> Result<(T, Applied), NodeError> {
        self.serving_leader().await?;
        self.confirm_leadership().await?;
        let state = self.inner.state.read();
        let at = Applied {
            log_index: state.last_applied.map_or(0, |id| id.index),
            position: 0,
            store_time_ms: state.table.now_ms(),
            outcome: leasehold_core::Outcome::Nothing,
        };
        Ok((read(&state), at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_past_the_limit_are_refused_at_once_and_admitted_again_once_room_is_made() {
        let admission = RequestSlots::new(3);
        let first = admission.admit(2).unwrap();
        let refused = admission.admit(2).unwrap_err();
        assert!(
            matches!(refused, NodeError::Overloaded { limit: 3 }),
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

    #[test]
    fn a_log_read_back_is_bounded_per_call_and_by_what_is_applied() {
        assert_eq!(read_log_end(1, u64::MAX, 5_000), READ_LOG_MAX_ENTRIES);
        assert_eq!(read_log_end(4_500, u64::MAX, 5_000), 5_000);
        assert_eq!(read_log_end(10, 20, 5_000), 20);
        assert_eq!(read_log_end(u64::MAX, u64::MAX, 5_000), 5_000);
    }
}
