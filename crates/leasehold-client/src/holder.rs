//! `Holder`, the lease keeper: acquires a lease (waiting for it if asked), renews it at least
//! every third of its TTL (together with the client's other holders, see `renewals`), and
//! knows until when its holding is safe.
//!
//! The deadline is counted from the instant a successful request was *sent*, not from its
//! answer: the store started the grant's TTL at some point after the send, so
//! `send + ttl - margin` is never later than the store's own expiry, whatever the request and
//! the answer spent on the way. The margin covers the difference between this machine's clock
//! rate and the leader's. Every renewal attempt is cut off at that deadline, so a renewal loop
//! never acts on a lease it may have lost.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::answers::{Acquired, Answer, HeldBy, Released, Renewal, Renewed, Written};
use crate::client::LeaseClient;
use crate::clock;
use crate::error::ClientError;
use crate::limits::{HOLDER_SUFFIX_BYTES, MAX_HOLDER_BYTES};
use crate::renewals::{self, Failed};
use crate::watch::{WatchFrom, WatchSelect};

/// Why a [`Holder`] no longer holds its lease.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lost {
    /// Renewals failed (no quorum, no node reachable) until the safe deadline passed.
    Unrenewed,
    /// A renewal found the lease held by another.
    HeldBy(HeldBy),
    /// A renewal found the lease free: it ran out before a renewal reached the store. A
    /// renewal never grants it again, so a standby may hold it now.
    Expired,
    /// A renewal found the lease granted anew under this holder's name, with another token
    /// (another process using the same exact name, say): whatever was done under the old token
    /// may have been fenced off.
    Regranted {
        /// The new grant's token.
        token: u64,
    },
    /// The store refused a renewal for good (bad input, an unknown session).
    Refused(String),
    /// [`Holder::release`] gave the lease up.
    Released,
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Unrenewed => write!(f, "no renewal succeeded before the safe deadline"),
            Lost::HeldBy(h) => write!(f, "held by {} with token {}", h.holder, h.token),
            Lost::Expired => write!(f, "the lease ran out before a renewal reached the store"),
            Lost::Regranted { token } => {
                write!(
                    f,
                    "the lease was granted anew under this name (token {token})"
                )
            }
            Lost::Refused(why) => write!(f, "renewal refused: {why}"),
            Lost::Released => write!(f, "released"),
        }
    }
}

/// Where a holding stands: until when it is safe, or why it was lost. Its instants are of
/// [`clock`](crate::clock), which counts the time the host was suspended: compare them with
/// `clock::now()`, and sleep until them with `clock::sleep_until`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// When the request that set `safe_until` (the grant, or the last renewal) was sent.
    pub sent: Instant,
    /// Before this instant the store has granted the lease to nobody else.
    pub safe_until: Instant,
    /// Set once the holding is over; it never comes back.
    pub lost: Option<Lost>,
}

/// Why a holder could not do what was asked.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    /// The lease is held by another, and the holder was not asked to wait.
    #[error("lease is held by {} with token {} until store time {} ms", .0.holder, .0.token, .0.expires_at_ms)]
    Held(HeldBy),
    /// The holding is over, or its safe deadline passed: nothing is sent.
    #[error("lease no longer held safely: {0}")]
    NotSafe(Lost),
    /// The options cannot work: a margin no shorter than the TTL, say.
    #[error("{0}")]
    Invalid(String),
    /// No answer came: see [`ClientError::is_indeterminate`] for whether a write may have
    /// been applied.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// How to hold a lease; made by [`Holder::options`].
#[derive(Clone, Debug)]
pub struct HolderOptions {
    lease: String,
    name: String,
    ttl: Duration,
    margin: Option<Duration>,
    exact_name: bool,
    wait: bool,
}

impl HolderOptions {
    /// How long before the store's expiry (as counted from the send) the holding stops being
    /// safe: shorter than two thirds of the TTL. Default: [`default_margin`], the larger of
    /// 100 ms and a tenth of the TTL, at most a quarter of it.
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// Use the holder name as given. Without this the name gets a suffix unique to this holder
    /// in this process, so two processes started with the same name never both hold the lease
    /// under one token (the store would take the second for a renewal by the first).
    pub fn exact_name(mut self) -> Self {
        self.exact_name = true;
        self
    }

