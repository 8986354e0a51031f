//! The durable Raft store: openraft's conformance suite on the real segment log and snapshotting
//! state machine, and what openraft's suite never does: reopen after a crash.

use std::io::{BufRead, BufReader, Cursor};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use leasehold::lease::{Batch, Command as LeaseCommand, Op, Outcome};
use leasehold::limits::PURGE_WAIT;
use leasehold::raft::{open_storage, LogStore, StateMachineStore, TypeConfig};
use openraft::storage::{
    RaftLogStorage, RaftLogStorageExt, RaftStateMachine, SnapshotMeta, StorageHelper,
};
use openraft::testing::{log_id, StoreBuilder, Suite};
use openraft::{Entry, EntryPayload, RaftLogReader, RaftSnapshotBuilder, StorageError, Vote};
use tempfile::TempDir;

struct LogBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for LogBuilder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<u64>> {
        let dir = TempDir::new().expect("temp dir");
        let log = LogStore::open(&dir.path().join("raft-log"))?;
        let sm = StateMachineStore::open(dir.path())?;
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite_passes_on_the_real_store() {
    Suite::test_all(LogBuilder).expect("openraft's storage conformance suite");
}

fn entry(term: u64, index: u64, key: &str) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, 1, index),
        payload: EntryPayload::Normal(Batch(vec![LeaseCommand {
            at_ms: Some(index),
            request: None,
            op: Op::Put {
                key: key.to_owned(),
                value: vec![7; 100],
                fence: None,
            },
        }])),
    }
}

/// The child side of the crash test: appends batches forever, announcing each durable one.
#[tokio::test]
async fn crash_child_appends_until_killed() {
    let Ok(dir) = std::env::var("LEASEHOLD_CRASH_DIR") else {
        return; // Only runs as the child of `log_survives_kill_9_mid_append`.
    };
    let mut log = LogStore::open(&std::path::Path::new(&dir).join("raft-log")).unwrap();
    log.save_vote(&Vote::new(4, 1)).await.unwrap();
    println!("vote saved");
    let mut next = 1;
    loop {
        let batch: Vec<_> = (next..next + 20)
            .map(|i| entry(4, i, &format!("k{i}")))
            .collect();
        log.blocking_append(batch).await.unwrap();
        next += 20;
        println!("durable {}", next - 1);
    }
}

#[test]
fn log_survives_kill_9_mid_append() {
    let dir = TempDir::new().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "crash_child_appends_until_killed",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LEASEHOLD_CRASH_DIR", dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut durable = 0u64;
    let mut vote_saved = false;
    // Kill it while it is appending: after a few dozen acknowledged batches.
    while durable < 1_000 {
        let line = lines.next().expect("child exited early").unwrap();
        // libtest may print its own "test ... " prefix on the same line.
        if line.ends_with("vote saved") {
            vote_saved = true;
        } else if let Some((_, n)) = line.split_once("durable ") {
            durable = n.trim().parse().unwrap();
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(vote_saved);

    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut log = LogStore::open(&dir.path().join("raft-log")).expect("reopen after kill -9");
        assert_eq!(
            log.read_vote().await.unwrap(),
            Some(Vote::new(4, 1)),
            "the saved vote survives"
        );
        let state = log.get_log_state().await.unwrap();
        let last = state.last_log_id.expect("entries survive").index;
        assert!(
            last >= durable,
            "acknowledged entry {durable} lost: the log ends at {last}"
        );
        let entries = log.try_get_log_entries(1..=last).await.unwrap();
        assert_eq!(entries.len() as u64, last, "the log has a hole");
        for (i, e) in entries.iter().enumerate() {
            assert_eq!(e.log_id.index, i as u64 + 1, "entries out of order");
        }
    });
}

#[test]
fn state_machine_reloads_its_snapshot_after_restart() {
    let dir = TempDir::new().unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        {
            let mut sm = StateMachineStore::open(dir.path()).unwrap();
            let acquire = Entry::<TypeConfig> {
                log_id: log_id(1, 1, 1),
                payload: EntryPayload::Normal(Batch(vec![LeaseCommand {
                    at_ms: Some(100),
                    request: None,
                    op: Op::Acquire {
                        lease: "l".into(),
                        holder: "a".into(),
                        ttl_ms: 1_000,
                    },
                }])),
            };
            let replies = sm.apply([acquire, entry(1, 2, "k")]).await.unwrap();
            assert!(matches!(
                replies[0][0].outcome,
                Outcome::Granted { token: 1, .. }
            ));
            sm.get_snapshot_builder()
                .await
                .build_snapshot()
                .await
                .unwrap();
        }
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(applied, Some(log_id(1, 1, 2)));
        let state = sm.shared();
        let state = state.read();
        assert_eq!(
            state.table.lease("l").unwrap().token,
            1,
            "tokens survive a restart"
        );
        assert_eq!(state.table.row("k"), Some(&[7u8; 100][..]));
        assert_eq!(state.table.now_ms(), 100);
    });
}

/// Entries `0..=upto` as a cluster's log holds them: the blank first entry, then puts.
fn log_through(upto: u64) -> Vec<Entry<TypeConfig>> {
    let first = Entry {
        log_id: log_id(0, 1, 0),
        payload: EntryPayload::Blank,
    };
    std::iter::once(first)
        .chain((1..=upto).map(|i| entry(1, i, &format!("k{i}"))))
        .collect()
}

