//! What a node knows of its peers' clocks (issue 42, a clock that lies): readings of each peer's
//! own clock, taken by asking (`clock_probe`), each with this node's own clock's readings when it
//! asked and when the answer came. From them:
//!
//! - how much each peer's clock counted up to an instant of this node's ([`PeerClocks::trail`]),
//!   whose growth the leader's stamps may not outrun but with a majority (`quorum_time`);
//! - how fast this node's clock runs against each peer's ([`PeerClocks::ratio`]), bounded both
//!   ways by the round trips, from which the leader slows or speeds its own clock to the
//!   majority's, and a node judges its own clock ([`judge`]).
//!
//! A peer's reading going back, or an interval that one clock measured [`CLOCK_JUMP_RATIO`]
//! times longer than the other, or [`CLOCK_JUMP_SECONDS`] longer than the peer's known rate
//! explains, is a jump: rates are measured from after it, and it counts nothing. A peer that
//! restarted (a new incarnation) starts a new clock: nothing counts across. Pure: no clock of
//! its own, no I/O.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::majority::{vouched, vouched_below};
use crate::limits::{
    CLOCK_JUMP_RATIO, CLOCK_JUMP_SECONDS, CLOCK_ODD_REMEMBERED, CLOCK_RATE_SPAN, CLOCK_RATE_WINDOW,
    ODD_CLOCK_RATE,
};
use crate::NodeId;

/// A node's answer when asked for its clock: which process it is (a restarted node's clock
/// starts anew) and its clock's reading, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClockReading {
    /// Drawn at random when the node's clock started.
    pub process: u64,
    /// The clock's reading.
    pub micros: u64,
}

/// The readings of one peer's clock kept: enough for [`CLOCK_RATE_WINDOW`] at the leader's pace.
const SAMPLES_KEPT: usize = 256;

/// One reading of a peer's clock.
#[derive(Clone, Copy, Debug)]
struct Sample {
    /// This node's own clock when it asked, and when the answer came.
    asked: Duration,
    answered: Duration,
    /// The peer's reading.
    theirs: Duration,
    /// What the peer's clock counted up to this reading since this node first read it: jumps
    /// and restarts count nothing.
    counted: Duration,
}

#[derive(Default)]
struct Peer {
    process: Option<u64>,
    samples: VecDeque<Sample>,
    /// Rates are measured from readings asked at or after this: the last jump or restart.
    rates_from: Duration,
    /// This node's own clock when it saw this peer's clock jump, the last few times, oldest
    /// first.
    jumps: VecDeque<Duration>,
}

/// The jumps of a peer's clock kept: enough to tell one jump from two within
/// [`CLOCK_ODD_REMEMBERED`] (see `clock_probe::clock_rates`).
const JUMPS_KEPT: usize = 4;

/// How fast this node's clock ran against one peer's: this node's elapsed time over the peer's,
/// across the last [`CLOCK_RATE_SPAN`] of readings. `low` and `high` bound it (the peer
/// read its clock somewhere within each round trip); `mid` is the estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ratio {
    pub low: f64,
    pub mid: f64,
    pub high: f64,
}

#[cfg(test)]
impl Ratio {
    /// A clock against itself.
    pub const SAME: Ratio = Ratio {
        low: 1.0,
        mid: 1.0,
        high: 1.0,
    };
}

#[derive(Default)]
pub struct PeerClocks {
    peers: BTreeMap<NodeId, Peer>,
}

