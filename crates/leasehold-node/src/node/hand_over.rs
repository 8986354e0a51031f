//! Leadership handed over before a leader stops (issue 41, item 9), as etcd's leader does on
//! SIGTERM: a rolling restart then costs no election timeout.
//!
//! Without it the followers of a leader that exits wait out their leader lease and an election
//! timeout before one campaigns: a second or so in which no write commits. With it the leader
//! first stops proposing (new writes wait for the next leader, as during an election, and are
//! then forwarded to it; one caught at the instant the gate closes is answered NOT_LEADER
//! naming its successor, where the clients retry it), waits for a voter whose log matches its
//! own, and tells every voter that it hands leadership to that one, the chosen voter last. The
//! others then grant its vote within the leader lease (third_party/openraft/PATCH.md, change
//! 5), and it campaigns at once. The vote is judged as any vote is: a hand-over can elect
//! nobody an election could not.
//!
//! A leader whose clock is odd steps down the same way (`clock_probe`), to a caught-up voter
//! whose clock is right: another odd one only if none is caught up within
//! [`HAND_OVER_TO_ODD_AFTER`], as it would lead at its odd rate and hand over in turn.
//!
//! A new peer message, so used only once every voter announces [`FEATURE`]. A hand-over that
//! does not finish within [`HAND_OVER_WAIT`] leaves the others to elect a leader as before:
//! the node then stops its heartbeats, so that their leader lease runs out while it finishes
//! stopping, and what waited for its successor is told that it shuts down.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};

use leasehold_proto::wire::HAND_OVER_FEATURE as FEATURE;
use openraft::ServerState;
use tokio::sync::Notify;

use super::Node;
use crate::limits::{HAND_OVER_CALL, HAND_OVER_TO_ODD_AFTER, HAND_OVER_WAIT};
use crate::NodeId;

/// Closes the leader's proposals for a hand-over and counts those already past it: the chosen
/// voter must hold every entry the leader will append, or the others' longer logs refuse it.
pub(super) struct ProposalGate {
    closed: AtomicBool,
    in_flight: AtomicUsize,
    drained: Notify,
    /// Set once a hand-over failed: nothing waits for a successor any longer.
    given_up: tokio::sync::watch::Sender<bool>,
}

impl Default for ProposalGate {
    fn default() -> Self {
        ProposalGate {
            closed: AtomicBool::new(false),
            in_flight: AtomicUsize::new(0),
            drained: Notify::new(),
            given_up: tokio::sync::watch::Sender::new(false),
        }
    }
}

/// A proposal past the gate; the gate counts it until it is dropped.
pub(super) struct InFlight<'a>(&'a ProposalGate);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, SeqCst) == 1 {
            self.0.drained.notify_waiters();
        }
    }
}

impl ProposalGate {
    /// Whether proposals wait for the next leader.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// A proposal's pass, unless the gate is closed. Counted before the second look, so that
    /// [`ProposalGate::drain`] either sees it counted or it sees the gate closed.
    pub(super) fn enter(&self) -> Option<InFlight<'_>> {
        if self.is_closed() {
            return None;
        }
        self.in_flight.fetch_add(1, SeqCst);
        let pass = InFlight(self);
        (!self.is_closed()).then_some(pass)
    }

    /// Whether the hand-over failed, and when it does: what waits for a successor stops. Also
    /// changes (to the same value) when the gate reopens: what waited goes on.
    pub(super) fn given_up(&self) -> tokio::sync::watch::Receiver<bool> {
        self.given_up.subscribe()
    }

    /// The hand-over failed: the gate stays closed, and nothing waits for a successor.
    fn give_up(&self) {
        self.closed.store(true, SeqCst);
        self.given_up.send_replace(true);
    }

    /// Opens the gate again after a hand-over that was not for stopping (see `step_down`).
    /// Wakes what waits for a successor too (`ensure_leader`): none came, and this node leads
    /// on, which no change of the Raft metrics need announce.
    fn reopen(&self) {
        self.closed.store(false, SeqCst);
        self.given_up.send_modify(|_| {});
    }

    /// Closes the gate and waits until every proposal past it has been answered.
    async fn drain(&self) {
        self.closed.store(true, SeqCst);
        loop {
            let drained = self.drained.notified();
            if self.in_flight.load(SeqCst) == 0 {
                return;
            }
            drained.await;
        }
    }
}

