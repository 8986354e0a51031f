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
//! leader also asks its peers for theirs ([`ask_peers`]) and starts from the largest that counts
//! ([`term_base`]): a leader killed and restarted that wins the next election would otherwise
//! start from the applied time alone and not count its own downtime, which its followers did
//! count (leases then lasted their TTL plus that downtime).
//!
//! **The invariant: store time minus real time never grows along the log.** Write `T(e)` for the
//! store time once entry `e` is applied, `s(e)` for the real time its stamp was taken and `a(e)`
//! for when its leader appended it (`s(e) <= a(e)`). For entries `A` before `B` in the log:
//!
//! ```text
//! T(B) - T(A) <= a(B) - s(A)
//! ```
//!
//! A lease granted by `A` expires once store time reaches `T(A) + TTL`, so it stays granted at
//! least `TTL` after `s(A)`, which is no earlier than its acquire was sent. (`leasehold-check`'s
//! `store_time_follows_real_time` judges the same inequality from the clients' side, with the
//! send and the answer in place of `s` and `a`.)
//!
//! *Within a term* stamps are `base + (t - t_base)` on one monotonic clock, so two stamps differ
//! by the real time between them, and `T` is the largest stamp so far.
//!
//! *Across terms.* A new term's base is `T(e) + (now - t_seen(e))` for an entry `e` applied at
//! the node that answered, where `t_seen(e) >= a(e)` is when that node appended `e`. A stamp `C`
//! of the new term then has `T(C) - T(A) = (T(e) - T(A)) + (s(C) - t_seen(e))`, which is at most
//! `(a(e) - s(A)) + (s(C) - a(e)) = s(C) - s(A)` by the inequality for `A` before `e`. That step
//! needs `A` before (or at) `e` for every committed `A`: `e` must be the newest entry that
//! carried a stamp, not just any entry the node applied. So:
//! - every stamped entry refreshes the node's instant, also one whose stamp equals the time
//!   before it (else `e` is older than a grant stamped with that same time);
//! - an install drops the instant (the snapshot brought entries newer than it);
//! - a peer's answer names its `e`, and counts only if that entry is at least as new as the
//!   leader's own: a peer cut off before the latest grants carries the lead of an older entry,
//!   and store time under-counted since (a majority's restart, say) would come back as time
//!   run ahead of real time, expiring those grants early.
//!
//! The leader takes its base after `confirm_leadership`, so it applied every committed entry
//! of earlier terms; a peer cannot have applied a stamped entry the leader has not. Only a
//! committed, applied entry lends its instant: an entry appended here and then replaced (a
//! deposed leader's) could carry a stamp from a clock that the committed history did not
//! follow. Losing time (an instant taken late, a restart, a base from the applied time alone)
//! only makes leases last longer, never shorter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's, not std's: the same monotonic clock in a node, and the simulation's virtual one when
// it runs the real stamping on tokio's paused clock.
use tokio::time::Instant;

use super::link::{Carried, PeerLink};
use super::local_clock::LocalClock;
use crate::limits::PEER_CARRY_WAIT;
use crate::raft::{LogId, NodeId, StampSeen};

/// What a node carries: `applied_now_ms`, the store time applied here, plus the time this
/// node's own clock has measured (`measured`, since an instant) since the entry that brought
/// that time was appended here, when `seen` says so for this process; `applied_now_ms` alone
/// otherwise.
pub fn carried_base(
    applied_now_ms: u64,
    seen: Option<StampSeen>,
    measured: impl FnOnce(Instant) -> Duration,
) -> Carried {
    match seen {
        Some(seen) if seen.ms == applied_now_ms => {
            let since = measured(seen.at).as_millis();
            Carried {
                ms: applied_now_ms.saturating_add(u64::try_from(since).unwrap_or(u64::MAX)),
                from: Some(seen.entry),
            }
        }
        _ => Carried {
            ms: applied_now_ms,
            from: None,
        },
    }
}

/// The oldest entry a peer's answer may count from for a leader that carries `own` with
/// `applied` applied: its own entry, or, where it has none, its last applied entry (a peer
/// cannot name a newer stamped one, so only an answer from exactly that entry counts).
pub fn counts_from(own: Carried, applied: Option<LogId>) -> Option<LogId> {
    own.from.or(applied)
}

/// Whether a peer's answer may raise the base of a leader whose answers must count from
/// `oldest` (see [`counts_from`] and the invariant above).
pub fn counts(answer: &Carried, oldest: Option<LogId>) -> bool {
    answer.from.is_some() && answer.from >= oldest
}

/// Where a new term's stamps start: the largest of `own` and the `answers` that count.
pub fn term_base<'a>(
    own: Carried,
    oldest: Option<LogId>,
    answers: impl IntoIterator<Item = &'a Carried>,
) -> u64 {
    answers
        .into_iter()
        .filter(|answer| counts(answer, oldest))
        .fold(own.ms, |base, answer| base.max(answer.ms))
}