    /// Wait while another holds the lease, woken by a watch of the lease rather than by
    /// polling, instead of failing with [`HoldError::Held`].
    pub fn wait(mut self) -> Self {
        self.wait = true;
        self
    }

    /// The name the holder asks as: the name given, or with the suffix that sets it apart,
    /// checked here so that a refusal speaks of the name the caller gave, not of one with a
    /// suffix it never wrote.
    fn holder_name(&self) -> Result<String, HoldError> {
        if self.name.is_empty() {
            return Err(HoldError::Invalid("holder: must not be empty".into()));
        }
        if self.exact_name {
            return Ok(self.name.clone());
        }
        let most = MAX_HOLDER_BYTES - HOLDER_SUFFIX_BYTES;
        if self.name.len() > most {
            return Err(HoldError::Invalid(format!(
                "holder: must be at most {most} bytes, leaving room for the suffix of up to \
                 {HOLDER_SUFFIX_BYTES} that sets it apart from other holders of the name (or hold \
                 under the exact name); got {}",
                self.name.len()
            )));
        }
        Ok(unique_name(&self.name))
    }

    /// Acquires the lease and starts renewing it.
    pub async fn acquire(self, client: Arc<LeaseClient>) -> Result<Holder, HoldError> {
        // Whole milliseconds, as the store counts the grant: the deadline never passes it.
        let ttl_ms = u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX);
        let ttl = Duration::from_millis(ttl_ms);
        let margin = self.margin.unwrap_or_else(|| default_margin(ttl));
        // The deadline must fall after the first renewal (a third of the TTL in), or the
        // holding would end before it could be renewed.
        if margin >= ttl - ttl / 3 {
            return Err(HoldError::Invalid(format!(
                "margin: must be shorter than two thirds of the TTL ({} ms), so that the \
                 holding outlasts a renewal; got {} ms",
                (ttl - ttl / 3).as_millis(),
                margin.as_millis()
            )));
        }
        let name = self.holder_name()?;
        let (token, sent) = grant(&client, &self.lease, &name, ttl_ms, self.wait).await?;
        let (stop, stop_renewals) = watch::channel(false);
        let (standing, watcher) = watch::channel(Standing {
            sent,
            safe_until: sent + ttl - margin,
            lost: None,
        });
        let keeper = Keeper {
            client: client.clone(),
            lease: self.lease.clone(),
            holder: name.clone(),
            token,
            ttl,
            ttl_ms,
            margin,
            standing,
            stop: stop_renewals,
        };
        let task = tokio::spawn(keeper.run(sent));
        Ok(Holder {
            client,
            lease: self.lease,
            holder: name,
            token,
            ttl,
            watcher,
            stop,
            task: Some(task),
            released: false,
        })
    }
}

/// Holds a lease while it lives: renews it at least every third of its TTL, and releases it
/// when dropped (best effort) or on [`release`](Self::release).
///
/// ```no_run
/// # async fn example() -> Result<(), leasehold_client::HoldError> {
/// use std::sync::Arc;
/// use std::time::Duration;
/// use leasehold_client::{Holder, LeaseClient};
///
/// let client = Arc::new(LeaseClient::new(&["127.0.0.1:7001", "127.0.0.1:7002"])?);
/// let holder = Holder::options("jobs/nightly", "worker", Duration::from_secs(5))
///     .wait()
///     .acquire(client)
///     .await?;
/// tokio::select! {
///     lost = holder.lost() => eprintln!("stopped: {lost}"),
///     _ = async {
///         // Refused locally once the holding is not safe, and by the store once a bigger
///         // token was granted.
///         holder.fenced_put("report", b"done").await?;
///         Ok::<_, leasehold_client::HoldError>(())
///     } => {}
/// }
/// holder.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct Holder {
    client: Arc<LeaseClient>,
    lease: String,
    holder: String,
    token: u64,
    ttl: Duration,
    watcher: watch::Receiver<Standing>,
    /// Tells the renewal task to stop once its attempt in flight, if any, has ended.
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    released: bool,
}

