//! One seeded schedule: three nodes, four clients and a nemesis of crashes, partitions, loss,
//! power losses and their compositions, then a heal and the checkers over the whole log. The
//! seeded test runs many; another checks that a seed replays.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use leasehold_check::{self as check, Completion, Log, Operation, Request, Rng};
use leasehold_core::{Command, Op};
use tokio::time::Instant;

use super::clients::{client, write, History};
use super::cluster::Sim;
use super::disk::OwnAppends;

/// Seeds that once failed; they run first, every time. 4: a leader restarted within its lease
/// served a read behind its acknowledged writes while the committed index was not fsynced.
/// 107: a node that installed a snapshot had archived a never-committed entry (the harness's
/// log assembly, now by highest term). 11: a leader, restarted after a power loss took entries
/// it had sent before its own flush, led on in its old term and proposed other entries under
/// the same log ids (openraft now restarts it as a follower, which leads again only by an
/// election for a later term: PATCH.md).
const REGRESSION_SEEDS: &[u64] = &[4, 107, 11];
/// Seeds within which a leader counting its unsynced copy must be caught.
const CAUGHT_WITHIN: u64 = 200;
/// How long the disks' flushes take, node 1's and the others'.
const SLOW_FSYNC: Duration = Duration::from_millis(10);
const FSYNC: Duration = Duration::from_millis(1);
/// Virtual time per schedule.
const SCHEDULE: Duration = Duration::from_secs(8);

/// What one schedule found and did.
struct Run {
    anomalies: Vec<check::Anomaly>,
    acknowledged: usize,
    /// Commands in the committed log that shared their entry with another.
    batched: usize,
    /// Everything the clients did and saw, for replays to compare.
    history: Vec<Operation>,
}

