//! Reading the other voters' clocks (issue 42, a clock that lies). Every node asks each other
//! voter for its clock's reading: at [`CLOCK_PROBE_LEADING`] while it leads, since the leader's
//! stamps may not outrun what a majority's clocks measured (`quorum_time`), and at
//! [`CLOCK_PROBE_FOLLOWING`] otherwise, to judge its own clock and to know the others' rates
//! when it comes to lead. Every voter is asked (one of an older build refuses the call), one at
//! a time, so that a peer that does not answer slows no other's readings; the readings bound
//! the stamps only once every voter announces [`FEATURE`] (a mixed cluster, mid-upgrade, stamps
//! from the leader's clock alone, as before).
//!
//! A node judges its own clock against the majority's (`peer_clocks::judge`). An odd one is
//! named in `status` and the metrics (`leasehold_clock_rate_ratio`), logged, kept from
//! campaigning (`election_watch`) and, if it leads, steps down (`hand_over`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_proto::wire::CLOCK_READING_FEATURE as FEATURE;

use super::peer_clocks::{judge, still_odd, ClockReading, Judgement};
use super::{HandedOver, Node};
use crate::limits::{
    CLOCK_ODD_NO_CAMPAIGN, CLOCK_ODD_REMEMBERED, CLOCK_PROBE_FOLLOWING, CLOCK_PROBE_LEADING,
    CLOCK_PROBE_WAIT, ODD_CLOCK_RATE,
};
use crate::NodeId;

/// How long a leader whose odd clock could not hand over waits before it tries again.
const STEP_DOWN_RETRY: Duration = Duration::from_secs(1);

/// A peer's clock is judged to have jumped when it did within this long.
const JUMP_SEEN_WITHIN: Duration = Duration::from_secs(1);

/// What this node makes of its own clock, and which peers are being asked.
#[derive(Default)]
pub(crate) struct OwnClock {
    judged: Mutex<Judged>,
    asking: Mutex<BTreeSet<NodeId>>,
    /// Wakes the probe at once: this node started to lead.
    pub(crate) wake: tokio::sync::Notify,
    stepping_down: std::sync::atomic::AtomicBool,
}

#[derive(Clone, Copy, Default)]
struct Judged {
    last: Judgement,
    /// This node's clock when it was last judged odd, when it last found it jumped, and when it
    /// last could not tell whether it did (kept: what it carries across a failover must not
    /// measure across a jump).
    last_odd: Option<Duration>,
    last_jump: Option<Duration>,
    last_maybe_jump: Option<Duration>,
    /// When it first found it jumped, of the judgements that found so one after another: the
    /// peers' jumps that made it find so were seen from [`JUMP_SEEN_WITHIN`] before this on.
    jump_began: Option<Duration>,
}

/// This node's clock as `status` and the metrics show it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClockShown {
    /// Its rate over the majority's, once known.
    pub rate_ratio: Option<f64>,
    /// Why it is odd, if it is (or was within [`crate::limits::CLOCK_ODD_REMEMBERED`]).
    pub odd: Option<&'static str>,
}

/// How a new leader corrects what each clock measured to the majority's rate (see
/// `clock::term_base`): a factor per clock, `None` for a peer's that jumped lately (as
/// `Node::clock_rates` tells).
pub(crate) struct ClockScales {
    /// This node's. Never left out for a jump: what it carries measured nothing across one it
    /// found or could not rule out (`Node::carried_time`), and it judges its clock afresh
    /// before it asks.
    pub own: f64,
    peers: BTreeMap<NodeId, Option<f64>>,
}

/// Each clock's rate over the majority's, `None` for a peer's that jumped lately (as
/// `Node::clock_rates` tells).
struct ClockRates {
    own: f64,
    peers: BTreeMap<NodeId, Option<f64>>,
}

impl ClockScales {
    /// Peer `id`'s: 1 when not known.
    pub fn peer(&self, id: NodeId) -> Option<f64> {
        self.peers.get(&id).copied().unwrap_or(Some(1.0))
    }
}

