//! openraft's async runtime: tokio, as openraft's own `TokioRuntime`, except for the random
//! numbers openraft draws (its election timeouts). Those come from a generator per thread that
//! starts from the operating system's entropy, unless a test seeds it: the simulation runs a
//! whole cluster on one thread, so with a seeded generator, a failing seed replays exactly.

use std::cell::RefCell;
use std::future::Future;
use std::time::Duration;

use openraft::{AsyncRuntime, OptionalSend, TokioRuntime};
use rand::rngs::StdRng;
use rand::{RngCore, SeedableRng};

thread_local! {
    static RNG: RefCell<Option<StdRng>> = const { RefCell::new(None) };
}

/// Makes openraft's random draws on this thread follow `seed`, from now on (the simulation's
/// schedules).
#[cfg(test)]
pub fn seed_this_thread(seed: u64) {
    RNG.with(|rng| *rng.borrow_mut() = Some(StdRng::seed_from_u64(seed)));
}

fn with_rng<T>(draw: impl FnOnce(&mut StdRng) -> T) -> T {
    RNG.with(|rng| draw(rng.borrow_mut().get_or_insert_with(StdRng::from_entropy)))
}

/// The calling thread's generator, as openraft's `AsyncRuntime::thread_rng` hands it out.
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRng;

impl RngCore for ThreadRng {
    fn next_u32(&mut self) -> u32 {
        with_rng(|rng| rng.next_u32())
    }

    fn next_u64(&mut self) -> u64 {
        with_rng(|rng| rng.next_u64())
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        with_rng(|rng| rng.fill_bytes(dest))
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        with_rng(|rng| rng.try_fill_bytes(dest))
    }
}

/// Tokio, with [`ThreadRng`].
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Runtime;

impl AsyncRuntime for Runtime {
    type JoinError = <TokioRuntime as AsyncRuntime>::JoinError;
    type JoinHandle<T: OptionalSend + 'static> = <TokioRuntime as AsyncRuntime>::JoinHandle<T>;
    type Sleep = <TokioRuntime as AsyncRuntime>::Sleep;
    type Instant = <TokioRuntime as AsyncRuntime>::Instant;
    type TimeoutError = <TokioRuntime as AsyncRuntime>::TimeoutError;
    type Timeout<R, T: Future<Output = R> + OptionalSend> =
        <TokioRuntime as AsyncRuntime>::Timeout<R, T>;
    type ThreadLocalRng = ThreadRng;
    type OneshotSender<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotSender<T>;
    type OneshotReceiverError = <TokioRuntime as AsyncRuntime>::OneshotReceiverError;
    type OneshotReceiver<T: OptionalSend> = <TokioRuntime as AsyncRuntime>::OneshotReceiver<T>;

    fn spawn<T>(future: T) -> Self::JoinHandle<T::Output>
    where
        T: Future + OptionalSend + 'static,
        T::Output: OptionalSend + 'static,
    {
        TokioRuntime::spawn(future)
    }

    fn sleep(duration: Duration) -> Self::Sleep {
        TokioRuntime::sleep(duration)
    }

    fn sleep_until(deadline: Self::Instant) -> Self::Sleep {
        TokioRuntime::sleep_until(deadline)
    }

    fn timeout<R, F: Future<Output = R> + OptionalSend>(
        duration: Duration,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout(duration, future)
    }

    fn timeout_at<R, F: Future<Output = R> + OptionalSend>(
        deadline: Self::Instant,
        future: F,
    ) -> Self::Timeout<R, F> {
        TokioRuntime::timeout_at(deadline, future)
    }

    fn is_panic(join_error: &Self::JoinError) -> bool {
        TokioRuntime::is_panic(join_error)
    }

    fn thread_rng() -> Self::ThreadLocalRng {
        ThreadRng
    }

    fn oneshot<T>() -> (Self::OneshotSender<T>, Self::OneshotReceiver<T>)
    where
        T: OptionalSend,
    {
        TokioRuntime::oneshot()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::Rng;

    #[test]
    fn a_seeded_thread_draws_the_same_numbers_again() {
        let draws = || {
            let mut rng = Runtime::thread_rng();
            (0..8)
                .map(|_| rng.gen_range(150..300))
                .collect::<Vec<u64>>()
        };
        seed_this_thread(7);
        let first = draws();
        seed_this_thread(7);
        assert_eq!(draws(), first);
        seed_this_thread(8);
        assert_ne!(draws(), first);
    }
}