/// A leader's snapshot of entries `0..=upto`: its meta and bytes.
async fn leader_snapshot(upto: u64) -> (SnapshotMeta<u64, openraft::BasicNode>, Vec<u8>) {
    let dir = TempDir::new().unwrap();
    let mut leader = StateMachineStore::open(dir.path()).unwrap();
    leader.apply(log_through(upto)).await.unwrap();
    let snapshot = leader
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    (snapshot.meta, snapshot.snapshot.into_inner())
}

/// A follower that voted, holds entries 0 to 5, all committed and applied, and a snapshot at 3.
async fn follower_at_5(dir: &Path) -> (LogStore, StateMachineStore) {
    let (mut log, mut sm) = open_storage(dir, leasehold::metrics::Metrics::new()).unwrap();
    log.save_vote(&Vote::new(2, 1)).await.unwrap();
    let entries = log_through(5);
    log.blocking_append(entries.clone()).await.unwrap();
    sm.apply(entries[..=3].to_vec()).await.unwrap();
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
    sm.apply(entries[4..].to_vec()).await.unwrap();
    log.save_committed(Some(log_id(1, 1, 5))).await.unwrap();
    (log, sm)
}

/// Opens the storage a crash left in `dir`, as a restarting node does, and checks it can go on:
/// the durable snapshot covers everything purged, the vote is there, openraft rebuilds its state
/// from it (re-applying the committed log after the snapshot), and every entry after the applied
/// one can be read to apply next.
async fn reopen_after_crash(dir: &Path) -> (LogStore, StateMachineStore) {
    let (mut log, mut sm) = open_storage(dir, leasehold::metrics::Metrics::new())
        .expect("storage opens after the crash");
    let purged = log.get_log_state().await.unwrap().last_purged_log_id;
    let snapshot = sm.get_current_snapshot().await.unwrap().map(|s| s.meta);
    let snapshot_last = snapshot.as_ref().and_then(|m| m.last_log_id);
    assert!(
        purged.map(|p| p.index) <= snapshot_last.map(|s| s.index),
        "the log is purged through {purged:?} but the durable snapshot ends at {snapshot_last:?}"
    );
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    StorageHelper::new(&mut log, &mut sm)
        .get_initial_state()
        .await
        .expect("openraft restores its state from the crashed storage");
    let (applied, _) = sm.applied_state().await.unwrap();
    let state = log.get_log_state().await.unwrap();
    let next = applied.map_or(1, |a| a.index + 1);
    let last = state.last_log_id.map_or(0, |l| l.index);
    let readable = log.try_get_log_entries(next..=last).await.unwrap();
    assert_eq!(
        readable.len() as u64,
        (last + 1).saturating_sub(next),
        "entries {next}..={last}, to apply next, are not all in the log"
    );
    (log, sm)
}

/// openraft 0.9.25 installs a received snapshot by queuing the install on the state machine
/// worker and issuing the purge of the log it covers at once, with no condition. Each crash
/// point of that pair must leave a log purged no further than the durable snapshot. (Paused
/// time: the store's bounded wait for a snapshot that never comes passes without sleeping.)
#[tokio::test(start_paused = true)]
async fn a_crash_at_any_point_of_a_snapshot_install_leaves_the_snapshot_covering_the_purged_log() {
    let (meta, data) = leader_snapshot(10).await;
    let snapshot = || Box::new(Cursor::new(data.clone()));
    let at_10 = meta.last_log_id.unwrap();

    // The purge was issued; the crash comes before the install ran. The purge waits for the
    // snapshot in a task of its own (not in openraft's core loop), so it returns at once,
    // having purged nothing; one whose snapshot never comes fails the log's next write.
    let dir = TempDir::new().unwrap();
    let (mut log, sm) = follower_at_5(dir.path()).await;
    log.purge(at_10).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, None, "purged before the snapshot");
    tokio::time::sleep(PURGE_WAIT + Duration::from_secs(1)).await;
    let next = log.blocking_append([entry(1, 6, "k6")]).await;
    assert!(
        next.is_err(),
        "a purge past every durable snapshot went unreported"
    );
    drop((log, sm));
    reopen_after_crash(dir.path()).await;

    // The install is durable; the crash comes before the purge ran. openraft's start-up purges
    // the log it finds behind the snapshot.
    let dir = TempDir::new().unwrap();
    let (log, mut sm) = follower_at_5(dir.path()).await;
    sm.install_snapshot(&meta, snapshot()).await.unwrap();
    drop((log, sm));
    let (mut log, mut sm) = reopen_after_crash(dir.path()).await;
    assert_eq!(sm.applied_state().await.unwrap().0, Some(at_10));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(at_10));

    // Both ran, in openraft's order and concurrently: the purge completes once the install is
    // durable.
    let dir = TempDir::new().unwrap();
    let (mut log, mut sm) = follower_at_5(dir.path()).await;
    let (purged, installed) =
        tokio::join!(log.purge(at_10), sm.install_snapshot(&meta, snapshot()));
    purged.unwrap();
    installed.unwrap();
    log.settled().await.unwrap();
    drop((log, sm));
    let (mut log, mut sm) = reopen_after_crash(dir.path()).await;
    assert_eq!(sm.applied_state().await.unwrap().0, Some(at_10));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(at_10));
    log.blocking_append([entry(1, 11, "k11")]).await.unwrap();
    let next = log.try_get_log_entries(11..=11).await.unwrap();
    sm.apply(next).await.unwrap();
    assert_eq!(sm.shared().read().table.row("k11"), Some(&[7u8; 100][..]));
}
