//! Who leads, as this node sees it: whether it may serve as the leader (waiting out an election,
//! refusing while its quorum is silent), who to name when it does not, and Raft's ReadIndex
//! confirmation that it still leads.

use openraft::error::{CheckIsLeaderError, ForwardToLeader, RaftError};
use openraft::{BasicNode, ServerState, StoredMembership};

use super::{Node, NodeError};
use crate::limits::{LEADER_WAIT, QUORUM_WAIT};
use crate::NodeId;

impl Node {
    pub(super) fn address_of(&self, id: NodeId) -> Option<String> {
        let metrics = self.inner.raft.metrics();
        let from_membership = metrics
            .borrow()
            .membership_config
            .membership()
            .get_node(&id)
            .map(|node: &BasicNode| node.addr.clone());
        from_membership.or_else(|| self.inner.peers.get(&id).cloned())
    }

    pub(super) fn not_leader(&self, leader: Option<NodeId>) -> NodeError {
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
    pub(super) async fn ensure_leader(&self) -> Result<u64, NodeError> {
        let mut metrics = self.inner.raft.metrics();
        let mut given_up = self.inner.proposals.given_up();
        let deadline = tokio::time::Instant::now() + LEADER_WAIT;
        loop {
            // Copy out and drop the borrow at once: it holds the metrics channel's read lock,
            // and taking it again below (`not_leader` reads the membership) while openraft waits
            // to publish new metrics deadlocks the runtime's threads. The fault suite and the
            // etcd comparison each found a node hung exactly so, after a leader change.
            let (running, leader, state, term, standing) = {
                let m = metrics.borrow_and_update();
                (
                    m.running_state.clone(),
                    m.current_leader,
                    m.state,
                    m.current_term,
                    self.standing_in(&m.membership_config),
                )
            };
            if let Err(fatal) = running {
                return Err(NodeError::RaftStopped(fatal.to_string()));
            }
            // A leader that could not hand over before it stops: no successor is coming.
            if *given_up.borrow_and_update() {
                return Err(NodeError::ShuttingDown);
            }
            // A removed node hears from no leader again: waiting out an election would only
            // make its callers wait, and one that led keeps its own id as the leader it knew.
            if let Err(removed @ NodeError::Removed(_)) = standing {
                return Err(removed);
            }
            // A leader handing over waits, as during an election, for the leader it hands to.
            let handing_over = self.inner.proposals.is_closed();
            match leader {
                Some(leader)
                    if leader == self.inner.id && state == ServerState::Leader && !handing_over =>
                {
                    return Ok(term)
                }
                Some(leader) if leader != self.inner.id => {
                    return Err(self.not_leader(Some(leader)))
                }
                _ => {}
            }
            let changed = tokio::select! {
                changed = tokio::time::timeout_at(deadline, metrics.changed()) => changed,
                _ = given_up.changed() => continue,
            };
            match changed {
                Err(_) => return Err(NodeError::NoLeader(LEADER_WAIT)),
                Ok(Err(_)) => return Err(NodeError::ShuttingDown),
                Ok(Ok(())) => {}
            }
        }
    }

    /// [`Node::ensure_leader`], refusing too while this node leads a quorum that has gone
    /// silent (see `quorum_watch`): what a write or a read asks before anything is proposed.
    /// Membership listings and watches ask `ensure_leader` alone: an operator diagnosing the
    /// outage still sees the members.
    pub(super) async fn serving_leader(&self) -> Result<u64, NodeError> {
        let term = self.ensure_leader().await?;
        if self.inner.quorum.is_silent(term) {
            return Err(NodeError::QuorumSilent { me: self.inner.id });
        }
        Ok(term)
    }

    /// [`standing`] under `config`, noting that this node has been a member: a joining node
    /// that has never found itself in a membership is not yet a member, not a removed one.
    pub(super) fn standing_in(
        &self,
        config: &StoredMembership<NodeId, BasicNode>,
    ) -> Result<(), NodeError> {
        use std::sync::atomic::Ordering::Relaxed;
        match standing(self.inner.id, config) {
            Ok(()) => {
                self.inner.was_member.store(true, Relaxed);
                Ok(())
            }
            Err(NodeError::Removed(me)) if !self.inner.was_member.load(Relaxed) => {
                Err(NodeError::NotMember(me))
            }
            other => other,
        }
    }

    /// The voters of the membership this node knows.
    pub(super) fn voter_ids(&self) -> Vec<NodeId> {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.membership_config.membership().voter_ids().collect()
    }

    pub(super) fn is_leader(&self) -> bool {
        let metrics = self.inner.raft.metrics();
        let m = metrics.borrow();
        m.state == ServerState::Leader && m.current_leader == Some(self.inner.id)
    }

    /// `judged` by the policy this node has applied. A follower's may be behind the leader's
    /// (a grant committed, not yet applied here): its denial is its own (`DeniedHere`), and the
    /// client asks another node, the leader having the last word.
    pub(super) fn denied_here(&self, judged: Result<(), NodeError>) -> Result<(), NodeError> {
        match judged {
            Err(NodeError::Denied(denied)) if !self.is_leader() => Err(NodeError::DeniedHere {
                me: self.inner.id,
                denied,
            }),
            judged => judged,
        }
    }

    pub(super) fn forward_error(&self, f: ForwardToLeader<NodeId, BasicNode>) -> NodeError {
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
    pub(super) async fn confirm_leadership(&self) -> Result<(), NodeError> {
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

    /// Resolves once this node sees another node than `leader` lead (itself included): not on
    /// an election alone, which the old leader may survive.
    pub(super) async fn leader_moves_from(&self, leader: NodeId) {
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
}

/// Whether node `me` is a member under `config`: not yet, while it waits to be added (started
/// with `--join`, it knows no membership), or no longer, once a membership without it is
/// applied (it was removed).
fn standing(me: NodeId, config: &StoredMembership<NodeId, BasicNode>) -> Result<(), NodeError> {
    match (config.membership().get_node(&me), config.log_id()) {
        (Some(_), _) => Ok(()),
        (None, None) => Err(NodeError::NotMember(me)),
        (None, Some(_)) => Err(NodeError::Removed(me)),
    }
}