impl Holder {
    /// Starts the options for holding `lease` as `name` with `ttl`.
    pub fn options(
        lease: impl Into<String>,
        name: impl Into<String>,
        ttl: Duration,
    ) -> HolderOptions {
        HolderOptions {
            lease: lease.into(),
            name: name.into(),
            ttl,
            margin: None,
            exact_name: false,
            wait: false,
        }
    }

    /// The lease held.
    pub fn lease(&self) -> &str {
        &self.lease
    }

    /// The holder name the store knows, suffix included.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The fencing token of this holding: put it on every write done for the lease.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The TTL every grant and renewal asks for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Until when the holding is safe: no other holder can be granted the lease before it. An
    /// instant of [`clock`](crate::clock).
    pub fn safe_until(&self) -> Instant {
        self.watcher.borrow().safe_until
    }

    /// Whether the holding is safe now.
    pub fn is_safe(&self) -> bool {
        let standing = self.watcher.borrow();
        standing.lost.is_none() && clock::now() < standing.safe_until
    }

    /// The holding's standing, updated on every renewal: for code that acts ahead of the
    /// deadline (`leasehold hold` stops its command a grace period before it).
    pub fn standing(&self) -> watch::Receiver<Standing> {
        self.watcher.clone()
    }

    /// Resolves once the lease is lost, or its safe deadline passes without a renewal.
    pub async fn lost(&self) -> Lost {
        let mut watcher = self.watcher.clone();
        loop {
            let standing = watcher.borrow_and_update().clone();
            if let Some(lost) = standing.lost {
                return lost;
            }
            tokio::select! {
                changed = watcher.changed() => if changed.is_err() {
                    return watcher.borrow().lost.clone().unwrap_or(Lost::Unrenewed);
                },
                () = clock::sleep_until(standing.safe_until) => {
                    if watcher.borrow().safe_until <= clock::now() {
                        return Lost::Unrenewed;
                    }
                }
            }
        }
    }

    /// Why the holding is not safe now, if it is not.
    fn unsafe_now(&self) -> Option<Lost> {
        let standing = self.watcher.borrow();
        match &standing.lost {
            Some(lost) => Some(lost.clone()),
            None if clock::now() >= standing.safe_until => Some(Lost::Unrenewed),
            None => None,
        }
    }

    /// Writes a row fenced with this holding's token. Refused here, without sending, once the
    /// holding is not safe; refused by the store ([`Written::StaleToken`]) once it has seen a
    /// bigger token for the lease.
    pub async fn fenced_put(&self, key: &str, value: &[u8]) -> Result<Answer<Written>, HoldError> {
        if let Some(lost) = self.unsafe_now() {
            return Err(HoldError::NotSafe(lost));
        }
        Ok(self
            .client
            .put(key, value, Some((&self.lease, self.token)))
            .await?)
    }

    /// Stops renewing without releasing: the lease expires by itself at its TTL. For a holder
    /// whose work may still run where it cannot stop it: a release would let a rival in while
    /// that work ran on.
    pub fn abandon(mut self) {
        self.released = true;
    }

    /// Stops renewing and gives the lease up, so a standby gets it at once.
    pub async fn release(mut self) -> Result<Answer<Released>, ClientError> {
        self.released = true;
        // Released before a renewal in flight landed, the lease would be granted anew to this
        // holder, and a standby would wait out a whole TTL.
        stop_renewing(&self.stop, self.task.take(), self.safe_until()).await;
        self.client
            .release(&self.lease, &self.holder, self.token)
            .await
    }
}

