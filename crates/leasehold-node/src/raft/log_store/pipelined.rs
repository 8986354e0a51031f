//! The queue in front of the disk, held at its fsync: an append is readable before it is
//! durable, openraft is told it is saved only once it is, appends queued behind a flush share
//! the next one, and a vote waits for every append before it; a follower's small append skips
//! the queue but not the appends queued before it.

use std::io;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
use openraft::testing::log_id;
use openraft::Vote;

use super::disk::{Disk, DiskFile, Open, StdDisk};
use super::tests::{entry, indexes, records_end};
use super::{lock, segment_path, LogStore};
use crate::limits::{INLINE_APPEND_COMMANDS, INLINE_APPEND_WRITE, PREALLOCATE_BYTES};

/// A disk whose files' `sync_data` (a segment's flush) waits while the gate is shut, and which
/// notes every flush and rename once it is done.
struct Gated {
    inner: StdDisk,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    shut: Mutex<bool>,
    opened: Condvar,
    /// Flushes waiting at the gate.
    waiting: Mutex<usize>,
    /// What was done, in order: "flush" or "rename".
    done: Mutex<Vec<&'static str>>,
    /// The thread of each flush, in order.
    flushed_on: Mutex<Vec<std::thread::ThreadId>>,
    /// While set, writes of zeros (a step of room) fail with this error, as a full disk's or
    /// an exhausted quota's do; records go in.
    no_room: Mutex<Option<io::ErrorKind>>,
}

struct GatedFile {
    inner: Arc<dyn DiskFile>,
    gate: Arc<Gate>,
}

impl Gate {
    fn set(&self, shut: bool) {
        *lock(&self.shut) = shut;
        self.opened.notify_all();
    }

    fn pass(&self) {
        *lock(&self.waiting) += 1;
        let mut shut = lock(&self.shut);
        while *shut {
            shut = self.opened.wait(shut).unwrap_or_else(|p| p.into_inner());
        }
        *lock(&self.waiting) -= 1;
    }

    fn done(&self) -> Vec<&'static str> {
        lock(&self.done).clone()
    }
}

impl Disk for Gated {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.inner.sync_dir(dir)
    }
    fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.read_dir(dir)
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>> {
        let inner = self.inner.open(path, how)?;
        let gate = self.gate.clone();
        Ok(Arc::new(GatedFile { inner, gate }))
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)?;
        lock(&self.gate.done).push("rename");
        Ok(())
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }
}

impl DiskFile for GatedFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, bytes: &[u8], offset: u64) -> io::Result<()> {
        if let Some(kind) = *lock(&self.gate.no_room) {
            if bytes.iter().all(|b| *b == 0) {
                return Err(kind.into());
            }
        }
        self.inner.write_all_at(bytes, offset)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }
    fn allocate(&self, len: u64) -> io::Result<()> {
        self.inner.allocate(len)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.gate.pass();
        self.inner.sync_data()?;
        lock(&self.gate.done).push("flush");
        lock(&self.gate.flushed_on).push(std::thread::current().id());
        Ok(())
    }
    fn sync_all(&self) -> io::Result<()> {
        self.inner.sync_all()
    }
}