impl PeerClocks {
    /// Notes `peer`'s reading, asked at `asked` and answered at `answered` on this node's clock.
    pub fn record(
        &mut self,
        peer: NodeId,
        asked: Duration,
        answered: Duration,
        reading: ClockReading,
    ) {
        let theirs = Duration::from_micros(reading.micros);
        // The rate known before this reading: none right after a restart or a jump (then only
        // the ratio of the intervals tells a jump).
        let rate = self.ratio(peer).or_else(|| self.latest_ratio(peer));
        let entry = self.peers.entry(peer).or_default();
        let last = entry.samples.back().copied();
        let counted = match last {
            None => Duration::ZERO,
            // A restart: the readings before it are of another clock, and the next reading
            // compared with them would look like a jump back (two peers restarted together
            // then made this node judge its own clock jumped).
            Some(last) if entry.process != Some(reading.process) => {
                entry.samples.clear();
                entry.rates_from = asked;
                last.counted
            }
            // Against the reading before the last too: a jump of this node's clock while it
            // waited for the last answer shows only across both (alone, that wait looks like
            // this node paused).
            Some(last)
                if (entry.samples.iter().rev().take(2))
                    .any(|before| jumped(before, asked, answered, theirs, rate)) =>
            {
                // The readings before it are on another footing (this node's clock may have
                // gone back): the trail goes on from the counted time alone.
                entry.samples.clear();
                entry.rates_from = asked;
                entry.jumps.push_back(answered);
                if entry.jumps.len() > JUMPS_KEPT {
                    entry.jumps.pop_front();
                }
                last.counted
            }
            Some(last) => last.counted + (theirs - last.theirs),
        };
        entry.process = Some(reading.process);
        entry.samples.push_back(Sample {
            asked,
            answered,
            theirs,
            counted,
        });
        // Kept: the window's readings, and the one before them for a trail that reaches back.
        while entry.samples.len() > SAMPLES_KEPT
            || (entry.samples.len() > 2
                && answered.saturating_sub(entry.samples[1].answered) > CLOCK_RATE_WINDOW)
        {
            entry.samples.pop_front();
        }
    }

    /// Forgets the peers not among `members`.
    pub fn keep_only(&mut self, members: impl Fn(NodeId) -> bool) {
        self.peers.retain(|id, _| members(*id));
    }

    /// What `peer`'s clock counted from this node's first reading of it up to this node's
    /// instant `at`, reading between its readings as if its clock ran evenly (jumps and
    /// restarts count nothing): only differences of it mean anything. Never more than it
    /// counted by the first reading answered after `at` (nor, past the last reading, than that
    /// one counted); zero if never read.
    pub fn trail(&self, peer: NodeId, at: Duration) -> Duration {
        let Some(entry) = self.peers.get(&peer) else {
            return Duration::ZERO;
        };
        let mut samples = entry.samples.iter();
        let Some(mut before) = samples.next() else {
            return Duration::ZERO;
        };
        for after in samples {
            if after.answered > at {
                let span = after.answered.saturating_sub(before.answered).as_secs_f64();
                let into = at.saturating_sub(before.answered).as_secs_f64();
                let grew = after.counted.saturating_sub(before.counted).as_secs_f64();
                let between = if span > 0.0 { grew * into / span } else { 0.0 };
                return before.counted + Duration::from_secs_f64(between.min(grew));
            }
            before = after;
        }
        before.counted
    }

    /// What `peer`'s clock counted between this node's instants `between` (as [`trail`] reads
    /// it), only where its readings cover them: the part after its last reading answered
    /// counts nothing, now or once a later reading covers it. Taken later, the time a late
    /// reading held back would come in one step (see `quorum_time::allowance`).
    ///
    /// [`trail`]: PeerClocks::trail
    pub fn grew(&self, peer: NodeId, between: std::ops::Range<Duration>) -> Duration {
        let Some(newest) = (self.peers.get(&peer)).and_then(|e| e.samples.back()) else {
            return Duration::ZERO;
        };
        let covered = |at: Duration| self.trail(peer, at.min(newest.answered));
        covered(between.end).saturating_sub(covered(between.start))
    }

    /// How fast this node's clock ran against `peer`'s over the last [`CLOCK_RATE_SPAN`] of the
    /// peer's clock, since its last jump or restart; `None` until the readings span that much.
    pub fn ratio(&self, peer: NodeId) -> Option<Ratio> {
        let entry = self.peers.get(&peer)?;
        let last = entry.samples.back()?;
        // The latest reading at least the span before the last: a rate that changed shows
        // within the span.
        let first = (entry.samples.iter().rev())
            .take_while(|s| s.asked >= entry.rates_from)
            .find(|s| last.theirs.saturating_sub(s.theirs) >= CLOCK_RATE_SPAN)?;
        between(first, last)
    }

    /// How fast this node's clock ran against `peer`'s between its last two readings: noisy,
    /// but the first to show a change of rate.
    pub fn latest_ratio(&self, peer: NodeId) -> Option<Ratio> {
        let entry = self.peers.get(&peer)?;
        let mut latest = entry.samples.iter().rev();
        let (last, first) = (latest.next()?, latest.next()?);
        (first.asked >= entry.rates_from).then(|| between(first, last))?
    }

