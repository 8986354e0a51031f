//! The sequences of one client's request ids, handed out so that the store never takes a write
//! for a forgotten one.
//!
//! A session keeps the answers of its latest requests (128, the core's `SESSION_ANSWERS`) and
//! refuses a request older than all of them as forgotten, whether or not it was ever applied:
//! the caller then cannot tell. A write held up between taking its sequence and reaching the
//! store (a busy runtime, a slow first attempt) could be overtaken by that many writes of a
//! client shared by many tasks. So a sequence is handed out only within [`SEQUENCE_SPAN`] of
//! the oldest still under way; a write past it waits until the oldest ends, within the
//! client's deadline. A renewal is a write too: it waits behind a write of the same client
//! held up that long.

use std::collections::BTreeSet;
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::limits::SEQUENCE_SPAN;

/// One client's sequences: the next, and those under way.
pub(crate) struct Sequences {
    state: Mutex<State>,
    /// Woken when a sequence is no longer under way.
    ended: Notify,
}

struct State {
    next: u64,
    under_way: BTreeSet<u64>,
}

/// A sequence under way until dropped.
pub(crate) struct Taken<'a> {
    sequences: &'a Sequences,
    /// The request id's sequence.
    pub(crate) sequence: u64,
}

impl Default for Sequences {
    fn default() -> Self {
        Sequences {
            state: Mutex::new(State {
                next: 1,
                under_way: BTreeSet::new(),
            }),
            ended: Notify::new(),
        }
    }
}

impl Sequences {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next sequence, once it is within [`SEQUENCE_SPAN`] of the oldest under way. Not
    /// bounded here: the client bounds the wait by its deadline.
    pub(crate) async fn take(&self) -> Taken<'_> {
        loop {
            // Registered before the look, so that an end between the two is not missed.
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            {
                let mut state = self.state();
                let oldest = state.under_way.first().copied();
                if oldest.is_none_or(|oldest| state.next - oldest < SEQUENCE_SPAN) {
                    let sequence = state.next;
                    state.next += 1;
                    state.under_way.insert(sequence);
                    return Taken {
                        sequences: self,
                        sequence,
                    };
                }
            }
            ended.await;
        }
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        let mut state = self.sequences.state();
        let oldest = state.under_way.first() == Some(&self.sequence);
        state.under_way.remove(&self.sequence);
        drop(state);
        // Only the oldest's end makes room.
        if oldest {
            self.sequences.ended.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_sequence_past_the_span_from_the_oldest_under_way_waits_for_it_to_end() {
        let sequences = Sequences::default();
        let oldest = sequences.take().await;
        assert_eq!(oldest.sequence, 1);
        // Those after it that ended leave no hole: the span counts from the oldest under way.
        for _ in 1..SEQUENCE_SPAN {
            drop(sequences.take().await);
        }
        let next = sequences.take();
        tokio::pin!(next);
        assert!(
            poll_once(next.as_mut()).await.is_none(),
            "a sequence {SEQUENCE_SPAN} past the oldest was handed out"
        );
        drop(oldest);
        assert_eq!(next.await.sequence, SEQUENCE_SPAN + 1);
    }

    /// `future` polled once: its output if it was ready.
    async fn poll_once<F: std::future::Future + Unpin>(future: F) -> Option<F::Output> {
        tokio::select! {
            biased;
            out = future => Some(out),
            _ = std::future::ready(()) => None,
        }
    }
}
