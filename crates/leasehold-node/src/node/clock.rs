//! The leader's stamping of store time.
//!
//! Store time is replicated state: it moves only through logged commands. The leader stamps each
//! command it proposes with a base store time plus what has been measured since it took that
//! base: by its own clock, held to what a majority of the voters' clocks measured (issue 42,
//! below). A new leader takes its base only after every entry of earlier terms is applied.
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
//! *Within a term*, with right clocks, stamps move as real time does from the base on, and `T`
//! is the largest stamp so far. How, when a clock lies, is the next invariant.
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
//!
//! **Issue 42: store time never advances faster than the clocks of a majority.** All of the
//! above stands on the clocks being right: one leader whose clock ran at 2x ended every lease
//! at half its TTL. Now the leader reads each voter's clock every [`CLOCK_PROBE_LEADING`]
//! (`clock_probe`; the readings, `peer_clocks`) and a stamp at its clock reading `t` is
//! (`quorum_time`):
//!
//! ```text
//! T(t) = max(T_last, min(T_last + pace * (t - t_last), T_last + G(t_last, t)))
//! ```
//!
//! - `G(t_last, t)` is the majority-th largest of what each voter's clock measured between
//!   the two stamps: this node's own `t - t_last`, and each peer's read `CLOCK_TRAIL` behind
//!   (evenly between readings; jumps and restarts count nothing). A term's first stamps read
//!   the peers from `CLOCK_TRAIL` before the term began, over the readings the node took as a
//!   follower: that window is as long as what this clock measured since the base, so it only
//!   bounds the same advance (the base carried the time up to it), and the stamps follow real
//!   time at once instead of standing still for the trail at every change of leader. With at
//!   most a minority of clocks wrong at each moment (one of three, two of five), at least one
//!   right clock measured at least `G`, and a right peer's reading was taken before the leader
//!   received it. Only each moment's minority: the rule once bounded the stamps by what a majority
//!   measured *since the term's base*, which asks the same minority to have been wrong all
//!   term. A follower whose clock ran fast for a while stays ahead since the base, and when
//!   the leader's own then sped up, two of three were ahead (a fault run: a grant 23 ms early);
//!   a follower restarted in the term stays behind, and when another's clock then slowed, two
//!   were behind (leases 0.6-0.9 s past their TTL).
//! - `pace` slows or speeds the leader's clock to the majority's rate. It is 1 unless the
//!   readings show for sure that this clock is off (the majority's bounds on its rate against
//!   the voters' all above 1, or all below: a loaded machine's round trips loosen them, and a
//!   right clock is left alone), and then one over the majority-th largest of those rates at
//!   their upper bounds (a peer read its clock somewhere within each round trip). A right
//!   peer's bound is at least this clock's true rate, so `pace * (t - t_last)` is at most the
//!   real time elapsed once the rate is known: stamps move no faster than real time, and a
//!   slow leader's do not fall behind.
//! - Time a stamp could not take is lost, never caught up: catching up would end early the
//!   leases granted before. So the within-term inequality holds with a right clock at the
//!   leader, and with a wrong one once its rate is measured (over [`CLOCK_RATE_SPAN`]); until
//!   then `G` holds it. What is left: the peers are read `CLOCK_TRAIL` of real time behind (on
//!   the leader's clock at the known pace), and in the moment a leader's clock changes rate,
//!   until the readings show it, that trail is counted at the old pace: it shrinks by up to
//!   its rate's worth, and store time may gain as much on real time, up to `CLOCK_TRAIL`, once.
//!   And a peer's readings are read between their answers as if its clock ran evenly between
//!   them: one answered late and the next early runs fast by the difference, and beside the
//!   leader's own clock speeding up, that is a majority for the moment (the fault suite's
//!   store-time checker allows the grant margin once a clock fault was injected). No stamping
//!   avoids some such gain: between two readings only the leader's clock measures, and stamps held
//!   to the readings alone would move in steps a reading's round trip apart, which a grant
//!   stamped at a step's top loses. So a lease does not pay for it: the leader logs every
//!   grant and renewal held `Limits::GRANT_MARGIN_MS` (150 ms: `quorum_time`'s tests measure
//!   up to 85 ms with answers 1-250 ms late) longer than asked (`Op::held_longer`, in
//!   `write`), and a lease in flight across the gain still lives its TTL. A forward jump of
//!   the leader's clock gains no more, by `G`; after a backward one the clock counts on from
//!   where it stood (`Stamping::trail_at`).
//! - Where not every voter answers for its clock (a member of an older build, mid-upgrade),
//!   the leader's clock alone moves the stamps, as before issue 42, and `G` bounds them again
//!   from the first stamp after they all do. A voter that stopped answering still counts
//!   as answering (by what it announced last): its clock then measures nothing more, so `G` is
//!   what the answering majority measured.
//!
//! Across terms, each answer's time measured since the newest stamp is corrected to the
//! majority's rate by what the new leader knows of that node's clock, and a peer's that jumped
//! lately is left out ([`term_base`]); the leader's own counts unless its clock jumped since
//! that stamp, or it cannot tell (one peer of two seemed to jump: theirs or its own?), as
//! `Node::carried_time` decides on fresh readings. One that jumped seconds before the stamp
//! measured nothing across the jump (left out too, a 2 s lease lived 2.93 s across a leader
//! kill in a fault run). And an odd clock is kept from leading: a node whose rate
//! differs from the majority's by more than `ODD_CLOCK_RATE`, or whose clock jumped, names
//! itself in `status` and the metrics, does not campaign and steps down if it leads, handing
//! over to a voter whose clock is right (`clock_probe`, `hand_over`).

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// tokio's, not std's: the same monotonic clock in a node, and the simulation's virtual one when
// it runs the real stamping on tokio's paused clock.
use tokio::time::Instant;

