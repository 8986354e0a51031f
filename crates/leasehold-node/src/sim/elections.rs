//! Scenarios of elections, each one fault sequence built by hand: a restarted leader whose
//! tail was truncated, a restarted leader that must follow the leader elected while it was
//! down, a node cut off that must rejoin without deposing the leader, survivors that must
//! elect, a node once outvoted for its log.

use std::sync::Arc;
use std::time::Duration;

use leasehold_check::{Completion, Request};
use leasehold_core::Batch;
use openraft::ServerState;
use tokio::time::Instant;

use super::clients::{plain_put, read, write};
use super::cluster::{any_leader, last_log_index, paused_runtime, sim_config, until_leader, Sim};

/// Review finding 1: a leader's uncommitted tail, lost while it was down, must not make the
/// node wait forever for it once it leads again in a later term. A leads and appends entries
/// nobody else gets; it dies; B leads and appends only its blank entry; A restarts, follows and
/// loses its tail; B dies; A leads with a blank entry below the index it found at boot. Its
/// reads must still be served.
async fn restarted_leader_with_a_lost_tail(seed: u64) {
    let sim = Sim::start(3, seed).await;
    let a = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(matches!(
        write(&sim, a, plain_put("before").op, None, deadline).await,
        Completion::Ok { .. }
    ));
    // Cut A off, and let it append entries of its own that reach nobody.
    {
        let mut net = sim.net();
        for other in (1..=3).filter(|other| *other != a) {
            net.cut.insert((a, other));
            net.cut.insert((other, a));
        }
    }
    let before_tail = last_log_index(&sim, a);
    let raft_a = sim.raft(a).unwrap();
    for i in 0..6 {
        let raft = raft_a.clone();
        tokio::spawn(async move {
            let _ = raft
                .client_write(Batch(vec![plain_put(&format!("lost{i}"))]))
                .await;
        });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(&sim, a) < before_tail + 6 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tail_end = last_log_index(&sim, a);
    assert!(
        tail_end >= before_tail + 3,
        "A appended its tail: {before_tail}..{tail_end}"
    );
    sim.crash(a).await;
    sim.net().cut.clear();

    // B leads without A's tail; A comes back, follows and drops its tail.
    let b = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a leader among the other two");
    sim.boot(a).await;
    let booted_at = sim.nodes[&a].boot.lock().unwrap().last_index;
    assert_eq!(booted_at, tail_end, "A booted with its uncommitted tail");
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(&sim, a) != last_log_index(&sim, b) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        last_log_index(&sim, a) < tail_end,
        "A's tail was truncated: {} < {tail_end}",
        last_log_index(&sim, a)
    );

    // The third node only votes from now on, so that A is the one to lead next.
    let c = 6 - a - b;
    sim.crash(c).await;
    let mut passive = (*sim_config()).clone();
    passive.enable_elect = false;
    sim.boot_with(c, Arc::new(passive)).await;
    // B dies; A campaigns at once and wins with the third node's vote.
    sim.crash(b).await;
    sim.raft(a).unwrap().trigger().elect().await.unwrap();
    if !until_leader(&sim, a, Duration::from_secs(5)).await {
        let m = sim.raft(a).unwrap().metrics().borrow().clone();
        panic!("seed {seed}: A={a} B={b} does not lead again: {m:?}");
    }
    assert!(
        last_log_index(&sim, a) < tail_end,
        "A leads with its log below the index it found at boot"
    );
    let state = sim.state(a);
    let completion = read(
        &sim,
        a,
        &Request::Get {
            key: "before".into(),
        },
    )
    .await;
    assert!(
        matches!(completion, Completion::Ok { .. }),
        "A, leading in a later term, must serve reads: {completion:?}"
    );
    assert!(state.read().table.row("before").is_some());
}

#[test]
fn a_restarted_leader_whose_tail_was_truncated_still_serves_reads() {
    for seed in 1..=10 {
        paused_runtime().block_on(restarted_leader_with_a_lost_tail(seed));
    }
}

