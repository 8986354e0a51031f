//! The log store through a power loss at every file-system call of an append, a truncate, a
//! purge and a vote save, on the simulated disk (`sim_disk`). Whatever the disk keeps, the store
//! opens; every entry whose append returned is there, intact, with no hole before it; nothing
//! comes back that an acknowledged truncate or purge removed; a saved vote stays saved; and the
//! log goes on from where it came back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::log_id;
use openraft::{RaftLogReader, Vote};

use super::disk::Disk;
use super::segment::{parse_segment, End};
use super::segment_path;
use super::sim_disk::{Keep, SimDisk};
use super::tests::entry;
use super::{lock, Entry, LogId, LogStore, StorageError};
use crate::limits::SEGMENT_BYTES;
use crate::NodeId;

const DIR: &str = "/node/raft-log";
/// Seeded choices of what survives, per crash point, besides keeping nothing and everything.
const SEEDS: u64 = 24;
/// Blocks allocated this far ahead of the records, about a record or two: appends cross the
/// allocated end often, so a crash finds it at every place.
const PREALLOCATE: u64 = 100;

#[derive(Clone)]
enum Op {
    Append(Vec<Entry>),
    /// Makes the next append start a segment, as if the active one were full.
    FillSegment,
    Truncate(u64),
    Purge(LogId),
    SaveVote(Vote<NodeId>),
}

fn append(term: u64, indexes: std::ops::RangeInclusive<u64>) -> Op {
    Op::Append(
        indexes
            .map(|i| Entry {
                log_id: log_id(term, 1, i),
                ..entry(i)
            })
            .collect(),
    )
}

/// Three segments: 1..=3, 4..=6, 7..=9.
fn three_segments() -> Vec<Op> {
    vec![
        Op::SaveVote(Vote::new(1, 1)),
        append(1, 1..=3),
        Op::FillSegment,
        append(1, 4..=6),
        Op::FillSegment,
        append(1, 7..=9),
    ]
}

impl Op {
    fn describe(&self) -> String {
        match self {
            Op::Append(entries) => {
                let first = entries.first().map(|e| e.log_id);
                format!("append of {} from {first:?}", entries.len())
            }
            Op::FillSegment => "fill".into(),
            Op::Truncate(since) => format!("truncate from {since}"),
            Op::Purge(upto) => format!("purge to {upto}"),
            Op::SaveVote(vote) => format!("save vote {vote}"),
        }
    }

    async fn run(&self, log: &mut LogStore) -> Result<(), StorageError> {
        match self {
            Op::Append(entries) => log.blocking_append(entries.clone()).await,
            Op::FillSegment => {
                if let Some(active) = lock(&log.shared.writer).active.as_mut() {
                    active.len = SEGMENT_BYTES;
                }
                Ok(())
            }
            Op::Truncate(since) => log.truncate(log_id(1, 1, *since)).await,
            Op::Purge(upto) => log.purge(*upto).await,
            Op::SaveVote(vote) => log.save_vote(vote).await,
        }
    }
}

/// What the acknowledged operations leave in the log.
#[derive(Clone, Default)]
struct Model {
    entries: BTreeMap<u64, Entry>,
    purged: Option<LogId>,
    vote: Option<Vote<NodeId>>,
}

impl Model {
    fn of(ops: &[Op]) -> Self {
        let mut model = Model::default();
        ops.iter().for_each(|op| model.apply(op));
        model
    }

    fn apply(&mut self, op: &Op) {
        match op {
            Op::Append(entries) => {
                for e in entries {
                    self.entries.insert(e.log_id.index, e.clone());
                }
            }
            Op::FillSegment => {}
            Op::Truncate(since) => {
                self.entries.split_off(since);
            }
            Op::Purge(upto) => {
                self.entries.retain(|i, _| *i > upto.index);
                self.purged = Some(*upto);
            }
            Op::SaveVote(vote) => self.vote = Some(*vote),
        }
    }
}

fn open(disk: &SimDisk) -> Result<LogStore, StorageError> {
    LogStore::open_on(Arc::new(disk.clone()), Path::new(DIR), PREALLOCATE)
}