    /// When this node asked `peer` for the last reading it has, on its clock.
    pub fn last_asked(&self, peer: NodeId) -> Option<Duration> {
        Some(self.peers.get(&peer)?.samples.back()?.asked)
    }

    /// When this node last heard from any of `peers`, on its clock.
    pub fn last_heard(&self, peers: &[NodeId]) -> Option<Duration> {
        let last = |p: &NodeId| Some(self.peers.get(p)?.samples.back()?.answered);
        peers.iter().filter_map(last).max()
    }

    /// When this node saw `peer`'s clock jump at or after its instant `since`, on its own
    /// clock, oldest first (the last few only).
    pub fn jumped_since(&self, peer: NodeId, since: Duration) -> Vec<Duration> {
        let jumps = self.peers.get(&peer).map(|p| p.jumps.iter());
        jumps
            .into_iter()
            .flatten()
            .copied()
            .filter(|at| *at >= since)
            .collect()
    }

    /// How many of the peers' clocks jumped, as this node saw, at or after its instant `since`.
    pub fn jumps_since(&self, since: Duration) -> usize {
        let recent = |p: &&Peer| p.jumps.back().is_some_and(|at| *at >= since);
        self.peers.values().filter(recent).count()
    }
}

/// How fast this node's clock ran against a peer's from reading `first` to `last`.
fn between(first: &Sample, last: &Sample) -> Option<Ratio> {
    let theirs = last.theirs.checked_sub(first.theirs)?.as_secs_f64();
    if theirs <= 0.0 {
        return None;
    }
    let ours = |to: Duration, from: Duration| to.saturating_sub(from).as_secs_f64() / theirs;
    let mid = |s: &Sample| (s.asked + s.answered) / 2;
    Some(Ratio {
        low: ours(last.asked, first.answered),
        mid: ours(mid(last), mid(first)),
        high: ours(last.answered, first.asked),
    })
}

/// Whether a reading `theirs`, asked at `asked` and answered at `answered`, shows a jump since
/// `last`: their clock went back, or one side measured the interval between the two readings
/// far longer than the other could have, or longer by [`CLOCK_JUMP_SECONDS`] than the peer's
/// `rate` (this clock's over theirs, as last measured, if known) explains.
fn jumped(
    last: &Sample,
    asked: Duration,
    answered: Duration,
    theirs: Duration,
    rate: Option<Ratio>,
) -> bool {
    let Some(their_span) = theirs.checked_sub(last.theirs) else {
        return true;
    };
    // The peer read its clock within each round trip: its interval lies within these of ours.
    let shortest = asked.saturating_sub(last.answered).as_secs_f64();
    let longest = answered.saturating_sub(last.asked).as_secs_f64();
    let their_span = their_span.as_secs_f64();
    let off_rate = |r: Ratio| {
        their_span > longest / r.low + CLOCK_JUMP_SECONDS
            || their_span + CLOCK_JUMP_SECONDS < shortest / r.high
    };
    their_span > longest * CLOCK_JUMP_RATIO + 0.001
        || their_span * CLOCK_JUMP_RATIO + 0.001 < shortest
        || rate.is_some_and(off_rate)
}

/// What a node makes of its own clock against the majority's.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Judgement {
    /// This node's clock's rate over the majority's (2.0: twice as fast), once known.
    pub rate_ratio: Option<f64>,
    /// Its clock runs more than [`ODD_CLOCK_RATE`] off the majority's for sure (the round trips
    /// cannot explain it), or it jumped.
    pub odd: bool,
    /// Why, for `status` and the log.
    pub jumped: bool,
    /// At least as many peers seemed to jump as not (one of two, with the third voter down):
    /// this clock or theirs, nobody can tell. Not odd, but what it measured across that moment
    /// is not to be trusted (see `Node::carried_time`).
    pub maybe_jumped: bool,
}

