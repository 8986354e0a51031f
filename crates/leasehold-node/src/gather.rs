//! Gathering concurrent requests into batches, for a stage that costs about as much per batch
//! as per request: an fsynced log append, a round trip to the leader.
//!
//! `in_flight` batches are outstanding (more only while one is stuck past `hold`, or while
//! requests wait beyond a full batch); every request that arrives meanwhile joins the next batch.
//! A lone request goes out at once (nothing waits for company), and under load the batches grow
//! until a batch's cost is shared by many requests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, AcquireError, OwnedSemaphorePermit, Semaphore};

/// How big batches grow and how many are outstanding.
#[derive(Clone, Copy, Debug)]
pub struct BatchLimits {
    /// Batches sent and not yet answered.
    pub in_flight: usize,
    /// Batches sent and not yet answered while requests wait beyond a full one (at least
    /// `in_flight`): a full batch has nothing to gain from waiting, so it goes out as soon as
    /// one of these is free (large values, one to a batch, are sent side by side).
    pub in_flight_full: usize,
    /// Requests per batch, at most.
    pub max_items: usize,
    /// The summed weight of a batch's requests, at most (a lone heavier request goes alone).
    pub max_weight: usize,
    /// How long an unanswered batch keeps its place in flight. The next batch goes out after
    /// that regardless; the late one still answers its requests if it ever completes.
    pub hold: Duration,
}

struct Pending<T, R> {
    item: T,
    reply: oneshot::Sender<R>,
}

/// A handle to a running gatherer: cheap to clone; the gathering stops with the last handle.
pub struct Gatherer<T, R> {
    queue: mpsc::UnboundedSender<Pending<T, R>>,
}

impl<T, R> Clone for Gatherer<T, R> {
    fn clone(&self) -> Self {
        Gatherer {
            queue: self.queue.clone(),
        }
    }
}

impl<T: Send + 'static, R: Send + 'static> Gatherer<T, R> {
    /// Starts gathering on the current tokio runtime. `send` handles one batch and answers each
    /// of its requests, in order; `weigh` sizes a request against `limits.max_weight`.
    pub fn start<W, S, F>(limits: BatchLimits, weigh: W, send: S) -> Self
    where
        W: Fn(&T) -> usize + Send + 'static,
        S: Fn(Vec<T>) -> F + Send + 'static,
        F: Future<Output = Vec<R>> + Send + 'static,
    {
        // Unbounded here, bounded where its items come from: each is a request the node admitted
        // (`serve --max-requests` at most at once, `limits::MAX_CONCURRENT_REQUESTS` by
        // default) or one of the node's own ticks, which it sends one at a time.
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(limits, waiting, weigh, send));
        Gatherer { queue }
    }

    /// Queues `item` for the next batch; `None` once the gatherer has stopped. Dropping the
    /// receiver before the batch is formed withdraws the item: it is never sent.
    pub fn submit(&self, item: T) -> Option<oneshot::Receiver<R>> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Pending { item, reply }).ok()?;
        Some(answer)
    }
}

/// The places of the batches in flight: `in_flight` slots, and the spares up to
/// `in_flight_full` that only a batch behind a full one may take.
struct Slots {
    slots: Arc<Semaphore>,
    spares: Arc<Semaphore>,
}

impl Slots {
    fn of(limits: &BatchLimits) -> Slots {
        let spares = limits.in_flight_full.saturating_sub(limits.in_flight);
        Slots {
            slots: Arc::new(Semaphore::new(limits.in_flight)),
            spares: Arc::new(Semaphore::new(spares)),
        }
    }

    /// A slot for the next batch, or a spare too if it comes `behind_full`, once one is free.
    async fn take(&self, behind_full: bool) -> Result<OwnedSemaphorePermit, AcquireError> {
        if !behind_full {
            return self.slots.clone().acquire_owned().await;
        }
        tokio::select! {
            // The same choice every time both are free, so a seeded simulation replays.
            biased;
            slot = self.slots.clone().acquire_owned() => slot,
            spare = self.spares.clone().acquire_owned() => spare,
        }
    }
}

