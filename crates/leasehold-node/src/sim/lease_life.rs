//! Scenarios of a lease's life across faults, each one fault sequence built by hand: a lease
//! must be free about its TTL after its acquire was sent, across a restarted leader, a member
//! cut off across a majority restart, a grant slow to replicate, and a leader cut off from its
//! quorum.

use std::time::Duration;

use leasehold_check::{Answer, Completion};
use leasehold_core::{Limits, Op, Outcome};
use tokio::time::Instant;

use super::clients::{plain_put, write};
use super::cluster::{any_leader, last_log_index, paused_runtime, until_leader, Sim};
use crate::limits::QUORUM_SILENCE;
use crate::node::INDETERMINATE_KEY;

/// The lease a leader grants just before it dies, and how long it lasts when that same leader
/// comes back after `down` and leads again before anyone else does.
const CARRIED_TTL: Duration = Duration::from_secs(2);

/// An acquire of the probe lease for `holder`, for [`CARRIED_TTL`].
fn probe_acquire(holder: &str) -> Op {
    Op::Acquire {
        lease: "probe".into(),
        holder: holder.into(),
        ttl_ms: CARRIED_TTL.as_millis() as u64,
    }
}

/// `count` nodes started with `seed`, and their first leader, once a first write has started
/// the store's clock.
async fn clocked(count: u64, seed: u64) -> (Sim, u64) {
    let sim = Sim::start(count, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = write(&sim, a, plain_put("start").op, None, deadline).await;
    assert!(matches!(first, Completion::Ok { .. }), "{first:?}");
    (sim, a)
}

/// A leader grants a lease and dies. Its followers do not campaign here, so it leads again once
/// it restarts, `down` later. The restarted process measured nothing of that time; its
/// followers did, on their monotonic clocks, from when they appended the grant. The lease must
/// be free about its TTL after its acquire was sent, not its TTL plus the downtime. The fault
/// suite's lease-life probe caught this twice in CI (3.2 and 3.7 s for a 2 s TTL), when a killed
/// leader, restarted within a second or two, won the next election.
///
/// Returns when the restarted leader led, and when the rival was granted the lease, both since
/// the acquire was sent.
async fn restarted_leader_carries_its_followers_time(
    seed: u64,
    down: Duration,
) -> (Duration, Duration) {
    let (sim, a) = clocked(3, seed).await;
    // The grant comes a second after the first write, so that it moves the store time its
    // followers carry.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let sent = Instant::now();
    let granted = write(
        &sim,
        a,
        probe_acquire("first"),
        None,
        sent + Duration::from_secs(5),
    )
    .await;
    let Completion::Ok { log_index, .. } = granted else {
        panic!("seed {seed}: the first acquire failed: {granted:?}");
    };
    let followers: Vec<u64> = (1..=3).filter(|id| *id != a).collect();
    // Both followers hold the grant, so both measure from it; neither campaigns.
    for &id in &followers {
        while last_log_index(&sim, id) < log_index {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        sim.node(id).unwrap().set_elections(false);
    }
    sim.crash(a).await;
    tokio::time::sleep(down).await;
    sim.boot(a).await;
    let raft_a = sim.raft(a).unwrap();
    if !until_leader(&sim, a, Duration::ZERO).await {
        raft_a.trigger().elect().await.unwrap();
    }
    assert!(
        until_leader(&sim, a, Duration::from_secs(5)).await,
        "seed {seed}: node {a} leads again"
    );
    let leads = sent.elapsed();
    let life = until_granted(
        &sim,
        a,
        probe_acquire("rival"),
        sent,
        Duration::from_secs(30),
        seed,
    )
    .await;
    (leads, life)
}

/// How often [`until_granted`]'s rival asks: often enough that a lease freed a few
/// milliseconds early shows (the simulation's time is virtual, so asking costs no real wait).
const POLL: Duration = Duration::from_millis(2);

/// Polls `rival`, an acquire, at node `via` every [`POLL`] until it is granted; how long after
/// `sent` that was. Panics, naming `seed`, once `limit` has passed since `sent`.
async fn until_granted(
    sim: &Sim,
    via: u64,
    rival: Op,
    sent: Instant,
    limit: Duration,
    seed: u64,
) -> Duration {
    loop {
        let answer = write(
            sim,
            via,
            rival.clone(),
            None,
            Instant::now() + Duration::from_secs(5),
        );
        if let Completion::Ok {
            answer: Answer::Outcome(Outcome::Granted { .. }),
            ..
        } = answer.await
        {
            return sent.elapsed();
        }
        assert!(
            sent.elapsed() < limit,
            "seed {seed}: the lease was never free"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[test]
fn a_restarted_leader_counts_the_time_its_followers_measured_while_it_was_down() {
    for (seed, down) in [(1, 1_000), (2, 3_000), (3, 10_000)] {
        let down = Duration::from_millis(down);
        let (leads, life) =
            paused_runtime().block_on(restarted_leader_carries_its_followers_time(seed, down));
        // Free at its TTL, or as soon as a leader is back if that is later. The grant's stamp
        // follows the send by a message delay or two: 300 ms covers it.
        let due = CARRIED_TTL.max(leads);
        assert!(
            life >= CARRIED_TTL && life <= due + Duration::from_millis(300),
            "seed {seed}: a {CARRIED_TTL:?} lease lived {life:?} across its leader's {down:?} \
             down time (it led again {leads:?} after the acquire was sent)"
        );
    }
}

/// The lease of the stale-member scenario, long enough that an early expiry stands out.
const STALE_TTL: Duration = Duration::from_secs(10);

/// Review of e8637e4, finding 1: a member cut off before the latest grants carries the lead
/// store time had when it was cut off. Five nodes; `s` is isolated while writes flow; the other
/// four lose power for 30 s and restart, so their store time now under-counts real time by
/// those 30 s (a restart has no instant for what it replays). A lease is granted. `s` is back,
/// but its log does not move yet (a snapshot streams to it, say), and the leader dies. The next
/// leader hears `s` first, since its links to the others are slower. `s`'s answer counts from an
/// entry older than the grant: taking it would start the new term 30 s ahead of the grant's
/// time, and the lease would be free at once.
///
/// Returns how long after the acquire was sent a rival was granted the lease.
async fn stale_member_across_a_majority_restart(seed: u64) -> Duration {
    let sim = Sim::start(5, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let stale = if a == 5 { 4 } else { 5 };
    sim.node(stale).unwrap().set_elections(false);
    // A first write starts the store's clock; one a second later moves it, and `s` applies it,
    // so that `s` carries time from then on.
    let deadline = Instant::now() + Duration::from_secs(5);
    let first = write(&sim, a, plain_put("start").op, None, deadline).await;
    assert!(matches!(first, Completion::Ok { .. }), "{first:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deadline = Instant::now() + Duration::from_secs(5);
    let second = write(&sim, a, plain_put("second").op, None, deadline).await;
    let Completion::Ok { log_index, .. } = second else {
        panic!("seed {seed}: {second:?}");
    };
    while sim
        .state(stale)
        .read()
        .last_applied
        .map_or(0, |id| id.index)
        < log_index
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sim.net().isolate(stale, 5);
    for i in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        let put = write(&sim, a, plain_put(&format!("k{i}")).op, None, deadline).await;
        assert!(matches!(put, Completion::Ok { .. }), "{put:?}");
    }
    let majority: Vec<u64> = (1..=5).filter(|id| *id != stale).collect();
    for &id in &majority {
        sim.crash(id).await;
        sim.nodes[&id].log.lose_power();
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    for &id in &majority {
        sim.boot(id).await;
    }
    let first_leader = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("the restarted four elect");
    let acquire = |holder: &str| Op::Acquire {
        lease: "probe".into(),
        holder: holder.into(),
        ttl_ms: STALE_TTL.as_millis() as u64,
    };
    let sent = Instant::now();
    let granted = write(
        &sim,
        first_leader,
        acquire("first"),
        None,
        sent + Duration::from_secs(5),
    )
    .await;
    let Completion::Ok {
        answer: Answer::Outcome(Outcome::Granted { .. }),
        log_index,
        ..
    } = granted
    else {
        panic!("seed {seed}: the first acquire failed: {granted:?}");
    };
    // `s` answers again, but nothing moves its log; the leader dies once the other three hold
    // the grant, so that any of them may lead next.
    let survivors: Vec<u64> = majority
        .iter()
        .copied()
        .filter(|id| *id != first_leader)
        .collect();
    for &id in &survivors {
        while last_log_index(&sim, id) < log_index {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let next = survivors[0];
    {
        let mut net = sim.net();
        net.cut.clear();
        for other in (1..=5).filter(|other| *other != stale) {
            net.stalled.insert((other, stale));
        }
        // Slower than any message to `s`, yet quick enough for openraft's leadership check,
        // which waits a heartbeat interval for the answers.
        for &other in &survivors[1..] {
            net.slow.insert((next, other), Duration::from_millis(20));
        }
    }
    for &other in &survivors[1..] {
        sim.node(other).unwrap().set_elections(false);
    }
    sim.crash(first_leader).await;
    sim.raft(next).unwrap().trigger().elect().await.unwrap();
    assert!(
        until_leader(&sim, next, Duration::from_secs(5)).await,
        "seed {seed}: node {next} leads"
    );
    until_granted(
        &sim,
        next,
        acquire("rival"),
        sent,
        Duration::from_secs(60),
        seed,
    )
    .await
}

#[test]
fn a_member_cut_off_across_a_majority_restart_does_not_run_store_time_ahead() {
    for seed in 1..=3 {
        let life = paused_runtime().block_on(stale_member_across_a_majority_restart(seed));
        // Free at its TTL: the survivors carried the time since the grant. The rival polls
        // every 50 ms, and the leader change takes a few hundred.
        assert!(
            life >= STALE_TTL && life <= STALE_TTL + Duration::from_millis(500),
            "seed {seed}: a {STALE_TTL:?} lease was granted to a rival {life:?} after its \
             acquire was sent"
        );
    }
}

/// A leader grants a lease while its log does not reach its followers: they append the grant
/// 700 ms after it was stamped. The links recover, and the leader dies 1.5 s after the acquire was sent. Its
/// followers carry store time from when they appended the grant, so, with nothing stamped
/// since, the next leader's clock starts the 700 ms behind, and the lease lives its TTL plus
/// that. CI saw it on real processes: a 5 s lease lived 5.9 s across a leader kill, its grant
/// slow to replicate on a loaded machine just after the cluster formed.
///
/// Returns how long after the acquire was sent a rival was granted the lease.
async fn slow_grant_then_leader_killed(seed: u64) -> Duration {
    let (sim, a) = clocked(3, seed).await;
    // The log does not move to the followers for 700 ms (as when AppendEntries time out on a
    // loaded machine and are sent again), heartbeats included: they must not campaign.
    let followers: Vec<u64> = (1..=3).filter(|id| *id != a).collect();
    for &id in &followers {
        sim.node(id).unwrap().set_elections(false);
        sim.net().stalled.insert((a, id));
    }
    let sent = Instant::now();
    let recover = async {
        tokio::time::sleep(SLOW_GRANT).await;
        sim.net().stalled.clear();
    };
    let (granted, ()) = tokio::join!(
        write(
            &sim,
            a,
            probe_acquire("first"),
            None,
            sent + Duration::from_secs(5)
        ),
        recover
    );
    assert!(
        matches!(granted, Completion::Ok { .. }),
        "seed {seed}: the first acquire failed: {granted:?}"
    );
    assert!(sent.elapsed() >= SLOW_GRANT, "the grant was slow to commit");
    for &id in &followers {
        sim.node(id).unwrap().set_elections(true);
    }
    tokio::time::sleep_until(sent + Duration::from_millis(1_500)).await;
    sim.crash(a).await;
    until_granted(
        &sim,
        followers[0],
        probe_acquire("rival"),
        sent,
        Duration::from_secs(30),
        seed,
    )
    .await
}

/// How late the slow links deliver the grant.
const SLOW_GRANT: Duration = Duration::from_millis(700);

#[test]
fn a_grant_slow_to_replicate_is_not_carried_late_across_a_leader_kill() {
    for seed in 1..=3 {
        let life = paused_runtime().block_on(slow_grant_then_leader_killed(seed));
        // Free at its TTL and the grant margin: the leader had its followers carry a time
        // stamped after the slow grant. The election ends before the TTL.
        let held = CARRIED_TTL + Duration::from_millis(Limits::GRANT_MARGIN_MS);
        assert!(
            life >= CARRIED_TTL && life <= held + Duration::from_millis(300),
            "seed {seed}: a {CARRIED_TTL:?} lease whose grant took {SLOW_GRANT:?} to replicate \
             was granted to a rival {life:?} after its acquire was sent"
        );
    }
}

/// What a cut-off leader answered: how long after it was sent, and the status.
struct CutOffAnswer {
    after: Duration,
    status: tonic::Status,
}

/// A leader cut off from every peer, its clients still reaching it (the fault suite's
/// IsolateLeader and OneWayFromLeader). openraft 0.9 has no CheckQuorum step-down: such a
/// leader leads its term until it hears of a newer one, which it cannot. Returns its answer to a
/// write it held when it was cut off, and to one sent once its quorum had been silent for a
/// while.
async fn cut_off_leader_answers(seed: u64) -> (CutOffAnswer, CutOffAnswer) {
    let (sim, a) = clocked(3, seed).await;
    let node = sim.node(a).unwrap();
    let answer = async |key: &str| {
        let sent = Instant::now();
        let status = tokio::time::timeout(
            Duration::from_secs(10),
            node.write_or_forward(plain_put(key).op, None),
        )
        .await
        .expect("an answer within 10 s")
        .expect_err("no quorum to write with");
        CutOffAnswer {
            after: sent.elapsed(),
            status: status.into(),
        }
    };
    sim.net().isolate(a, 3);
    let cut = Instant::now();
    let held = answer("held").await;
    tokio::time::sleep_until(cut + QUORUM_SILENCE + Duration::from_millis(500)).await;
    let later = answer("later").await;
    (held, later)
}

#[test]
fn a_leader_cut_off_from_its_quorum_gives_writes_up_and_then_refuses_them_at_once() {
    for seed in 1..=3 {
        let (held, later) = paused_runtime().block_on(cut_off_leader_answers(seed));
        let indeterminate = |s: &tonic::Status| s.metadata().get(INDETERMINATE_KEY).is_some();
        // Given up once the quorum was silent for QUORUM_SILENCE (the last answer came a
        // heartbeat or so before the cut), not held for the whole quorum wait; it may have
        // been applied.
        assert!(
            held.after <= QUORUM_SILENCE + Duration::from_millis(200)
                && indeterminate(&held.status),
            "seed {seed}: a write held by the cut-off leader ended after {:?}: {:?}",
            held.after,
            held.status
        );
        // Refused before it was proposed: the client knows it was not applied.
        assert!(
            later.after <= Duration::from_millis(10)
                && later.status.code() == tonic::Code::Unavailable
                && !indeterminate(&later.status),
            "seed {seed}: a write sent to the cut-off leader later ended after {:?}: {:?}",
            later.after,
            later.status
        );
    }
}

/// Issue 42, a clock that lies. Before it, the leader stamped store time from its own clock
/// alone, so a leader whose clock runs fast ended every lease early in real time (a 2 s lease
/// lived 1.054 s under a leader at 2x; a holder that counts its own TTL then believes it is safe
/// while a rival holds the lease), and one whose clock runs slow kept every lease too long
/// (4.041 s at 0.5x). `count` nodes; once the first leader leads, the clocks of `odd` of them
/// (the leader among them, or followers only) run at `rate_ppm` after a jump of `jump_ms`,
/// `fault.into_ms` after a lease was acquired through the first leader, and a rival polls. The
/// odd nodes must name themselves within 10 s, and the lease must stay granted its TTL after
/// the acquire was sent, and be free within 500 ms after (the bound).
///
/// Returns how long after the acquire was sent the rival was granted the lease, and how long
/// after the fault began the last odd node named itself, if within 10 s.
async fn lease_life_with_odd_clocks(seed: u64, fault: ClockFault) -> (Duration, Option<Duration>) {
    let (sim, a) = clocked(fault.count, seed).await;
    // The fault hits a cluster that has read its clocks for a while.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let followers = (1..=fault.count).filter(|id| *id != a);
    let odd: Vec<u64> = match fault.leader {
        true => std::iter::once(a)
            .chain(followers)
            .take(fault.odd)
            .collect(),
        false => followers.take(fault.odd).collect(),
    };
    let sent = Instant::now();
    let deadline = sent + Duration::from_secs(5);
    let granted = write(&sim, a, probe_acquire("first"), None, deadline).await;
    assert!(
        matches!(granted, Completion::Ok { .. }),
        "seed {seed}: the first acquire failed: {granted:?}"
    );
    // The clocks go wrong while the lease is held: a lease in flight when the leader's clock
    // changes rate, above all one that ends before the readings show it, is the one its stamps
    // could cut short.
    tokio::time::sleep_until(sent + Duration::from_millis(fault.into_ms)).await;
    let began = Instant::now();
    for &id in &odd {
        sim.node(id)
            .unwrap()
            .set_clock(fault.rate_ppm, fault.jump_ms);
    }
    let limit = Duration::from_secs(30);
    let life = until_granted(&sim, a, probe_acquire("rival"), sent, limit, seed).await;
    let named = |id: &u64| sim.node(*id).is_some_and(|n| n.own_clock().odd.is_some());
    while !odd.iter().all(named) && began.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (life, odd.iter().all(named).then(|| began.elapsed()))
}

/// One case of [`lease_life_with_odd_clocks`].
#[derive(Clone, Copy, Debug)]
struct ClockFault {
    count: u64,
    odd: usize,
    leader: bool,
    rate_ppm: u64,
    jump_ms: i64,
    /// How long after the acquire was sent the clocks go wrong.
    into_ms: u64,
}

#[test]
fn a_minority_of_clocks_running_fast_or_slow_or_jumping_neither_shortens_nor_stretches_a_lease() {
    use crate::node::RATE_REAL;
    let mut faults = Vec::new();
    for (count, odd) in [(3, 1), (5, 2)] {
        for leader in [true, false] {
            for rate_ppm in [
                2 * RATE_REAL,
                3 * RATE_REAL / 2,
                2 * RATE_REAL / 3,
                RATE_REAL / 2,
            ] {
                faults.push((count, odd, leader, rate_ppm, 0));
            }
            for jump_ms in [10_000, -10_000] {
                faults.push((count, odd, leader, RATE_REAL, jump_ms));
            }
        }
    }
    // Half a second into the lease's life, and 60 ms before the store frees it (its TTL and
    // the grant margin): within the time the leader takes to see its own clock's new rate.
    let ends = CARRIED_TTL.as_millis() as u64 + Limits::GRANT_MARGIN_MS - 60;
    let faults = [500, ends].into_iter().flat_map(|into_ms| {
        (faults.iter()).map(move |&(count, odd, leader, rate_ppm, jump_ms)| ClockFault {
            count,
            odd,
            leader,
            rate_ppm,
            jump_ms,
            into_ms,
        })
    });
    let mut wrong = Vec::new();
    for (seed, fault) in (1..).zip(faults) {
        let (life, named) = paused_runtime().block_on(lease_life_with_odd_clocks(seed, fault));
        if life < CARRIED_TTL || life > CARRIED_TTL + Duration::from_millis(500) || named.is_none()
        {
            wrong.push((seed, fault, life, named));
        }
    }
    assert!(
        wrong.is_empty(),
        "a {CARRIED_TTL:?} lease lived, as (seed, fault, life, odd named after): {wrong:#?}"
    );
}

/// Three nodes started with `seed` that have read each other's clocks for 2 s: the sim, its
/// leader and the two followers.
async fn three_reading_clocks(seed: u64) -> (Sim, u64, u64, u64) {
    let (sim, a) = clocked(3, seed).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut followers = (1..=3).filter(|id| *id != a);
    let (b, c) = (followers.next().unwrap(), followers.next().unwrap());
    (sim, a, b, c)
}

/// The probe lease granted to "first" through leader `a`, once both `followers` hold the grant
/// (so both measure from it): when its acquire was sent.
async fn granted_at_both(sim: &Sim, a: u64, followers: [u64; 2], seed: u64) -> Instant {
    let sent = Instant::now();
    let deadline = sent + Duration::from_secs(5);
    let granted = write(sim, a, probe_acquire("first"), None, deadline).await;
    let Completion::Ok { log_index, .. } = granted else {
        panic!("seed {seed}: the first acquire failed: {granted:?}");
    };
    for id in followers {
        while last_log_index(sim, id) < log_index {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    sent
}

/// Once `b` leads, how long after `sent` a rival polling through it was granted the probe.
async fn once_led_granted(sim: &Sim, b: u64, sent: Instant, seed: u64) -> Duration {
    let led = until_leader(sim, b, Duration::from_secs(10)).await;
    assert!(led, "seed {seed}: {b} never led");
    let limit = Duration::from_secs(30);
    until_granted(sim, b, probe_acquire("rival"), sent, limit, seed).await
}

/// A leader dies just as its one follower with the whole log has a right clock again after
/// running slow for a while; the other follower was down, and is back with a shorter log, so
/// only the first can win a vote. How long after the crash a new leader is elected.
async fn failover_just_after_a_clock_came_right(seed: u64) -> Duration {
    use crate::node::RATE_REAL;
    let (sim, a, b, c) = three_reading_clocks(seed).await;
    // B's clock runs at half speed, long enough for B to find out (it judges itself against
    // both peers), then on while C is down and writes go on without it.
    sim.node(b).unwrap().set_clock(RATE_REAL / 2, 0);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    sim.crash(c).await;
    for i in 0..10 {
        let deadline = Instant::now() + Duration::from_secs(5);
        let put = plain_put(&format!("while {c} is down: {i}")).op;
        assert!(matches!(
            write(&sim, a, put, None, deadline).await,
            Completion::Ok { .. }
        ));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sim.node(b).unwrap().set_clock(RATE_REAL, 0);
    // Right again for longer than its rate takes to show it, short of being forgotten as odd
    // in `status`.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert!(
        last_log_index(&sim, c) < last_log_index(&sim, b),
        "seed {seed}"
    );
    let named = sim.node(b).unwrap().own_clock().odd;
    assert!(
        named.is_some(),
        "seed {seed}: {b}'s clock was never named odd"
    );
    sim.boot(c).await;
    sim.crash(a).await;
    let crashed = Instant::now();
    let leader = any_leader(&sim, Duration::from_secs(10)).await;
    assert_eq!(leader, Some(b), "seed {seed}: only {b} has the whole log");
    crashed.elapsed()
}

#[test]
fn a_follower_whose_clock_came_right_a_moment_ago_may_lead_when_no_other_can() {
    for seed in 1..=3 {
        let took = paused_runtime().block_on(failover_just_after_a_clock_came_right(seed));
        assert!(
            took <= Duration::from_millis(1_000),
            "seed {seed}: the leader was replaced {took:?} after it died"
        );
    }
}

/// Two of five clocks go odd (set to `rate_ppm` and jumped by `jump_ms`, the follower's
/// `after` the leader's), the leader's among them, and the other odd one is the follower the
/// leader's log reaches first. The leader steps down; it must hand leadership to one of the
/// three right clocks, not to the odd follower that happens to be caught up first: that one
/// leads at its odd rate until it finds its clock odd, then hands over in turn. 5-node fault
/// runs saw leadership go 2, 1, 2, 1, 3 in 300 ms, nodes 1 and 2 both at half speed, and a 2 s
/// lease live 2.53 s (seed 1796608766160206331); and go 1, 2, 1, 2, 4 in 80 ms, both clocks
/// jumped 10 s ahead (seed 1796621727576969037): each saw the other's clock keep step with its
/// own.
///
/// Returns the odd leader and follower, the leaders after the first, in order, and how long
/// after its acquire was sent a rival was granted the lease.
async fn odd_leader_hands_over_past_an_odd_follower(
    seed: u64,
    (rate_ppm, jump_ms, after): (u64, i64, Duration),
) -> ([u64; 2], Vec<u64>, Duration) {
    let (sim, a) = clocked(5, seed).await;
    let mut followers = (1..=5).filter(|id| *id != a);
    let b = followers.next().unwrap();
    // The right clocks hear the leader 30 ms later than B does.
    for other in followers {
        sim.net().slow.insert((a, other), Duration::from_millis(30));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let sent = Instant::now();
    let deadline = sent + Duration::from_secs(5);
    let granted = write(&sim, a, probe_acquire("first"), None, deadline).await;
    assert!(
        matches!(granted, Completion::Ok { .. }),
        "seed {seed}: {granted:?}"
    );
    sim.node(a).unwrap().set_clock(rate_ppm, jump_ms);
    tokio::time::sleep(after).await;
    sim.node(b).unwrap().set_clock(rate_ppm, jump_ms);
    // Each term's leader once: a deposed leader names itself until it hears of the next term.
    let watching = async {
        let mut leaders = Vec::new();
        let mut term = sim.raft(a).unwrap().metrics().borrow().current_term;
        while sent.elapsed() < Duration::from_secs(4) {
            for id in sim.up() {
                let m = sim.raft(id).unwrap().metrics().borrow().clone();
                if m.state == openraft::ServerState::Leader && m.current_term > term {
                    term = m.current_term;
                    leaders.push(id);
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        leaders
    };
    let limit = Duration::from_secs(30);
    let rival = until_granted(&sim, a, probe_acquire("rival"), sent, limit, seed);
    let (leaders, life) = tokio::join!(watching, rival);
    ([a, b], leaders, life)
}

#[test]
fn a_leader_whose_clock_is_odd_hands_over_to_a_right_clock_not_to_an_odd_one_caught_up_first() {
    use crate::node::RATE_REAL;
    let together = Duration::ZERO;
    let (half_speed, jumped) = ((RATE_REAL / 2, 0, together), (RATE_REAL, 10_000, together));
    for (seed, odd) in (1..=3)
        .map(|seed| (seed, half_speed))
        .chain([(4, jumped), (5, jumped)])
    {
        let ([_, b], leaders, life) =
            paused_runtime().block_on(odd_leader_hands_over_past_an_odd_follower(seed, odd));
        assert!(
            leaders.len() == 1
                && leaders[0] != b
                && (CARRIED_TTL..=CARRIED_TTL + Duration::from_millis(500)).contains(&life),
            "seed {seed}, clocks {odd:?}: after the odd leader, {leaders:?} led in turn (node {b} \
             odd too); the {CARRIED_TTL:?} lease lived {life:?}"
        );
    }
}

/// As above, but the follower's clock jumps a moment after the leader's: the leader may hand
/// over before it sees the second jump (the follower's clock then seems to have jumped just
/// once, with its own, as a right one does), but the follower, once it leads and finds its own
/// clock jumped, sees the leader's jump twice and hands leadership on, not back. (Before, a
/// jump seen near its own counted as its own: with the jumps 250 ms apart, seed 10, leadership
/// went 1, 2, 1, 2, 1, 2, 1 and the 2 s lease lived 2.82 s; a review of the fix for seeds 4
/// and 5 found it.)
#[test]
fn two_clocks_that_jump_a_moment_apart_hand_leadership_on_not_back_and_forth() {
    use crate::node::RATE_REAL;
    for (seed, after) in [
        (6, 40),
        (7, 150),
        (8, 400),
        (9, 100),
        (10, 250),
        (11, 600),
        (12, 30),
    ] {
        let odd = (RATE_REAL, 10_000, Duration::from_millis(after));
        let ([a, b], leaders, life) =
            paused_runtime().block_on(odd_leader_hands_over_past_an_odd_follower(seed, odd));
        // The leader was seen to win a term of its own as its clock jumped, before it found the
        // jump (seed 8; what started that election is not known): only not after the follower
        // led.
        let b_led = leaders.iter().filter(|l| **l == b).count();
        assert!(
            b_led <= 1
                && !leaders.iter().skip_while(|l| **l != b).any(|l| *l == a)
                && leaders.last().is_some_and(|last| *last != a && *last != b)
                && (CARRIED_TTL..=CARRIED_TTL + Duration::from_millis(500)).contains(&life),
            "seed {seed}, the follower's clock {after} ms after: after the odd leader, {leaders:?} \
             led in turn (nodes {a} and {b} odd); the {CARRIED_TTL:?} lease lived {life:?}"
        );
    }
}

/// Only the leader's clock of five jumps: every other clock seems to jump, once, at about the
/// moment it finds its own did; all four are right ones to hand leadership to. (A review found
/// that matching their jumps to the last judgement that found its own, a second or more after
/// the first, took the peer whose jump it saw first for one that jumped too.)
async fn peers_odd_after_a_lone_jump(seed: u64) -> std::collections::BTreeSet<u64> {
    use crate::node::RATE_REAL;
    let (sim, a) = clocked(5, seed).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    sim.node(a).unwrap().set_clock(RATE_REAL, 10_000);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let node = sim.node(a).unwrap();
    assert_eq!(node.own_clock().odd, Some("jumped"), "seed {seed}");
    node.odd_peer_clocks()
}

#[test]
fn a_node_whose_clock_jumped_alone_takes_every_peer_for_a_right_clock() {
    for seed in 1..=3 {
        let odd = paused_runtime().block_on(peers_odd_after_a_lone_jump(seed));
        assert!(odd.is_empty(), "seed {seed}: peers {odd:?} taken for odd");
    }
}

/// A follower's clock jumps 10 s ahead and, a moment later, back (two of the fault suite's
/// `ClockJump`s in a row): the jump back is found as the first was, and the node goes on
/// judging its clock (the first version of the jumps' episode subtracted the last jump's
/// reading from the reading after the jump back, which panicked the clock's probe). Returns
/// whether a slow clock set 4 s later was named within 10 s.
async fn judged_on_after_a_jump_back(seed: u64) -> bool {
    use crate::node::RATE_REAL;
    let (sim, _, b, _) = three_reading_clocks(seed).await;
    let node = sim.node(b).unwrap();
    node.set_clock(RATE_REAL, 10_000);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    node.set_clock(RATE_REAL, -10_000);
    tokio::time::sleep(Duration::from_secs(4)).await;
    node.set_clock(RATE_REAL / 2, 0);
    let named = Instant::now() + Duration::from_secs(10);
    while Instant::now() < named {
        if node.own_clock().odd == Some("runs slow") {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

#[test]
fn a_clock_that_jumped_ahead_and_back_is_still_judged() {
    for seed in 1..=2 {
        let named = paused_runtime().block_on(judged_on_after_a_jump_back(seed));
        assert!(
            named,
            "seed {seed}: a slow clock after the jumps was never named"
        );
    }
}

/// A follower's clock jumps 10 s ahead, and a moment later (well within the 3 s its jump is
/// remembered) it is the one to lead after the leader dies: the other follower restarted and
/// carries only the applied time. The new leader's own carried time measured nothing across
/// the jump (it counts from an append after it), so it must count. A fault run (seed
/// 1796615319693489518) saw a 2 s lease live 2.93 s so, across a leader kill 3.5 s after a
/// follower's clock jumped.
///
/// Returns how long after its acquire was sent a rival was granted the lease.
async fn leader_whose_clock_jumped_a_moment_ago(seed: u64) -> Duration {
    use crate::node::RATE_REAL;
    let (sim, a, b, c) = three_reading_clocks(seed).await;
    sim.node(b).unwrap().set_clock(RATE_REAL, 10_000);
    // Past the second in which B's peers seem to jump (each judgement of it then finds its own
    // clock jumped), short of the 3 s it is remembered.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(
        sim.node(b).unwrap().own_clock().odd == Some("jumped"),
        "seed {seed}: {b} never found its clock jumped"
    );
    let sent = granted_at_both(&sim, a, [b, c], seed).await;
    sim.crash(a).await;
    sim.crash(c).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    sim.boot(c).await;
    sim.node(c).unwrap().set_elections(false);
    once_led_granted(&sim, b, sent, seed).await
}

#[test]
fn a_leader_whose_clock_jumped_before_the_last_stamp_counts_the_time_it_measured_since() {
    for seed in 1..=3 {
        let life = paused_runtime().block_on(leader_whose_clock_jumped_a_moment_ago(seed));
        assert!(
            (CARRIED_TTL..=CARRIED_TTL + Duration::from_millis(500)).contains(&life),
            "seed {seed}: the {CARRIED_TTL:?} lease lived {life:?}"
        );
    }
}

/// A follower's clock jumps 10 s ahead just after it appended a grant, and the leader dies at
/// once: the follower leads, with one peer to read. That peer's reading seems to jump too (by
/// the same 10 s, back), one of two: which clock jumped is a tie. The new leader must not count
/// the 10 s its own clock "measured" since the grant (the lease would end at once), nor the
/// peer's answer; the review of the fix for the test above found it.
async fn leader_whose_clock_jumped_just_before_it_led(seed: u64) -> Duration {
    use crate::node::RATE_REAL;
    let (sim, a, b, c) = three_reading_clocks(seed).await;
    sim.node(c).unwrap().set_elections(false);
    let sent = granted_at_both(&sim, a, [b, c], seed).await;
    sim.node(b).unwrap().set_clock(RATE_REAL, 10_000);
    sim.crash(a).await;
    once_led_granted(&sim, b, sent, seed).await
}

#[test]
fn a_leader_whose_clock_jumped_as_the_old_one_died_counts_nothing_across_the_jump() {
    // Not every seed shows it (seed 3 did: the lease lived 667 ms); the time it loses instead
    // (the lease lives its TTL and the failover) is the price of not knowing which clock jumped.
    for seed in 1..=6 {
        let life = paused_runtime().block_on(leader_whose_clock_jumped_just_before_it_led(seed));
        assert!(
            life >= CARRIED_TTL,
            "seed {seed}: the {CARRIED_TTL:?} lease lived {life:?}"
        );
    }
}
