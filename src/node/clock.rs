//! The leader's stamping of store time.
//!
//! Store time is replicated state: it moves only through logged commands. The leader stamps each
//! command it proposes with the last store time in its log plus what its own monotonic clock has
//! measured since it read that time. A new leader reads the time only after every entry of
//! earlier terms is applied, so it continues from the last time in its log: time without a
//! leader is not counted, and a failover makes leases last longer, never shorter.
//!
//! Invariant (enforced here and by `LeaseTable::apply` taking the max): store time never runs
//! faster than the leader's real time, so a lease never expires, in real time, sooner than its
//! TTL after the acquire was sent.

use std::sync::Mutex;

// tokio's, not std's: the same monotonic clock in a node, and the simulation's virtual one when
// it runs the real stamping on tokio's paused clock.
use tokio::time::Instant;

/// Where this term's stamps start from.
#[derive(Clone, Copy)]
struct TermBase {
    term: u64,
    base_ms: u64,
    since: Instant,
    /// The last stamp handed out, so stamps never go backwards even if `Instant` were to.
    last_ms: u64,
}

#[derive(Default)]
pub struct LeaderClock {
    base: Mutex<Option<TermBase>>,
}

impl LeaderClock {
    /// A stamp for a command proposed in `term`, or `None` when the clock has not been started
    /// for that term yet (see [`LeaderClock::start_term`]).
    pub fn stamp(&self, term: u64) -> Option<u64> {
        let mut guard = self.base.lock().unwrap_or_else(|p| p.into_inner());
        let base = guard.as_mut().filter(|b| b.term == term)?;
        let elapsed_ms = u64::try_from(base.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        base.last_ms = base.last_ms.max(base.base_ms.saturating_add(elapsed_ms));
        Some(base.last_ms)
    }

    /// Starts stamping for `term` from `applied_now_ms`, the store time once every entry before
    /// this term is applied. A second call for the same term keeps the first base.
    pub fn start_term(&self, term: u64, applied_now_ms: u64) -> u64 {
        let mut guard = self.base.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(base) if base.term >= term => {}
            _ => {
                *guard = Some(TermBase {
                    term,
                    base_ms: applied_now_ms,
                    since: Instant::now(),
                    last_ms: applied_now_ms,
                })
            }
        }
        drop(guard);
        self.stamp(term).unwrap_or(applied_now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stamps_start_at_the_applied_time_and_follow_the_monotonic_clock() {
        let clock = LeaderClock::default();
        assert_eq!(
            clock.stamp(3),
            None,
            "no stamps before the term's clock starts"
        );
        let first = clock.start_term(3, 10_000);
        assert!((10_000..10_050).contains(&first), "{first}");
        std::thread::sleep(Duration::from_millis(30));
        let later = clock.stamp(3).unwrap();
        assert!(
            later >= first + 30,
            "time elapsed must be counted: {first} then {later}"
        );
        // Real time elapsed bounds the stamps: never faster than the monotonic clock.
        assert!(later <= 10_000 + 1_000, "{later}");
    }

    #[test]
    fn a_new_term_continues_from_the_applied_time_not_the_wall_clock() {
        let clock = LeaderClock::default();
        clock.start_term(1, 5_000);
        assert_eq!(
            clock.stamp(2),
            None,
            "a stamp from an old term's base is never reused"
        );
        let second = clock.start_term(2, 7_000);
        assert!((7_000..7_050).contains(&second), "{second}");
        // A late call for an older term does not move the base back.
        clock.start_term(1, 0);
        assert!(clock.stamp(2).unwrap() >= second);
    }
}
