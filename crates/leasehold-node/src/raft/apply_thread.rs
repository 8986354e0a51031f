//! A thread of its own for changing the table, so that the nodes the table grows by come from
//! an allocator arena of their own, not one the request path allocates in.
//!
//! glibc gives each thread an arena. A leader's runtime threads also decode requests, gather
//! them into entries and send them to the followers; a table changed there got its B-tree
//! nodes among those requests' short-lived allocations, and the holes these left between the
//! nodes stayed resident. Filled to a million leases (`cluster/measure-scale.sh`), a leader
//! held 211-214 bytes per lease against its followers' 185-189, 40-48 MB of it free chunks of
//! 500-700 bytes (by `malloc_info`); one arena for every thread made it worse, not better.
//! Applied here, the leader held 190-192 against 185-186. (What applying allocates and frees
//! elsewhere, answers and events, still crosses arenas, and a table loaded from a snapshot was
//! decoded where the snapshot was read.) The cost is a hand-off to this thread and back per
//! batch of entries that openraft applies, not per command; one client's puts did not
//! measurably slow.

use std::sync::mpsc;

use tokio::runtime::RuntimeFlavor;

/// Work for the thread: a closure that sends its own result back.
type Job = Box<dyn FnOnce() + Send>;

/// The thread, alive while this handle is: dropping it ends the thread after the work queued.
pub(super) struct ApplyThread {
    jobs: mpsc::Sender<Job>,
}

/// The thread stopped: it panicked in an earlier job, or in this one.
#[derive(Debug, thiserror::Error)]
#[error("the apply thread stopped: an apply panicked")]
pub(super) struct Stopped;

impl ApplyThread {
    pub fn spawn() -> std::io::Result<ApplyThread> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("leasehold-apply".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(ApplyThread { jobs })
    }

    /// Runs `work` on the thread and waits for its result: without blocking a multi-threaded
    /// runtime, and blocking a current-thread one, as the work did when it ran there. Such a
    /// runtime, idle while it waited, would count as idle: under a paused test clock it would
    /// jump to its next timer mid-apply (`spawn_blocking` guards against that; a thread of our
    /// own does not).
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Stopped> {
        let on_current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::CurrentThread);
        if on_current_thread {
            let (done, result) = mpsc::sync_channel(1);
            self.send(move || {
                let _ = done.send(work());
            })?;
            return result.recv().map_err(|_| Stopped);
        }
        let (done, result) = tokio::sync::oneshot::channel();
        self.send(move || {
            let _ = done.send(work());
        })?;
        result.await.map_err(|_| Stopped)
    }

    fn send(&self, job: impl FnOnce() + Send + 'static) -> Result<(), Stopped> {
        self.jobs.send(Box::new(job)).map_err(|_| Stopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_one_thread_of_its_own_in_order() {
        let thread = ApplyThread::spawn().unwrap();
        let here = std::thread::current().id();
        let first = thread.run(|| std::thread::current().id()).await.unwrap();
        let second = thread.run(|| std::thread::current().id()).await.unwrap();
        assert_ne!(first, here);
        assert_eq!(first, second);
        assert_eq!(thread.run(|| 6 * 7).await.unwrap(), 42);
    }

    /// A paused clock with a timer pending stands still while the thread works, as it did
    /// while the work ran on the runtime; awaiting the thread, the idle runtime jumped 60 s.
    #[tokio::test(start_paused = true)]
    async fn a_paused_clock_stands_still_while_the_thread_works() {
        let thread = ApplyThread::spawn().unwrap();
        let timer = tokio::spawn(tokio::time::sleep(std::time::Duration::from_secs(60)));
        tokio::task::yield_now().await;
        let before = tokio::time::Instant::now();
        let slept = std::time::Duration::from_millis(20);
        thread.run(move || std::thread::sleep(slept)).await.unwrap();
        assert_eq!(before.elapsed(), std::time::Duration::ZERO);
        timer.abort();
    }

    #[tokio::test]
    async fn a_panic_stops_the_thread_with_an_error_not_a_hang() {
        let thread = ApplyThread::spawn().unwrap();
        let panicked = thread
            .run(|| -> u32 { panic!("an apply that panics") })
            .await;
        assert!(panicked.is_err());
        assert!(thread.run(|| 1).await.is_err(), "the thread is gone");
    }
}