/// Judges this node's clock from its `ratios` against each peer's (`None`: not known yet, taken
/// as agreeing) among `voters` (this node counted in), and how many peers' clocks it saw jump
/// lately: when most of them did at once, its own did.
pub fn judge(ratios: &[Option<Ratio>], voters: usize, jumps: usize) -> Judgement {
    let known: Vec<Ratio> = ratios.iter().flatten().copied().collect();
    let with_own = |pick: fn(&Ratio) -> f64| with_own(ratios, pick);
    // Fast for sure when a majority's clocks are slower than this one's even at the low bound;
    // slow when a majority's are faster even at the high bound.
    let fast = vouched_below(with_own(|r| r.low), voters).unwrap_or(1.0) > 1.0 + ODD_CLOCK_RATE;
    let slow = vouched(with_own(|r| r.high), voters).unwrap_or(1.0) < 1.0 - ODD_CLOCK_RATE;
    let jumped = jumps * 2 > ratios.len();
    Judgement {
        maybe_jumped: jumps > 0 && jumps * 2 >= ratios.len(),
        rate_ratio: (!known.is_empty())
            .then(|| vouched(with_own(|r| r.mid), voters))
            .flatten(),
        odd: fast || slow || jumped,
        jumped,
    }
}

/// One rate per voter, for the majority rules (`majority::vouched`): this node's against its
/// own, 1, then `pick` of its rate against each peer's, 1 where not known yet (taken as
/// agreeing).
pub fn with_own(ratios: &[Option<Ratio>], pick: fn(&Ratio) -> f64) -> Vec<f64> {
    let mut values = vec![1.0];
    values.extend(ratios.iter().map(|r| r.as_ref().map_or(1.0, pick)));
    values
}

