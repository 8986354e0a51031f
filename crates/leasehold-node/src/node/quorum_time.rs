//! How far a leader's stamps may move: by its own clock, slowed or sped to the majority's rate,
//! and from one stamp to the next never further than a majority of the voters' clocks measured
//! between them (issue 42; the argument is in `clock`). Pure: the clocks' readings come in as
//! values.

use std::time::Duration;

use super::majority::vouched;
use super::peer_clocks::{with_own, PeerClocks, Ratio};
use crate::limits::{CLOCK_TRAIL, CLOCK_UNHEARD, ODD_CLOCK_RATE};
use crate::NodeId;

/// The most a leader's clock is slowed or sped: far past any clock that is merely odd, so that
/// a rate measured across a jump the filter let through cannot stop or race the stamps.
const MOST_CORRECTION: f64 = 8.0;

/// What the voters' clocks allow a leader's stamps, now.
#[derive(Clone, Debug, PartialEq)]
pub struct Allowance {
    /// What a majority of the voters' clocks vouch for having measured since the last stamp,
    /// the most the stamps may move (see [`allowance`]); `None` when the leader's clock alone
    /// decides (a single voter, or a voter of a build that cannot be asked).
    pub grew: Option<Duration>,
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
        grew: None,
        pace: 1.0,
        heard: true,
    };
}