/// Waits (at most 10 s) until `holds` does.
async fn until(what: &str, mut holds: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !holds().await {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A log in a fresh directory, on a disk with an open gate.
fn gated_log() -> (tempfile::TempDir, Arc<Gate>, LogStore) {
    gated_log_stepping(PREALLOCATE_BYTES)
}

/// A log as `gated_log`'s, with one append written by the flusher, which leaves the room ahead
/// that a small append is written into on its own thread, and a last write taken as quick
/// (the machine may be busy: a follower on a slow disk is another test's).
async fn gated_log_with_room() -> (tempfile::TempDir, Arc<Gate>, LogStore) {
    let (dir, gate, mut log) = gated_log();
    log.blocking_append([entry(1)]).await.unwrap();
    log.shared.wrote_in(Duration::ZERO);
    (dir, gate, log)
}

/// A log as `gated_log`'s, its room allocated and written `preallocate` bytes at a time.
fn gated_log_stepping(preallocate: u64) -> (tempfile::TempDir, Arc<Gate>, LogStore) {
    let dir = tempfile::TempDir::new().unwrap();
    let gate = Arc::new(Gate::default());
    let disk = Arc::new(Gated {
        inner: StdDisk,
        gate: gate.clone(),
    });
    let log = LogStore::open_on(disk, dir.path(), preallocate).unwrap();
    (dir, gate, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_are_readable_at_once_saved_in_order_and_before_a_vote() {
    let (dir, gate, mut log) = gated_log();
    gate.set(true);

    let mut appender = log.clone();
    let first = tokio::spawn(async move { appender.blocking_append((1..=3).map(entry)).await });
    until("the first flush waits at the gate", async || {
        *lock(&gate.waiting) == 1
    })
    .await;
    // Readable while its flush is held, so that a leader's replication streams send it.
    assert_eq!(indexes(&mut log).await, [1, 2, 3]);
    let mut appender = log.clone();
    let second = tokio::spawn(async move { appender.blocking_append((4..=5).map(entry)).await });
    let mut reader = log.clone();
    until("the second append is readable", async || {
        indexes(&mut reader).await.len() == 5
    })
    .await;
    let mut appender = log.clone();
    let third = tokio::spawn(async move { appender.blocking_append([entry(6)]).await });
    until("the third append is readable", async || {
        indexes(&mut reader).await.len() == 6
    })
    .await;
    let mut voter = log.clone();
    let vote = tokio::spawn(async move { voter.save_vote(&Vote::new(2, 1)).await });
    // No append can have been told it is saved: its flush has not happened. (Noted now,
    // asserted once the gate is open: a failed test must not leave the flusher waiting at it.)
    let told_early = first.is_finished() || second.is_finished() || third.is_finished();
    let done_early = gate.done();

    gate.set(false);
    first.await.unwrap().unwrap();
    second.await.unwrap().unwrap();
    third.await.unwrap().unwrap();
    assert!(
        !told_early,
        "an append was told it is saved before its flush"
    );
    assert!(done_early.is_empty(), "{done_early:?}");
    vote.await.unwrap().unwrap();
    // The first append's step of room (made durable apart, before its records), one flush for
    // that append, one shared by the two queued behind it, then the vote's state file, only
    // once every append is durable.
    assert_eq!(gate.done(), ["flush", "flush", "flush", "rename"]);

    drop(log);
    let mut log = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&mut log).await, [1, 2, 3, 4, 5, 6]);
    assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
}

/// A leader's commit may run ahead of its own flush: the state file never records a committed
/// id past the log on disk, or a restart would fail to re-apply up to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_state_file_never_holds_a_committed_id_past_the_log_on_disk() {
    let (dir, gate, mut log) = gated_log();
    log.blocking_append((1..=2).map(entry)).await.unwrap();
    gate.set(true);
    let mut appender = log.clone();
    let held = tokio::spawn(async move { appender.blocking_append((3..=4).map(entry)).await });
    until("the flush waits at the gate", async || {
        *lock(&gate.waiting) == 1
    })
    .await;
    // Committed on the followers' copies while this one is still being flushed; the state file
    // is written meanwhile (as a deferred purge may, beside the flusher).
    log.save_committed(Some(log_id(1, 1, 4))).await.unwrap();
    log.shared
        .write_state(&mut super::State::default())
        .unwrap();
    let on_disk = super::parse_state(
        dir.path(),
        &std::fs::read(dir.path().join("state")).unwrap(),
    );
    // The gate opens before anything is asserted: a failed test must not leave the flusher
    // waiting at it (the runtime would wait for it forever).
    gate.set(false);
    held.await.unwrap().unwrap();
    assert_eq!(on_disk.unwrap().committed, Some(log_id(1, 1, 2)));
    log.shared
        .write_state(&mut super::State::default())
        .unwrap();
    drop(log);
    let mut log = LogStore::open(dir.path()).unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1, 4)));
}