/// How a hand-over went, for the node's last log lines.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum HandedOver {
    /// This node did not lead: nothing to hand over.
    NotLeading,
    /// Node `to` leads now, `ms` after the hand-over began.
    To { to: NodeId, ms: u128 },
    /// Not handed over; the others elect a leader once this one is gone.
    Not(String),
}

impl Node {
    /// Hands leadership to an up-to-date voter if this node leads: what a node stopping on
    /// request does first. Bounded by [`HAND_OVER_WAIT`]; proposals stay closed afterwards,
    /// as the node is stopping. If it could not hand over, it stops heartbeats (they would
    /// keep the followers' leader lease alive, and so keep them from electing a successor
    /// while it finishes stopping) and tells what waited for a successor that it shuts down.
    pub(crate) async fn hand_over(&self) -> HandedOver {
        if !self.is_leader() {
            return HandedOver::NotLeading;
        }
        let handed = self.try_hand_over().await;
        if let HandedOver::Not(_) = &handed {
            self.inner.raft.runtime_config().heartbeat(false);
            self.inner.proposals.give_up();
        }
        handed
    }

    /// Hands leadership to an up-to-date voter if this node leads, and goes on as a follower:
    /// what a leader whose clock is odd does (see `clock_probe`). Proposals wait for the next
    /// leader while it hands over, and go to it after.
    pub(crate) async fn step_down(&self) -> HandedOver {
        if !self.is_leader() {
            return HandedOver::NotLeading;
        }
        let handed = self.try_hand_over().await;
        self.inner.proposals.reopen();
        handed
    }

    async fn try_hand_over(&self) -> HandedOver {
        let started = tokio::time::Instant::now();
        let me = self.inner.id;
        let (voters, vote) = {
            let metrics = self.inner.raft.metrics();
            let m = metrics.borrow();
            let voters: Vec<NodeId> = m.membership_config.membership().voter_ids().collect();
            (voters, m.vote)
        };
        let others: Vec<NodeId> = voters.iter().copied().filter(|id| *id != me).collect();
        if others.is_empty() {
            return HandedOver::Not("no other voter to hand leadership to".into());
        }
        let protocols = self.inner.channels.protocols();
        if !protocols.all_announce(me, voters.iter().copied(), FEATURE) {
            return HandedOver::Not(format!(
                "a voter does not announce {FEATURE:?} (a build from before it)"
            ));
        }
        let stage = std::sync::Mutex::new("no voter caught up with this node's log");
        let at = |now| *stage.lock().unwrap_or_else(|p| p.into_inner()) = now;
        let handed = tokio::time::timeout_at(started + HAND_OVER_WAIT, async {
            self.inner.proposals.drain().await;
            // A caught-up voter whose clock runs with the majority's, else, after a while, any
            // caught-up voter: one known odd would lead at its odd rate and step down in turn
            // (see `clock_probe`), and two odd ones handed leadership back and forth, while
            // waiting for one in particular without end held SIGTERM's hand-over past its bound.
            let odd = self.odd_peer_clocks();
            let (odd, right): (Vec<NodeId>, Vec<NodeId>) =
                others.iter().partition(|id| odd.contains(id));
            // With no right clock among them, no wait for one.
            let odd_after =
                tokio::time::Instant::now() + HAND_OVER_TO_ODD_AFTER * u32::from(!right.is_empty());
            let to = self.caught_up_voter(&right, &odd, odd_after).await;
            at("the voters could not be told");
            self.tell_voters(vote, to, &others).await?;
            at("the chosen voter did not win");
            self.led_by_another().await;
            Ok::<_, String>(to)
        });
        match handed.await {
            Ok(Ok(to)) => HandedOver::To {
                to,
                ms: started.elapsed().as_millis(),
            },
            Ok(Err(why)) => HandedOver::Not(why),
            Err(_) => {
                let stage = *stage.lock().unwrap_or_else(|p| p.into_inner());
                HandedOver::Not(format!("{stage} within {HAND_OVER_WAIT:?}"))
            }
        }
    }