async fn set_up(setup: &[Op]) -> (SimDisk, LogStore) {
    let disk = SimDisk::new();
    let mut log = open(&disk).unwrap();
    for op in setup {
        op.run(&mut log).await.unwrap();
    }
    (disk, log)
}

fn keeps() -> impl Iterator<Item = Keep> {
    [Keep::Nothing, Keep::Everything]
        .into_iter()
        .chain((0..SEEDS).map(Keep::Seeded))
}

/// Runs `setup`, then `op` with the power going during each of its calls in turn and once
/// after it returned, and checks every state the disk can come back in.
async fn crash_at_every_call(setup: &[Op], op: Op) {
    let before = Model::of(setup);
    let mut after = before.clone();
    after.apply(&op);
    let calls = {
        let (disk, mut log) = set_up(setup).await;
        disk.reset_calls(None);
        op.run(&mut log).await.unwrap();
        disk.calls()
    };
    assert!(calls > 0, "{} makes no file-system call", op.describe());
    for crash in (0..calls).map(Some).chain([None]) {
        let (disk, mut log) = set_up(setup).await;
        disk.reset_calls(crash);
        let acked = op.run(&mut log).await.is_ok();
        assert_eq!(
            acked,
            crash.is_none(),
            "{}: a failed call must fail the operation",
            op.describe()
        );
        drop(log);
        for keep in keeps() {
            let what = format!(
                "{}, the power lost during call {crash:?} of {calls}, keeping {keep:?}",
                op.describe()
            );
            check_recovery(&disk.after_power_loss(keep), &before, &after, acked, &what).await;
        }
    }
}

/// What an operation leaves: its own result if it returned, else that or the one before.
fn either<T: PartialEq>(acked: bool, before: T, after: T, got: T) -> bool {
    got == after || !acked && got == before
}

/// Opens the store on what survived and checks it against the states before and after the
/// operation (`acked`: whether the operation returned).
async fn check_recovery(disk: &SimDisk, before: &Model, after: &Model, acked: bool, what: &str) {
    let mut log =
        open(disk).unwrap_or_else(|e| panic!("{what}: refused to start after a power loss: {e}"));
    let state = log.get_log_state().await.unwrap();
    let vote = log.read_vote().await.unwrap();
    let entries = log.try_get_log_entries(..).await.unwrap();
    let purged = state.last_purged_log_id;
    let indexes: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();

    assert!(
        either(acked, before.vote, after.vote, vote),
        "{what}: vote {vote:?}"
    );
    assert!(
        either(acked, before.purged, after.purged, purged),
        "{what}: purged to {purged:?}"
    );
    let first = purged.map_or(1, |p| p.index + 1);
    let expected: Vec<u64> = (first..first + entries.len() as u64).collect();
    assert_eq!(indexes, expected, "{what}: a hole");
    for e in &entries {
        let i = e.log_id.index;
        let known = after.entries.get(&i) == Some(e) || !acked && before.entries.get(&i) == Some(e);
        assert!(known, "{what}: entry {i} is not what was appended there");
    }
    // An entry the operation itself removes (truncates) may be gone if it did not return; a
    // purge takes entries with its marker, checked above.
    let removed_by_op =
        |i: &u64| !after.entries.contains_key(i) && after.purged.is_none_or(|p| *i > p.index);
    let required = |i: &&u64| {
        **i >= first
            && if acked {
                after.entries.contains_key(i)
            } else {
                before.entries.contains_key(i) && !removed_by_op(i)
            }
    };
    for i in before
        .entries
        .keys()
        .chain(after.entries.keys())
        .filter(required)
    {
        assert!(
            indexes.contains(i),
            "{what}: acknowledged entry {i} lost: {indexes:?}"
        );
    }

    // The log goes on from where it came back, and that survives a reopen.
    let next = first + entries.len() as u64;
    let more = Entry {
        log_id: log_id(9, 1, next),
        ..entry(next)
    };
    log.blocking_append([more.clone()])
        .await
        .unwrap_or_else(|e| panic!("{what}: the next append fails: {e}"));
    drop(log);
    let mut log = open(disk).unwrap_or_else(|e| panic!("{what}: reopen after an append: {e}"));
    let mut expected = entries;
    expected.push(more);
    let again = log.try_get_log_entries(..).await.unwrap();
    assert!(again == expected, "{what}: the log changed across a reopen");
}

