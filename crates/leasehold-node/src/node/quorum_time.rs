//! How far a leader's stamps may move: by its own clock, slowed or sped to the majority's rate,
//! and never past what a majority of the voters' clocks measured since the term's base (issue
//! 42; the argument is in `clock`). Pure: the clocks' readings come in as values.

use std::time::Duration;

use super::majority::vouched;
use super::peer_clocks::{with_own, PeerClocks, Ratio};
use crate::limits::{CLOCK_TRAIL, CLOCK_UNHEARD, ODD_CLOCK_RATE};
use crate::raft::NodeId;

/// The most a leader's clock is slowed or sped: far past any clock that is merely odd, so that
/// a rate measured across a jump the filter let through cannot stop or race the stamps.
const MOST_CORRECTION: f64 = 8.0;

/// What each voter's clock measured since the term's base, as [`Allowance::since_base`] reads
/// them: this node's own, and each peer's by its id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Measured {
    pub own: Duration,
    pub peers: Vec<(NodeId, Duration)>,
}

impl Measured {
    /// What a majority of the clocks vouch for having measured between `before` and these
    /// readings: the majority-th largest of each clock's growth (nothing for a peer not read
    /// before). Unlike what they measured since the base, this forgets a clock that was wrong
    /// earlier in the term: a follower that ran fast for a while stays ahead since the base,
    /// and with it the majority-th largest since the base was this node's own clock, whatever
    /// that clock did next.
    fn grew_since(&self, before: &Measured) -> Option<Duration> {
        let earlier = |id| before.peers.iter().find(|(p, _)| *p == id).map(|(_, d)| *d);
        let peers = (self.peers.iter())
            .map(|(id, now)| earlier(*id).map_or(Duration::ZERO, |was| now.saturating_sub(was)));
        let grew: Vec<Duration> = std::iter::once(self.own.saturating_sub(before.own))
            .chain(peers)
            .collect();
        let voters = grew.len();
        vouched(grew, voters)
    }
}

/// What the voters' clocks allow a leader's stamps, now.
#[derive(Clone, Debug, PartialEq)]
pub struct Allowance {
    /// The store time the stamps may reach since the term's base: what a majority of the
    /// voters' clocks measured since then (read [`CLOCK_TRAIL`] behind, evenly between
    /// readings); `None` when the leader's clock alone decides (a single voter, or a voter of
    /// a build that cannot be asked).
    pub since_base: Option<Duration>,
    /// What each voter's clock measured since the base (`None` with `since_base`): the stamps
    /// move no further than a majority of them grew since the last stamp.
    pub measured: Option<Measured>,
    /// How much store time one unit of the leader's clock is worth: the majority's rate over
    /// the leader's, bounded from above (1.0 when unknown).
    pub pace: f64,
    /// Whether the leader heard from a voter lately enough to trust its own clock since: else
    /// the stamps stand still.
    pub heard: bool,
}

impl Allowance {
    /// The leader's clock alone, as before issue 42.
    pub const OWN_CLOCK: Allowance = Allowance {
        since_base: None,
        measured: None,
        pace: 1.0,
        heard: true,
    };
}

/// What the `peers` (the other voters; `voters` counts this node too) allow a leader whose
/// term's base was taken at `since` on its own clock (where `clocks` count from), which reads
/// `now`; their clocks are read at its instant `trail_at` (see [`Stamping::trail_at`]).
pub fn allowance(
    clocks: &PeerClocks,
    peers: &[NodeId],
    voters: usize,
    since: Duration,
    now: Duration,
    trail_at: Duration,
) -> Allowance {
    let measured = Measured {
        own: now.saturating_sub(since),
        peers: (peers.iter())
            .map(|p| (*p, clocks.trail(*p, trail_at)))
            .collect(),
    };
    let since_base = std::iter::once(measured.own).chain(measured.peers.iter().map(|(_, d)| *d));
    let rate = leader_rate(clocks, peers, voters);
    // Unheard from for longer than the readings come, this clock may have jumped (or this
    // node paused): it measures nothing until the next reading tells which.
    let heard = peers.is_empty()
        || (clocks.last_heard(peers)).is_some_and(|at| now.saturating_sub(at) <= CLOCK_UNHEARD);
    Allowance {
        since_base: vouched(since_base.collect(), voters),
        measured: Some(measured),
        pace: (1.0 / rate).clamp(1.0 / MOST_CORRECTION, MOST_CORRECTION),
        heard,
    }
}