/// How long a node stays odd after it was last judged so: see [`CLOCK_ODD_REMEMBERED`].
pub fn still_odd(last_odd: Option<Duration>, now: Duration) -> bool {
    last_odd.is_some_and(|at| now.saturating_sub(at) < CLOCK_ODD_REMEMBERED)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Readings of a peer whose clock runs at `rate` of this node's, every `every` ms for `for_ms`,
    /// each answered 1 ms after it was asked (read half-way).
    fn readings(clocks: &mut PeerClocks, peer: NodeId, rate: f64, every: u64, for_ms: u64) {
        for at in (0..=for_ms).step_by(every as usize) {
            let theirs = 1_000_000.0 + (at as f64 + 0.5) * rate * 1_000.0;
            let reading = ClockReading {
                process: 7,
                micros: theirs as u64,
            };
            clocks.record(peer, MS(at), MS(at + 1), reading);
        }
    }

    #[test]
    fn a_peer_at_half_this_clocks_rate_shows_a_ratio_of_two_within_the_round_trip() {
        let mut clocks = PeerClocks::default();
        readings(&mut clocks, 2, 0.5, 25, 4_000);
        let ratio = clocks.ratio(2).unwrap();
        assert!(ratio.low <= 2.0 && 2.0 <= ratio.high, "{ratio:?}");
        assert!((ratio.mid - 2.0).abs() < 0.01, "{ratio:?}");
        assert!(ratio.high - ratio.low < 0.01, "{ratio:?}");
        assert_eq!(clocks.ratio(3), None, "never read");
    }

    #[test]
    fn the_trail_counts_the_peers_clock_from_its_first_reading_and_grows_evenly() {
        let mut clocks = PeerClocks::default();
        assert_eq!(clocks.trail(2, MS(5)), Duration::ZERO, "never read");
        readings(&mut clocks, 2, 1.0, 25, 1_000);
        // Up to the first reading's answer (asked at 0), nothing; by the one answered at 201
        // (asked at 200), its clock counted 200 ms.
        assert_eq!(clocks.trail(2, MS(0)), Duration::ZERO);
        assert_eq!(clocks.trail(2, MS(201)), MS(200));
        // Half-way to the next answer, half-way there.
        let between = clocks.trail(2, MS(213) + Duration::from_micros(500));
        assert_eq!(between, MS(212) + Duration::from_micros(500));
        assert_eq!(clocks.trail(2, MS(5_000)), MS(1_000), "no more than read");
        // The trail outlives the window's readings.
        let mut clocks = PeerClocks::default();
        readings(&mut clocks, 2, 1.0, 25, 10_000);
        assert_eq!(clocks.trail(2, MS(10_001)), MS(10_000));
    }

    #[test]
    fn a_jump_or_a_restart_counts_nothing_and_rates_start_after_it() {
        let mut clocks = PeerClocks::default();
        readings(&mut clocks, 2, 1.0, 25, 2_000);
        let before = clocks.trail(2, MS(2_001));
        let jumped = ClockReading {
            process: 7,
            micros: 1_000_000 + 12_025_500,
        };
        clocks.record(2, MS(2_025), MS(2_026), jumped);
        assert_eq!(
            clocks.trail(2, MS(2_026)),
            before,
            "the jump counts nothing"
        );
        assert_eq!(clocks.jumps_since(MS(2_000)), 1);
        assert_eq!(clocks.ratio(2), None, "rates start anew");
        let restarted = ClockReading {
            process: 8,
            micros: 5,
        };
        clocks.record(2, MS(2_050), MS(2_051), restarted);
        assert_eq!(clocks.trail(2, MS(2_051)), before);
    }

    #[test]
    fn a_jump_across_a_long_gap_in_the_readings_is_still_a_jump_and_a_known_rate_is_not() {
        // A peer at `rate` read every 25 ms for 2 s; then no answer until this node asks at
        // `asked` ms and reads `theirs` µs past its first reading: how many jumps were seen.
        let after_a_gap = |rate: f64, asked: u64, theirs: u64| {
            let mut clocks = PeerClocks::default();
            readings(&mut clocks, 2, rate, 25, 2_000);
            let reading = ClockReading {
                process: 7,
                micros: 1_000_000 + theirs,
            };
            clocks.record(2, MS(asked), MS(asked + 1), reading);
            clocks.jumps_since(MS(0))
        };
        // 6 s without an answer, during which this node's clock jumped 10 s ahead: 16 s on
        // this clock against 6 on the peer's, under the ratio.
        let jumped = after_a_gap(1.0, 18_000, 8_000_500);
        assert_eq!(jumped, 1, "the jump across the gap went unseen");
        // A peer at twice this clock's rate, read across the same gap, jumped not.
        let known = after_a_gap(2.0, 8_000, 16_001_000);
        assert_eq!(known, 0, "a known rate taken for a jump");
        // Nor one whose rate is not known yet (read once before the gap).
        let mut clocks = PeerClocks::default();
        readings(&mut clocks, 2, 2.0, 25, 0);
        let reading = ClockReading {
            process: 7,
            micros: 1_000_000 + 12_001_000,
        };
        clocks.record(2, MS(6_000), MS(6_001), reading);
        assert_eq!(
            clocks.jumps_since(MS(0)),
            0,
            "an unknown rate taken for a jump"
        );
    }

    #[test]
    fn a_peer_restarted_reads_on_from_its_new_clock_and_did_not_jump() {
        let mut clocks = PeerClocks::default();
        readings(&mut clocks, 2, 1.0, 25, 2_000);
        // Its new process's clock starts far below the old one's; two readings of it.
        for (at, micros) in [(2_500, 5_000), (2_525, 30_000)] {
            let restarted = ClockReading { process: 8, micros };
            clocks.record(2, MS(at), MS(at + 1), restarted);
        }
        assert_eq!(clocks.jumps_since(MS(0)), 0, "a restart is no jump");
        assert_eq!(
            clocks.trail(2, MS(2_526)),
            MS(2_025),
            "2,000 ms counted before, 25 after"
        );
    }

    #[test]
    fn a_clock_is_judged_against_the_majority_not_against_one_peer() {
        let two = Some(Ratio {
            low: 1.98,
            mid: 2.0,
            high: 2.02,
        });
        let half = Some(Ratio {
            low: 0.49,
            mid: 0.5,
            high: 0.51,
        });
        let same = Some(Ratio::SAME);
        // This node's clock runs at twice both peers'.
        let fast = judge(&[two, two], 3, 0);
        assert!(fast.odd && fast.rate_ratio == Some(2.0), "{fast:?}");
        // One peer runs at half this node's: that peer is odd, not this node.
        assert!(!judge(&[two, same], 3, 0).odd);
        assert!(judge(&[half, half], 3, 0).odd);
        // Five voters, this node and another both fast against the other three.
        assert!(judge(&[same, two, two, two], 5, 0).odd);
        assert!(!judge(&[same, two, same, same], 5, 0).odd);
        // Nothing known yet: not odd, no ratio.
        assert_eq!(judge(&[None, None], 3, 0), Judgement::default());
        // Both peers seemed to jump at once: this node's clock jumped.
        assert!(judge(&[same, same], 3, 2).jumped);
        assert!(!judge(&[same, same], 3, 1).odd);
    }
}
