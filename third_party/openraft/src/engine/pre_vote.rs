//! Leasehold patch: the pre-vote (Raft thesis §9.6).
//!
//! Upstream 0.9 campaigns as soon as its election timeout passes: it raises its term and asks
//! for votes. A node cut off from the others does so again and again, each time for a higher
//! term that reaches nobody; once back, its first answer to the leader carries that term, and
//! the leader steps down for an election that the node, its log behind, cannot win. Here a node
//! whose timeout passes first asks the voters whether they would vote for it (its term plus one,
//! its last log id), and campaigns only once a quorum says yes. A voter says yes as it would to
//! the vote itself, and no while it has heard from a live leader within a leader lease; it
//! changes nothing in answering. A cut-off node hears no yes, so its term stays where it was.

use std::collections::BTreeSet;

use crate::engine::Command;
use crate::engine::Engine;
use crate::quorum::QuorumSet;
use crate::raft::VoteRequest;
use crate::raft::VoteResponse;
use crate::raft_state::LogStateReader;
use crate::type_config::alias::InstantOf;
use crate::type_config::TypeConfigExt;
use crate::RaftTypeConfig;
use crate::Vote;

/// The pre-vote round this node started last: the vote it would campaign with, when it asked,
/// and the voters that said yes (itself first).
pub(crate) struct PreVote<C>
where C: RaftTypeConfig
{
    vote: Vote<C::NodeId>,
    started: InstantOf<C>,
    granted: BTreeSet<C::NodeId>,
}

impl<C> std::fmt::Debug for PreVote<C>
where C: RaftTypeConfig
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreVote").field("vote", &self.vote).field("granted", &self.granted).finish()
    }
}

impl<C> Engine<C>
where C: RaftTypeConfig
{
    /// Asks the other voters whether they would vote for this node in the next term, in place
    /// of campaigning (`elect`) when the election timeout has passed. A round is asked at most
    /// once per election timeout: the timer that calls this fires on every tick until the vote
    /// changes, and a round changes no vote (its first clears the vote's `committed` flag, see
    /// below, which leaves the vote's timestamp as it was).
    ///
    /// A follower gets here only when its leader has been silent for a lease and a timeout, and
    /// from then on it names no leader: its vote is held, in memory only, as uncommitted (as a
    /// restarted leader's is, see `startup`). Upstream's campaign did the same, by voting for
    /// itself; without it, a follower cut off from every peer would name its dead leader for as
    /// long as no quorum answers it, and report itself healthy. The vote then accepts no other
    /// vote than before (a leader id orders by term, then node id, ahead of `committed`), but
    /// the old leader's own vote request of that term, which it granted already; and the
    /// leader's next message, if it comes, makes it committed again.
    pub(crate) fn pre_elect(&mut self) {
        let now = C::now();
        if let Some(round) = &self.pre_vote {
            if now < round.started + self.config.timer_config.election_timeout {
                return;
            }
        }
        if self.state.vote_ref().is_committed() {
            tracing::info!(leader = display(self.state.vote_ref()), "pre-vote: the leader is silent; naming none");
            self.state.vote.committed = false;
        }
        let vote = Vote::new(self.state.vote_ref().leader_id().get_term() + 1, self.config.id.clone());
        let vote_req = VoteRequest::new(vote.clone(), self.state.last_log_id().cloned());
        tracing::info!(pre_vote = display(&vote_req), "pre-vote: asking the voters");
        self.pre_vote = Some(PreVote {
            vote,
            started: now,
            granted: BTreeSet::from([self.config.id.clone()]),
        });
        self.output.push_command(Command::SendPreVote { vote_req });
    }

    /// Whether this node would grant `req`'s vote now: as `handle_vote_req` would judge it (the
    /// log at least as long as this node's, the vote not below its own), and not while a leader
    /// is live. A follower's leader is live while this node heard from it within a leader lease;
    /// a leader is, while a quorum acknowledged it within a lease, or it was elected within one.
    /// Nothing changes.
    pub(crate) fn handle_pre_vote_req(&mut self, req: &VoteRequest<C::NodeId>) -> VoteResponse<C::NodeId> {
        let now = C::now();
        let lease = self.config.timer_config.leader_lease;
        let within_lease = |at: Option<InstantOf<C>>| at.is_some_and(|at| now <= at + lease);
        let vote_utime = self.state.vote_last_modified();
        let leader_live = match self.leader.as_mut() {
            Some(leader) => within_lease(leader.last_quorum_acked_time()) || within_lease(vote_utime),
            None => self.state.vote_ref().is_committed() && within_lease(vote_utime),
        };
        let granted =
            !leader_live && req.last_log_id.as_ref() >= self.state.last_log_id() && &req.vote >= self.state.vote_ref();
        tracing::info!(
            pre_vote = display(req),
            leader_live,
            granted,
            my_vote = display(self.state.vote_ref()),
            "pre-vote: answered"
        );
        VoteResponse::new(self.state.vote_ref(), self.state.last_log_id().cloned(), granted)
    }

    /// `target`'s answer to this node's pre-vote for `pre_vote`. Once a quorum says yes, this
    /// node campaigns, if nothing changed since it asked: it does not lead, no leader reached it,
    /// and its term is the same. A no from a later term moves this node to that term (as a vote
    /// answer would), uncommitted: its next round is for a term after it, and a leader of that
    /// term, if there is one, is still to reach it.
    pub(crate) fn handle_pre_vote_resp(
        &mut self,
        target: C::NodeId,
        resp: VoteResponse<C::NodeId>,
        pre_vote: &Vote<C::NodeId>,
    ) {
        let Some(round) = self.pre_vote.as_mut() else {
            return;
        };
        if round.vote != *pre_vote || self.leader.is_some() {
            return;
        }
        if !resp.vote_granted {
            let term = self.state.vote_ref().leader_id().get_term();
            if resp.vote.leader_id().get_term() > term {
                let mut later = resp.vote.clone();
                later.committed = false;
                tracing::info!(target = display(&target), later = display(&later), "pre-vote: a voter is in a later term");
                let _ = self.vote_handler().update_vote(&later);
            }
            return;
        }
        round.granted.insert(target);
        if !self.state.membership_state.effective().is_quorum(round.granted.iter()) {
            return;
        }
        let started = round.started;
        self.pre_vote = None;
        let same_term = self.state.vote_ref().leader_id().get_term() + 1 == pre_vote.leader_id().get_term();
        let unheard = self.state.vote_last_modified().map_or(true, |at| at < started);
        let voter = self.state.membership_state.effective().is_voter(&self.config.id);
        if same_term && unheard && voter {
            tracing::info!(pre_vote = display(pre_vote), "pre-vote: a quorum would vote for this node; campaigning");
            self.elect();
        }
    }
}
