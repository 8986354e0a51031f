//! Renewals gathered: the holders of one client renew together, in one request, and so one
//! log entry, instead of one each. A process that holds 10,000 leases with a 10 s TTL sends
//! about twenty requests every third of the TTL, not 3,000 a second.
//!
//! A holder renews at the latest a third of its TTL after its last renewal was sent, and joins
//! any round of renewals that starts once a sixth of its TTL has passed. So holders granted at
//! scattered times fall into step: after one third of a TTL, those of one TTL renew together.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::answers::{Renewal, Renewed};
use crate::error::ClientError;
use crate::limits::MAX_RENEWALS;

/// A client whose renewals are gathered: where they wait, and how one request is sent.
pub(crate) trait Gathered: Send + Sync + 'static {
    /// The renewals waiting for this client's next request.
    fn renewals(&self) -> &Renewals;
    /// One request renewing `leases`: their answers, in order.
    fn send(
        &self,
        leases: Vec<Renewal>,
    ) -> impl std::future::Future<Output = Result<Vec<Renewed>, ClientError>> + Send;
}

/// How long the first renewal of a round waits for the holders it woke to join it.
const GATHER: Duration = Duration::from_millis(2);

/// Waits for the first round of renewals that starts after `eligible`: a holder past a sixth
/// of its TTL joins it rather than renewing on its own later.
pub(crate) async fn next_round_after(client: &impl Gathered, eligible: Instant) {
    tokio::time::sleep_until(eligible).await;
    client.renewals().round.notified().await;
}

/// Why a gathered renewal got no answer for its lease.
#[derive(Debug)]
pub(crate) enum Failed {
    /// The store refused the request for good (bad input, a denial): its message.
    Refused(String),
    /// No answer this time (no quorum, no node reachable): try again.
    Unanswered,
}

/// The renewals waiting for the next request of one client.
#[derive(Default)]
pub(crate) struct Renewals {
    queue: Mutex<Queue>,
    /// Wakes the holders waiting to join a round when one starts.
    round: tokio::sync::Notify,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A task is sending what waits; a renewal queued meanwhile goes with its next request.
    sending: bool,
}

struct Waiting {
    renewal: Renewal,
    reply: oneshot::Sender<Result<Renewed, Failed>>,
}

/// Renews one lease along with whatever other renewals of `client` are due with it.
pub(crate) async fn renew<C: Gathered>(
    client: &Arc<C>,
    renewal: Renewal,
) -> Result<Renewed, Failed> {
    let (reply, answer) = oneshot::channel();
    let lead = {
        let mut queue = lock(&client.renewals().queue);
        queue.waiting.push(Waiting { renewal, reply });
        !std::mem::replace(&mut queue.sending, true)
    };
    if lead {
        tokio::spawn(send_all(client.clone()));
    }
    // The sender always answers or drops the reply; dropped, it was stopped mid-flight.
    answer.await.unwrap_or(Err(Failed::Unanswered))
}

fn lock(queue: &Mutex<Queue>) -> std::sync::MutexGuard<'_, Queue> {
    queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Starts a round: wakes the holders that may join it, waits [`GATHER`] for them, then sends
/// what waits in requests of at most [`MAX_RENEWALS`] leases, side by side. The requests are
/// not waited for: a renewal queued while they are out starts the next round, so one slow
/// request never holds up the renewals behind it.
async fn send_all<C: Gathered>(client: Arc<C>) {
    client.renewals().round.notify_waiters();
    // Dropped during the gather (its runtime shutting down), the round hands its renewals to
    // the next one instead of leaving `sending` set for good.
    let mut round = Round(Some(client.renewals()));
    tokio::time::sleep(GATHER).await;
    for batch in batches(round.take()) {
        tokio::spawn(send(client.clone(), batch));
    }
}

/// A round being gathered: dropped before it took the queue, it lets the next renewal start
/// another.
struct Round<'a>(Option<&'a Renewals>);