/// Reads the other voters' clocks and judges this node's, until aborted.
pub async fn probe_clocks(node: Node) {
    loop {
        let pause = match node.is_leader() {
            true => CLOCK_PROBE_LEADING,
            false => CLOCK_PROBE_FOLLOWING,
        };
        let woken = node.inner.own_clock.wake.notified();
        let _ = tokio::time::timeout(pause, woken).await;
        node.ask_clocks();
        node.judge_own_clock();
    }
}

impl Node {
    /// This node's clock, for a peer that asks.
    pub fn clock_reading(&self) -> ClockReading {
        let local = self.inner.clock.local();
        ClockReading {
            process: local.process(),
            micros: u64::try_from(local.now().as_micros()).unwrap_or(u64::MAX),
        }
    }

    /// What `status` and the metrics show of this node's clock.
    pub fn own_clock(&self) -> ClockShown {
        let judged = *self
            .inner
            .own_clock
            .judged
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = self.inner.clock.local().now();
        let odd = still_odd(judged.last_odd, now).then(|| match judged.last.rate_ratio {
            _ if still_odd(judged.last_jump, now) => "jumped",
            Some(r) if r < 1.0 => "runs slow",
            _ => "runs fast",
        });
        ClockShown {
            rate_ratio: judged.last.rate_ratio,
            odd,
        }
    }

    /// How to correct what each clock measured to the majority's rate: this node's by its rate
    /// over the majority's, a peer's by its own over this node's too. A clock known to be
    /// within [`ODD_CLOCK_RATE`] of the majority's counts as it is, and one slower is not
    /// scaled up: store time is never ahead of real time.
    pub(crate) fn clock_scales(&self) -> ClockScales {
        let scale = |rate: f64| match (rate - 1.0).abs() {
            off if off > ODD_CLOCK_RATE && rate.is_finite() => (1.0 / rate).clamp(1.0 / 8.0, 1.0),
            _ => 1.0,
        };
        let rates = self.clock_rates();
        ClockScales {
            own: scale(rates.own),
            peers: (rates.peers.into_iter())
                .map(|(id, rate)| (id, rate.map(scale)))
                .collect(),
        }
    }

    /// The voters other than this node whose clocks are known to run off the majority's by
    /// more than [`ODD_CLOCK_RATE`] or to have jumped lately: a leader handing over passes
    /// them by while it can (see `hand_over`).
    pub(crate) fn odd_peer_clocks(&self) -> BTreeSet<NodeId> {
        let odd = |rate: Option<f64>| rate.is_none_or(|r| (r - 1.0).abs() > ODD_CLOCK_RATE);
        (self.clock_rates().peers.into_iter())
            .filter(|(_, rate)| odd(*rate))
            .map(|(id, _)| id)
            .collect()
    }

    /// Each clock's rate over the majority's, this node's and the other voters', as this node's
    /// readings show it (1 where not known), `None` for a peer's that jumped lately: seen to
    /// jump within [`CLOCK_ODD_REMEMBERED`] or, while this node remembers its own clock jumping
    /// then, not seen to jump just once, with it (below).
    fn clock_rates(&self) -> ClockRates {
        let judged = *self.own().judged.lock().unwrap_or_else(|p| p.into_inner());
        let rate = judged.last.rate_ratio.unwrap_or(1.0);
        let now = self.inner.clock.local().now();
        let since = now.saturating_sub(CLOCK_ODD_REMEMBERED);
        let clocks = self.inner.clock.peer_clocks();
        // A peer's clock seen to jump did, unless this node's own jumped then (every clock that
        // did not jump with it seems to): jumps, as rates, are the majority's to judge. So while
        // this node remembers its own clock jumping, a right peer's seemed to jump once, when
        // this node found its own did; one that seemed not to jumped with it (two clocks jumped
        // together keep step, and each would take the other for a right one to hand leadership
        // to) or was not read since, and one that seemed to jump again jumped on its own, a
        // moment before or after.
        let mine = (judged.jump_began.zip(judged.last_jump))
            .filter(|(_, last)| *last >= since)
            .map(|(began, last)| began.saturating_sub(JUMP_SEEN_WITHIN)..=last + JUMP_SEEN_WITHIN);
        let me = self.inner.id;
        let voters = self.voter_ids().into_iter();
        let peers = voters.filter(|id| *id != me).map(|id| {
            let theirs = clocks.ratio(id).map_or(1.0, |r| rate / r.mid);
            let seen = clocks.jumped_since(id, since);
            let right = match &mine {
                Some(mine) => matches!(seen[..], [at] if mine.contains(&at)),
                None => seen.is_empty(),
            };
            (id, right.then_some(theirs))
        });
        ClockRates {
            own: rate,
            peers: peers.collect(),
        }
    }

