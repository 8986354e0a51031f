//! The leader's stamping of store time.
//!
//! Store time is replicated state: it moves only through logged commands. The leader stamps each
//! command it proposes with a base store time plus what its own monotonic clock has measured
//! since it took that base. A new leader takes its base only after every entry of earlier terms
//! is applied.
//!
//! **Time carried across a failover.** The base is the newest store time this node applied, plus
//! what its own monotonic clock has measured since it appended the entry that carried it
//! ([`carried_base`]), so time without a leader is counted and a lease's life across a leader
//! kill stays close to its TTL. The append, not the apply: an entry acknowledged just before
//! its leader died is applied here only once the next leader is elected.
//! After a restart the node has no such instant for what it applied from its disk, so a new
//! leader also asks its peers for theirs ([`ask_peers`]) and starts from the largest: a leader
//! killed and restarted that wins the next election would otherwise start from the applied time
//! alone and not count its own downtime, which its followers did count (leases then lasted
//! their TTL plus that downtime). Each peer's answer is its own `carried_base`, so the bound
//! below holds for each, and for the largest.
//!
//! **Why it never runs ahead of real time.** Let a lease be acquired by an entry stamped `A`,
//! taken at real time `t_A`, no earlier than the acquire was sent. Claim: every stamp `S`,
//! taken at real time `t_S`, has `S - A <= t_S - t_A`, so store time reaches `A + TTL` no sooner
//! than `TTL` after the acquire was sent. Within a term it holds because the leader adds only
//! what its monotonic clock measured. A new leader's base is `S + (now - t_seen)`, where `S` is
//! the store time its table reached by applying a committed entry stamped `S` at `t_S`, and
//! `t_seen >= t_S` is when that entry was appended here (stamped before proposed, proposed
//! before appended). So `base - A = (S - A) + (now - t_seen) <= (t_S - t_A) + (now - t_S)`,
//! which is `now - t_A`. Only a committed, applied entry lends its instant: an entry appended
//! here and then replaced (a deposed leader's) could carry a stamp from a clock that the
//! committed history did not follow. `LeaseTable::apply` taking the max keeps stamps from going
//! back.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's, not std's: the same monotonic clock in a node, and the simulation's virtual one when
// it runs the real stamping on tokio's paused clock.
use tokio::time::Instant;

use super::peer_link::PeerLink;
use crate::raft::{NodeId, StampSeen};

/// How long a new leader waits for its peers' carried times before its first stamp. Any answer
/// only adds time a peer measured, so one that comes later is not needed for safety; the wait
/// is short, since a partitioned peer answers never and holds up the term's first write.
pub const PEER_CARRY_WAIT: Duration = Duration::from_millis(200);

/// Where a new term's stamps start: `applied_now_ms`, the store time applied here, plus the time
/// this node's monotonic clock has measured since the entry that brought that time was appended
/// here, when `seen` says so for this process; `applied_now_ms` alone otherwise.
pub fn carried_base(applied_now_ms: u64, seen: Option<StampSeen>, now: Instant) -> u64 {
    match seen {
        Some(seen) if seen.ms == applied_now_ms => {
            let since = now.saturating_duration_since(seen.at).as_millis();
            applied_now_ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX))
        }
        _ => applied_now_ms,
    }
}

/// What the `peers` (id to peer address) answer when asked for the store time they carry: each
/// answer, or why there was none. Waits until `needed` of them answered, or all did, or
/// [`PEER_CARRY_WAIT`] passed.
pub async fn ask_peers(
    link: &Arc<dyn PeerLink>,
    peers: BTreeMap<NodeId, String>,
    needed: usize,
) -> BTreeMap<NodeId, Result<u64, String>> {
    let deadline = tokio::time::Instant::now() + PEER_CARRY_WAIT;
    let mut asking = tokio::task::JoinSet::new();
    for (peer, addr) in peers {
        let answer = link.carried_time(peer, addr, PEER_CARRY_WAIT);
        asking.spawn(async move { (peer, answer.await) });
    }
    let mut answers = BTreeMap::new();
    let mut answered = 0;
    while answered < needed {
        match tokio::time::timeout_at(deadline, asking.join_next()).await {
            Ok(Some(Ok((peer, answer)))) => {
                answered += usize::from(answer.is_ok());
                answers.insert(peer, answer);
            }
            // A task that panicked carries no answer; the others still may.
            Ok(Some(Err(_))) => {}
            Ok(None) | Err(_) => break,
        }
    }
    answers
}

/// Where this term's stamps start from.
#[derive(Clone, Copy)]
struct TermBase {
    term: u64,
    base_ms: u64,
    since: Instant,
    /// The last stamp handed out, so stamps never go backwards even if `Instant` were to.
    last_ms: u64,
}

#[derive(Default)]
pub struct LeaderClock {
    base: Mutex<Option<TermBase>>,
    /// Held while a term's base is being found, so that the writes arriving together at a new
    /// leader ask its peers once, not once each.
    starting: tokio::sync::Mutex<()>,
}

impl LeaderClock {
    /// A stamp for a command proposed in `term`, or `None` when the clock has not been started
    /// for that term yet (see [`LeaderClock::start_term`]).
    pub fn stamp(&self, term: u64) -> Option<u64> {
        let mut guard = self.base.lock().unwrap_or_else(|p| p.into_inner());
        let base = guard.as_mut().filter(|b| b.term == term)?;
        let elapsed_ms = u64::try_from(base.since.elapsed().as_millis()).unwrap_or(u64::MAX);
        base.last_ms = base.last_ms.max(base.base_ms.saturating_add(elapsed_ms));
        Some(base.last_ms)
    }