async fn gather<T, R, W, S, F>(
    limits: BatchLimits,
    mut waiting: mpsc::UnboundedReceiver<Pending<T, R>>,
    weigh: W,
    send: S,
) where
    T: Send + 'static,
    R: Send + 'static,
    W: Fn(&T) -> usize,
    S: Fn(Vec<T>) -> F,
    F: Future<Output = Vec<R>> + Send + 'static,
{
    let slots = Slots::of(&limits);
    // The request that did not fit in the last batch: it opens the next one.
    let mut carried: Option<Pending<T, R>> = None;
    loop {
        // The last batch was full and more waited: this one needs no company either.
        let behind_full = carried.is_some();
        let first = match carried.take() {
            Some(pending) => pending,
            None => match waiting.recv().await {
                Some(pending) => pending,
                None => return,
            },
        };
        // Everything that arrives while every slot is taken joins this batch.
        let Ok(slot) = slots.take(behind_full).await else {
            return;
        };
        let (mut items, mut replies) = (Vec::new(), Vec::new());
        let mut weight = 0;
        let mut next = Some(first);
        while let Some(pending) = next.take().or_else(|| waiting.try_recv().ok()) {
            if pending.reply.is_closed() {
                continue; // Its caller gave up before it was sent.
            }
            let w = weigh(&pending.item);
            let full = items.len() == limits.max_items || weight + w > limits.max_weight;
            if !items.is_empty() && full {
                carried = Some(pending);
                break;
            }
            weight += w;
            items.push(pending.item);
            replies.push(pending.reply);
        }
        if items.is_empty() {
            continue;
        }
        let batch = send(items);
        tokio::spawn(async move {
            tokio::pin!(batch);
            let answers = tokio::select! {
                // An answer that is ready wins over the hold running out at the same moment: the
                // same choice every time, so a seeded simulation replays.
                biased;
                answers = &mut batch => answers,
                () = tokio::time::sleep(limits.hold) => {
                    drop(slot);
                    batch.await
                }
            };
            debug_assert_eq!(answers.len(), replies.len(), "one answer per request");
            for (reply, answer) in replies.into_iter().zip(answers) {
                let _ = reply.send(answer);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(in_flight: usize, max_items: usize, max_weight: usize) -> BatchLimits {
        BatchLimits {
            in_flight,
            in_flight_full: in_flight,
            max_items,
            max_weight,
            hold: Duration::from_secs(3_600),
        }
    }

    /// A gatherer whose batches wait for `release` and report their sizes.
    fn recording(
        limits: BatchLimits,
    ) -> (
        Gatherer<usize, usize>,
        mpsc::UnboundedReceiver<Vec<usize>>,
        Arc<Semaphore>,
    ) {
        let (batches, seen) = mpsc::unbounded_channel();
        let release = Arc::new(Semaphore::new(0));
        let gate = release.clone();
        let gatherer = Gatherer::start(
            limits,
            |w: &usize| *w,
            move |items: Vec<usize>| {
                let _ = batches.send(items.clone());
                let gate = gate.clone();
                async move {
                    gate.acquire().await.unwrap().forget();
                    items.iter().map(|i| i * 10).collect()
                }
            },
        );
        (gatherer, seen, release)
    }

    #[tokio::test]
    async fn a_lone_request_goes_at_once_and_later_ones_share_the_next_batch() {
        let (gatherer, mut seen, release) = recording(limits(1, 100, 1_000));
        let first = gatherer.submit(1).unwrap();
        assert_eq!(
            seen.recv().await.unwrap(),
            vec![1],
            "nothing waits for company"
        );
        // While the first batch is out, three more arrive: they go together, in order.
        let rest: Vec<_> = [2, 3, 4].map(|i| gatherer.submit(i).unwrap()).into();
        release.add_permits(1);
        assert_eq!(first.await.unwrap(), 10);
        assert_eq!(seen.recv().await.unwrap(), vec![2, 3, 4]);
        release.add_permits(1);
        let answers: Vec<usize> = futures_answers(rest).await;
        assert_eq!(
            answers,
            vec![20, 30, 40],
            "each request gets its own answer"
        );
    }

    #[tokio::test]
    async fn batches_stop_at_the_item_and_weight_limits() {
        let (gatherer, mut seen, release) = recording(limits(1, 3, 10));
        let _block = gatherer.submit(1).unwrap();
        assert_eq!(seen.recv().await.unwrap(), vec![1]);
        let _waiting: Vec<_> = [1, 1, 1, 1, 6, 5, 20]
            .map(|w| gatherer.submit(w).unwrap())
            .into();
        release.add_permits(10);
        assert_eq!(
            seen.recv().await.unwrap(),
            vec![1, 1, 1],
            "three items at most"
        );
        assert_eq!(seen.recv().await.unwrap(), vec![1, 6], "weight 10 at most");
        assert_eq!(seen.recv().await.unwrap(), vec![5]);
        assert_eq!(
            seen.recv().await.unwrap(),
            vec![20],
            "too heavy: goes alone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_behind_a_full_one_goes_out_in_a_spare_slot() {
        let mut l = limits(1, 2, 1_000);
        l.in_flight_full = 2;
        let (gatherer, mut seen, release) = recording(l);
        let _block = gatherer.submit(1).unwrap();
        assert_eq!(seen.recv().await.unwrap(), vec![1]);
        let _waiting: Vec<_> = [2, 3, 4, 5, 6, 7]
            .map(|i| gatherer.submit(i).unwrap())
            .into();
        release.add_permits(1);
        assert_eq!(seen.recv().await.unwrap(), vec![2, 3]);
        // Full, and more waited behind it: the next goes out while [2, 3] is unanswered (well
        // within the hour's hold).
        let next = tokio::time::timeout(Duration::from_secs(5), seen.recv()).await;
        assert_eq!(next.expect("a second batch in flight"), Some(vec![4, 5]));
        // Both slots are taken now: [6, 7] waits for one.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(seen.try_recv().is_err(), "no third batch in flight");
        release.add_permits(1);
        assert_eq!(seen.recv().await.unwrap(), vec![6, 7]);
    }

    #[tokio::test]
    async fn a_withdrawn_request_is_never_sent() {
        let (gatherer, mut seen, release) = recording(limits(1, 100, 1_000));
        let _block = gatherer.submit(1).unwrap();
        assert_eq!(seen.recv().await.unwrap(), vec![1]);
        drop(gatherer.submit(2).unwrap());
        let kept = gatherer.submit(3).unwrap();
        release.add_permits(2);
        assert_eq!(seen.recv().await.unwrap(), vec![3]);
        assert_eq!(kept.await.unwrap(), 30);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_batch_gives_up_its_slot_after_the_hold() {
        let mut l = limits(1, 100, 1_000);
        l.hold = Duration::from_millis(500);
        let (gatherer, mut seen, release) = recording(l);
        let stuck = gatherer.submit(1).unwrap();
        assert_eq!(seen.recv().await.unwrap(), vec![1]);
        let next = gatherer.submit(2).unwrap();
        // The next batch goes out once the hold has passed, though the first is unanswered.
        assert_eq!(seen.recv().await.unwrap(), vec![2]);
        release.add_permits(2);
        assert_eq!(stuck.await.unwrap(), 10, "the late batch still answers");
        assert_eq!(next.await.unwrap(), 20);
    }

    async fn futures_answers(receivers: Vec<oneshot::Receiver<usize>>) -> Vec<usize> {
        let mut answers = Vec::new();
        for r in receivers {
            answers.push(r.await.unwrap());
        }
        answers
    }
}