#[tokio::test]
async fn power_lost_during_the_first_append_of_an_empty_log() {
    crash_at_every_call(&[Op::SaveVote(Vote::new(1, 1))], append(1, 1..=3)).await;
}

#[tokio::test]
async fn power_lost_during_an_append_to_a_segment() {
    let setup = [append(1, 1..=3), append(1, 4..=5)];
    crash_at_every_call(&setup, append(1, 6..=8)).await;
}

#[tokio::test]
async fn power_lost_during_an_append_that_starts_a_segment() {
    let setup = [append(1, 1..=3), Op::FillSegment];
    crash_at_every_call(&setup, append(1, 4..=6)).await;
}

#[tokio::test]
async fn power_lost_during_an_append_over_a_truncated_tail() {
    let setup = [append(1, 1..=6), Op::Truncate(4)];
    crash_at_every_call(&setup, append(2, 4..=6)).await;
}

#[tokio::test]
async fn power_lost_during_an_append_after_a_purge_whose_removals_were_not_synced() {
    let mut setup = three_segments();
    setup.push(Op::Purge(log_id(1, 1, 5)));
    crash_at_every_call(&setup, append(1, 10..=11)).await;
}

#[tokio::test]
async fn power_lost_during_a_truncate_within_a_segment() {
    let setup = [append(1, 1..=3), append(1, 4..=6)];
    crash_at_every_call(&setup, Op::Truncate(3)).await;
}

#[tokio::test]
async fn power_lost_during_a_truncate_across_segments() {
    crash_at_every_call(&three_segments(), Op::Truncate(2)).await;
}

#[tokio::test]
async fn power_lost_during_a_purge_behind_the_log() {
    crash_at_every_call(&three_segments(), Op::Purge(log_id(1, 1, 5))).await;
}

#[tokio::test]
async fn power_lost_during_a_purge_past_the_end_of_the_log() {
    crash_at_every_call(&three_segments(), Op::Purge(log_id(1, 1, 12))).await;
}

#[tokio::test]
async fn power_lost_during_a_vote_save() {
    let setup = [Op::SaveVote(Vote::new(1, 1)), append(1, 1..=3)];
    crash_at_every_call(&setup, Op::SaveVote(Vote::new(2, 2))).await;
}

/// What `disk` holds, on a disk of its own.
fn copy_of(disk: &SimDisk) -> SimDisk {
    disk.after_power_loss(Keep::Everything)
}

#[tokio::test]
async fn power_lost_again_while_cutting_a_torn_tail() {
    let setup = [append(1, 1..=3)];
    let before = Model::of(&setup);
    let mut after = before.clone();
    after.apply(&append(1, 4..=6));
    let (disk, mut log) = set_up(&setup).await;
    // Calls 0 to 2 make room for 4..=6 (100 bytes ahead is less than a record): allocate,
    // write zeros, sync. Call 3 writes them: the power goes during the write, and it is torn.
    disk.reset_calls(Some(3));
    append(1, 4..=6).run(&mut log).await.unwrap_err();
    drop(log);
    let mut torn_tails = 0;
    for seed in 0..SEEDS {
        let torn = disk.after_power_loss(Keep::Seeded(seed));
        let calls = {
            let copy = copy_of(&torn);
            copy.reset_calls(None);
            drop(open(&copy).unwrap());
            copy.calls()
        };
        let segment = copy_of(&torn)
            .read(&segment_path(Path::new(DIR), 1))
            .unwrap();
        torn_tails += usize::from(matches!(parse_segment(&segment).end, End::Torn(_)));
        for crash in 0..calls {
            let copy = copy_of(&torn);
            copy.reset_calls(Some(crash));
            open(&copy).err().expect("the power went during open");
            for keep in keeps() {
                let what = format!(
                    "open of a torn tail (seed {seed}), the power lost during call {crash} of \
                     {calls}, keeping {keep:?}"
                );
                check_recovery(&copy.after_power_loss(keep), &before, &after, false, &what).await;
            }
        }
    }
    assert!(torn_tails > 0, "some seed leaves a tail to cut");
}
