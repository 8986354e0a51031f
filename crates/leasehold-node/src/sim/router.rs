//! The router: the network the test controls. Raft messages go through it to the target's
//! node, cut, stalled, slowed or dropped as the schedule says.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_check::Rng;
use openraft::error::{InstallSnapshotError, RPCError, RaftError, RemoteError, Unreachable};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;

use crate::node::Node;
use crate::raft::{TypeConfig, VotePenalty};

#[derive(Default)]
pub(super) struct Net {
    /// The product's node around each running Raft: its clock, proposer, forwarder and reads.
    pub(super) nodes: BTreeMap<u64, Node>,
    /// Directed links that drop everything.
    pub(super) cut: BTreeSet<(u64, u64)>,
    /// Directed links on which the log does not move: AppendEntries and InstallSnapshot are
    /// dropped, votes and peer calls pass. A member being caught up looks so to its leader
    /// while a snapshot streams to it, or while probes look for where its log matches.
    pub(super) stalled: BTreeSet<(u64, u64)>,
    /// Time added to every message on a directed link.
    pub(super) slow: BTreeMap<(u64, u64), Duration>,
    /// Percent of messages dropped on every link.
    pub(super) loss_pct: u64,
    /// Every message takes the same time, as on one machine's loopback; otherwise each takes a
    /// random 0 to 14 ms, which by itself pulls apart nodes that act at the same instant.
    pub(super) uniform_latency: bool,
    pub(super) rng: Option<Rng>,
}

impl Net {
    /// Cuts node `id` off from the other nodes of `1..=count`, both ways.
    pub(super) fn isolate(&mut self, id: u64, count: u64) {
        for other in (1..=count).filter(|other| *other != id) {
            self.cut.insert((id, other));
            self.cut.insert((other, id));
        }
    }
}

/// A message's travel time when every link takes the same.
const UNIFORM_LATENCY: Duration = Duration::from_millis(1);

#[derive(Clone, Default)]
pub(super) struct Router(pub(super) Arc<Mutex<Net>>);

impl Router {
    /// The target's node and a delay for this message, or why it does not arrive.
    pub(super) fn route(&self, from: u64, to: u64) -> Result<(Node, Duration), Unreachable> {
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

    pub(super) fn reply_lost(&self, from: u64, to: u64) -> bool {
        self.0.lock().unwrap().cut.contains(&(to, from))
    }

    /// Runs `call` on node `to` as a message from `from` reaches it: dropped or delayed on the
    /// way there, its reply lost if the way back is cut.
    pub(super) async fn deliver<T>(
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
pub(super) enum Undelivered {
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

pub(super) struct NodeNet {
    pub(super) from: u64,
    pub(super) router: Router,
    pub(super) penalty: Arc<VotePenalty>,
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

pub(super) struct Link {
    pub(super) from: u64,
    pub(super) to: u64,
    pub(super) router: Router,
    pub(super) penalty: Arc<VotePenalty>,
}

impl Link {
    /// Whether the log does not move on this link now (see `Net::stalled`).
    pub(super) fn stalled(&self) -> Result<(), Unreachable> {
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

    pub(super) async fn send<Resp, E: std::error::Error>(
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
    fn backoff(&self) -> openraft::network::Backoff {
        crate::raft::unreachable_backoff()
    }
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
    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<u64>,
        _: RPCOption,
    ) -> Result<VoteResponse<u64>, RPCError<u64, BasicNode, RaftError<u64>>> {
        self.send(async |node| node.raft().pre_vote(rpc).await)
            .await
    }
}