/// What the `peers` (id to peer address) answer when asked for the store time they carry: each
/// answer, or why there was none. Waits until `needed` of them gave an answer that
/// [`counts`] from `oldest`, or all answered, or [`PEER_CARRY_WAIT`] passed.
pub async fn ask_peers(
    link: &Arc<dyn PeerLink>,
    peers: BTreeMap<NodeId, String>,
    needed: usize,
    oldest: Option<LogId>,
) -> BTreeMap<NodeId, Result<Carried, String>> {
    let deadline = tokio::time::Instant::now() + PEER_CARRY_WAIT;
    let mut asking = tokio::task::JoinSet::new();
    for (peer, addr) in peers {
        let answer = link.carried_time(peer, addr, oldest, PEER_CARRY_WAIT);
        asking.spawn(async move { (peer, answer.await) });
    }
    let mut answers = BTreeMap::new();
    let mut answered = 0;
    while answered < needed {
        match tokio::time::timeout_at(deadline, asking.join_next()).await {
            Ok(Some(Ok((peer, answer)))) => {
                answered += usize::from(answer.as_ref().is_ok_and(|a| counts(a, oldest)));
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
    /// The local clock's reading when the base was taken.
    since: Duration,
    /// The last stamp handed out, so stamps never go backwards even if the local clock were to.
    last_ms: u64,
}

#[derive(Default)]
pub struct LeaderClock {
    /// The clock stamps count on: this node's own (see `local_clock`).
    local: LocalClock,
    base: Mutex<Option<TermBase>>,
    /// Held while a term's base is being found, so that the writes arriving together at a new
    /// leader ask its peers once, not once each.
    starting: tokio::sync::Mutex<()>,
    /// Whether a fresh stamp for the followers to carry is being logged (see
    /// [`CARRY_REFRESH_AFTER`]): one at a time, however many slow writes asked for it.
    refreshing: AtomicBool,
    /// Whether a slow write asked for a refresh while one was being logged: it may have been
    /// stamped after that one, so another follows.
    again: AtomicBool,
}

impl LeaderClock {
    /// A stamp for a command proposed in `term`, or `None` when the clock has not been started
    /// for that term yet (see [`LeaderClock::start_term`]).
    pub fn stamp(&self, term: u64) -> Option<u64> {
        let mut guard = self.base.lock().unwrap_or_else(|p| p.into_inner());
        let base = guard.as_mut().filter(|b| b.term == term)?;
        let elapsed = self.local.now().saturating_sub(base.since);
        let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
        base.last_ms = base.last_ms.max(base.base_ms.saturating_add(elapsed_ms));
        Some(base.last_ms)
    }

    /// Held while this node finds a new term's base: whoever holds it next finds the term
    /// started.
    pub async fn starting(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.starting.lock().await
    }

    /// Claims the one refresh of the followers' carried time that may be in flight: false when
    /// one already is, which asks it to log another after its own ([`LeaderClock::asked_again`]).
    /// [`LeaderClock::refreshed`] ends it.
    pub fn claim_refresh(&self) -> bool {
        let claimed = !self.refreshing.swap(true, Ordering::AcqRel);
        if !claimed {
            self.again.store(true, Ordering::Release);
        }
        claimed
    }

    /// Whether a refresh was asked for while the claimed one was logged; clears the request.
    pub fn asked_again(&self) -> bool {
        self.again.swap(false, Ordering::AcqRel)
    }

    /// The clock this node's stamps and carried time count on.
    pub fn local(&self) -> &LocalClock {
        &self.local
    }

    /// The refresh claimed with [`LeaderClock::claim_refresh`] is over.
    pub fn refreshed(&self) {
        self.refreshing.store(false, Ordering::Release);
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
                    since: self.local.now(),
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
    use crate::node::link::{Carried, ForwardAnswer, Forwarded, OnBehalf, Read, ReadAnswer};
    use std::future::Future;
    use std::pin::Pin;
    use std::time::Duration;

    /// Peers that answer their carried time at once, fail at once, or never answer.
    struct Peers(BTreeMap<NodeId, Option<Result<Carried, String>>>);

    impl PeerLink for Peers {
        fn propose(
            &self,
            _: NodeId,
            _: String,
            _: Vec<Forwarded>,
        ) -> Pin<Box<dyn Future<Output = Vec<ForwardAnswer>> + Send>> {
            unreachable!("only carried times are asked")
        }

        fn carried_time(
            &self,
            peer: NodeId,
            _: String,
            _: Option<LogId>,
            _: Duration,
        ) -> Pin<Box<dyn Future<Output = Result<Carried, String>> + Send>> {
            match self.0[&peer].clone() {
                Some(answer) => Box::pin(std::future::ready(answer)),
                None => Box::pin(std::future::pending()),
            }
        }

        fn read(&self, _: NodeId, _: String, _: OnBehalf, _: Read) -> ReadAnswer {
            unreachable!("only carried times are asked")
        }

        fn hand_over(
            &self,
            _: NodeId,
            _: String,
            _: openraft::Vote<NodeId>,
            _: NodeId,
            _: Duration,
        ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
            unreachable!("only carried times are asked")
        }

        fn status(
            &self,
            _: NodeId,
            _: String,
        ) -> Pin<Box<dyn Future<Output = crate::proto::v1::NodeStatus> + Send>> {
            unreachable!("only carried times are asked")
        }
    }

    fn addresses(ids: &[NodeId]) -> BTreeMap<NodeId, String> {
        ids.iter().map(|id| (*id, format!("node-{id}"))).collect()
    }

    fn entry(term: u64, index: u64) -> LogId {
        LogId::new(openraft::CommittedLeaderId::new(term, 1), index)
    }

    /// `ms` carried from the entry at `index` (of term 1).
    fn carried(ms: u64, index: u64) -> Carried {
        Carried {
            ms,
            from: Some(entry(1, index)),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn peers_are_asked_until_enough_answers_count_and_no_longer_than_the_wait() {
        let link: Arc<dyn PeerLink> = Arc::new(Peers(BTreeMap::from([
            (2, Some(Ok(carried(5_000, 10)))),
            (3, Some(Err("connection refused".to_owned()))),
            (4, None),
            (5, Some(Ok(carried(7_000, 10)))),
            (6, Some(Ok(carried(60_000, 8)))),
        ])));
        let oldest = Some(entry(1, 10));
        let began = tokio::time::Instant::now();
        let answers = ask_peers(&link, addresses(&[2, 3, 4, 5]), 2, oldest).await;
        assert_eq!(began.elapsed(), Duration::ZERO, "two answered at once");
        assert_eq!(answers[&2], Ok(carried(5_000, 10)));
        assert_eq!(answers[&5], Ok(carried(7_000, 10)));
        assert!(answers[&3].is_err(), "a refusal is no answer: {answers:?}");

        let answers = ask_peers(&link, addresses(&[2, 4, 6]), 2, oldest).await;
        assert_eq!(
            began.elapsed(),
            PEER_CARRY_WAIT,
            "node 6 answered from an older entry, which does not count: the wait ends at its limit"
        );
        assert_eq!(answers.len(), 2, "node 4 never answered: {answers:?}");

        let answers = ask_peers(&link, addresses(&[2, 3]), 2, oldest).await;
        assert_eq!(
            began.elapsed(),
            PEER_CARRY_WAIT,
            "everyone asked has answered or failed: no wait"
        );
        assert_eq!(answers.len(), 2);
    }

    #[test]
    fn a_peer_that_has_not_applied_the_newest_stamp_does_not_raise_the_base() {
        // The leader applied the grant at index 12; node 5 was cut off at index 8, and has
        // counted real time since on top of a store time that ran ahead of the cluster's.
        let own = carried(10_300, 12);
        let oldest = counts_from(own, Some(entry(2, 13)));
        let behind = carried(75_800, 8);
        let caught_up = carried(10_400, 12);
        let from_nothing = Carried {
            ms: 90_000,
            from: None,
        };
        assert_eq!(
            term_base(own, oldest, [&behind, &caught_up, &from_nothing]),
            10_400
        );
        // A leader with no instant of its own (its state came in a snapshot) counts only an
        // answer from its last applied entry.
        let bare = Carried {
            ms: 10_000,
            from: None,
        };
        let oldest = counts_from(bare, Some(entry(1, 12)));
        assert_eq!(term_base(bare, oldest, [&behind, &caught_up]), 10_400);
        assert_eq!(term_base(bare, oldest, [&carried(10_200, 11)]), 10_000);
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
            entry: entry(1, 4),
            at: applied_at,
        });
        let later = applied_at + Duration::from_millis(2_500);
        assert_eq!(
            carried_base(7_000, seen, |at| later - at),
            carried(9_500, 4)
        );
        assert_eq!(
            carried_base(7_000, seen, |at| applied_at - at),
            carried(7_000, 4),
            "nothing measured, nothing added"
        );
    }

    #[test]
    fn without_an_instant_for_the_applied_time_the_base_is_the_applied_time() {
        let now = Instant::now();
        let bare = Carried {
            ms: 7_000,
            from: None,
        };
        assert_eq!(
            carried_base(7_000, None, |at| now - at),
            bare,
            "after a restart"
        );
        let older = Some(StampSeen {
            ms: 6_000,
            entry: entry(1, 4),
            at: now - Duration::from_secs(10),
        });
        assert_eq!(
            carried_base(7_000, older, |at| now - at),
            bare,
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