    /// Tells this node, then the other voters, that leadership `vote` goes to `to`, and `to`
    /// last, as soon as enough of the others have it that `to`'s campaign can win: `to`
    /// needs a majority of the voters, counting itself and this node. The rest are told
    /// alongside, not waited for, so that a paused voter delays nothing.
    async fn tell_voters(
        &self,
        vote: openraft::Vote<NodeId>,
        to: NodeId,
        others: &[NodeId],
    ) -> Result<(), String> {
        use futures_util::StreamExt;
        let trigger = self.inner.raft.trigger().hand_over(vote, to).await;
        trigger.map_err(|fatal| format!("raft stopped: {fatal}"))?;
        let voters = others.len() + 1;
        let majority = voters / 2 + 1;
        let needed = majority.saturating_sub(2);
        let mut telling: futures_util::stream::FuturesUnordered<_> = (others.iter())
            .filter(|id| **id != to)
            .map(|id| {
                let (node, id) = (self.clone(), *id);
                tokio::spawn(async move { node.tell(id, vote, to).await })
            })
            .collect();
        let mut told = 0;
        while told < needed {
            match telling.next().await {
                Some(Ok(Ok(()))) => told += 1,
                Some(_) => {}
                None => {
                    return Err(format!(
                        "{told} of the {needed} other voters that must let node {to} through \
                         could be told"
                    ))
                }
            }
        }
        self.tell(to, vote, to)
            .await
            .map_err(|why| format!("node {to} could not be told: {why}"))
    }

    /// Tells voter `peer` that leadership `vote` is handed over to `to`.
    async fn tell(
        &self,
        peer: NodeId,
        vote: openraft::Vote<NodeId>,
        to: NodeId,
    ) -> Result<(), String> {
        let addr = (self.address_of(peer))
            .ok_or_else(|| format!("node {peer} has no known peer address"))?;
        let told = self
            .inner
            .link
            .hand_over(peer, addr, vote, to, HAND_OVER_CALL);
        told.await
    }

    /// A voter among `preferred` whose log matches this leader's last entry, once one does;
    /// from `rest_after` on, one among `rest` too.
    async fn caught_up_voter(
        &self,
        preferred: &[NodeId],
        rest: &[NodeId],
        rest_after: tokio::time::Instant,
    ) -> NodeId {
        let mut metrics = self.inner.raft.metrics();
        loop {
            let rest_too = tokio::time::Instant::now() >= rest_after;
            let caught_up = {
                let m = metrics.borrow_and_update();
                let matched = |id: &NodeId| {
                    let replication = m.replication.as_ref()?;
                    replication.get(id)?.as_ref().map(|log_id| log_id.index)
                };
                let rest = rest.iter().filter(|_| rest_too);
                (preferred.iter().chain(rest))
                    .find(|id| m.last_log_index.is_some() && matched(id) == m.last_log_index)
                    .copied()
            };
            if let Some(id) = caught_up {
                return id;
            }
            let changed = metrics.changed();
            let changed = match rest_too {
                true => changed.await,
                false => (tokio::time::timeout_at(rest_after, changed).await).unwrap_or(Ok(())),
            };
            if changed.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Once another node leads (or this one no longer does and names another).
    async fn led_by_another(&self) {
        let me = self.inner.id;
        let mut metrics = self.inner.raft.metrics();
        let _ = metrics
            .wait_for(|m| {
                m.state != ServerState::Leader && m.current_leader.is_some_and(|l| l != me)
            })
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use futures_util::FutureExt;

    #[tokio::test]
    async fn a_closed_gate_admits_nothing_and_drains_once_every_pass_is_dropped() {
        let gate = ProposalGate::default();
        let first = gate.enter().expect("open");
        let second = gate.enter().expect("open");
        let drain = gate.drain();
        tokio::pin!(drain);
        // Closed at the first poll: no new pass, and the two outstanding hold the drain.
        assert!((&mut drain).now_or_never().is_none());
        assert!(gate.enter().is_none(), "a closed gate admitted a proposal");
        drop(first);
        assert!((&mut drain).now_or_never().is_none());
        drop(second);
        assert!((&mut drain).now_or_never().is_some(), "drained");
    }
}
