//! The leader's stamps: the store time each proposal carries, started for a term from the
//! largest time carried here or at a peer, corrected to the majority's clock rate (see
//! `clock`), and refreshed after a slow commit.

use super::clock;
use super::link::Carried;
use super::write::{Refresh, RefreshClaim};
use super::Node;
use super::NodeError;
use crate::limits::{PEER_APPLY_WAIT, PEER_CARRY_WAIT};
use crate::raft::LogId;
use leasehold_core::Op;
use tokio::time::Instant;

impl Node {
    /// The store time to stamp on a command proposed now in `term`; `None` under the manual clock.
    pub(super) async fn stamp(&self, term: u64) -> Result<Option<u64>, NodeError> {
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
        let voters = self.voter_ids().len();
        let peers = members
            .into_iter()
            .filter(|(id, _)| *id != self.inner.id)
            .collect();
        // The peers' clocks are read afresh alongside: those that answer must be known to have
        // jumped, or not, before their answers count (see `clock_probe::read_clocks`).
        let (since, deadline) = (
            self.inner.clock.local().now(),
            Instant::now() + PEER_CARRY_WAIT,
        );
        self.read_clocks(&[], since, deadline).await;
        let answers = clock::ask_peers(&self.inner.link, peers, voters / 2, oldest).await;
        let voter_ids = self.voter_ids();
        let answered: Vec<_> = (answers.iter())
            .filter(|(id, a)| a.is_ok() && voter_ids.contains(id))
            .map(|(id, _)| *id)
            .collect();
        self.read_clocks(&answered, since, deadline).await;
        // And this node's own, on those readings: a follower handed leadership by a leader
        // whose clock jumped with its own has not judged it yet.
        self.judge_own_clock();
        // Measured again after the wait for the peers (up to `PEER_CARRY_WAIT`): the same
        // entry's time plus what this node's clock measured since its append, now, so that the
        // wait is carried and not lost from every lease the old leader granted.
        let own = self.carried_time();
        let scales = self.clock_scales();
        let answered =
            (answers.iter()).filter_map(|(id, a)| Some((a.as_ref().ok()?, scales.peer(*id))));
        let applied_ms = self.inner.state.read().table.now_ms();
        let carried = answered.chain(std::iter::once((&own, Some(scales.own))));
        let base = clock::term_base(applied_ms, oldest, carried);
        tracing::info!(
            term,
            base_ms = base,
            own_ms = own.ms,
            ?oldest,
            peers = ?answers,
            "stamps of this term start from the largest store time carried here or at a peer \
             that applied the newest stamp, corrected to the majority's clock rate"
        );
        let stamp = self.inner.clock.start_term(term, base);
        // The voters' clocks are read at the leader's pace from now on (see `clock_probe`).
        self.inner.own_clock.wake.notify_one();
        Ok(Some(stamp))
    }

    /// Waits until this node leads (or names who does), then stamps a proposal: the term and
    /// the stamp.
    pub(super) async fn leader_stamp(&self) -> Result<(u64, Option<u64>), NodeError> {
        let term = self.serving_leader().await?;
        Ok((term, self.stamp(term).await?))
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
    /// and that entry; the applied time alone if its clock jumped since. A new leader asks its
    /// peers for theirs.
    pub fn carried_time(&self) -> Carried {
        let applied_now_ms = self.inner.state.read().table.now_ms();
        // A clock known to have jumped since the append it would measure from measured nothing
        // to go by: a leader stepping down for a clock that jumped is asked by its successor
        // before that one may know it. (One known to run fast or slow, its successor corrects.)
        let seen = self.inner.state.stamp_seen();
        let local = self.inner.clock.local();
        let jumped_since = |at| self.clock_jumped_after(local.reading(at));
        if seen.is_some_and(|seen| jumped_since(seen.at)) {
            return Carried {
                ms: applied_now_ms,
                from: None,
            };
        }
        clock::carried_base(applied_now_ms, seen, |at| local.since(at))
    }

    /// The current stamp if this node leads with a started clock: for the expiry ticker.
    pub(super) fn peek_stamp(&self) -> Option<u64> {
        let term = self.inner.raft.metrics().borrow().current_term;
        self.inner.clock.stamp(term)
    }

    /// Logs a tick, a fresh stamp, in the background: after a write slow to commit, the
    /// followers would otherwise carry its stamp from when they appended it, late (see
    /// [`CARRY_REFRESH_AFTER`]). One tick at a time; a slow write that commits while one
    /// is on its way has another logged after it, since it may be newer than the tick. The
    /// tick's own commit asks for none, so a cluster whose every commit is slow logs at most
    /// one tick per slow write, never a stream of them.
    pub(super) fn refresh_carried_time(&self) {
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
}