/// Three nodes, once the first leads; from then on, none campaigns unless the scenario says.
/// Returns the first leader.
async fn first_leader_then_no_campaigns(seed: u64) -> (Sim, u64) {
    let sim = Sim::start(3, seed).await;
    let first = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    for id in 1..=3 {
        sim.node(id).unwrap().set_elections(false);
    }
    (sim, first)
}

/// Makes `id` campaign every half second until it leads, for up to 5 s.
async fn campaign_until_it_leads(sim: &Sim, id: u64, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !until_leader(sim, id, Duration::from_millis(500)).await {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: node {id} never led"
        );
        sim.raft(id).unwrap().trigger().elect().await.unwrap();
    }
}

/// Waits up to 5 s until node `id`'s log is as long as node `ahead`'s.
async fn catch_up(sim: &Sim, id: u64, ahead: u64, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while last_log_index(sim, id) < last_log_index(sim, ahead) {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: node {id} never caught up with node {ahead}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A leader that died must come back as a follower of the leader elected while it was down,
/// not depose it. openraft compares leader ids by term, then node id, so a restarted leader
/// that campaigned for the next term at once (as Leasehold's patch of openraft first had it)
/// outranked a leader of that same term with a lower id: that leader stepped down at its first
/// message to the restarted node, and the cluster spent an election without one. The fault
/// suite saw a 2 s lease then live 2.6 s. Here node 3 leads, dies, node 1 leads the next term,
/// and node 3 restarts: node 1 must lead on, in the same term, and node 3 follow it.
async fn restarted_leader_rejoins_as_a_follower(seed: u64) {
    let (sim, first) = first_leader_then_no_campaigns(seed).await;
    // Node 3 leads: if another does, it is cut off until the others' leases run out, and node 3
    // campaigns.
    if first != 3 {
        sim.net().cut.extend(
            (1..=3)
                .filter(|id| *id != first)
                .flat_map(|id| [(first, id), (id, first)]),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        campaign_until_it_leads(&sim, 3, seed).await;
        sim.net().cut.clear();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    assert!(matches!(
        write(&sim, 3, plain_put("under 3").op, None, deadline).await,
        Completion::Ok { .. }
    ));
    catch_up(&sim, 1, 3, seed).await;

    // Node 3 dies; once node 2's lease of its term has run out, node 1, level with it, leads
    // the next term: the term node 3 would campaign for.
    let old_term = sim.raft(3).unwrap().metrics().borrow().current_term;
    sim.crash(3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    campaign_until_it_leads(&sim, 1, seed).await;
    sim.node(1).unwrap().set_elections(true);
    let term = sim.raft(1).unwrap().metrics().borrow().current_term;
    assert_eq!(
        term,
        old_term + 1,
        "seed {seed}: node 1 leads the next term"
    );

    sim.boot(3).await;
    leads_on_and_is_followed(&sim, 1, term, 3, seed).await;
}

/// Node `leader`, leading term `term`, must lead on in it for 2 s after node `back` returns
/// (restarted, or let back in), and `back` must then follow it in that term.
async fn leads_on_and_is_followed(sim: &Sim, leader: u64, term: u64, back: u64, seed: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while Instant::now() < deadline {
        let m = sim.raft(leader).unwrap().metrics().borrow().clone();
        assert!(
            m.current_leader == Some(leader) && m.current_term == term,
            "seed {seed}: node {leader}, leading term {term}, was deposed when node {back} came \
             back: {m:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let m = sim.raft(back).unwrap().metrics().borrow().clone();
    assert_eq!(
        (m.current_leader, m.current_term),
        (Some(leader), term),
        "seed {seed}: node {back} follows node {leader} once back"
    );
}

#[test]
fn a_restarted_leader_follows_the_leader_elected_while_it_was_down() {
    for seed in 1..=10 {
        paused_runtime().block_on(restarted_leader_rejoins_as_a_follower(seed));
    }
}

/// A node cut off from the others, both ways, for several election timeouts, and then let back:
/// the leader of the others must lead on, in its term, and the node follow it. Without a
/// pre-vote, the cut-off node campaigned again and again, each campaign for a higher term that
/// reached nobody; once back, its first answer to the leader carried that term, and the leader
/// stepped down for an election the node could not win (its log was behind). The fault suite saw
/// a 2 s lease live 2.8 s across a leader cut off one way: the others elected a new leader, whose
/// messages reached the old one, which stepped down, and then (its answers lost, TCP stalls the
/// stream) heard nothing more and campaigned. `leader` cuts off the leader so, one way until it
/// has stepped down and then both ways; otherwise a follower is cut off both ways.
async fn cut_off_node_rejoins_without_deposing_the_leader(seed: u64, leader: bool) {
    let sim = Sim::start(3, seed).await;
    let first = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a first leader");
    let away = match leader {
        true => first,
        false => first % 3 + 1,
    };
    let others: Vec<u64> = (1..=3).filter(|id| *id != away).collect();
    match leader {
        true => sim.net().cut.extend(others.iter().map(|id| (away, *id))),
        false => sim.net().isolate(away, 3),
    }
    // The others lead, and write, while the node is away: its log falls behind theirs.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut ruler = None;
    while ruler.is_none() {
        assert!(
            Instant::now() < deadline,
            "seed {seed}: the others elect nobody"
        );
        for id in &others {
            if until_leader(&sim, *id, Duration::ZERO).await {
                ruler = Some(*id);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let ruler = ruler.unwrap();
    if leader {
        while sim.raft(away).unwrap().metrics().borrow().state == ServerState::Leader {
            assert!(
                Instant::now() < deadline,
                "seed {seed}: node {away} leads on"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        sim.net().isolate(away, 3);
    }
    let done = write(&sim, ruler, plain_put("while away").op, None, deadline).await;
    assert!(
        matches!(done, Completion::Ok { .. }),
        "seed {seed}: {done:?}"
    );
    // Several of the node's election timeouts (150 to 300 ms, after a lease of 300). Its leader
    // silent, the node names none (its health says so), though it cannot campaign.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let m = sim.raft(away).unwrap().metrics().borrow().clone();
    assert_eq!(
        m.current_leader, None,
        "seed {seed}: node {away}, cut off, still names a leader: {m:?}"
    );
    let term = sim.raft(ruler).unwrap().metrics().borrow().current_term;
    sim.net().cut.clear();
    leads_on_and_is_followed(&sim, ruler, term, away, seed).await;
    catch_up(&sim, away, ruler, seed).await;
}

#[test]
fn a_follower_cut_off_for_a_while_rejoins_without_deposing_the_leader() {
    for seed in 1..=10 {
        paused_runtime().block_on(cut_off_node_rejoins_without_deposing_the_leader(
            seed, false,
        ));
    }
}

#[test]
fn a_leader_cut_off_for_a_while_rejoins_without_deposing_its_successor() {
    for seed in 1..=10 {
        paused_runtime().block_on(cut_off_node_rejoins_without_deposing_the_leader(seed, true));
    }
}

/// After a leader dies, its two survivors must elect one of them, every time, within a few
/// election timeouts. openraft 0.9 draws a node's election timeout once per process and checks
/// it on a fixed tick, so two survivors can campaign in the same instant, again and again (a
/// known livelock of openraft's single-term-leader mode). Leasehold uses its default mode, where
/// a leader id is the term and the node id, so a candidate grants a same-term candidate with a
/// higher id and a tie ends at once. Here every node draws the same timeout and every message
/// takes the same time, the worst case for ties, and three leaders in a row die.
async fn survivors_of_a_dead_leader_elect(seed: u64) {
    // Every node draws the same timeout: the worst case of draws that round to the same tick.
    let mut same_draw = (*sim_config()).clone();
    same_draw.election_timeout_min = same_draw.election_timeout_max - 1;
    let sim = Sim::start_with(3, seed, Arc::new(same_draw.validate().unwrap())).await;
    sim.net().uniform_latency = true;
    for round in 0..3 {
        let old = any_leader(&sim, Duration::from_secs(10))
            .await
            .unwrap_or_else(|| panic!("seed {seed} round {round}: no leader to kill"));
        sim.crash(old).await;
        // The longest seen in 600 such failovers was about two seconds.
        let new = any_leader(&sim, Duration::from_secs(5)).await;
        assert!(
            new.is_some(),
            "seed {seed} round {round}: the two nodes left after node {old} died elected \
             nobody within 5 s (terms now {:?})",
            sim.up()
                .iter()
                .map(|id| sim.raft(*id).unwrap().metrics().borrow().current_term)
                .collect::<Vec<_>>()
        );
        sim.boot(old).await;
        // The next round starts once the restarted node follows the new leader.
        let new = new.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sim.raft(old).unwrap().metrics().borrow().current_leader != Some(new) {
            assert!(
                Instant::now() < deadline,
                "seed {seed} round {round}: node {old} never followed node {new}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

#[test]
fn the_survivors_of_a_dead_leader_always_elect_one_of_them() {
    for seed in 1..=50 {
        paused_runtime().block_on(survivors_of_a_dead_leader_elect(seed));
    }
}

/// A node that once lost a campaign for its shorter log must still campaign in time when a
/// later leader dies. openraft 0.9 marks such a node ("seen a greater log") and adds
/// `2 × election_timeout_max` to its election timeout until it next campaigns on its own timer,
/// however long it has been caught up since; with both survivors marked, the fault suite saw
/// leases live 3.4 to 4.5 s for a 2 s TTL. Here C is refused for its log, then follows a new
/// leader B until it is level with it; B dies and C, the only one allowed to campaign, must lead
/// before a marked openraft would have started (1,050 to 1,200 ms after B's last heartbeat).
///
/// Returns how long after B died C led.
async fn outvoted_node_campaigns_in_time(seed: u64) -> Duration {
    let (sim, first) = first_leader_then_no_campaigns(seed).await;
    let (a, c) = match first {
        1 => (2, 3),
        2 => (1, 3),
        _ => (1, 2),
    };
    // C falls behind.
    for other in [first, a] {
        sim.net().cut.extend([(c, other), (other, c)]);
    }
    for key in ["x", "y", "z"] {
        let done = write(
            &sim,
            first,
            plain_put(key).op,
            None,
            Instant::now() + Duration::from_secs(5),
        )
        .await;
        assert!(
            matches!(done, Completion::Ok { .. }),
            "seed {seed}: {done:?}"
        );
    }
    // The leader dies; C, back in touch with A only, campaigns and is refused for its log.
    sim.crash(first).await;
    sim.net().cut.clear();
    assert!(last_log_index(&sim, c) < last_log_index(&sim, a));
    sim.raft(c).unwrap().trigger().elect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !until_leader(&sim, c, Duration::ZERO).await,
        "seed {seed}: C won with less log"
    );

    // A leads next, its log as long as any; C follows it until level with it. Nobody else
    // campaigns. A term of A's no later than C's refused campaign is outranked by it (a leader
    // id orders by term, then node id), so A campaigns until C follows it.
    sim.boot(first).await;
    sim.node(first).unwrap().set_elections(false);
    let b = a;
    let deadline = Instant::now() + Duration::from_secs(10);
    while sim.raft(c).unwrap().metrics().borrow().current_leader != Some(b) {
        assert!(Instant::now() < deadline, "seed {seed}: A never led C");
        if !until_leader(&sim, b, Duration::ZERO).await {
            sim.raft(b).unwrap().trigger().elect().await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    catch_up(&sim, c, b, seed).await;
    // C follows, level, for a while: openraft keeps its mark all the same.
    sim.node(c).unwrap().set_elections(true);
    tokio::time::sleep(Duration::from_secs(1)).await;

    sim.crash(b).await;
    let died = Instant::now();
    assert!(
        until_leader(&sim, c, Duration::from_secs(10)).await,
        "seed {seed}: C never led after B died"
    );
    died.elapsed()
}

#[test]
fn a_node_once_outvoted_for_its_log_still_campaigns_in_time() {
    for seed in 1..=5 {
        let took = paused_runtime().block_on(outvoted_node_campaigns_in_time(seed));
        // Unpenalised, C campaigns 450 to 600 ms after B's last heartbeat (a leader lease of
        // 300 ms and a timeout of 150 to 300), which came a heartbeat or less before B died.
        assert!(
            took <= Duration::from_millis(750),
            "seed {seed}: C led {took:?} after the leader died; openraft's own timer alone, \
             penalised for the lost campaign, takes 1,050 to 1,200 ms"
        );
    }
}

/// A leader stopping on request names an up-to-date voter, which leads at once: no election
/// timeout, no leader lease waited out. What was acknowledged before stays.
async fn leader_hands_over(seed: u64) {
    let sim = Sim::start(3, seed).await;
    let old = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a leader");
    let deadline = Instant::now() + Duration::from_secs(5);
    let before = write(&sim, old, plain_put("before").op, None, deadline).await;
    assert!(matches!(before, Completion::Ok { .. }), "{before:?}");
    let term = sim.raft(old).unwrap().metrics().borrow().current_term;
    let started = Instant::now();
    let handed = sim.node(old).unwrap().hand_over().await;
    let crate::node::HandedOver::To { to, .. } = handed else {
        panic!("seed {seed}: not handed over: {handed:?}");
    };
    assert!(
        started.elapsed() < Duration::from_millis(crate::limits::ELECTION_TIMEOUT_MIN_MS),
        "seed {seed}: took {:?}",
        started.elapsed()
    );
    assert!(
        until_leader(&sim, to, Duration::ZERO).await,
        "seed {seed}: node {to} leads"
    );
    let new_term = sim.raft(to).unwrap().metrics().borrow().current_term;
    assert_eq!(new_term, term + 1, "seed {seed}: one election, won at once");
    // Applied once the new leader commits an entry of its term.
    let deadline = Instant::now() + Duration::from_secs(1);
    while sim.state(to).read().table.row("before").is_none() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let kept = sim.state(to).read().table.row("before").is_some();
    assert!(
        kept,
        "seed {seed}: the new leader holds the acknowledged write"
    );
}

#[test]
fn a_leader_handing_over_is_succeeded_at_once_by_the_voter_it_names() {
    for seed in 1..=10 {
        paused_runtime().block_on(leader_hands_over(seed));
    }
}

/// A leader that cannot hand over (here its peers announce an older build, without the
/// feature) still runs while it stops. Its heartbeats must not keep the followers'
/// lease alive meanwhile, nor may its writes wait for a successor that is not coming: the
/// others elect a leader while it runs, and it refuses a write at once as shutting down.
async fn leader_that_cannot_hand_over(seed: u64) {
    let sim = Sim::start(3, seed).await;
    let old = any_leader(&sim, Duration::from_secs(5))
        .await
        .expect("a leader");
    let node = sim.node(old).unwrap();
    let mut older = tonic::metadata::MetadataMap::new();
    let header = "protocol=2; format=1; version=0.2.0";
    older.insert(crate::raft::protocol::PROTOCOL_KEY, header.parse().unwrap());
    for peer in (1..=3).filter(|peer| *peer != old) {
        node.channels().protocols().heard(peer, &older);
    }
    let handed = node.hand_over().await;
    assert!(
        matches!(&handed, crate::node::HandedOver::Not(why) if why.contains("hand-over")),
        "seed {seed}: {handed:?}"
    );
    let started = Instant::now();
    let refused = node.write(plain_put("after").op, None).await;
    assert!(
        matches!(refused, Err(crate::node::NodeError::ShuttingDown)),
        "seed {seed}: {refused:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(10),
        "seed {seed}: {:?}",
        started.elapsed()
    );
    let others: Vec<u64> = sim.up().into_iter().filter(|id| *id != old).collect();
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut elected = None;
    while elected.is_none() && Instant::now() < deadline {
        for &id in &others {
            if until_leader(&sim, id, Duration::ZERO).await {
                elected = Some(id);
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        elected.is_some(),
        "seed {seed}: no other node was elected while node {old} ran"
    );
}

#[test]
fn a_leader_that_cannot_hand_over_lets_the_others_elect_while_it_still_runs() {
    for seed in 1..=10 {
        paused_runtime().block_on(leader_that_cannot_hand_over(seed));
    }
}