/// Asserts that there were `flushes`, all on `thread` if `on`, none on it otherwise.
fn all_on(flushes: &[std::thread::ThreadId], thread: std::thread::ThreadId, on: bool) {
    assert!(!flushes.is_empty(), "no flush");
    assert!(
        flushes.iter().all(|t| (*t == thread) == on),
        "{flushes:?}, on {thread:?}: {on}"
    );
}

/// A follower's append of a few commands is written on the thread that waits for it, before
/// the call returns; one of more goes to the flusher, on another thread, as a leader's does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_small_append_is_written_on_its_own_thread_a_big_one_by_the_flusher() {
    let (dir, gate, mut log) = gated_log_with_room().await;
    let here = std::thread::current().id();
    let flushes = || lock(&gate.flushed_on).clone();
    let first = flushes().len();
    let small = INLINE_APPEND_COMMANDS as u64;
    log.blocking_append_awaited((2..=small + 1).map(entry))
        .await
        .unwrap();
    let after_small = flushes();
    all_on(&after_small[first..], here, true);
    let big = (small + 2)..=(2 * small + 2);
    log.blocking_append_awaited(big.map(entry)).await.unwrap();
    all_on(&flushes().split_off(after_small.len()), here, false);

    drop(log);
    let mut log = LogStore::open(dir.path()).unwrap();
    let written: Vec<u64> = (1..=2 * small + 2).collect();
    assert_eq!(indexes(&mut log).await, written);
}

/// A small append is written on its own thread only into room written ahead of it: once an
/// append leaves less than the flusher keeps, the next goes to the flusher, which writes the
/// next step of room, and the one after is the follower's own again. The runtime's thread
/// never writes a step of zeros, which takes 0.8 ms for `PREALLOCATE_BYTES`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followers_small_append_goes_to_the_flusher_when_the_room_ahead_runs_short() {
    // Steps of room as small as the room kept, which is then all there is after a step.
    let (dir, gate, mut log) = gated_log_stepping(512);
    let here = std::thread::current().id();
    let last_on_here = || lock(&gate.flushed_on).last() == Some(&here);
    log.blocking_append([entry(1)]).await.unwrap();
    assert!(!last_on_here(), "the leader's append, by the flusher");
    for (i, on_here) in [(2, true), (3, false), (4, true)] {
        log.shared.wrote_in(Duration::ZERO);
        log.blocking_append_awaited([entry(i)]).await.unwrap();
        let why = [
            "too little room left: to the flusher",
            "into the room the flusher left",
        ];
        assert_eq!(last_on_here(), on_here, "{}", why[usize::from(on_here)]);
    }

    drop(log);
    let mut log = LogStore::open(dir.path()).unwrap();
    assert_eq!(indexes(&mut log).await, [1, 2, 3, 4]);
}

/// A truncate cuts the file where the records now end, room and all, and so does an append
/// that replaces entries (a new leader's), which truncates them first: the small append after
/// the one, or the other, is written off the runtime's thread, which never writes a truncate
/// or a step of room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_truncate_or_with_one_a_followers_small_append_is_written_off_its_thread() {
    for truncated_before in [true, false] {
        let (dir, gate, mut log) = gated_log_with_room().await;
        let here = std::thread::current().id();
        log.blocking_append((2..=4).map(entry)).await.unwrap();
        if truncated_before {
            log.truncate(log_id(1, 1, 3)).await.unwrap();
        }
        log.shared.wrote_in(Duration::ZERO);
        log.blocking_append_awaited([entry(3)]).await.unwrap();
        assert_ne!(
            lock(&gate.flushed_on).last(),
            Some(&here),
            "written on the runtime's thread (truncated before: {truncated_before})"
        );

        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, [1, 2, 3]);
    }
}