use super::link::{Carried, PeerLink};
use super::local_clock::LocalClock;
use super::peer_clocks::PeerClocks;
use super::quorum_time::{self, Allowance, Stamping};
use crate::limits::PEER_CARRY_WAIT;
#[cfg(doc)]
use crate::limits::{CLOCK_PROBE_LEADING, CLOCK_RATE_SPAN};
use crate::raft::{LogId, StampSeen};
use crate::NodeId;

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

/// Where a new term's stamps start: the largest of `carried` (this node's and its peers'
/// answers) that counts, each corrected to the majority's clock rate, or `applied_ms`, the
/// store time this node applied, if none does. Each comes with the factor that corrects what
/// its node's clock measured since the newest stamp (the part past `applied_ms`: a node that
/// counts applied the same entry, so the same time): 0.5 for a clock known to run at twice the
/// majority's, 1 for one known right or not known yet (it went odd within the last second or
/// so, and counts as every answer did before issue 42), `None` for a peer's that jumped lately.
pub fn term_base<'a>(
    applied_ms: u64,
    oldest: Option<LogId>,
    carried: impl IntoIterator<Item = (&'a Carried, Option<f64>)>,
) -> u64 {
    (carried.into_iter())
        .filter(|(carried, _)| counts(carried, oldest))
        .filter_map(|(carried, scale)| {
            let measured = carried.ms.saturating_sub(applied_ms) as f64;
            Some(applied_ms.saturating_add((measured * scale?) as u64))
        })
        .fold(applied_ms, u64::max)
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

/// Where this term's stamps stand.
#[derive(Clone)]
struct TermBase {
    term: u64,
    stamping: Stamping,
}

/// The voters whose clocks bound the stamps (see `quorum_time`).
#[derive(Default)]
struct Voters {
    /// The other voters.
    peers: Vec<NodeId>,
    /// All voters, this node counted in.
    count: usize,
    /// Whether every voter answers for its clock: else (a mixed cluster during an upgrade, or
    /// before the first round of readings) this node's clock alone decides, as before.
    all_answer: bool,
}

#[derive(Default)]
pub struct LeaderClock {
    /// The clock stamps count on: this node's own (see `local_clock`).
    local: LocalClock,
    /// What this node read of its peers' clocks (see `clock_probe`).
    peers: Mutex<PeerClocks>,
    voters: Mutex<Voters>,
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
        let now = self.local.now();
        Some(
            base.stamping
                .stamp(now, |own, trail| self.allowance(own, now, trail)),
        )
    }

    /// What the voters' clocks allow a stamp at `now` on this node's clock, which measured
    /// `own` since the last stamp, the peers' clocks read over `trail`.
    fn allowance(&self, own: Duration, now: Duration, trail: Range<Duration>) -> Allowance {
        let voters = self.voters.lock().unwrap_or_else(|p| p.into_inner());
        if !voters.all_answer {
            return Allowance::OWN_CLOCK;
        }
        let peers = self.peers.lock().unwrap_or_else(|p| p.into_inner());
        quorum_time::allowance(&peers, &voters.peers, voters.count, own, now, trail)
    }

    /// The voters whose clocks bound the stamps from now on: `peers` and this node, and whether
    /// every one of them answers for its clock.
    pub fn set_voters(&self, peers: Vec<NodeId>, all_answer: bool) {
        let count = peers.len() + 1;
        *self.voters.lock().unwrap_or_else(|p| p.into_inner()) = Voters {
            peers,
            count,
            all_answer,
        };
    }

    /// What this node read of its peers' clocks.
    pub fn peer_clocks(&self) -> std::sync::MutexGuard<'_, PeerClocks> {
        self.peers.lock().unwrap_or_else(|p| p.into_inner())
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
                let since = self.local.now();
                *guard = Some(TermBase {
                    term,
                    stamping: Stamping::new(applied_now_ms, since),
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

        fn etcd_read(
            &self,
            _: NodeId,
            _: String,
            _: OnBehalf,
            _: crate::node::link::EtcdRead,
        ) -> crate::node::link::EtcdReadAnswering {
            unreachable!("only carried times are asked")
        }

        fn clock_reading(
            &self,
            _: NodeId,
            _: String,
            _: Duration,
        ) -> Pin<Box<dyn Future<Output = Result<crate::node::ClockReading, String>> + Send>>
        {
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
        let right = |c| (c, Some(1.0));
        let carried_here = [&own, &behind, &caught_up, &from_nothing].map(right);
        assert_eq!(term_base(10_000, oldest, carried_here), 10_400);
        // A leader with no instant of its own (its state came in a snapshot) counts only an
        // answer from its last applied entry.
        let bare = Carried {
            ms: 10_000,
            from: None,
        };
        let oldest = counts_from(bare, Some(entry(1, 12)));
        let answers = [&behind, &caught_up].map(right);
        assert_eq!(term_base(10_000, oldest, answers), 10_400);
        assert_eq!(
            term_base(10_000, oldest, [right(&carried(10_200, 11))]),
            10_000
        );
    }

    #[test]
    fn a_clock_known_to_be_odd_is_corrected_to_the_majoritys_rate_or_left_out() {
        // The grant applied at 10_000; right clocks measured about 500 ms since, a clock
        // known to run at twice the majority's 1_000, one that jumped 10_500.
        let oldest = Some(entry(1, 12));
        let (right, fast, jumped) = (
            carried(10_500, 12),
            carried(11_000, 12),
            carried(20_500, 12),
        );
        let known = [(&right, Some(1.0)), (&fast, Some(0.5)), (&jumped, None)];
        assert_eq!(term_base(10_000, oldest, known), 10_500);
        let not_yet = [(&right, Some(1.0)), (&fast, Some(1.0))];
        assert_eq!(term_base(10_000, oldest, not_yet), 11_000, "not known yet");
        assert_eq!(
            term_base(10_000, oldest, [(&jumped, None)]),
            10_000,
            "the applied time, when no answer may count"
        );
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

    /// `peers` answer a reading every 25 ms for `ms`, 1 ms after it is asked, their clocks
    /// running at real speed (tokio's, whatever this node's own does) from this call on.
    async fn read_peers(clock: &LeaderClock, peers: &[NodeId], ms: u64) {
        let origin = Instant::now();
        for _ in (0..ms).step_by(25) {
            let asked = clock.local().now();
            tokio::time::advance(Duration::from_millis(1)).await;
            let answered = clock.local().now();
            for peer in peers {
                let micros = u64::try_from(origin.elapsed().as_micros()).unwrap() + 1_000_000_000;
                let reading = crate::node::ClockReading { process: 7, micros };
                clock.peer_clocks().record(*peer, asked, answered, reading);
            }
            tokio::time::advance(Duration::from_millis(24)).await;
            clock.stamp(1).unwrap();
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_whose_clock_jumps_back_at_the_terms_start_stamps_on_with_one_peer_answering()
    {
        // Three voters, one down: this node and peer 2 are the majority.
        let clock = LeaderClock::default();
        clock.set_voters(vec![2, 3], true);
        let base = clock.start_term(1, 10_000);
        clock
            .local()
            .set(crate::node::local_clock::RATE_REAL, -10_000);
        read_peers(&clock, &[2], 1_000).await;
        let later = clock.stamp(1).unwrap();
        assert!(later >= base + 700, "{base} then {later} a second later");
    }

    #[tokio::test(start_paused = true)]
    async fn stamps_bounded_by_the_voters_again_go_on_from_the_last_stamp_without_stopping() {
        // A voter unheard from: the stamps go by this node's clock alone for 2 s.
        let clock = LeaderClock::default();
        clock.set_voters(vec![2, 3], false);
        let base = clock.start_term(1, 10_000);
        tokio::time::advance(Duration::from_secs(2)).await;
        let alone = clock.stamp(1).unwrap();
        assert_eq!(alone, base + 2_000);
        // Every voter answers again: its readings bound the stamps, from here on.
        clock.set_voters(vec![2, 3], true);
        read_peers(&clock, &[2, 3], 1_000).await;
        let bounded = clock.stamp(1).unwrap();
        assert!(
            bounded >= alone + 800 && bounded <= alone + 1_000,
            "{alone} then {bounded} a second later"
        );
    }
}