/// Stops the renewals and waits for the one in flight, if any, to end. The wait is bounded: no
/// attempt outlives the safe deadline.
async fn stop_renewing(
    stop: &watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    safe_until: Instant,
) {
    let _ = stop.send(true);
    if let Some(task) = task {
        // Past the deadline a renewal no longer matters: no need to wait longer.
        let _ = tokio::time::timeout_at(clock::timer(safe_until), task).await;
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if self.released {
            return;
        }
        // Best effort: a standby gets the lease now rather than at its expiry, once the renewal
        // in flight, if any, has ended.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let client = self.client.clone();
            let (lease, holder, token) = (self.lease.clone(), self.holder.clone(), self.token);
            let (stop, task, safe_until) = (self.stop.clone(), self.task.take(), self.safe_until());
            runtime.spawn(async move {
                stop_renewing(&stop, task, safe_until).await;
                client.release(&lease, &holder, token).await
            });
        } else if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// The margin when none is given: the larger of 100 ms and a tenth of the TTL, but at most a
/// quarter of it, so that short TTLs still leave time to renew.
pub fn default_margin(ttl: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(100)).min(ttl / 4)
}

/// `name` with a suffix no other holder of any process shares: a per-process tag drawn from
/// std's randomly seeded hasher, and a per-holder counter.
fn unique_name(name: &str) -> String {
    use std::hash::{BuildHasher, Hasher};
    static PROCESS_TAG: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let tag = *PROCESS_TAG.get_or_init(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        hasher.finish()
    });
    suffixed(name, tag as u32, NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `name` with the suffix of holder `n` of the process tagged `tag`: at most
/// [`HOLDER_SUFFIX_BYTES`] more.
fn suffixed(name: &str, tag: u32, n: u64) -> String {
    format!("{name}~{tag:08x}.{n}")
}

/// Acquires the lease, waiting while it is held if `wait`: returns the token and the instant
/// the granting request was sent.
async fn grant(
    client: &LeaseClient,
    lease: &str,
    holder: &str,
    ttl_ms: u64,
    wait: bool,
) -> Result<(u64, Instant), HoldError> {
    let mut watch = None;
    loop {
        let sent = clock::now();
        let answer = client.acquire(lease, holder, ttl_ms).await?;
        let held = match answer.outcome {
            Acquired::Granted { token, .. } => return Ok((token, sent)),
            Acquired::HeldBy(held) if !wait => return Err(HoldError::Held(held)),
            Acquired::HeldBy(held) => held,
        };
        // Wake on the event that frees the lease after the refusal, or at the latest when the
        // holder's grant runs out in store time (a watch that cannot be served must not leave
        // the standby waiting forever).
        let watch = watch.get_or_insert_with(|| {
            client.watch(
                WatchSelect::Lease(lease.to_owned()),
                WatchFrom::Index(answer.applied.log_index + 1),
            )
        });
        let left_ms = held
            .expires_at_ms
            .saturating_sub(answer.applied.store_time_ms);
        let expiry = tokio::time::sleep(Duration::from_millis(left_ms) + Duration::from_millis(20));
        tokio::pin!(expiry);
        loop {
            tokio::select! {
                () = &mut expiry => break,
                event = watch.next() => match event {
                    Ok(event) if event.log_index > answer.applied.log_index
                        && event.kind.frees() => break,
                    Ok(_) => {}
                    // The watch gave up: the expiry timer alone wakes the standby.
                    Err(_) => {
                        expiry.as_mut().await;
                        break;
                    }
                },
            }
        }
    }
}

/// The renewal task's state.
struct Keeper {
    client: Arc<LeaseClient>,
    lease: String,
    holder: String,
    token: u64,
    ttl: Duration,
    ttl_ms: u64,
    margin: Duration,
    standing: watch::Sender<Standing>,
    stop: watch::Receiver<bool>,
}

impl Keeper {
    /// Renews a third of the TTL after the last successful send, or earlier with the client's
    /// other holders once a sixth has passed, until the holding is lost.
    async fn run(mut self, mut last_sent: Instant) {
        let lost = loop {
            // Tokio's timers: a suspension makes them late, and `renew` finds the deadline
            // passed then.
            let eligible = clock::timer(last_sent + self.ttl / 6);
            let joinable = renewals::next_round_after(&*self.client, eligible);
            tokio::select! {
                () = tokio::time::sleep_until(clock::timer(last_sent + self.ttl / 3)) => {}
                () = joinable => {}
                _ = self.stop.wait_for(|stop| *stop) => break Lost::Released,
            }
            match self.renew().await {
                Ok(sent) => last_sent = sent,
                Err(lost) => break lost,
            }
        };
        self.standing.send_modify(|s| s.lost = Some(lost));
    }

    /// One renewal, gathered with the other holders' of this client that are due, retried
    /// until it succeeds or the safe deadline passes: each attempt is cut off at the deadline,
    /// so nothing this holder does waits past it.
    async fn renew(&self) -> Result<Instant, Lost> {
        loop {
            // No new attempt once the holder is being released; one in flight ends by itself.
            if *self.stop.borrow() {
                return Err(Lost::Released);
            }
            let sent = clock::now();
            let safe_until = self.standing.borrow().safe_until;
            if sent >= safe_until {
                return Err(Lost::Unrenewed);
            }
            let renewal = Renewal {
                lease: self.lease.clone(),
                holder: self.holder.clone(),
                token: self.token,
                ttl_ms: self.ttl_ms,
            };
            let attempt = renewals::renew(&self.client, renewal);
            let renewed = match tokio::time::timeout_at(clock::timer(safe_until), attempt).await {
                Err(_) => return Err(Lost::Unrenewed),
                Ok(Err(Failed::Refused(why))) => return Err(Lost::Refused(why)),
                // Unavailable, indeterminate: the next attempt settles it, in time or not.
                Ok(Err(Failed::Unanswered)) => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                Ok(Ok(renewed)) => renewed,
            };
            return match renewed {
                Renewed::Until { .. } => {
                    let safe_until = sent + self.ttl - self.margin;
                    self.standing.send_modify(|s| {
                        s.sent = sent;
                        s.safe_until = safe_until;
                    });
                    Ok(sent)
                }
                Renewed::NotHeld => Err(Lost::Expired),
                Renewed::HeldBy(held) => Err(Lost::HeldBy(held)),
                Renewed::WrongToken { current_token } => Err(Lost::Regranted {
                    token: current_token,
                }),
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use leasehold_proto::v1 as pb;
    use pb::acquire_response::Outcome;

    use super::*;
    use crate::fake::{fake_node, Reply};

    fn granted(token: u64, renewed: bool) -> Reply {
        Reply::Acquire(Outcome::Granted(pb::Granted {
            token,
            expires_at_ms: 0,
            renewed,
        }))
    }

    const TTL: Duration = Duration::from_millis(600);
    const MARGIN: Duration = Duration::from_millis(100);

    /// Safety review 161302a, finding 5: a holder counts the time its host was suspended,
    /// as the store's clock does. The clock jumps as a resume makes it jump (the host slept a
    /// minute, a hundred TTLs) while tokio's does not move: the holding is unsafe at once,
    /// refuses a fenced write without sending it, and is lost within a slice.
    #[tokio::test]
    async fn a_holder_counts_the_time_its_host_was_suspended() {
        let (_node, client) = fake_node(vec![granted(1, false), Reply::Hang]).await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        assert!(holder.is_safe());
        clock::test_jump::suspend(Duration::from_secs(60));
        assert!(!holder.is_safe(), "safe after a minute asleep");
        assert!(matches!(
            holder.fenced_put("k", b"v").await,
            Err(HoldError::NotSafe(Lost::Unrenewed))
        ));
        let lost = tokio::time::timeout(clock::SLICE * 2, holder.lost()).await;
        assert_eq!(lost.expect("lost within two slices"), Lost::Unrenewed);
    }

    #[tokio::test]
    async fn a_renewal_answered_held_by_another_is_a_loss_at_once() {
        let thief = pb::lease_renewal::Outcome::HeldBy(pb::HeldBy {
            holder: "thief".into(),
            token: 2,
            expires_at_ms: 0,
        });
        let (_node, client) = fake_node(vec![granted(1, false), Reply::Renew(thief)]).await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        let lost = tokio::time::timeout(TTL, holder.lost()).await.unwrap();
        assert!(
            matches!(&lost, Lost::HeldBy(h) if h.holder == "thief"),
            "{lost}"
        );
        match holder.fenced_put("k", b"v").await {
            Err(HoldError::NotSafe(Lost::HeldBy(_))) => {}
            other => panic!("a write after the loss was sent: {other:?}"),
        }
    }

    #[tokio::test]
    async fn a_renewal_that_finds_the_lease_run_out_or_granted_anew_is_a_loss() {
        let not_held = pb::lease_renewal::Outcome::NotHeld(pb::NotHeld {});
        let (node, client) = fake_node(vec![granted(1, false), Reply::Renew(not_held)]).await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        let lost = tokio::time::timeout(TTL, holder.lost()).await.unwrap();
        assert_eq!(lost, Lost::Expired);
        // Renewed through a renewal, never through an acquire that could grant it again.
        assert_eq!(*node.renewals.lock().unwrap(), vec![vec!["l".to_owned()]]);
        let wrong = pb::lease_renewal::Outcome::WrongToken(pb::WrongToken { current_token: 2 });
        let (_node, client) = fake_node(vec![granted(1, false), Reply::Renew(wrong)]).await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        let lost = tokio::time::timeout(TTL, holder.lost()).await.unwrap();
        assert_eq!(lost, Lost::Regranted { token: 2 });
    }

    #[tokio::test]
    async fn the_holders_of_one_client_fall_into_step_and_renew_in_one_request() {
        let (node, client) = fake_node(vec![granted(1, false), Reply::Answer]).await;
        let client = Arc::new(client);
        let first = Holder::options("a", "me", TTL)
            .acquire(client.clone())
            .await
            .unwrap();
        // Granted half a renewal period later: out of step at first.
        tokio::time::sleep(TTL / 6).await;
        let second = Holder::options("b", "me", TTL)
            .acquire(client.clone())
            .await
            .unwrap();
        tokio::time::sleep(TTL * 2).await;
        assert!(first.is_safe() && second.is_safe());
        let renewals = node.renewals.lock().unwrap().clone();
        let both = renewals.iter().filter(|leases| leases.len() == 2).count();
        let alone = renewals.len() - both;
        assert!(
            both >= 4 && alone <= 2,
            "{both} renewals of both, {alone} of one: {renewals:?}"
        );
    }

    #[tokio::test]
    async fn a_denied_lease_costs_only_its_own_holder_not_those_renewed_with_it() {
        let (node, client) = fake_node(vec![granted(1, false), Reply::Answer]).await;
        let client = Arc::new(client);
        let kept = Holder::options("a", "me", TTL)
            .acquire(client.clone())
            .await
            .unwrap();
        let denied = Holder::options("b", "me", TTL)
            .acquire(client.clone())
            .await
            .unwrap();
        *node.denied_lease.lock().unwrap() = Some("b".into());
        let lost = tokio::time::timeout(TTL, denied.lost()).await.unwrap();
        assert!(
            matches!(&lost, Lost::Refused(why) if why.contains("may not hold b")),
            "{lost}"
        );
        tokio::time::sleep(TTL).await;
        assert!(kept.is_safe(), "the other holder renewed on its own");
        let renewals = node.renewals.lock().unwrap().clone();
        assert!(
            renewals.iter().any(|r| r.len() == 2) && renewals.iter().any(|r| r == &["a"]),
            "{renewals:?}"
        );
    }

    #[tokio::test]
    async fn renewals_that_never_answer_end_the_holding_at_send_plus_ttl_minus_margin() {
        // The grant's answer takes 300 ms: a deadline counted from the answer would be that
        // much later.
        let slow = Duration::from_millis(300);
        let grant = Outcome::Granted(pb::Granted {
            token: 1,
            expires_at_ms: 0,
            renewed: false,
        });
        let (_node, client) = fake_node(vec![Reply::SlowAcquire(slow, grant), Reply::Hang]).await;
        let before = clock::now();
        let holder = Holder::options("l", "me", TTL)
            .margin(MARGIN)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        assert!(before.elapsed() >= slow);
        let deadline = holder.safe_until();
        assert!(
            deadline < before + TTL - MARGIN + Duration::from_millis(100),
            "counted from the answer: {} ms after the call began",
            (deadline - before).as_millis()
        );
        assert_eq!(holder.lost().await, Lost::Unrenewed);
        let at = clock::now();
        assert!(at >= deadline, "lost before its deadline");
        assert!(
            at < deadline + Duration::from_millis(100),
            "lost {} ms after its deadline",
            (at - deadline).as_millis()
        );
        assert!(!holder.is_safe());
        assert!(matches!(
            holder.fenced_put("k", b"v").await,
            Err(HoldError::NotSafe(Lost::Unrenewed))
        ));
    }

    #[tokio::test]
    async fn a_holder_renews_every_third_of_its_ttl_and_releases_when_dropped() {
        let (node, client) = fake_node(vec![granted(1, false), Reply::Answer]).await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        tokio::time::sleep(TTL * 2).await;
        assert!(holder.is_safe());
        // A renewal every 200 ms: about six in 1.2 s, each a renewal, not an acquire.
        let renewals = node.renewals.lock().unwrap().len();
        assert!(
            (5..=7).contains(&renewals),
            "{renewals} renewals in two TTLs"
        );
        // The grant and the renewals (the register is not counted: it carries no request id).
        assert_eq!(node.request_ids.lock().unwrap().len(), renewals + 1);
        drop(holder);
        tokio::time::timeout(TTL, async {
            while node.releases.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("released after the drop");
        assert_eq!(*node.releases.lock().unwrap(), vec![1]);
    }

    #[tokio::test]
    async fn a_release_waits_for_the_renewal_in_flight_so_it_cannot_land_after_it() {
        // Answered before the safe deadline (500 ms in): an attempt is cut off there.
        let slow = Duration::from_millis(150);
        let renewal = pb::lease_renewal::Outcome::Renewed(pb::Renewed::default());
        let (node, client) = fake_node(vec![
            granted(1, false),
            Reply::SlowRenew(slow, renewal),
            Reply::Answer,
        ])
        .await;
        let holder = Holder::options("l", "me", TTL)
            .acquire(Arc::new(client))
            .await
            .unwrap();
        // The renewal is sent a third of the TTL in (200 ms), and answered 150 ms later.
        tokio::time::sleep(TTL / 3 + Duration::from_millis(50)).await;
        holder.release().await.unwrap();
        let timeline = node.timeline.lock().unwrap().clone();
        let answered = timeline
            .iter()
            .position(|(what, _)| *what == "slow renewal answered");
        let released = timeline.iter().position(|(what, _)| *what == "release");
        assert!(
            answered.is_some() && answered < released,
            "the release went out while the renewal was in flight: {timeline:?}"
        );
    }

    #[tokio::test]
    async fn options_that_cannot_work_are_refused_before_anything_is_sent() {
        let (node, client) = fake_node(vec![granted(1, false)]).await;
        let client = Arc::new(client);
        let refused = Holder::options("l", "me", TTL)
            .margin(TTL)
            .acquire(client.clone())
            .await;
        assert!(matches!(refused, Err(HoldError::Invalid(ref e)) if e.contains("margin")));
        let long = "h".repeat(MAX_HOLDER_BYTES - HOLDER_SUFFIX_BYTES + 1);
        for (name, said) in [("", "must not be empty"), (&long[..], "at most 98 bytes")] {
            let refused = Holder::options("l", name, TTL)
                .acquire(client.clone())
                .await;
            let said_so = matches!(refused, Err(HoldError::Invalid(ref e)) if e.contains(said));
            assert!(said_so, "{name:?}: {:?}", refused.err());
        }
        assert!(node.request_ids.lock().unwrap().is_empty());
    }

    #[test]
    fn a_suffixed_name_fits_the_room_left_for_it() {
        let name = "h".repeat(MAX_HOLDER_BYTES - HOLDER_SUFFIX_BYTES);
        assert_eq!(suffixed(&name, u32::MAX, u64::MAX).len(), MAX_HOLDER_BYTES);
        assert_eq!(suffixed(&name, 0, 1).len(), MAX_HOLDER_BYTES - 19);
    }
}