impl Round<'_> {
    /// What waits, taken in the same breath as the next renewal is let start a round.
    fn take(&mut self) -> Vec<Waiting> {
        let Some(renewals) = self.0.take() else {
            return Vec::new();
        };
        let mut queue = lock(&renewals.queue);
        queue.sending = false;
        std::mem::take(&mut queue.waiting)
    }
}

impl Drop for Round<'_> {
    fn drop(&mut self) {
        if let Some(renewals) = self.0 {
            lock(&renewals.queue).sending = false;
        }
    }
}

/// `waiting` cut into requests: at most [`MAX_RENEWALS`] each, and a lease named twice (two
/// holders of one lease in this process, one of them lost) in separate requests, since a
/// request may name a lease once only.
fn batches(waiting: Vec<Waiting>) -> Vec<Vec<Waiting>> {
    let mut batches: Vec<(std::collections::HashSet<String>, Vec<Waiting>)> = Vec::new();
    for w in waiting {
        let fits = |(named, batch): &&mut (std::collections::HashSet<String>, Vec<Waiting>)| {
            batch.len() < MAX_RENEWALS && !named.contains(&w.renewal.lease)
        };
        match batches.iter_mut().find(fits) {
            Some((named, batch)) => {
                named.insert(w.renewal.lease.clone());
                batch.push(w);
            }
            None => batches.push(([w.renewal.lease.clone()].into(), vec![w])),
        }
    }
    batches.into_iter().map(|(_, batch)| batch).collect()
}

/// One request for `batch`, each waiter answered with its lease's outcome. A request refused
/// whole (one lease's holder had its permission revoked, say) is halved until the refused
/// leases are alone, so that only their holders lose their holdings.
async fn send<C: Gathered>(client: Arc<C>, batch: Vec<Waiting>) {
    let mut pending = vec![batch];
    while let Some(mut batch) = pending.pop() {
        let renewals: Vec<Renewal> = batch.iter().map(|w| w.renewal.clone()).collect();
        match client.send(renewals).await {
            Ok(answers) => {
                for (w, renewed) in batch.into_iter().zip(answers) {
                    let _ = w.reply.send(Ok(renewed));
                }
            }
            Err(e) if batch.len() > 1 && refused(&e) => {
                let second = batch.split_off(batch.len() / 2);
                pending.extend([second, batch]);
            }
            Err(e) => {
                for w in batch {
                    let _ = w.reply.send(Err(failed(&e)));
                }
            }
        }
    }
}

/// Whether the store refused a request for good: bad input, or a denial.
fn refused(e: &ClientError) -> bool {
    matches!(
        e.code(),
        tonic::Code::InvalidArgument | tonic::Code::PermissionDenied
    )
}

fn failed(e: &ClientError) -> Failed {
    if refused(e) {
        Failed::Refused(e.to_string())
    } else {
        Failed::Unanswered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiting(lease: &str) -> Waiting {
        Waiting {
            renewal: Renewal {
                lease: lease.into(),
                holder: "h".into(),
                token: 1,
                ttl_ms: 1_000,
            },
            reply: oneshot::channel().0,
        }
    }

    #[test]
    fn requests_hold_at_most_the_limit_and_name_each_lease_once() {
        let mut all: Vec<Waiting> = (0..MAX_RENEWALS + 10)
            .map(|i| waiting(&format!("l{i}")))
            .collect();
        all.push(waiting("l0"));
        let sizes: Vec<usize> = batches(all).iter().map(Vec::len).collect();
        assert_eq!(sizes, [MAX_RENEWALS, 11]);
        let twice = batches(vec![waiting("a"), waiting("a"), waiting("b")]);
        let leases: Vec<Vec<&str>> = twice
            .iter()
            .map(|b| b.iter().map(|w| w.renewal.lease.as_str()).collect())
            .collect();
        assert_eq!(leases, [vec!["a", "b"], vec!["a"]]);
    }
}