/// This clock's rate over the majority's, as the stamps' pace counts it: 1 unless the readings
/// show for sure that it is off (a majority's bounds all above 1, or all below), and then the
/// majority's upper bound, which is at least the true rate for every right peer, so that the
/// stamps move no faster than real time once it is known. Over the last readings alone when
/// those show for sure, and tightly, that the rate changed: the stamps follow the change from
/// its first reading on. A right clock is left alone: its bounds, loose under a loaded machine's
/// round trips, would only slow its stamps.
fn leader_rate(clocks: &PeerClocks, peers: &[NodeId], voters: usize) -> f64 {
    let majority_of = |ratio: &dyn Fn(NodeId) -> Option<Ratio>, bound: fn(&Ratio) -> f64| {
        let ratios: Vec<Option<Ratio>> = peers.iter().map(|p| ratio(*p)).collect();
        vouched(with_own(&ratios, bound), voters).unwrap_or(1.0)
    };
    let spanned = |p| clocks.ratio(p);
    // A peer whose last readings are loose says nothing new: its span's ratio stands.
    let tight = |p| {
        let latest = clocks
            .latest_ratio(p)
            .filter(|r| r.high - r.low <= ODD_CLOCK_RATE);
        latest.or_else(|| clocks.ratio(p))
    };
    let (low, high) = (
        majority_of(&spanned, |r| r.low),
        majority_of(&spanned, |r| r.high),
    );
    let (latest_low, latest_high) = (
        majority_of(&tight, |r| r.low),
        majority_of(&tight, |r| r.high),
    );
    let (low, high) = match latest_low > high * (1.0 + ODD_CLOCK_RATE)
        || latest_high < low * (1.0 - ODD_CLOCK_RATE)
    {
        true => (latest_low, latest_high),
        false => (low, high),
    };
    match low <= 1.0 && 1.0 <= high {
        true => 1.0,
        false => high,
    }
}

/// Where a term's stamps stand.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamping {
    /// The term's base store time, in microseconds, and the leader's clock when it was taken.
    pub base_us: u64,
    pub since: Duration,
    /// The last stamp, in microseconds, and the leader's clock when it was given.
    pub last_us: u64,
    pub last_read: Duration,
    /// Where the voters' clocks were last read, on the leader's: see [`Stamping::trail_at`].
    trail_at: Duration,
    /// The pace of the last stamp: see [`Stamping::trail_at`].
    pace: f64,
    /// The most the last stamp was allowed, in microseconds: `None` when the leader's clock
    /// alone moved it (see [`Stamping::advance`] and [`Stamping::rebound`]).
    allowed_us: Option<u64>,
    /// What the voters' clocks had measured at the last stamp: see [`Measured::grew_since`].
    measured: Option<Measured>,
}

impl Stamping {
    pub fn new(base_ms: u64, since: Duration) -> Stamping {
        let base_us = base_ms.saturating_mul(1_000);
        Stamping {
            base_us,
            since,
            last_us: base_us,
            last_read: since,
            trail_at: since,
            pace: 1.0,
            allowed_us: Some(base_us),
            measured: None,
        }
    }

    /// Whether the voters' clocks bound the stamps again after the leader's clock alone moved
    /// them (a voter of an older build left, say): the allowance must then count from here,
    /// see [`Stamping::bounded_from`].
    pub fn rebound(&self, allowed: &Allowance) -> bool {
        allowed.since_base.is_some() && self.allowed_us.is_none()
    }

    /// Counts the allowance from the last stamp, taken at the leader's clock reading `now`,
    /// instead of the term's base: the stamps since the base went by the leader's clock alone,
    /// and what the voters' clocks measured counts only from readings asked after the moment
    /// they bound it again, so that an allowance from the base would stand below the last
    /// stamp and stop the stamps for as long as the leader's clock alone moved them.
    pub fn bounded_from(&mut self, now: Duration) {
        self.base_us = self.last_us;
        self.since = now;
        self.trail_at = now;
        self.allowed_us = Some(self.last_us);
        self.measured = None;
    }