    /// Held while this node finds a new term's base: whoever holds it next finds the term
    /// started.
    pub async fn starting(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.starting.lock().await
    }

    /// Starts stamping for `term` from `applied_now_ms`, the store time once every entry before
    /// this term is applied. A second call for the same term keeps the first base.
    pub fn start_term(&self, term: u64, applied_now_ms: u64) -> u64 {
        let mut guard = self.base.lock().unwrap_or_else(|p| p.into_inner());
        match guard.as_ref() {
            Some(base) if base.term >= term => {}
            _ => {
                *guard = Some(TermBase {
                    term,
                    base_ms: applied_now_ms,
                    since: Instant::now(),
                    last_ms: applied_now_ms,
                })
            }
        }
        drop(guard);
        self.stamp(term).unwrap_or(applied_now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::forwarder::{Answer, Forwarded};
    use std::future::Future;
    use std::pin::Pin;

    /// Peers that answer their carried time at once, fail at once, or never answer.
    struct Peers(BTreeMap<NodeId, Option<Result<u64, String>>>);

    impl PeerLink for Peers {
        fn propose(
            &self,
            _: NodeId,
            _: String,
            _: Vec<Forwarded>,
        ) -> Pin<Box<dyn Future<Output = Vec<Answer>> + Send>> {
            unreachable!("only carried times are asked")
        }

        fn carried_time(
            &self,
            peer: NodeId,
            _: String,
            _: Duration,
        ) -> Pin<Box<dyn Future<Output = Result<u64, String>> + Send>> {
            match self.0[&peer].clone() {
                Some(answer) => Box::pin(std::future::ready(answer)),
                None => Box::pin(std::future::pending()),
            }
        }
    }

    fn addresses(ids: &[NodeId]) -> BTreeMap<NodeId, String> {
        ids.iter().map(|id| (*id, format!("node-{id}"))).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn peers_are_asked_until_enough_answered_and_no_longer_than_the_wait() {
        let link: Arc<dyn PeerLink> = Arc::new(Peers(BTreeMap::from([
            (2, Some(Ok(5_000))),
            (3, Some(Err("connection refused".to_owned()))),
            (4, None),
            (5, Some(Ok(7_000))),
        ])));
        let began = tokio::time::Instant::now();
        let answers = ask_peers(&link, addresses(&[2, 3, 4, 5]), 2).await;
        assert_eq!(began.elapsed(), Duration::ZERO, "two answered at once");
        assert_eq!(answers[&2], Ok(5_000));
        assert_eq!(answers[&5], Ok(7_000));
        assert!(answers[&3].is_err(), "a refusal is no answer: {answers:?}");

        let answers = ask_peers(&link, addresses(&[2, 3, 4, 5]), 3).await;
        assert_eq!(
            began.elapsed(),
            PEER_CARRY_WAIT,
            "a third answer never comes: the wait ends at its limit"
        );
        assert_eq!(answers.len(), 3, "node 4 never answered: {answers:?}");

        let answers = ask_peers(&link, addresses(&[2, 3]), 2).await;
        assert_eq!(
            began.elapsed(),
            PEER_CARRY_WAIT,
            "everyone asked has answered or failed: no wait"
        );
        assert_eq!(answers.len(), 2);
    }

    #[test]
    fn stamps_start_at_the_applied_time_and_follow_the_monotonic_clock() {
        let clock = LeaderClock::default();
        assert_eq!(
            clock.stamp(3),
            None,
            "no stamps before the term's clock starts"
        );
        let first = clock.start_term(3, 10_000);
        assert!((10_000..10_050).contains(&first), "{first}");
        std::thread::sleep(Duration::from_millis(30));
        let later = clock.stamp(3).unwrap();
        assert!(
            later >= first + 30,
            "time elapsed must be counted: {first} then {later}"
        );
        // Real time elapsed bounds the stamps: never faster than the monotonic clock.
        assert!(later <= 10_000 + 1_000, "{later}");
    }

    #[test]
    fn a_new_base_carries_the_time_measured_since_the_newest_stamp_was_applied() {
        let applied_at = Instant::now();
        let seen = Some(StampSeen {
            ms: 7_000,
            at: applied_at,
        });
        let later = applied_at + Duration::from_millis(2_500);
        assert_eq!(carried_base(7_000, seen, later), 9_500);
        assert_eq!(
            carried_base(7_000, seen, applied_at),
            7_000,
            "nothing measured, nothing added"
        );
    }

    #[test]
    fn without_an_instant_for_the_applied_time_the_base_is_the_applied_time() {
        let now = Instant::now();
        assert_eq!(carried_base(7_000, None, now), 7_000, "after a restart");
        let older = Some(StampSeen {
            ms: 6_000,
            at: now - Duration::from_secs(10),
        });
        assert_eq!(
            carried_base(7_000, older, now),
            7_000,
            "the applied time came another way (a snapshot): nothing is carried"
        );
    }

    #[test]
    fn a_new_term_continues_from_the_applied_time_not_the_wall_clock() {
        let clock = LeaderClock::default();
        clock.start_term(1, 5_000);
        assert_eq!(
            clock.stamp(2),
            None,
            "a stamp from an old term's base is never reused"
        );
        let second = clock.start_term(2, 7_000);
        assert!((7_000..7_050).contains(&second), "{second}");
        // A late call for an older term does not move the base back.
        clock.start_term(1, 0);
        assert!(clock.stamp(2).unwrap() >= second);
    }
}