/// What the `peers` (the other voters; `voters` counts this node too) allow a leader whose
/// clock reads `now` and measured `own` since its last stamp; their clocks are read over
/// `trail`, its instants from the last stamp's trail to this one's (see
/// [`Stamping::trail_at`]).
///
/// `grew` is the majority-th largest of what each clock measured since the last stamp: with
/// at most a minority of the clocks wrong *at each moment*, a right clock measured at least as
/// much. Not what they measured since the term's base: that asks a minority to have been
/// wrong all term. A follower whose clock ran fast for a while stays ahead since the base, and
/// when the leader's own then sped up, two of three were ahead (a fault run: a grant 23 ms
/// early past the grant margin); a follower restarted in the term stays behind, and when
/// another's clock then slowed, two were behind (leases 0.6-0.9 s past their TTL).
///
/// A peer counts only between its readings ([`PeerClocks::grew`]): time its readings came
/// too late to cover is lost, not taken later in one step, which, beside a leader clock
/// speeding up, let the stamps take back at twice real time what they had lost.
pub fn allowance(
    clocks: &PeerClocks,
    peers: &[NodeId],
    voters: usize,
    own: Duration,
    now: Duration,
    trail: std::ops::Range<Duration>,
) -> Allowance {
    let peers_grew = peers.iter().map(|p| clocks.grew(*p, trail.clone()));
    let grew = vouched(std::iter::once(own).chain(peers_grew).collect(), voters);
    let rate = leader_rate(clocks, peers, voters);
    // Unheard from for longer than the readings come, this clock may have jumped (or this
    // node paused): it measures nothing until the next reading tells which.
    let heard = peers.is_empty()
        || (clocks.last_heard(peers)).is_some_and(|at| now.saturating_sub(at) <= CLOCK_UNHEARD);
    Allowance {
        grew,
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
    /// The last stamp, in microseconds, and the leader's clock when it was given.
    last_us: u64,
    last_read: Duration,
    /// Where the voters' clocks were read for the last stamp, on the leader's: see
    /// [`Stamping::trail_at`].
    trail_at: Duration,
    /// The pace of the last stamp: see [`Stamping::trail_at`].
    pace: f64,
}

impl Stamping {
    /// Stamps from `base_ms` at the leader's clock reading `since`. The voters' clocks are read
    /// [`CLOCK_TRAIL`] behind from the first stamp on, over readings taken before the term
    /// (a follower reads its peers too): the stamps follow real time at once, not after the
    /// trail (which lost its length of every lease at every change of leader).
    pub fn new(base_ms: u64, since: Duration) -> Stamping {
        let base_us = base_ms.saturating_mul(1_000);
        Stamping {
            last_us: base_us,
            last_read: since,
            trail_at: since.saturating_sub(CLOCK_TRAIL),
            pace: 1.0,
        }
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
    /// A leader's clock that went back counts on from where it stood: the last stamp's and the
    /// trail's instants move back with it, instead of this clock measuring nothing (which held
    /// every stamp for as long as the jump, when the only other voter that answered ran no
    /// further) and the trail standing still. (The peers' readings taken across the jump are
    /// on another footing, and count nothing: `PeerClocks::record`.)
    ///
    /// Returns the trail since the last stamp: from its instant to this one's.
    pub fn trail_at(&mut self, now: Duration) -> std::ops::Range<Duration> {
        let back = self.last_read.saturating_sub(now);
        self.trail_at = self.trail_at.saturating_sub(back);
        self.last_read = self.last_read.saturating_sub(back);
        let from = self.trail_at;
        let trail = CLOCK_TRAIL.div_f64(self.pace);
        self.trail_at = self.trail_at.max(now.saturating_sub(trail));
        from..self.trail_at
    }

    /// The stamp at the leader's clock reading `now`, in milliseconds: the trail moved on
    /// ([`Stamping::trail_at`]), `allow` asked what the voters' clocks allow, given what this
    /// clock measured since the last stamp and the trail since it, and the stamps advanced by
    /// that ([`Stamping::advance`]).
    pub fn stamp(
        &mut self,
        now: Duration,
        allow: impl FnOnce(Duration, std::ops::Range<Duration>) -> Allowance,
    ) -> u64 {
        let trail = self.trail_at(now);
        let own = now.saturating_sub(self.last_read);
        self.advance(now, allow(own, trail))
    }

    /// The stamp at the leader's clock reading `now`, in milliseconds: the last one moved by
    /// what the clock measured since, at the allowed pace, and no further than a majority of
    /// the voters' clocks measured since ([`Allowance::grew`]). Never back; a clock that went
    /// back measured nothing.
    ///
    /// Time a stamp could not take (a majority grew less than the pace asked) is lost, never
    /// caught up later: a stamp that moved faster than real time would end early the leases
    /// granted before it. So a pace above the clock's true rate (one that ran slow and came
    /// right, until the readings show it) moves the stamps only as fast as the majority's
    /// clocks.
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
        let most = allowed.grew.map_or(u64::MAX, |grew| {
            let us = u64::try_from(grew.as_micros()).unwrap_or(u64::MAX);
            self.last_us.saturating_add(us)
        });
        self.last_us = self.last_us.max(paced.min(most));
        self.last_us / 1_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::peer_clocks::ClockReading;
    use leasehold_core::Limits;

    const MS: fn(u64) -> Duration = Duration::from_millis;

    /// Peers 2 and 3 read every 25 ms for `for_ms`, each answered 1 ms after it was asked, their
    /// clocks running at `rates` of this node's.
    fn read(rates: [f64; 2], for_ms: u64) -> PeerClocks {
        let mut clocks = PeerClocks::default();
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
        // Half a second of this clock since the last stamp, a quarter of theirs.
        let allowed = allowance(
            &clocks,
            &[2, 3],
            3,
            MS(500),
            MS(3_500),
            MS(3_000)..MS(3_500),
        );
        assert!((allowed.pace - 0.5).abs() < 0.01, "{allowed:?}");
        assert!(
            (allowed.grew.unwrap()).abs_diff(MS(250)) < MS(2),
            "{allowed:?}"
        );
        let mut stamping = Stamping::new(10_000, MS(3_000));
        let stamp = stamping.advance(MS(3_500), allowed);
        assert!((10_249..=10_250).contains(&stamp), "{stamp}");
    }

    #[test]
    fn one_fast_peer_moves_nothing_and_a_slow_leader_is_sped_up() {
        let clocks = read([2.0, 1.0], 4_000);
        let second = MS(2_961)..MS(3_961);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(1_000), MS(4_001), second.clone());
        assert!((allowed.pace - 1.0).abs() < 0.01, "{allowed:?}");
        // In that second peer 2's clock counted 2 s; this one's and peer 3's, one.
        let grew = allowed.grew.unwrap();
        assert!(grew.abs_diff(MS(1_000)) < MS(5), "{grew:?}");
        let clocks = read([2.0, 2.0], 4_000);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(1_000), MS(4_001), second);
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
        let trail = MS(3_963)..MS(4_063);
        let allowed = allowance(&clocks, &[2, 3], 3, MS(103), MS(4_103), trail);
        assert!(allowed.pace < 0.52 && allowed.heard, "{allowed:?}");
        // Nothing heard for far longer than readings come (a jump, or a pause): no stamps.
        let trail = MS(4_063)..MS(14_063);
        let unheard = allowance(&clocks, &[2, 3], 3, MS(10_000), MS(14_103), trail);
        assert!(!unheard.heard, "{unheard:?}");
        let mut stamping = Stamping::new(1_000, MS(4_000));
        stamping.advance(MS(4_103), allowed);
        let before = stamping.last_us;
        stamping.advance(MS(14_103), unheard);
        assert_eq!(stamping.last_us, before, "a jump of 10 s measures nothing");
    }

    /// An allowance by which a majority of the clocks grew `ms` since the last stamp.
    fn grew(ms: u64, pace: f64) -> Allowance {
        Allowance {
            grew: Some(MS(ms)),
            pace,
            heard: true,
        }
    }

    #[test]
    fn stamps_never_pass_the_majority_nor_catch_up_nor_go_back() {
        let mut stamping = Stamping::new(1_000, MS(0));
        assert_eq!(
            stamping.advance(MS(10_000), grew(100, 1.0)),
            1_100,
            "a jump ahead"
        );
        assert_eq!(stamping.advance(MS(5), grew(5, 1.0)), 1_100, "back");
        assert_eq!(stamping.advance(MS(55), grew(50, 1.0)), 1_150);
        assert_eq!(
            stamping.advance(MS(65), grew(1_000, 1.0)),
            1_160,
            "no catching up"
        );
    }

    #[test]
    fn a_majority_of_the_clocks_vouches_for_what_they_grew_since_the_last_stamp() {
        // Peer 2's clock runs at twice this one's, peer 3's at half.
        let clocks = read([2.0, 0.5], 4_000);
        let second = MS(2_961)..MS(3_961);
        // This clock measured a second: peer 2's two, peer 3's a half. A majority: one.
        let allowed = allowance(&clocks, &[2, 3], 3, MS(1_000), MS(4_001), second.clone());
        assert!(
            (allowed.grew.unwrap()).abs_diff(MS(1_000)) < MS(5),
            "{allowed:?}"
        );
        // This clock measured a tenth of it (it stood still): a majority, half a second.
        let allowed = allowance(&clocks, &[2, 3], 3, MS(100), MS(4_001), second);
        assert!(
            (allowed.grew.unwrap()).abs_diff(MS(500)) < MS(5),
            "{allowed:?}"
        );
    }

    #[test]
    fn the_trail_is_real_time_at_the_known_pace_and_a_clock_that_went_back_counts_on() {
        let mut stamping = Stamping::new(1_000, MS(10_000));
        assert_eq!(stamping.trail_at(MS(10_500)), MS(9_900)..MS(10_400));
        // A clock known to run at twice the majority's: 200 ms of it are 100 ms of real time.
        let fast = Allowance {
            grew: None,
            pace: 0.5,
            heard: true,
        };
        stamping.advance(MS(11_000), fast.clone());
        assert_eq!(stamping.trail_at(MS(11_000)), MS(10_400)..MS(10_800));
        // It jumps back 10 s: 200 ms later it reads 1.2 s. The last stamp's instant moves back
        // with it (at most by what it read less than at the last stamp: the 200 ms between
        // count nothing), and so does the trail.
        assert_eq!(stamping.trail_at(MS(1_200)), MS(1_000)..MS(1_000));
        assert_eq!(stamping.last_read, MS(1_200));
        assert_eq!(
            stamping.advance(MS(1_400), fast),
            1_600,
            "1,500 at 11 s, and 100 more"
        );
    }

    /// A term from real time 0 to `until_ms`, stamped every 5 ms of real time: this node's
    /// clock reads `leader(r)` at real millisecond `r`; peers 2 and 3 answer `(process,
    /// reading)` or nothing (down). Each reading is asked every 25 ms of this node's clock,
    /// read 5 ms later and answered 10 ms after the ask: round trips long enough that the last
    /// two readings do not show a new rate for sure (as on a loaded machine). Returns each
    /// stamp with its real time.
    fn stamped_term(
        leader: impl Fn(f64) -> f64,
        peers: [&dyn Fn(f64) -> Option<(u64, f64)>; 2],
        until_ms: u64,
    ) -> Vec<(f64, f64)> {
        stamped_term_answered(leader, peers, until_ms, &mut |_| 10.0)
    }

    /// [`stamped_term`], each reading answered `answered_after(r)` ms after its ask at real
    /// time `r`, and read halfway.
    fn stamped_term_answered(
        leader: impl Fn(f64) -> f64,
        peers: [&dyn Fn(f64) -> Option<(u64, f64)>; 2],
        until_ms: u64,
        answered_after: &mut dyn FnMut(f64) -> f64,
    ) -> Vec<(f64, f64)> {
        let at = |ms: f64| Duration::from_secs_f64(ms / 1e3);
        let mut clocks = PeerClocks::default();
        let mut stamping = Stamping::new(0, MS(0));
        let (mut asks, mut pending, mut stamps) = (0.0, Vec::new(), Vec::new());
        for step in 0..=(until_ms / 5) {
            let r = step as f64 * 5.0;
            // As the node's probe: one reading in flight at a time, asked at its turn.
            while leader(r) >= asks && pending.is_empty() {
                let after = answered_after(r);
                let theirs = peers.map(|peer| peer(r + after / 2.0));
                pending.push((at(leader(r)), r + after, theirs));
                asks = leader(r) + 25.0;
            }
            pending.retain(|(asked, answered_at, theirs)| {
                if *answered_at > r {
                    return true;
                }
                for (peer, answer) in [2, 3].into_iter().zip(theirs) {
                    if let Some((process, ms)) = answer {
                        let micros = (1e9 + ms * 1e3) as u64;
                        let reading = ClockReading {
                            process: *process,
                            micros,
                        };
                        clocks.record(peer, *asked, at(leader(*answered_at)), reading);
                    }
                }
                false
            });
            let now = at(leader(r));
            let stamp = stamping.stamp(now, |own, trail| {
                allowance(&clocks, &[2, 3], 3, own, now, trail)
            });
            stamps.push((r, stamp as f64));
        }
        stamps
    }

    /// How far the stamps moved from real time `from_ms` to each later one, less the real
    /// time between: the most (store time gained) and the least (lost).
    fn gained_and_lost(stamps: &[(f64, f64)], from_ms: f64, to_ms: f64) -> (f64, f64) {
        let (_, from) = *stamps.iter().find(|(r, _)| *r >= from_ms).unwrap();
        (stamps.iter().filter(|(r, _)| *r > from_ms && *r <= to_ms))
            .map(|(r, stamp)| (stamp - from) - (r - from_ms))
            .fold((f64::MIN, f64::MAX), |(most, least), d| {
                (most.max(d), least.min(d))
            })
    }

    /// A clock that reads real time until 4 s, then runs at twice its speed.
    fn doubles_at_4_s(r: f64) -> f64 {
        match r < 4_000.0 {
            true => r,
            false => 4_000.0 + 2.0 * (r - 4_000.0),
        }
    }

    #[test]
    fn a_peer_that_ran_fast_earlier_in_the_term_does_not_let_a_leader_whose_clock_speeds_up_race() {
        // Peer 2's clock ran at 2x for the term's first 2 s (its count since the base stays
        // 2 s ahead), peer 3's is right, and this node's doubles at 4 s.
        let peer_2 = |r: f64| Some((1, if r < 2_000.0 { 2.0 * r } else { 2_000.0 + r }));
        let stamps = stamped_term(doubles_at_4_s, [&peer_2, &|r| Some((1, r))], 4_400);
        // The trail, read at the old pace, may shrink by half of its 100 ms; no more.
        let (gained, _) = gained_and_lost(&stamps, 3_900.0, 4_400.0);
        assert!(
            gained <= CLOCK_TRAIL.as_millis() as f64,
            "store time gained {gained} ms on real time"
        );
    }

    #[test]
    fn a_peer_restarted_earlier_in_the_term_and_one_whose_clock_slows_do_not_slow_the_stamps() {
        // Peer 2 was down from 1 s to 3 s into the term and came back restarted (its count
        // since the base stays 2 s behind); peer 3's clock runs at half speed from 4 s on.
        let peer_2 = |r: f64| match r {
            r if r < 1_000.0 => Some((1, r)),
            r if r < 3_000.0 => None,
            r => Some((2, r - 3_000.0)),
        };
        let peer_3 = |r: f64| {
            Some((
                1,
                if r < 4_000.0 {
                    r
                } else {
                    4_000.0 + (r - 4_000.0) / 2.0
                },
            ))
        };
        let stamps = stamped_term(|r| r, [&peer_2, &peer_3], 5_500);
        // This node's clock and peer 2's are right: a majority.
        let (_, lost) = gained_and_lost(&stamps, 4_000.0, 5_500.0);
        assert!(lost >= -50.0, "store time lost {} ms on real time", -lost);
    }

    #[test]
    fn stamps_behind_the_majority_move_no_faster_than_it_grows_whatever_the_pace() {
        // The stamps fell 300 ms behind what the clocks counted (a slow clock's readings came
        // late), then the pace says 1.5 for a clock that is right again.
        let mut stamping = Stamping::new(1_000, MS(0));
        assert_eq!(stamping.advance(MS(1_000), grew(1_000, 0.7)), 1_700);
        // 100 ms later the clocks grew by 100 ms: so do the stamps, not by 150.
        assert_eq!(stamping.advance(MS(1_100), grew(100, 1.5)), 1_800);
        assert_eq!(stamping.advance(MS(1_200), grew(100, 1.5)), 1_900);
    }

    #[test]
    fn a_leader_clock_that_doubles_as_late_readings_come_in_gains_less_than_the_grant_margin() {
        // Peer 2 was paused from 2 s to 4 s into the term; every reading is answered 1-250 ms
        // after its ask (a loaded machine's, each drawn from the seed); this node's clock
        // doubles at 4 s, as peer 2's readings resume. Store time gains on real time from the
        // trail read at the old pace (up to 50 ms here) and from readings whose answers came
        // late and then early (the interpolation between them runs fast by the difference).
        let peer_2 = |r: f64| (!(2_000.0..4_000.0).contains(&r)).then_some((1, r));
        let peer_3 = |r: f64| Some((1, r));
        let mut most = (0.0, 0);
        for seed in 1..=100_u64 {
            let mut draw = seed;
            let mut answered_after = move |_| {
                draw = draw.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                1.0 + ((draw >> 33) % 250) as f64
            };
            let stamps = stamped_term_answered(
                doubles_at_4_s,
                [&peer_2, &peer_3],
                4_400,
                &mut answered_after,
            );
            for (i, (r1, s1)) in stamps
                .iter()
                .enumerate()
                .filter(|(_, (r, _))| *r >= 3_000.0)
            {
                for (r2, s2) in &stamps[i..] {
                    let gained = (s2 - s1) - (r2 - r1);
                    if gained > most.0 {
                        most = (gained, seed);
                    }
                }
            }
        }
        let margin = Limits::GRANT_MARGIN_MS as f64;
        assert!(
            most.0 < margin,
            "store time gained {most:?} (ms, seed) on real time"
        );
    }
}
