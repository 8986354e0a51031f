//! A thread of its own for the state machine: openraft's state machine worker runs there, on
//! a runtime of the thread's own (openraft as patched: `RaftStateMachine::worker_runtime`), so
//! that the nodes the table grows by come from an allocator arena of their own, not one the
//! request path allocates in, and a committed entry is applied at once.
//!
//! glibc gives each thread an arena. A leader's runtime threads also decode requests, gather
//! them into entries and send them to the followers; a table changed there got its B-tree
//! nodes among those requests' short-lived allocations, and the holes these left between the
//! nodes stayed resident. Filled to a million leases (`cluster/measure-scale.sh`), a leader
//! held 211-214 bytes per lease against its followers' 185-189, 40-48 MB of it free chunks of
//! 500-700 bytes (by `malloc_info`); one arena for every thread made it worse, not better.
//! Applied here, the leader held 190-192 against 185-186. (What applying allocates and frees
//! elsewhere, answers and events, still crosses arenas, and a table loaded from a snapshot at
//! start-up is decoded on the thread that opens the store.)
//!
//! The worker once ran on the node's runtime and handed each batch to this thread and back.
//! On a leader that runtime is busy the moment an entry commits (the commit goes out to the
//! followers, openraft reports its metrics and the node's watchers wake): one client's put
//! waited about 30 µs there for the worker to be polled, then two hand-offs between threads.
//! Here the worker wakes on a thread that has nothing else to do, beside the runtime's work.

use tokio::runtime::{Builder, Handle};
use tokio::sync::oneshot;

/// The thread, alive while this handle is: dropping it stops the thread's runtime, and with it
/// whatever still runs there.
pub(super) struct ApplyThread {
    runtime: Handle,
    _stop: oneshot::Sender<()>,
}

impl ApplyThread {
    pub fn spawn() -> std::io::Result<ApplyThread> {
        let runtime = Builder::new_current_thread().enable_all().build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("leasehold-apply".into())
            .spawn(move || {
                // Dropped or sent, the handle is gone: the runtime drops its tasks here.
                let _ = runtime.block_on(stopped);
            })?;
        Ok(ApplyThread {
            runtime: handle,
            _stop: stop,
        })
    }

    /// The thread's runtime, for openraft to run the state machine's worker on.
    pub fn runtime(&self) -> Handle {
        self.runtime.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn work_runs_on_one_thread_of_its_own() {
        let thread = ApplyThread::spawn().unwrap();
        let here = std::thread::current().id();
        let on = || {
            thread
                .runtime()
                .spawn(async { std::thread::current().id() })
        };
        let first = on().await.unwrap();
        let second = on().await.unwrap();
        assert_ne!(first, here);
        assert_eq!(first, second);
    }

    #[tokio::test]
    async fn dropping_the_handle_stops_what_runs_on_the_thread() {
        let thread = ApplyThread::spawn().unwrap();
        let (_never, forever) = oneshot::channel::<()>();
        let task = thread.runtime().spawn(forever);
        drop(thread);
        let ended = tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the runtime stops")
            .expect_err("the task was dropped with the runtime");
        assert!(ended.is_cancelled());
    }
}
