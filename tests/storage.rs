//! The durable Raft store: openraft's conformance suite on the real segment log and snapshotting
//! state machine, and what openraft's suite never does: reopen after a crash.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use leasehold::lease::{Batch, Command as LeaseCommand, Op, Outcome};
use leasehold::raft::{LogStore, StateMachineStore, TypeConfig};
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
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
