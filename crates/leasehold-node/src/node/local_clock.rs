//! The node's own monotonic clock, as the leader's stamping, the time a node carries across a
//! failover and the peers' clock readings count it (issue 42, a clock that lies). It runs at the
//! machine's rate unless told otherwise: the simulation and the fault suite (`serve
//! --clock-control`, see `clock_control`) run one node's clock fast or slow, as a VM's may after
//! a live migration or a misbehaving TSC, or make it jump, to show what one wrong clock does to
//! every lease. Readings are tokio's `Instant` (the real clock in a node, the simulation's
//! virtual one) mapped through the rate since each change, so a change of rate never jumps; a
//! jump is its own change.

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Parts per million of real time a clock counts: this for a true clock.
pub const RATE_REAL: u64 = 1_000_000;

/// A clock's first reading. Far from zero so that a backward jump (the fault suite's, 10 s)
/// has room below: readings never go under zero.
const ORIGIN: Duration = Duration::from_secs(1_000_000);

/// The changes of rate or jumps a clock remembers: an instant older than the oldest is read at
/// that change's rate. A node asks for readings at instants a few seconds old at most (the
/// append of its newest stamp), and changes come from a test, seconds apart.
const CHANGES_KEPT: usize = 16;

/// A monotonic clock running at a rate of the real one, which may jump.
#[derive(Debug)]
pub struct LocalClock {
    changes: Mutex<VecDeque<Anchor>>,
    /// Drawn at random when the clock starts: a peer that reads a new one knows this node
    /// restarted, and counts nothing across.
    process: u64,
}

/// Where a rate began: the real instant and this clock's reading then.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    real: Instant,
    local: Duration,
    rate_ppm: u64,
}

impl Default for LocalClock {
    fn default() -> Self {
        let first = Anchor {
            real: Instant::now(),
            local: ORIGIN,
            rate_ppm: RATE_REAL,
        };
        LocalClock {
            changes: Mutex::new(VecDeque::from([first])),
            process: std::collections::hash_map::RandomState::new().hash_one(ORIGIN),
        }
    }
}

impl LocalClock {
    /// This clock's reading now.
    pub fn now(&self) -> Duration {
        self.reading(Instant::now())
    }

    /// This clock's reading at the real instant `at` (one the node took with tokio's clock, as
    /// the log's append times are), with the rates and jumps it had between then and now.
    pub fn reading(&self, at: Instant) -> Duration {
        let changes = self.lock();
        let anchor = changes.iter().rev().find(|a| a.real <= at);
        anchor.unwrap_or(&changes[0]).reading(at)
    }

    /// What this clock measured since the real instant `then`: nothing if it went back.
    pub fn since(&self, then: Instant) -> Duration {
        self.now().saturating_sub(self.reading(then))
    }

    /// From now on, counts `rate_ppm` parts per million of real time (2,000,000: twice as
    /// fast as it should), after jumping `jump_ms` (negative: back).
    pub fn set(&self, rate_ppm: u64, jump_ms: i64) {
        let now = Instant::now();
        let reading = self.reading(now);
        let jump = Duration::from_millis(jump_ms.unsigned_abs());
        let local = match jump_ms < 0 {
            true => reading.saturating_sub(jump),
            false => reading.saturating_add(jump),
        };
        let mut changes = self.lock();
        if changes.len() == CHANGES_KEPT {
            changes.pop_front();
        }
        changes.push_back(Anchor {
            real: now,
            local,
            rate_ppm,
        });
    }

    /// Which clock this is: another after a restart.
    pub fn process(&self) -> u64 {
        self.process
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Anchor>> {
        self.changes.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Anchor {
    /// The clock's reading at the real instant `at`. Before the anchor it is read at the
    /// anchor's rate: the clock keeps no older history.
    fn reading(&self, at: Instant) -> Duration {
        match at.checked_duration_since(self.real) {
            Some(after) => self.local.saturating_add(scaled(after, self.rate_ppm)),
            None => (self.local).saturating_sub(scaled(self.real - at, self.rate_ppm)),
        }
    }
}

fn scaled(real: Duration, rate_ppm: u64) -> Duration {
    let nanos = real.as_nanos().saturating_mul(u128::from(rate_ppm)) / u128::from(RATE_REAL);
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_clock_counts_at_its_rate_from_each_change_without_a_jump() {
        let clock = LocalClock::default();
        let started = clock.now();
        let at = |secs| started + Duration::from_secs(secs);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.now(), at(1));
        clock.set(2 * RATE_REAL, 0);
        assert_eq!(clock.now(), at(1), "no jump at the change");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.now(), at(3));
        let then = Instant::now();
        clock.set(RATE_REAL / 2, 0);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.now(), at(4));
        assert_eq!(
            clock.since(then),
            Duration::from_secs(1),
            "half of two seconds"
        );
        assert_eq!(clock.since(Instant::now()), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn a_jump_shows_in_what_the_clock_measured_across_it() {
        let clock = LocalClock::default();
        let then = Instant::now();
        tokio::time::advance(Duration::from_secs(1)).await;
        clock.set(RATE_REAL, 10_000);
        assert_eq!(clock.since(then), Duration::from_secs(11));
        let ahead = clock.now();
        clock.set(RATE_REAL, -10_000);
        assert_eq!(clock.now() + Duration::from_secs(10), ahead, "back 10 s");
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.since(then), Duration::from_secs(3));
    }
}