    /// Whether this node found its clock jumped, or could not tell, at or after its own
    /// reading `at`.
    pub(crate) fn clock_jumped_after(&self, at: Duration) -> bool {
        let judged = self.own().judged.lock().unwrap_or_else(|p| p.into_inner());
        let since = |jump: Option<Duration>| jump.is_some_and(|jump| jump >= at);
        since(judged.last_jump) || since(judged.last_maybe_jump)
    }

    /// Whether this node's clock is odd, as `status` names it.
    fn clock_is_odd(&self) -> bool {
        self.own_clock().odd.is_some()
    }

    /// Whether this node's clock keeps it from campaigning: judged odd within the last
    /// [`CLOCK_ODD_NO_CAMPAIGN`] (`status` names it for longer).
    pub(crate) fn clock_bars_campaign(&self) -> bool {
        let last_odd = (self.own().judged.lock().unwrap_or_else(|p| p.into_inner())).last_odd;
        let now = self.inner.clock.local().now();
        last_odd.is_some_and(|at| now.saturating_sub(at) < CLOCK_ODD_NO_CAMPAIGN)
    }

    /// Reads the clocks of `peers` afresh (asked from this node's clock reading `since` on),
    /// waiting until `deadline` at most: a new leader must know which clocks jumped before it
    /// counts the time they carry, and a follower's usual readings may be a quarter of a second
    /// old, from before the jump that made the old leader step down. Returns at once where not
    /// every voter can be asked (a mixed cluster: the stamps go by this node's clock alone).
    pub(crate) async fn read_clocks(
        &self,
        peers: &[NodeId],
        since: Duration,
        deadline: tokio::time::Instant,
    ) {
        let me = self.inner.id;
        let voters = self.voter_ids();
        let protocols = self.inner.channels.protocols();
        if !protocols.all_announce(me, voters.iter().copied(), FEATURE) {
            return;
        }
        loop {
            self.ask_clocks();
            let fresh = |p: &NodeId| (self.inner.clock.peer_clocks().last_asked(*p)) >= Some(since);
            if peers.iter().all(fresh) || tokio::time::Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Asks each other voter not already being asked for its clock's reading, in the
    /// background, and tells the leader's clock which voters bound its stamps.
    fn ask_clocks(&self) {
        let me = self.inner.id;
        let voters = self.voter_ids();
        let peers: Vec<NodeId> = voters.iter().copied().filter(|id| *id != me).collect();
        let protocols = self.inner.channels.protocols();
        let all_answer = protocols.all_announce(me, voters.iter().copied(), FEATURE);
        self.inner
            .clock
            .peer_clocks()
            .keep_only(|id| voters.contains(&id));
        let members = self.member_ids();
        protocols.keep_announced_of(|id| members.contains(&id));
        self.inner.clock.set_voters(peers.clone(), all_answer);
        // Every voter is asked, whatever it announced: a follower hears no Raft message from
        // the other followers (after a restart it knows none of their features), and their
        // answers announce them. One of an older build refuses the call, harmlessly.
        for peer in peers {
            let Some(addr) = self.address_of(peer) else {
                continue;
            };
            if !self
                .own()
                .asking
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(peer)
            {
                continue;
            }
            let node = self.clone();
            tokio::spawn(async move {
                let local = node.inner.clock.local();
                let asked = local.now();
                let answer = node.inner.link.clock_reading(peer, addr, CLOCK_PROBE_WAIT);
                if let Ok(reading) = answer.await {
                    let answered = local.now();
                    let mut clocks = node.inner.clock.peer_clocks();
                    clocks.record(peer, asked, answered, reading);
                }
                node.own()
                    .asking
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&peer);
            });
        }
    }

    fn own(&self) -> &OwnClock {
        &self.inner.own_clock
    }

    /// Judges this node's clock from the readings so far; logs a change, and steps down if it
    /// became odd while leading.
    pub(crate) fn judge_own_clock(&self) {
        let me = self.inner.id;
        let voters = self.voter_ids();
        let now = self.inner.clock.local().now();
        let judgement = {
            let clocks = self.inner.clock.peer_clocks();
            let peers = voters.iter().filter(|id| **id != me);
            let ratios: Vec<_> = peers.map(|id| clocks.ratio(*id)).collect();
            let jumps = clocks.jumps_since(now.saturating_sub(JUMP_SEEN_WITHIN));
            judge(&ratios, voters.len(), jumps)
        };
        let was_odd = self.clock_is_odd();
        {
            let mut judged = self.own().judged.lock().unwrap_or_else(|p| p.into_inner());
            judged.last = judgement;
            if judgement.odd {
                judged.last_odd = Some(now);
            }
            if judgement.jumped {
                // Apart, not after: this node's clock may have jumped back.
                let went_on =
                    (judged.last_jump).is_some_and(|at| now.abs_diff(at) <= JUMP_SEEN_WITHIN);
                if !went_on {
                    judged.jump_began = Some(now);
                }
                judged.last_jump = Some(now);
            }
            if judgement.maybe_jumped {
                judged.last_maybe_jump = Some(now);
            }
        }
        let shown = self.own_clock();
        match (was_odd, shown.odd) {
            (false, Some(why)) => tracing::warn!(
                rate_ratio = ?shown.rate_ratio,
                "this node's clock {why} against the majority's: it does not campaign, and \
                 steps down if it leads, until it has been right for a moment; check its time \
                 source (NTP, the hypervisor's clock)"
            ),
            (true, None) => tracing::info!(
                rate_ratio = ?shown.rate_ratio,
                "this node's clock has agreed with the majority's for a while: no longer named odd"
            ),
            _ => {}
        }
        // Only while it is odd now: one right again (whose oddness is still remembered, and may
        // still keep it from campaigning) may lead when handed leadership, else two nodes odd
        // one after the other would hand it back and forth.
        if judgement.odd && self.is_leader() {
            self.step_down_for_clock();
        }
    }

    /// Hands leadership to another voter, in the background, once at a time.
    fn step_down_for_clock(&self) {
        use std::sync::atomic::Ordering;
        if self.own().stepping_down.swap(true, Ordering::AcqRel) {
            return;
        }
        let node = self.clone();
        tokio::spawn(async move {
            let handed = node.step_down().await;
            tracing::warn!(?handed, "stepped down: this node's clock is odd");
            // Each try closes the proposals while it lasts: one that found no voter to hand to
            // waits before the next, else the writes would stall at every reading.
            if matches!(handed, HandedOver::Not(_)) {
                tokio::time::sleep(STEP_DOWN_RETRY).await;
            }
            node.own().stepping_down.store(false, Ordering::Release);
        });
    }
}

/// Keeps `leasehold_clock_rate_ratio` in step with what the node makes of its clock.
pub async fn follow_clock(node: Node, metrics: Arc<crate::metrics::Metrics>) {
    let mut every = tokio::time::interval(Duration::from_secs(1));
    loop {
        every.tick().await;
        let shown = node.own_clock();
        metrics
            .clock_rate_ratio
            .set(shown.rate_ratio.unwrap_or(0.0));
        metrics.clock_odd.set(i64::from(shown.odd.is_some()));
    }
}