/// Runs one seeded schedule, the logs telling leaders of their own appends as `own` says.
async fn schedule(seed: u64, own: OwnAppends) -> Run {
    // openraft's own draws (election timeouts) follow the seed too: the whole cluster runs on
    // this one thread.
    crate::raft::runtime::seed_this_thread(seed);
    let mut rng = Rng(seed);
    let sim = Arc::new(Sim::start(3, rng.bits()).await);
    // Disks that take time to flush, one slower than a round trip to the others: as leader,
    // node 1 commits on its followers' copies before its own is durable.
    for (id, node) in &sim.nodes {
        let mut log = node.log.lock();
        log.own_appends = own;
        log.fsync = if *id == 1 { SLOW_FSYNC } else { FSYNC };
    }
    let history: History = Arc::default();
    let until = Instant::now() + SCHEDULE;
    let clients: Vec<_> = (0..4)
        .map(|id| tokio::spawn(client(id, sim.clone(), history.clone(), rng.bits(), until)))
        .collect();

    // The nemesis: crashes with restarts, isolations, one-way loss, random loss, heals.
    let mut down: Vec<(u64, Instant)> = Vec::new();
    while Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(rng.between(50, 400))).await;
        let now = Instant::now();
        for (id, _) in down.iter().filter(|(_, back_at)| *back_at <= now) {
            sim.boot(*id).await;
        }
        down.retain(|(_, back_at)| *back_at > now);
        match rng.below(9) {
            6 => {
                // Power loss: every node at once, unsynced writes gone.
                for id in 1..=3 {
                    sim.crash(id).await;
                    sim.nodes[&id].log.lose_power();
                }
                for id in 1..=3 {
                    if !down.iter().any(|(d, _)| *d == id) {
                        sim.boot(id).await;
                    }
                }
            }
            0 => {
                let id = rng.between(1, 4);
                if !down.iter().any(|(d, _)| *d == id) {
                    sim.crash(id).await;
                    down.push((id, now + Duration::from_millis(rng.between(100, 1_500))));
                }
            }
            1 => sim.net().isolate(rng.between(1, 4), 3),
            7 => {
                // Composite: a node cut off across the others' power loss, so that it still
                // carries the lead store time had before the restart under-counted it.
                let cut_off = rng.between(1, 4);
                sim.net().isolate(cut_off, 3);
                for id in (1..=3).filter(|id| *id != cut_off) {
                    if !down.iter().any(|(d, _)| *d == id) {
                        sim.crash(id).await;
                        sim.nodes[&id].log.lose_power();
                        down.push((id, now + Duration::from_millis(rng.between(300, 1_500))));
                    }
                }
            }
            8 => {
                // Composite: the leader dies while a member's log does not move (a snapshot
                // streams to it, or probes look for where it matches); the member still
                // answers the next leader's question for its carried time.
                let behind = rng.between(1, 4);
                {
                    let mut net = sim.net();
                    for other in (1..=3).filter(|other| *other != behind) {
                        net.stalled.insert((other, behind));
                    }
                }
                let leader = sim.up().into_iter().find(|id| {
                    sim.raft(*id).is_some_and(|raft| {
                        raft.metrics().borrow().state == openraft::ServerState::Leader
                    })
                });
                if let Some(leader) = leader.filter(|leader| *leader != behind) {
                    sim.crash(leader).await;
                    down.push((leader, now + Duration::from_millis(rng.between(100, 1_500))));
                }
            }
            2 => {
                let (from, to) = (rng.between(1, 4), rng.between(1, 4));
                if from != to {
                    sim.net().cut.insert((from, to));
                }
            }
            3 => sim.net().loss_pct = rng.below(30),
            _ => {
                let mut net = sim.net();
                net.cut.clear();
                net.stalled.clear();
                net.loss_pct = 0;
            }
        }
    }
    for client in clients {
        client.await.unwrap();
    }

    // Heal everything, restart everyone, and let the cluster settle.
    {
        let mut net = sim.net();
        net.cut.clear();
        net.stalled.clear();
        net.loss_pct = 0;
    }
    // The final restart is a power loss too.
    for id in 1..=3 {
        sim.crash(id).await;
        sim.nodes[&id].log.lose_power();
    }
    for id in 1..=3 {
        sim.boot(id).await;
    }
    // A final write commits everything before it; every replica must reach it.
    let settle = Op::Put {
        key: "settle".into(),
        value: Vec::new(),
        fence: None,
    };
    let mut settled = None;
    // Every attempt is a client's send: one that failed may still have applied. An attempt can
    // fail at once (node 1 forwards to the leader its restored vote names, which no longer
    // leads), so attempts are spaced as a client's retries are, for 40 s in all.
    let mut attempts = 0;
    let give_up = Instant::now() + Duration::from_secs(40);
    while Instant::now() < give_up {
        let deadline = Instant::now() + Duration::from_secs(2);
        attempts += 1;
        if let Completion::Ok { log_index, .. } =
            write(&sim, 1, settle.clone(), None, deadline).await
        {
            settled = Some(log_index);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let Some(settled) = settled else {
        return Run {
            anomalies: vec![check::Anomaly::new(
                "liveness",
                "no write applied after healing",
            )],
            acknowledged: 0,
            batched: 0,
            history: history.lock().unwrap().clone(),
        };
    };
    let mut history = history.lock().unwrap().clone();
    for _ in 0..attempts {
        history.push(Operation {
            client: 99,
            request: Request::Write(settle.clone()),
            invoked_ns: sim.now_ns(),
            completed_ns: sim.now_ns(),
            completion: Completion::Indeterminate(
                "the settling write, sent until it applied".into(),
            ),
        });
    }
    let mut digests = BTreeSet::new();
    for _ in 0..200 {
        digests = (1..=3)
            .map(|id| {
                let state = sim.state(id);
                let state = state.read();
                (
                    state.last_applied.map_or(0, |id| id.index),
                    state.table.digest(),
                )
            })
            .collect();
        if digests.len() == 1 && digests.iter().all(|(index, _)| *index >= settled) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (log, mut anomalies) = cluster_log(&sim, settled);
    anomalies.extend(check::check_all(&history, &log));
    if digests.len() != 1 {
        anomalies.push(check::Anomaly::new(
            "convergence",
            format!("replicas differ: {digests:?}"),
        ));
    }
    let acknowledged = history
        .iter()
        .filter(|op| matches!(op.completion, Completion::Ok { .. }))
        .count();
    let batched = log
        .iter()
        .map(|(_, commands)| commands.len())
        .filter(|&n| n > 1)
        .sum();
    Run {
        anomalies,
        acknowledged,
        batched,
        history,
    }
}

/// The committed log up to `upto`, pieced together from every node: one that installed a
/// snapshot lacks the entries before it, and may have purged (so archived) an entry that was
/// never committed. At each index the committed entry is the one of the highest term: a leader
/// of a later term holds the committed entry and never overwrites it. Two entries of the same
/// index and term must be the same (Raft's log matching); the anomalies say where not.
fn cluster_log(sim: &Sim, upto: u64) -> (Log, Vec<check::Anomaly>) {
    let mut merged: BTreeMap<u64, (u64, Vec<Command>)> = BTreeMap::new();
    let mut anomalies = Vec::new();
    for (id, node) in &sim.nodes {
        for (index, term, commands) in node.log.entries(upto) {
            match merged.get(&index) {
                Some((known_term, known)) if *known_term == term && *known != commands => {
                    anomalies.push(check::Anomaly::new(
                        "convergence",
                        format!("node {id} holds {commands:?} at index {index} of term {term}, another node {known:?}"),
                    ))
                }
                Some((known_term, _)) if *known_term >= term => {}
                _ => {
                    merged.insert(index, (term, commands));
                }
            }
        }
    }
    let log = merged
        .into_iter()
        .map(|(index, (_, commands))| (index, commands))
        .collect();
    (log, anomalies)
}

fn seeds() -> Vec<u64> {
    if let Some(seed) = std::env::var("LEASEHOLD_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("LEASEHOLD_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    REGRESSION_SEEDS.iter().copied().chain(1..=count).collect()
}

#[test]
fn seeded_schedules_of_crashes_partitions_and_loss_keep_every_invariant() {
    let started = std::time::Instant::now();
    let (mut acknowledged, mut batched) = (0, 0);
    let seeds = seeds();
    for &seed in &seeds {
        let run = run_schedule(seed);
        assert!(
            run.anomalies.is_empty(),
            "seed {seed}: {:#?}",
            run.anomalies
        );
        assert!(
            run.acknowledged >= 20,
            "seed {seed} exercised nothing: {} operations acknowledged",
            run.acknowledged
        );
        acknowledged += run.acknowledged;
        batched += run.batched;
    }
    println!(
        "{} schedules of {} virtual seconds, {acknowledged} operations acknowledged \
         ({batched} commands logged in shared entries), in {:?}",
        seeds.len(),
        SCHEDULE.as_secs(),
        started.elapsed()
    );
    // The proposer's gathering must be exercised, not just present.
    assert!(batched > 0, "no two commands ever shared a log entry");
}

/// Runs schedule `seed` on a fresh paused runtime.
fn run_schedule(seed: u64) -> Run {
    run_schedule_with(seed, OwnAppends::SavedWhenSynced)
}

/// [`run_schedule`], the logs telling leaders of their own appends as `own` says.
fn run_schedule_with(seed: u64, own: OwnAppends) -> Run {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_all().start_paused(true);
    // tokio's own draws (which `select!` branch is polled first, inside openraft) follow the
    // seed too; `tokio_unstable` comes from .cargo/config.toml.
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&seed.to_le_bytes()));
    let runtime = builder.build().unwrap();
    runtime.block_on(schedule(seed, own))
}

/// The schedules catch a leader that counts itself toward a quorum before its own copy of an
/// entry is durable, which the openraft patch exists to prevent (`third_party/openraft/
/// PATCH.md`): with logs that tell a leader its own appends are saved before they are synced,
/// some seed's power loss takes an acknowledged write with it, and the checkers say so.
#[test]
fn a_leader_counting_its_unsynced_copy_loses_acknowledged_writes_and_is_caught() {
    for seed in 1..=CAUGHT_WITHIN {
        let run = run_schedule_with(seed, OwnAppends::SavedBeforeSynced);
        if let Some(anomaly) = run.anomalies.first() {
            println!("seed {seed} caught it: {anomaly:?}");
            return;
        }
    }
    panic!("no seed of {CAUGHT_WITHIN} caught a leader counting its unsynced copy");
}

/// A failing seed is a reproduction only if it replays: the same seed, run again, must give
/// the same history, operation by operation, to the virtual nanosecond.
#[test]
fn a_seed_replays_the_same_history() {
    for seed in [1, 4, 107] {
        let first = run_schedule(seed);
        let again = run_schedule(seed);
        assert!(first.history.len() > 20, "seed {seed} did too little");
        let diverged = first
            .history
            .iter()
            .zip(&again.history)
            .position(|(a, b)| a != b);
        assert!(
            diverged.is_none() && first.history.len() == again.history.len(),
            "seed {seed} replayed differently from operation {diverged:?} of {} (then {}): {:?} \
             then {:?}",
            first.history.len(),
            again.history.len(),
            diverged.map(|i| &first.history[i]),
            diverged.map(|i| &again.history[i]),
        );
    }
}