    /// Where to read the voters' clocks at the leader's clock reading `now`: [`CLOCK_TRAIL`] of
    /// real time behind it, so that the readings grow evenly between the answers, and never
    /// back in real time.
    ///
    /// Real time, not the leader's: the trail is counted on the leader's clock at the last
    /// stamp's pace (a clock known to run at twice the majority's trails by 200 ms of its own).
    /// Only a change of how far store time trails real time shortens a lease, never the trail
    /// itself, and a trail of the leader's time would shrink by half in real time whenever its
    /// clock ran twice as fast (or grow, and then shrink back, when one that ran slow came
    /// right again): store time gained on real time by as much, once the faster clock raced up
    /// to it. Now only until the readings show the new rate, as the pace does.
    ///
    /// A leader's clock that went back counts on from where it stood: the base's and the
    /// trail's instants move back with it, instead of this clock measuring nothing since the
    /// base (which held every stamp for as long as the jump, when the only other voter that
    /// answered ran no further) and the trail standing still.
    ///
    /// Returns where to read them, and how far the clock went back (zero mostly): the peers'
    /// readings must count from an instant moved back as far (`PeerClocks::shift_origin`).
    pub fn trail_at(&mut self, now: Duration) -> (Duration, Duration) {
        let back = self.last_read.saturating_sub(now);
        self.since = self.since.saturating_sub(back);
        self.trail_at = self.trail_at.saturating_sub(back);
        self.last_read = self.last_read.saturating_sub(back);
        let trail = CLOCK_TRAIL.div_f64(self.pace);
        self.trail_at = self.trail_at.max(now.saturating_sub(trail));
        (self.trail_at, back)
    }

    /// The stamp at the leader's clock reading `now`, in milliseconds: the last one moved by
    /// what the clock measured since, at the allowed pace, and no further than allowed. Never
    /// back; a clock that went back measured nothing. Never faster than the pace either, even
    /// to catch up with what is allowed: a stamp that moved faster than real time would end
    /// early the leases granted before it.
    ///
    /// Nor faster than the allowance grew since the last stamp: a pace above the clock's true
    /// rate (one that ran slow and came right, until the readings show it) would otherwise race
    /// the stamps up to the allowance, taking back the time they lost behind it before, and
    /// end early the leases granted meanwhile.
    ///
    /// Nor further than a majority of the voters' clocks grew since the last stamp: the
    /// allowance since the base holds only while at most a minority's clocks were wrong all
    /// term, and one follower whose clock ran fast for a while, then the leader's own, are two.
    pub fn advance(&mut self, now: Duration, allowed: Allowance) -> u64 {
        let measured = match allowed.heard {
            true => now.saturating_sub(self.last_read).as_secs_f64() * 1e6,
            false => 0.0,
        };
        self.last_read = now;
        self.pace = allowed.pace;
        let paced = self
            .last_us
            .saturating_add((measured * allowed.pace) as u64);
        let most = allowed.since_base.map(|since_base| {
            let us = u64::try_from(since_base.as_micros()).unwrap_or(u64::MAX);
            self.base_us.saturating_add(us)
        });
        let grown = match (most, self.allowed_us) {
            (Some(most), Some(before)) => self.last_us.saturating_add(most.saturating_sub(before)),
            _ => u64::MAX,
        };
        let majority_grew = match (&allowed.measured, &self.measured) {
            (Some(measured), Some(before)) => measured.grew_since(before),
            _ => None,
        };
        let majority_grew = majority_grew.map_or(u64::MAX, |grew| {
            let us = u64::try_from(grew.as_micros()).unwrap_or(u64::MAX);
            self.last_us.saturating_add(us)
        });
        self.allowed_us = most;
        self.measured = allowed.measured;
        let most = most.unwrap_or(u64::MAX).min(grown).min(majority_grew);
        self.last_us = self.last_us.max(paced.min(most));
        self.last_us / 1_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::peer_clocks::ClockReading;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Peers 2 and 3 read every 25 ms for `for_ms`, each answered 1 ms after it was asked, their
    /// clocks running at `rates` of this node's.
    fn read(rates: [f64; 2], for_ms: u64) -> PeerClocks {
        let mut clocks = PeerClocks::default();
        clocks.count_from(MS(0));
        for at in (0..=for_ms).step_by(25) {
            for (peer, rate) in [(2, rates[0]), (3, rates[1])] {
                let micros = (1e9 + (at as f64 + 0.5) * rate * 1e3) as u64;
                let reading = ClockReading { process: 1, micros };
                clocks.record(peer, MS(at), MS(at + 1), reading);
            }
        }
        clocks
    }

    #[test]
    fn a_leader_twice_as_fast_as_both_peers_stamps_at_their_pace() {
        // This node's clock counted 4 s while theirs counted 2 s.
        let clocks = read([0.5, 0.5], 4_000);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(0), MS(4_001), MS(3_961));
        assert!((allowed.pace - 0.5).abs() < 0.01, "{allowed:?}");
        let since = allowed.since_base.unwrap();
        assert!(since <= MS(2_000) && since >= MS(1_970), "{since:?}");
        let mut stamping = Stamping::new(10_000, MS(3_000));
        let stamp = stamping.advance(MS(3_500), allowed);
        assert!((10_249..=10_250).contains(&stamp), "{stamp}");
    }

