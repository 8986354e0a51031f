//! The node's own monotonic clock, as the leader's stamping reads it (issue 42, a clock that
//! lies). A real node's runs at the machine's rate; the simulation runs one node's fast or slow
//! (`set_rate`), as a VM's clock may after a live migration or a misbehaving TSC, to show what
//! one wrong clock does to every lease. Readings are tokio's `Instant` (the real clock in a node,
//! the simulation's virtual one) mapped through the rate since the last change of rate, so a
//! change never makes the clock jump.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Parts per million of real time a clock counts: this for a true clock.
pub const RATE_REAL: u64 = 1_000_000;

/// A monotonic clock running at a rate of the real one.
#[derive(Debug)]
pub struct LocalClock {
    anchor: Mutex<Anchor>,
}

/// Where the current rate began: the real instant and this clock's reading then.
#[derive(Clone, Copy, Debug)]
struct Anchor {
    real: Instant,
    local: Duration,
    rate_ppm: u64,
}

impl Default for LocalClock {
    fn default() -> Self {
        LocalClock {
            anchor: Mutex::new(Anchor {
                real: Instant::now(),
                local: Duration::ZERO,
                rate_ppm: RATE_REAL,
            }),
        }
    }
}

impl LocalClock {
    /// This clock's reading now: time since it started, at its rates.
    pub fn now(&self) -> Duration {
        self.lock().reading(Instant::now())
    }

    /// What this clock measured since the real instant `then` (an instant the node took with
    /// tokio's clock, as the log's append times are).
    pub fn since(&self, then: Instant) -> Duration {
        let anchor = *self.lock();
        anchor
            .reading(Instant::now())
            .saturating_sub(anchor.reading(then))
    }

    /// From now on, counts `rate_ppm` parts per million of real time (2,000,000: twice as
    /// fast as it should). The simulation's; a real node's clock runs as its machine's does.
    #[cfg(test)]
    pub fn set_rate(&self, rate_ppm: u64) {
        let now = self.now();
        *self.lock() = Anchor {
            real: Instant::now(),
            local: now,
            rate_ppm,
        };
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Anchor> {
        self.anchor.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Anchor {
    /// The clock's reading at the real instant `at`. Before the anchor it is read at the
    /// current rate: the clock keeps no older history.
    fn reading(&self, at: Instant) -> Duration {
        match at.checked_duration_since(self.real) {
            Some(after) => self.local + scaled(after, self.rate_ppm),
            None => self
                .local
                .saturating_sub(scaled(self.real - at, self.rate_ppm)),
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
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.now(), Duration::from_secs(1));
        clock.set_rate(2 * RATE_REAL);
        assert_eq!(clock.now(), Duration::from_secs(1), "no jump at the change");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(clock.now(), Duration::from_secs(3));
        let then = Instant::now();
        clock.set_rate(RATE_REAL / 2);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(clock.now(), Duration::from_secs(4));
        assert_eq!(
            clock.since(then),
            Duration::from_secs(1),
            "half of two seconds"
        );
        assert_eq!(clock.since(Instant::now()), Duration::ZERO);
    }
}