/// A step of room the disk has no space for (or the user's quota has none) is not taken, as a
/// full `fallocate`'s was not: the file's length goes back, and the appends write their records
/// past the last ones (an error would have failed the log, and every append after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_of_room_the_disk_has_no_space_for_is_not_taken_and_the_log_goes_on() {
    for no_room in [io::ErrorKind::StorageFull, io::ErrorKind::QuotaExceeded] {
        let (dir, gate, mut log) = gated_log_stepping(4096);
        log.blocking_append([entry(1)]).await.unwrap();
        *lock(&gate.no_room) = Some(no_room);
        // Into the room the first step left, and past it.
        for i in 2..=60 {
            let appended = log.blocking_append([entry(i)]).await;
            assert!(appended.is_ok(), "{no_room:?}: {appended:?}");
        }
        let len = std::fs::metadata(segment_path(dir.path(), 1))
            .unwrap()
            .len();
        assert_eq!(
            len,
            records_end(&log),
            "{no_room:?}: no room past the records"
        );

        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, (1..=60).collect::<Vec<u64>>());
    }
}

/// A follower whose last write took longer than `INLINE_APPEND_WRITE` hands even a small
/// append to the flusher, and writes the next one itself once the last write was quick.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_on_a_slow_disk_hands_even_a_small_append_to_the_flusher() {
    let (_dir, gate, mut log) = gated_log_with_room().await;
    let first = lock(&gate.flushed_on).len();
    let here = std::thread::current().id();
    log.shared.wrote_in(INLINE_APPEND_WRITE * 5);
    log.blocking_append_awaited([entry(2)]).await.unwrap();
    let by_the_flusher = lock(&gate.flushed_on).clone();
    all_on(&by_the_flusher[first..], here, false);
    // A quick write, as this machine's are, at least when it is not busy.
    log.shared.wrote_in(Duration::ZERO);
    log.blocking_append_awaited([entry(3)]).await.unwrap();
    all_on(
        &lock(&gate.flushed_on).split_off(by_the_flusher.len()),
        here,
        true,
    );
}

/// A follower's small append, written on its own thread, waits for the appends queued before
/// it (a leader's, queued before it stepped down, whose flusher has not started): written
/// first, it would follow them in the index and precede them on disk, a hole after a crash.
/// The blocking pool's only thread is held, so the flusher cannot start until it is let go.
#[test]
fn a_followers_small_append_waits_for_the_appends_queued_before_it() {
    use futures_util::FutureExt;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (dir, gate, log) = gated_log_with_room().await;
        let before = gate.done().len();
        let (let_go, held) = std::sync::mpsc::channel::<()>();
        let (holding, pool_held) = tokio::sync::oneshot::channel();
        let pool = tokio::task::spawn_blocking(move || {
            let _ = holding.send(());
            let _ = held.recv();
        });
        pool_held.await.unwrap();
        let (mut leader, mut follower) = (log.clone(), log.clone());
        let mut queued = std::pin::pin!(leader.blocking_append((2..=4).map(entry)));
        assert!(
            queued.as_mut().now_or_never().is_none(),
            "the leader's append is queued"
        );
        let mut small = std::pin::pin!(follower.blocking_append_awaited([entry(5)]));
        let at_once = small.as_mut().now_or_never();
        let done_early = gate.done().split_off(before);
        let_go.send(()).unwrap();
        pool.await.unwrap();
        queued.await.unwrap();
        assert!(
            at_once.is_none(),
            "the small append did not wait for the queued one"
        );
        small.await.unwrap();
        assert!(done_early.is_empty(), "{done_early:?}");
        assert_eq!(gate.done().split_off(before), ["flush", "flush"]);
        let small_on = *lock(&gate.flushed_on).last().unwrap();
        assert_eq!(
            small_on,
            std::thread::current().id(),
            "written on its own thread"
        );

        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, [1, 2, 3, 4, 5]);
    });
}
