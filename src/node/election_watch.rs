//! A following voter that has heard nothing since its leader's last message for longer than any
//! election openraft schedules on its own starts one itself.
//!
//! Why: openraft 0.9 remembers that a vote this node asked for was refused for a shorter log, and
//! from then on adds `2 × election_timeout_max` to this node's election timeout, until this node
//! campaigns again on its own timer. A node that once lost an election while it lagged (a
//! restarted node does, often) keeps that penalty after it has caught up, so when the leader dies
//! later it waits 1.45 to 1.6 s instead of 0.65 to 0.8 s; with both survivors penalised, every
//! lease outlives its TTL by the difference (the fault suite's lease-life probe saw 3.4 s for a
//! 2 s TTL). openraft fixed this in 0.10; 0.9.25 is the last 0.9.
//!
//! The watch fires only after `2 × election_timeout_max + heartbeat_interval` of silence: later
//! than openraft's own unpenalised election (`election_timeout_max` of leader lease plus at most
//! `election_timeout_max`), so it never races a healthy follower, and never while a leader's
//! heartbeats arrive. And it fires only when the silence began with a leader's message: once an
//! election is under way (this node's vote changed since), openraft's random timeouts and its
//! penalty decide who campaigns next, as they should there. Two survivors campaigning on the
//! watch's fixed delay would tie again and again when the one with the shorter log has the higher
//! id; the penalty is what lets the longer log win.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use openraft::ServerState;
use tokio::time::Instant;

use super::Node;

/// When this node last heard from a leader, and whether it may campaign.
pub(super) struct ElectionWatch {
    /// When the silence began, and whether a leader's message began it (the watch is armed)
    /// rather than a change of this node's vote.
    silent_since: Mutex<(Instant, bool)>,
    /// Mirrors openraft's `enable_elect`, which cannot be read back from a running Raft.
    elections: AtomicBool,
}

impl ElectionWatch {
    pub(super) fn new(elections: bool) -> Self {
        ElectionWatch {
            silent_since: Mutex::new((Instant::now(), false)),
            elections: AtomicBool::new(elections),
        }
    }

    /// A leader's message was accepted: the silence starts again, and the watch is armed.
    pub(super) fn heard_leader(&self) {
        self.restart(true);
    }

    /// This node's vote changed, or it campaigned: the silence starts again, and the watch waits
    /// for a leader's message before it is armed.
    fn vote_changed(&self) {
        self.restart(false);
    }

    fn restart(&self, armed: bool) {
        *self.silent_since.lock().unwrap_or_else(|e| e.into_inner()) = (Instant::now(), armed);
    }

    /// How long since a leader was last heard from, if nothing but silence followed.
    fn silence(&self) -> Option<Duration> {
        let (since, armed) = *self.silent_since.lock().unwrap_or_else(|e| e.into_inner());
        armed.then(|| since.elapsed())
    }

    pub(super) fn set_elections(&self, enabled: bool) {
        self.elections.store(enabled, Ordering::Relaxed);
    }

    fn elections(&self) -> bool {
        self.elections.load(Ordering::Relaxed)
    }
}

/// The silence after which the watch campaigns, for a Raft `config`.
pub fn silence_limit(config: &openraft::Config) -> Duration {
    Duration::from_millis(2 * config.election_timeout_max + config.heartbeat_interval)
}

/// Checks every heartbeat interval whether this node, a following voter with elections enabled,
/// has gone [`silence_limit`] without a word since its leader's last, and if so starts an
/// election. Runs until aborted.
pub async fn watch_elections(node: Node) {
    let config = node.raft().config().clone();
    let limit = silence_limit(&config);
    let mut check = tokio::time::interval(Duration::from_millis(config.heartbeat_interval));
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let metrics = node.raft().metrics();
    let mut vote = metrics.borrow().vote;
    let watch = &node.inner.elections;
    loop {
        check.tick().await;
        let (now_vote, following, voter) = {
            let m = metrics.borrow();
            (
                m.vote,
                m.state == ServerState::Follower,
                m.membership_config
                    .membership()
                    .voter_ids()
                    .any(|id| id == node.id()),
            )
        };
        if now_vote != vote {
            // A vote granted, a campaign started, a new leader's term: openraft restarted its
            // own timer, and so does the watch.
            vote = now_vote;
            watch.vote_changed();
            continue;
        }
        let Some(silence) = watch.silence() else {
            continue;
        };
        if !following || !voter || !watch.elections() || silence < limit {
            continue;
        }
        tracing::warn!(
            silence_ms = silence.as_millis() as u64,
            limit_ms = limit.as_millis() as u64,
            "no word from the leader for longer than an election takes: campaigning"
        );
        watch.vote_changed();
        if let Err(e) = node.raft().trigger().elect().await {
            tracing::debug!(error = %e, "election not triggered");
        }
    }
}