    #[test]
    fn one_fast_peer_moves_nothing_and_a_slow_leader_is_sped_up() {
        let clocks = read([2.0, 1.0], 4_000);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(0), MS(4_001), MS(3_961));
        assert!((allowed.pace - 1.0).abs() < 0.01, "{allowed:?}");
        assert!(allowed.since_base.unwrap() <= MS(4_001), "{allowed:?}");
        let clocks = read([2.0, 2.0], 4_000);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(0), MS(4_001), MS(3_961));
        assert!((allowed.pace - 2.0).abs() < 0.02, "{allowed:?}");
    }

    #[test]
    fn a_leader_whose_clock_speeds_up_paces_from_the_first_reading_after_and_one_unheard_waits() {
        // Both peers read every 25 ms for 4 s at this clock's rate, then this clock runs at
        // twice its speed: the next readings come 50 ms apart on it, 25 ms on theirs, each
        // answered within half a millisecond.
        let mut clocks = read([1.0, 1.0], 4_000);
        for (at, theirs) in [(4_050, 4_025.5), (4_100, 4_050.5)] {
            for peer in [2, 3] {
                let micros = (1e9 + theirs * 1e3) as u64;
                let reading = ClockReading { process: 1, micros };
                let answered = MS(at) + Duration::from_micros(500);
                clocks.record(peer, MS(at), answered, reading);
            }
        }
        let allowed = allowance(&clocks, &[2, 3], 3, MS(0), MS(4_103), MS(4_063));
        assert!(allowed.pace < 0.52 && allowed.heard, "{allowed:?}");
        // Nothing heard for far longer than readings come (a jump, or a pause): no stamps.
        let unheard = allowance(&clocks, &[2, 3], 3, MS(0), MS(14_103), MS(14_063));
        assert!(!unheard.heard, "{unheard:?}");
        let mut stamping = Stamping::new(1_000, MS(4_000));
        stamping.advance(MS(4_103), allowed);
        let before = stamping.last_us;
        stamping.advance(MS(14_103), unheard);
        assert_eq!(stamping.last_us, before, "a jump of 10 s measures nothing");
    }

    #[test]
    fn stamps_never_pass_the_majority_nor_catch_up_nor_go_back() {
        let mut stamping = Stamping::new(1_000, MS(0));
        let capped = Allowance {
            since_base: Some(MS(100)),
            measured: None,
            pace: 1.0,
            heard: true,
        };
        assert_eq!(stamping.advance(MS(10_000), capped), 1_100, "a jump ahead");
        assert_eq!(stamping.advance(MS(5), Allowance::OWN_CLOCK), 1_100, "back");
        assert_eq!(stamping.advance(MS(55), Allowance::OWN_CLOCK), 1_150);
        let far = Allowance {
            since_base: Some(MS(1_000)),
            measured: None,
            pace: 1.0,
            heard: true,
        };
        assert_eq!(stamping.advance(MS(65), far), 1_160, "no catching up");
    }

    #[test]
    fn the_trail_is_real_time_at_the_known_pace_and_a_clock_that_went_back_counts_on() {
        let mut stamping = Stamping::new(1_000, MS(10_000));
        assert_eq!(stamping.trail_at(MS(10_500)), (MS(10_400), MS(0)));
        // A clock known to run at twice the majority's: 200 ms of it are 100 ms of real time.
        let fast = Allowance {
            since_base: None,
            measured: None,
            pace: 0.5,
            heard: true,
        };
        stamping.advance(MS(11_000), fast.clone());
        assert_eq!(stamping.trail_at(MS(11_000)), (MS(10_800), MS(0)));
        // It jumps back 10 s: 200 ms later it reads 1.2 s. The base moves back with it (at
        // most by what it read less than at the last stamp: the 200 ms between count nothing),
        // and so does the trail.
        assert_eq!(stamping.trail_at(MS(1_200)), (MS(1_000), MS(9_800)));
        assert_eq!(stamping.since, MS(200));
        assert_eq!(
            stamping.advance(MS(1_400), fast),
            1_600,
            "1,500 at 11 s, and 100 more"
        );
    }

    #[test]
    fn a_peer_that_ran_fast_earlier_in_the_term_does_not_let_a_leader_whose_clock_speeds_up_race() {
        // In real milliseconds `r`: peer 2's clock ran at 2x for the term's first 2 s (its
        // count since the base stays 2 s ahead), peer 3's is right, and this node's doubles at
        // 4 s. Each reading is asked every 25 ms of this node's clock, read 5 ms later and
        // answered 10 ms after the ask: round trips long enough that the last two readings do
        // not show the new rate for sure, so the pace stays 1 (as on a loaded machine).
        let leader = |r: f64| {
            if r < 4_000.0 {
                r
            } else {
                4_000.0 + 2.0 * (r - 4_000.0)
            }
        };
        let peer_2 = |r: f64| if r < 2_000.0 { 2.0 * r } else { 2_000.0 + r };
        let at = |ms: f64| Duration::from_secs_f64(ms / 1e3);
        let mut clocks = PeerClocks::default();
        clocks.count_from(MS(0));
        let mut stamping = Stamping::new(0, MS(0));
        let (mut asks, mut pending) = (0.0, Vec::new());
        let (mut before, mut most_gained) = (None, 0.0_f64);
        for step in 0..=(4_400 / 5) {
            let r = step as f64 * 5.0;
            while leader(r) >= asks {
                let read_at = r + 5.0;
                pending.push((at(leader(r)), r + 10.0, [peer_2(read_at), read_at]));
                asks += 25.0;
            }
            pending.retain(|(asked, answered_at, theirs)| {
                if *answered_at > r {
                    return true;
                }
                for (peer, ms) in [2, 3].into_iter().zip(theirs) {
                    let micros = (1e9 + ms * 1e3) as u64;
                    let reading = ClockReading { process: 1, micros };
                    clocks.record(peer, *asked, at(leader(*answered_at)), reading);
                }
                false
            });
            let now = at(leader(r));
            let (trail_at, _) = stamping.trail_at(now);
            let allowed = allowance(&clocks, &[2, 3], 3, MS(0), now, trail_at);
            let stamp = stamping.advance(now, allowed) as f64;
            if r == 3_900.0 {
                before = Some((r, stamp));
            }
            if let Some((r_before, stamp_before)) = before {
                most_gained = most_gained.max((stamp - stamp_before) - (r - r_before));
            }
        }
        // The trail, read at the old pace, may shrink by half of its 100 ms; no more.
        assert!(
            most_gained <= CLOCK_TRAIL.as_millis() as f64,
            "store time gained {most_gained} ms on real time"
        );
    }

    #[test]
    fn stamps_behind_the_allowance_move_no_faster_than_it_grows_whatever_the_pace() {
        // The stamps fell 300 ms behind what the majority allows (a slow clock's readings
        // came late), then the pace says 1.5 for a clock that is right again.
        let mut stamping = Stamping::new(1_000, MS(0));
        let allowed = |ms, pace| Allowance {
            since_base: Some(MS(ms)),
            measured: None,
            pace,
            heard: true,
        };
        assert_eq!(stamping.advance(MS(1_000), allowed(1_000, 0.7)), 1_700);
        // 100 ms later the allowance grew by 100 ms: so do the stamps, not by 150.
        assert_eq!(stamping.advance(MS(1_100), allowed(1_100, 1.5)), 1_800);
        assert_eq!(stamping.advance(MS(1_200), allowed(1_200, 1.5)), 1_900);
    }
}
