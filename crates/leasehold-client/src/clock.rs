//! The holders' clock: tokio's, plus the time the host spent suspended.
//!
//! A lease's TTL runs on the store's clock, which keeps counting while this host is suspended
//! (a closed laptop lid, `systemctl suspend`, a hibernated VM); `CLOCK_MONOTONIC`, which tokio's
//! `Instant` reads, stops. A holder that measured its safe deadline on it would, after a
//! resume, believe itself safe for as long as the host slept, while the store has granted the
//! lease to another (safety review 161302a, finding 5). So a holder's instants are of this
//! clock: tokio's, plus how far `CLOCK_BOOTTIME` (which counts a suspension) has run ahead of
//! `CLOCK_MONOTONIC` since boot. On a host that never slept the two are tokio's own, so tokio's
//! paused time in tests still drives them.
//!
//! Elsewhere than Linux (and Android) the offset is zero, and a suspension is not counted: on
//! macOS tokio's clock (`mach_absolute_time`) stops while the machine sleeps, as
//! `CLOCK_MONOTONIC` does on Linux. There a holder's margin must cover a sleep, as before.

use std::time::Duration;

use tokio::time::Instant;

/// Now, on the holders' clock.
pub fn now() -> Instant {
    Instant::now() + suspended()
}

/// `at`, an instant of the holders' clock, as tokio's timers take it: what to sleep until.
/// A suspension after this call makes the timer fire late (tokio's clock stops with the host),
/// so a deadline that must be noticed soon after a resume is slept in slices ([`sleep_until`]).
pub fn timer(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or_else(Instant::now)
}

/// Sleeps until `at` on the holders' clock, waking at least every [`SLICE`] to look, so that a
/// deadline that passed while the host was suspended is noticed within a slice of the resume.
pub async fn sleep_until(at: Instant) {
    loop {
        let left = at.saturating_duration_since(now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(SLICE)).await;
    }
}

/// How long [`sleep_until`] sleeps at most before it looks at the clock again.
pub const SLICE: Duration = Duration::from_millis(100);

/// How much longer `CLOCK_BOOTTIME` has run than `CLOCK_MONOTONIC`: the time this host spent
/// suspended since it booted.
pub fn suspended() -> Duration {
    measured() + test_jump::get()
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn measured() -> Duration {
    use rustix::time::{clock_gettime, ClockId};
    // Monotonic first: read in this order, the difference comes out larger by the time between
    // the reads, never smaller, so a holder errs toward an early deadline.
    let monotonic = duration(clock_gettime(ClockId::Monotonic));
    boottime().saturating_sub(monotonic)
}

/// `CLOCK_BOOTTIME` now: `CLOCK_MONOTONIC` plus the time the host was suspended, the clock
/// `leasehold hold`'s guard keeps its deadlines on too; `CLOCK_MONOTONIC` where the kernel has
/// no such clock (then no suspension is counted).
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn boottime() -> Duration {
    use rustix::time::{clock_gettime, clock_gettime_dynamic, ClockId, DynamicClockId};
    match clock_gettime_dynamic(DynamicClockId::Boottime) {
        Ok(boot) => duration(boot),
        Err(_) => duration(clock_gettime(ClockId::Monotonic)),
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
fn duration(t: rustix::time::Timespec) -> Duration {
    Duration::new(
        t.tv_sec.max(0) as u64,
        t.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn measured() -> Duration {
    Duration::ZERO
}

/// A suspension tests make on their own thread: the clock jumps as a resume makes it jump.
#[cfg(test)]
pub(crate) mod test_jump {
    use std::cell::Cell;
    use std::time::Duration;

    thread_local! {
        static JUMPED: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// This thread's host "was suspended" `by` more.
    pub(crate) fn suspend(by: Duration) {
        JUMPED.with(|j| j.set(j.get() + by));
    }

    pub(super) fn get() -> Duration {
        JUMPED.with(Cell::get)
    }
}

#[cfg(not(test))]
mod test_jump {
    pub(super) fn get() -> std::time::Duration {
        std::time::Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The measured part is what the host slept since boot (under a year here), and a
    /// suspension a test makes adds to it.
    #[test]
    fn the_suspension_is_measured_and_a_tests_jump_adds_to_it() {
        let before = suspended();
        assert!(before < Duration::from_secs(365 * 24 * 3600), "{before:?}");
        test_jump::suspend(Duration::from_secs(60));
        let after = suspended();
        // Each reading is off by the time between its two clock reads: well under a millisecond.
        let slack = Duration::from_millis(1);
        assert!(
            after + slack >= before + Duration::from_secs(60),
            "{before:?} {after:?}"
        );
    }
}
