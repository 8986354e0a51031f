//! The durable Raft log and vote: append-only segment files and a small state file.
//!
//! A node's log directory holds:
//! - segments, `{first index:020}.seg`: the magic `LHSEG\0\0\x02` (format 2), then one record
//!   per entry, `[header crc32 u32][length u32][payload crc32 u32][entry]` (little-endian; the
//!   entry in postcard; the header checksum covers the record's offset in the file, its length
//!   and its payload checksum). Indexes are consecutive within and across segments. A new
//!   segment starts once the current one passes [`SEGMENT_BYTES`], so purging the log behind a
//!   snapshot deletes whole files. The active segment's blocks are allocated and written with
//!   zeros ahead of its records ([`PREALLOCATE_BYTES`] at a time), so that an append's
//!   `fdatasync` has neither a change of length nor a block's first write to journal with the
//!   data: a segment's records may be followed by zeros.
//! - `state`: the vote, the last purged log id and the last committed id reported, replaced
//!   atomically (temporary file, fsync, rename, fsync of the directory).
//!
//! An append is readable at once and written behind openraft's back: one flusher at a time
//! takes every append queued so far and writes all their records (the magic too, if it is a
//! segment's first) in one write and one `fdatasync`, and only then tells openraft those
//! appends are saved. A leader (openraft as patched, `third_party/openraft/PATCH.md`) sends its
//! entries to the followers while they are being flushed, and counts itself toward their quorum
//! only from that callback; a follower waits for it before it answers. Appends that queue up
//! behind a flush share the next one (group commit): the whole cost of durability, where a
//! B-tree store (redb, before) wrote several pages per commit. A follower's append of a few
//! commands (`append_awaited`, with openraft's patch 7) is written instead on the thread that
//! waits for it, once the appends queued before it are, and readable only then, into room the
//! flusher wrote ahead ([`ROOM_KEPT_BYTES`]): see [`INLINE_APPEND_COMMANDS`]. A vote is saved
//! durably before `save_vote` returns, and only once every earlier append is, as is a truncate
//! or a purge: each first waits for the appends queued before it, and holds the writer the
//! flusher holds per batch.
//!
//! # Recovery
//!
//! At open every record is read back and checked, and the last segment is synced: what a
//! killed process left in the page cache is durable before a restarted leader counts it. Writes
//! are sequential and each is synced before the next begins, so a crash can leave only a prefix
//! of the last write's bytes,
//! perhaps followed by zeros (the file grew, its blocks never came) or garbage (the block being
//! written): never a good record after a damaged one. A record is judged by this table, where
//! "later" means a good record (both checksums hold) starting at any byte after it, since a
//! damaged length says nothing of where the next record is:
//!
//! | header                      | payload               | later | verdict              |
//! |-----------------------------|-----------------------|-------|----------------------|
//! | checks                      | checks, decodes       |       | an entry; read on    |
//! | checks                      | checks, doesn't decode|       | corrupt              |
//! | checks, length > MAX_RECORD |                       |       | corrupt              |
//! | checks, a newer log format  | checks                |       | refused: newer build |
//! | zeros to the end of the file|                       | no    | the end: allocated   |
//! | cut short or fails          |                       | no    | torn: cut from here  |
//! | checks                      | cut short or fails    | no    | torn: cut from here  |
//! | cut short or fails          |                       | yes   | corrupt              |
//! | checks                      | cut short or fails    | yes   | corrupt              |
//!
//! A segment's magic is judged like a header (it goes out with the segment's first append).
//! Zeros after the last record are room allocated for the next (or blocks a crash never
//! filled): the records end there, in any segment, and nothing is cut. A
//! torn tail is cut, with a warning, and only in the last segment: every earlier segment was
//! whole and synced before the next was created. Anything else (a corrupt row, a torn record
//! before the last segment, a gap between entries) refuses to start rather than serve a log
//! with a hole. A segment without the magic but holding a good record of format 1 (no header
//! checksum) is refused as written by an older Leasehold.
//!
//! One case no format can tell apart: damage within the very last record of the last segment
//! looks exactly like a torn write. It is cut, and logged; every earlier record is protected.
//! Likewise, records a fault zeroed to the end of the last segment look exactly like room
//! allocated for more: they are not there, and nothing is logged. Before a later segment, such
//! a hole refuses to start: each segment is named for its first entry, and open checks that
//! the entry before it is there (unless purged).
//!
//! Directory changes (a segment created or removed, the state file renamed) are synced before
//! anything relies on them, and a truncate syncs each removal before the next, since a file
//! system may make unsynced directory changes durable in any order. Unsynced removals of purged
//! segments may come back after a crash; their entries are all purged, and open skips them.
//!
//! The committed id is a hint, never fsynced on its own: it is written whenever the state file
//! is. After a crash it may come back older than what the node had applied. That costs nothing
//! but re-applying a few entries later, because reads never trust it alone: see
//! [`read_index`](super::read_index), which makes a restarted node apply the whole log it found
//! at start-up before it answers a read.
//!
//! # Files
//!
//! `segment` holds the format and the recovery table; `disk` the seam under every file-system
//! call (in production the same system calls as before the seam: an append is still one
//! `pwrite` and one `fdatasync`); in tests, `sim_disk` is a disk that loses power and
//! `power_loss` crashes the store at every one of those calls.

mod disk;
#[cfg(test)]
mod pipelined;
#[cfg(test)]
mod power_loss;
mod segment;
#[cfg(test)]
mod sim_disk;

use std::borrow::Borrow;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageIOError, Vote};
use serde::{Deserialize, Serialize};

use super::codec::{decode, encode};
use super::snapshot_file::DurableSnapshot;
use super::AppendTimes;
use super::{LogId, StorageError, TypeConfig};
use crate::limits::{
    INLINE_APPEND_COMMANDS, INLINE_APPEND_WRITE, PREALLOCATE_BYTES, ROOM_KEPT_BYTES, SEGMENT_BYTES,
};
use crate::NodeId;
use disk::{Disk, DiskFile, Open, Spared, StdDisk};
use segment::{encode_record, parse_segment, End, Parsed, HEADER, MAGIC};

type Entry = openraft::Entry<TypeConfig>;

const STATE: &str = "state";
const STATE_TMP: &str = "state.tmp";
/// What a state file starts with since it carries a checksum: these bytes, then the CRC-32 of
/// the encoded state (little-endian), then the state. A file without them is of the format
/// before, read as it is.
const STATE_MAGIC: &[u8; 4] = b"LHS2";

/// What to do about a node whose data dir cannot be read: incarnations refuse an emptied data
/// dir under the node's old id, and an older copy of the dir could bring back an older vote or
/// lose entries the node acknowledged.
pub(crate) const REPLACE_NODE: &str = "replace the node: `leasehold member remove ID`, then add \
     it back under a new id with an empty data dir";

/// The state file's bytes: magic, checksum, state.
fn state_bytes(state: &State) -> Result<Vec<u8>, StorageError> {
    let payload = encode(state).map_err(write_error)?;
    let mut bytes = Vec::with_capacity(8 + payload.len());
    bytes.extend_from_slice(STATE_MAGIC);
    bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// The state a state file holds, or why it cannot be trusted.
fn parse_state(path: &Path, bytes: &[u8]) -> Result<State, StorageError> {
    let Some(rest) = bytes.strip_prefix(STATE_MAGIC) else {
        // The format before the checksum: whole, or not at all (a file of zeros would decode
        // as no vote if trailing bytes were let through).
        return match postcard::take_from_bytes::<State>(bytes) {
            Ok((state, [])) => Ok(state),
            Ok((_, rest)) => Err(read_error(format!(
                "{} is damaged ({} bytes after its state): it holds this node's vote, so the \
                 node refuses to start; {REPLACE_NODE}",
                path.display(),
                rest.len()
            ))),
            Err(e) => Err(read_error(e)),
        };
    };
    let damaged = |why: &str| {
        read_error(format!(
            "{} is damaged ({why}): it holds this node's vote, and a node that forgot its vote \
             may vote twice in a term, so it refuses to start; {REPLACE_NODE}",
            path.display()
        ))
    };
    let (crc, payload) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| damaged("shorter than its header"))?;
    if crc32fast::hash(payload) != u32::from_le_bytes(*crc) {
        return Err(damaged("its checksum does not match"));
    }
    decode(payload).map_err(|e| damaged(&format!("it does not decode: {e}")))
}

/// Cheap to clone: clones share one log, as openraft's log readers expect.
#[derive(Clone)]
pub struct LogStore {
    shared: Arc<Shared>,
    /// When set, a purge waits until the snapshot on disk covers it: openraft issues a purge
    /// alongside a snapshot install that may not be durable yet (see `snapshot_file`). Unset,
    /// as in openraft's storage suite, a purge goes ahead at once.
    purge_behind: Option<DurableSnapshot>,
    /// A purge still waiting for the snapshot that covers it (see `RaftLogStorage::purge`
    /// below): the task that will run it, which a later purge, or an append that would leave
    /// a hole, waits for first.
    deferred: Arc<tokio::sync::Mutex<Option<Deferred>>>,
    /// When set, every append is noted there, for the state machine (see `append_times`).
    appends: Option<AppendTimes>,
    /// Where the durations of appends (write and fdatasync) are counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// A purge running behind openraft's back: it waits for its snapshot, then purges.
type Deferred = tokio::task::JoinHandle<Result<(), StorageError>>;

struct Shared {
    disk: Arc<dyn Disk>,
    dir: PathBuf,
    /// What readers see. Held only for lookups and updates, never across file I/O.
    index: Mutex<Index>,
    /// The one writer's state: the flusher's, or a truncate's, purge's, vote's or follower's small
    /// append's, one at a time.
    writer: Mutex<Writer>,
    /// The last committed id openraft reported, written with the state file whenever that is.
    /// Apart from the writer, which the flusher holds across an fsync: openraft saves it from
    /// its core loop on every commit, and must not wait for a flush to do so.
    committed: Mutex<Option<LogId>>,
    /// Woken after every flush (see `drained`).
    flushes: tokio::sync::Notify,
    /// How long the last write and its `fdatasync` took, in microseconds.
    last_write: std::sync::atomic::AtomicU64,
    /// How far ahead of its records the active segment's blocks are allocated and written, a
    /// step at a time ([`PREALLOCATE_BYTES`] but in tests).
    preallocate: u64,
    /// The room a write off the runtime's thread leaves written past its records, and a small
    /// append needs to be written on it ([`ROOM_KEPT_BYTES`], at most `preallocate`).
    kept: u64,
}

#[derive(Default)]
struct Index {
    segments: BTreeMap<u64, Arc<dyn DiskFile>>,
    /// Where each entry is, for indexes `first..first + len` (purged ones are gone).
    entries: VecDeque<Location>,
    last_purged: Option<LogId>,
    /// Appends made but not yet written, after `entries`.
    queue: Queue,
}

/// Appends readable but not yet on disk (see the module's comment).
#[derive(Default)]
struct Queue {
    /// Their entries, in order, following `Index::entries`: readers see them at once (a
    /// leader's replication streams read them back while they are being flushed). Shared
    /// with the flusher's batch, which encodes them without a copy.
    entries: VecDeque<Arc<Entry>>,
    /// Each append's callback, in order, told once its last entry is durable.
    callbacks: VecDeque<LogFlushed<TypeConfig>>,
    /// Whether a flusher is at work: an append starts one when none is.
    flushing: bool,
    /// Appends queued, and flushed, since the log was opened (see `drained`).
    queued: u64,
    flushed: u64,
    /// Why a flush failed. What it was writing may be partly on disk, so nothing more is
    /// written: every later append fails too, and openraft stops the node.
    failed: Option<String>,
}

#[derive(Clone, Copy)]
struct Location {
    log_id: LogId,
    /// The segment (its first index) and where the record starts in it.
    segment: u64,
    offset: u64,
    len: u32,
}

#[derive(Default)]
struct Writer {
    /// The segment appends go to.
    active: Option<Active>,
    state: State,
}

/// The segment appends go to.
struct Active {
    /// Its first index.
    first: u64,
    file: Arc<dyn DiskFile>,
    /// Where its records end.
    len: u64,
    /// How far the writer has allocated its blocks and written zeros in them (from `len` on),
    /// as far as it knows: a reopened segment counts from its records' end, since what follows
    /// them may be room only allocated (an earlier build's, or a step a crash cut short).
    allocated: u64,
}

impl Writer {
    /// The room past the active segment's records, written with zeros.
    fn room(&self) -> u64 {
        (self.active.as_ref()).map_or(0, |active| active.allocated.saturating_sub(active.len))
    }
}

#[derive(Clone, Default, Serialize, Deserialize)]
struct State {
    vote: Option<Vote<NodeId>>,
    last_purged: Option<LogId>,
    committed: Option<LogId>,
}

fn io_error(subject: ErrorSubject<NodeId>, verb: ErrorVerb, e: impl ToString) -> StorageError {
    let e = io::Error::other(e.to_string());
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

fn read_error(e: impl ToString) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Read, e)
}

fn write_error(e: impl ToString) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Write, e)
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where an append that is not queued for the flusher is written.
#[derive(Clone, Copy)]
enum Thread {
    /// The caller's, which waits for it anyway: no hand-off to another thread and back.
    This,
    /// The blocking pool's, so that the runtime goes on meanwhile.
    BlockingPool,
}

/// The commands `entries` carry, an entry that is not a batch counting as one.
fn commands(entries: &[Entry]) -> usize {
    (entries.iter())
        .map(|entry| match &entry.payload {
            openraft::EntryPayload::Normal(batch) => batch.0.len(),
            _ => 1,
        })
        .sum()
}

/// What a step of room is written with, a piece at a time.
static ZEROS: [u8; 64 * 1024] = [0; 64 * 1024];

/// Allocates `active`'s blocks up to `to` and writes zeros in those past its records and its
/// room, durably: apart from the records, so that their `fdatasync` carries them alone.
fn step(active: &Active, to: u64) -> io::Result<()> {
    active.file.allocate(to)?;
    let mut at = active.allocated.max(active.len);
    while at < to {
        let piece = (to - at).min(ZEROS.len() as u64);
        active.file.write_all_at(&ZEROS[..piece as usize], at)?;
        at += piece;
    }
    active.file.sync_data()
}

fn segment_path(dir: &Path, first: u64) -> PathBuf {
    dir.join(format!("{first:020}.seg"))
}

impl LogStore {
    /// Opens (or creates) the log in directory `dir`, checking every record and cutting off a
    /// torn tail.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_on(Arc::new(StdDisk), dir, PREALLOCATE_BYTES)
    }

    fn open_on(disk: Arc<dyn Disk>, dir: &Path, preallocate: u64) -> Result<Self, StorageError> {
        let disk: Arc<dyn Disk> = Arc::new(Spared(disk));
        let names = list_or_create(disk.as_ref(), dir)?;
        let state = read_state(disk.as_ref(), dir, &names)?;
        let mut firsts: Vec<u64> = names
            .iter()
            .filter_map(|name| name.strip_suffix(".seg")?.parse().ok())
            .collect();
        firsts.sort_unstable();

        let purged_upto = state.last_purged.map(|id| id.index);
        let mut index = Index {
            last_purged: state.last_purged,
            ..Index::default()
        };
        let mut active = None;
        for (n, &first) in firsts.iter().enumerate() {
            let path = segment_path(dir, first);
            let (file, parsed, len) = recover_segment(disk.as_ref(), &path, n + 1 == firsts.len())?;
            segment_follows(&index, first, &path)?;
            for (entry, offset, record_len) in parsed.entries {
                let at = entry.log_id.index;
                if purged_upto.is_some_and(|p| at <= p) {
                    continue;
                }
                if let Err(expected) = next_in_log(index.last_log_id(), at) {
                    return Err(read_error(format!(
                        "{} holds entry {at} where entry {expected} should be: refusing to start \
                         rather than serve a log with a hole",
                        path.display(),
                    )));
                }
                index.entries.push_back(Location {
                    log_id: entry.log_id,
                    segment: first,
                    offset,
                    len: record_len,
                });
            }
            index.segments.insert(first, file.clone());
            // The next step writes what follows the records (see `Active::allocated`).
            active = Some(Active {
                first,
                file,
                len,
                allocated: len,
            });
        }
        if let Some(active) = &active {
            active.file.sync_data().map_err(read_error)?;
        }
        Ok(LogStore {
            shared: Arc::new(Shared {
                disk,
                dir: dir.to_owned(),
                index: Mutex::new(index),
                committed: Mutex::new(state.committed),
                writer: Mutex::new(Writer { active, state }),
                flushes: tokio::sync::Notify::new(),
                last_write: Default::default(),
                preallocate,
                kept: preallocate.min(ROOM_KEPT_BYTES),
            }),
            purge_behind: None,
            deferred: Arc::default(),
            appends: None,
            metrics: None,
        })
    }

    /// This log purges only what `snapshot` durably covers.
    pub fn purging_behind(mut self, snapshot: DurableSnapshot) -> Self {
        self.purge_behind = Some(snapshot);
        self
    }

    /// Counts how long each append takes to be durable in `metrics`.
    pub fn counting_in(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Notes in `appends` when each entry is appended.
    pub fn timing_appends(mut self, appends: AppendTimes) -> Self {
        self.appends = Some(appends);
        self
    }

    /// Runs `f` with the writer on the blocking pool, so that its fsync does not stall the
    /// runtime.
    async fn with_writer<T, F>(&self, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Shared, &mut Writer) -> Result<T, StorageError> + Send + 'static,
    {
        on_writer(self.shared.clone(), f).await
    }

    /// Settles the deferred purge: waits for it if `wait`, and reports its failure if it has
    /// failed, so that a purge that could not be done stops the node at its next write.
    async fn settle_deferred(&self, wait: bool) -> Result<(), StorageError> {
        let mut deferred = self.deferred.lock().await;
        if !deferred.as_ref().is_some_and(|d| wait || d.is_finished()) {
            return Ok(());
        }
        let Some(purge) = deferred.take() else {
            return Ok(());
        };
        purge.await.map_err(write_error)?
    }

    /// Waits for every queued append to be written and for a purge still waiting for its
    /// snapshot (see `purge`), and reports how they ended: for a shutdown, or a test, that must
    /// know nothing more of the log is on its way to the disk.
    pub async fn settled(&self) -> Result<(), StorageError> {
        self.shared.drained().await?;
        self.settle_deferred(true).await
    }

    /// What every append does first: settles a purge its entries must wait for, and notes when
    /// they were appended.
    async fn prepare(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<Vec<Entry>, StorageError> {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // Entries after a purge still waiting for its snapshot may not follow the last entry on
        // disk; written now, a crash before the purge would leave a log with a hole.
        let hole = entries
            .first()
            .is_some_and(|e| self.leaves_a_hole(e.log_id.index));
        self.settle_deferred(hole).await?;
        if let Some(appends) = &self.appends {
            appends.appended(entries.iter().map(|entry| entry.log_id));
        }
        Ok(entries)
    }

    /// Writes `entries` where they belong, on `thread` (on the blocking pool instead, where
    /// this thread would have a truncate or a step of room to write first), once every append
    /// queued before them is written, then tells `callback`.
    async fn write_now(
        &self,
        entries: Vec<Entry>,
        callback: LogFlushed<TypeConfig>,
        thread: Thread,
    ) -> Result<(), StorageError> {
        self.shared.drained().await?;
        // Simply following the log, into room written ahead, only: a truncate first, or a
        // step of zeros, is the blocking pool's to write.
        let thread = match thread {
            Thread::This if !self.shared.roomy_for(&entries) => Thread::BlockingPool,
            thread => thread,
        };
        let result = match thread {
            Thread::This => self
                .shared
                .append(&mut lock(&self.shared.writer), entries, thread),
            Thread::BlockingPool => {
                self.with_writer(move |shared, writer| shared.append(writer, entries, thread))
                    .await
            }
        };
        // The entries are durable (fdatasync returned) before openraft is told so.
        match &result {
            Ok(took) => {
                self.shared.timed(*took, self.metrics.as_deref());
                callback.log_io_completed(Ok(()));
            }
            Err(e) => callback.log_io_completed(Err(io::Error::other(e.to_string()))),
        }
        result.map(drop)
    }

    /// Queues `entries` for the flusher if they simply follow the last entry (what every
    /// leader's append and almost every follower's big one is), starting one if none is at
    /// work; hands them back otherwise, with their callback.
    #[allow(clippy::type_complexity)]
    fn queue(
        &self,
        entries: Vec<Entry>,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<Option<(Vec<Entry>, LogFlushed<TypeConfig>)>, StorageError> {
        let start = {
            let mut index = lock(&self.shared.index);
            if let Some(e) = index.queue.refusal() {
                callback.log_io_completed(Err(io::Error::other(e.clone())));
                return Err(write_error(e));
            }
            if !follows(index.last_log_id(), &entries) {
                return Ok(Some((entries, callback)));
            }
            let queue = &mut index.queue;
            queue.entries.extend(entries.into_iter().map(Arc::new));
            queue.callbacks.push_back(callback);
            queue.queued += 1;
            !std::mem::replace(&mut queue.flushing, true)
        };
        if start {
            let shared = self.shared.clone();
            let metrics = self.metrics.clone();
            // Not awaited: openraft hears of the flush through the callbacks.
            drop(tokio::task::spawn_blocking(move || {
                shared.flush_queue(metrics.as_deref())
            }));
        }
        Ok(None)
    }

    /// Whether `first_index` may not follow the last entry: what an append after a purge past
    /// the end of the log (a snapshot installed ahead of it) looks like. An empty log counts: a
    /// node joining a cluster whose log was compacted has none, and its first entries after
    /// the snapshot's must not reach the disk before the snapshot does.
    fn leaves_a_hole(&self, first_index: u64) -> bool {
        lock(&self.shared.index)
            .last_log_id()
            .is_none_or(|last| first_index != last.index + 1)
    }
}

/// Whether entry `at` may come next in a log whose last entry (or purge) is `last`: the one
/// rule recovery checks of the log on disk, refusing to start on a hole, and the append checks
/// of what it is handed before it writes, so that no bug upstream can put a hole on the disk
/// for the next start to find. The index that should come there, if not.
/// Whether `entries` simply follow `last`, one after another: nothing to truncate first.
fn follows(last: Option<LogId>, entries: &[Entry]) -> bool {
    entries.first().is_some_and(|e| {
        next_in_log(last, e.log_id.index).is_ok()
            && entries
                .windows(2)
                .all(|w| w[1].log_id.index == w[0].log_id.index + 1)
    })
}

fn next_in_log(last: Option<LogId>, at: u64) -> Result<(), u64> {
    match last {
        Some(last) if at != last.index + 1 => Err(last.index + 1),
        _ => Ok(()),
    }
}

/// Whether the segment at `path`, named for its first entry `first`, follows the entries
/// `index` holds so far. Unless the purge covers the entry before it, that one must be there:
/// else a segment whose last records a fault zeroed (read as room allocated for more) would
/// leave a hole behind a later one.
fn segment_follows(index: &Index, first: u64, path: &Path) -> Result<(), StorageError> {
    let purged_upto = index.last_purged.map_or(0, |id| id.index);
    let expected = index.last_log_id().map_or(1, |last| last.index + 1);
    if first <= purged_upto + 1 || first == expected {
        return Ok(());
    }
    Err(read_error(format!(
        "{} starts at entry {first} where entry {expected} should be: refusing to start rather \
         than serve a log with a hole; {REPLACE_NODE}",
        path.display(),
    )))
}

/// The names in the log's directory, creating it (durably) if there is none yet.
fn list_or_create(disk: &dyn Disk, dir: &Path) -> Result<Vec<String>, StorageError> {
    match disk.read_dir(dir) {
        Ok(names) => Ok(names),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            disk.create_dir_all(dir).map_err(write_error)?;
            // The directory's own entry must be durable before a vote is saved inside it.
            let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
            disk.sync_dir(parent.unwrap_or(Path::new(".")))
                .map_err(write_error)?;
            Ok(Vec::new())
        }
        Err(e) => Err(read_error(e)),
    }
}

/// The saved vote, committed index and purge, or the empty state of a new log; removes what a
/// crash left of a replacement.
fn read_state(disk: &dyn Disk, dir: &Path, names: &[String]) -> Result<State, StorageError> {
    let state = match disk.read(&dir.join(STATE)) {
        Ok(bytes) => parse_state(&dir.join(STATE), &bytes)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => State::default(),
        Err(e) => return Err(read_error(e)),
    };
    if names.iter().any(|n| n == STATE_TMP) {
        // A state replacement a crash interrupted; `state` is whole, old or new.
        disk.remove_file(&dir.join(STATE_TMP))
            .map_err(write_error)?;
    }
    Ok(state)
}

/// Segment `path`, opened and parsed, with where its records end once a torn tail of the `last`
/// segment (the write a crash interrupted, never acknowledged) is cut off. Any other damage
/// refuses.
fn recover_segment(
    disk: &dyn Disk,
    path: &Path,
    last: bool,
) -> Result<(Arc<dyn DiskFile>, Parsed, u64), StorageError> {
    let file = disk.open(path, Open::Existing).map_err(read_error)?;
    let bytes = disk.read(path).map_err(read_error)?;
    let parsed = parse_segment(&bytes);
    let mut len = bytes.len() as u64;
    let why = match parsed.end {
        End::Clean => None,
        End::Allocated(at) => {
            len = at;
            None
        }
        End::Torn(at) if last => {
            tracing::warn!(
                segment = %path.display(),
                at,
                bytes = len - at,
                "cutting off a torn tail, the write a crash interrupted"
            );
            file.set_len(at).map_err(write_error)?;
            file.sync_all().map_err(write_error)?;
            len = at;
            None
        }
        End::Torn(at) => Some((at, "a torn record before the last segment".to_owned())),
        End::Corrupt(at, ref why) => Some((at, why.to_string())),
        End::Newer(at, format) => {
            return Err(read_error(format!(
                "{} holds, at byte {at}, an entry of log format {format}, newer than this build \
                 ({}) reads (up to {}): a newer Leasehold wrote this data dir. Run that version \
                 on it (a node goes back to an older version only while the cluster uses nothing \
                 newer)",
                path.display(),
                env!("CARGO_PKG_VERSION"),
                leasehold_core::format::LOG_FORMAT,
            )));
        }
        End::OldFormat => {
            return Err(read_error(format!(
                "{} is a log segment of format 1 (no header checksum), written by an older \
                 Leasehold, which this one does not read: run the older build, or \
                 {REPLACE_NODE} so that it catches up from the leader (one node at a time)",
                path.display()
            )));
        }
    };
    if let Some((at, why)) = why {
        return Err(read_error(format!(
            "{} is corrupt at byte {at} ({why}): refusing to start rather than serve a log with \
             a hole; {REPLACE_NODE}",
            path.display()
        )));
    }
    Ok((file, parsed, len))
}

/// Runs `f` with the writer on the blocking pool, so that its fsync does not stall the runtime.
async fn on_writer<T, F>(shared: Arc<Shared>, f: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce(&Shared, &mut Writer) -> Result<T, StorageError> + Send + 'static,
{
    tokio::task::spawn_blocking(move || {
        let mut writer = lock(&shared.writer);
        f(&shared, &mut writer)
    })
    .await
    .map_err(write_error)?
}

impl Queue {
    /// What an append, or a wait for the queue, is refused with once a flush has failed.
    fn refusal(&self) -> Option<String> {
        let why = self.failed.as_ref()?;
        Some(format!("an earlier append failed: {why}"))
    }
}

impl Index {
    /// The last entry, queued or on disk, or else the last purged.
    fn last_log_id(&self) -> Option<LogId> {
        (self.queue.entries.back().map(|e| e.log_id))
            .or(self.entries.back().map(|l| l.log_id))
            .or(self.last_purged)
    }
}

impl Shared {
    /// Replaces the state file, durably, with the committed id last reported, or the last
    /// entry on disk if that is older: a leader's commit may run ahead of its own flush, and a
    /// restart that finds a committed id past its log fails to re-apply it. (The caller holds
    /// the writer, so the disk does not move meanwhile.)
    fn write_state(&self, state: &mut State) -> Result<(), StorageError> {
        let on_disk = {
            let index = lock(&self.index);
            (index.entries.back().map(|l| l.log_id)).or(index.last_purged)
        };
        state.committed = (*lock(&self.committed)).min(on_disk);
        let bytes = state_bytes(state)?;
        let tmp = self.dir.join(STATE_TMP);
        let file = self.disk.open(&tmp, Open::Truncated).map_err(write_error)?;
        file.write_all_at(&bytes, 0).map_err(write_error)?;
        file.sync_all().map_err(write_error)?;
        self.disk
            .rename(&tmp, &self.dir.join(STATE))
            .map_err(write_error)?;
        self.disk.sync_dir(&self.dir).map_err(write_error)
    }

    /// What of `entries` goes on after the log, by the rules recovery reads it by: an entry at
    /// or below the purge is dropped (recovery skips it); one from inside the log replaces what
    /// follows, as a truncate would (openraft's contract allows such an append); one that does
    /// not follow the last entry or purge would leave a hole and is refused (recovery would
    /// refuse to start on it).
    fn place(&self, writer: &mut Writer, entries: Vec<Entry>) -> Result<Vec<Entry>, StorageError> {
        let purged = lock(&self.index).last_purged.map(|p| p.index);
        let entries: Vec<Entry> = entries
            .into_iter()
            .filter(|e| purged.is_none_or(|p| e.log_id.index > p))
            .collect();
        let Some(first_index) = entries.first().map(|e| e.log_id.index) else {
            return Ok(entries);
        };
        let overlaps = lock(&self.index)
            .entries
            .back()
            .is_some_and(|last| first_index <= last.log_id.index);
        // Checked whole before anything changes, the truncate included: an entry from inside
        // the log has its predecessor there, after the purge.
        let mut last = match overlaps {
            true => None,
            false => lock(&self.index).last_log_id(),
        };
        for entry in &entries {
            if let Err(expected) = next_in_log(last, entry.log_id.index) {
                return Err(write_error(format!(
                    "an append put entry {} where entry {expected} should be: refusing to \
                     write a log with a hole",
                    entry.log_id.index
                )));
            }
            last = Some(entry.log_id);
        }
        if overlaps {
            self.truncate(writer, first_index)?;
        }
        Ok(entries)
    }

    /// Writes `entries` where they belong, durably, then makes them visible to readers: the
    /// way of an append that does not simply follow the log (the queue is empty then).
    /// Returns how long the write took, as `write` does.
    fn append(
        &self,
        writer: &mut Writer,
        entries: Vec<Entry>,
        thread: Thread,
    ) -> Result<Duration, StorageError> {
        let entries = self.place(writer, entries)?;
        let (locations, took) = self.write(writer, &entries, thread)?;
        lock(&self.index).entries.extend(locations);
        Ok(took)
    }

    /// Writes `entries`, which follow the last entry on disk, in one write and one
    /// `fdatasync` (on `thread`), and returns where they are and how long that write and its
    /// `fdatasync` took (not a step of room written before them: the disk's pace for an
    /// append, which a follower's small appends go by).
    fn write<E: Borrow<Entry>>(
        &self,
        writer: &mut Writer,
        entries: &[E],
        thread: Thread,
    ) -> Result<(Vec<Location>, Duration), StorageError> {
        let Some(first_index) = entries.first().map(|e| e.borrow().log_id.index) else {
            return Ok((Vec::new(), Duration::ZERO));
        };
        let active = self.active_from(writer, first_index)?;
        let mut bytes = Vec::new();
        if active.len == 0 {
            bytes.extend_from_slice(MAGIC);
        }
        let mut locations = Vec::with_capacity(entries.len());
        for entry in entries.iter().map(Borrow::borrow) {
            let offset = active.len + bytes.len() as u64;
            let record_len = encode_record(entry, offset, &mut bytes).map_err(write_error)?;
            locations.push(Location {
                log_id: entry.log_id,
                segment: active.first,
                offset,
                len: record_len,
            });
        }
        let end = active.len + bytes.len() as u64;
        // The runtime's thread writes into the room the others keep (see `append_awaited`).
        let ahead = match thread {
            Thread::This => 0,
            Thread::BlockingPool => self.kept,
        };
        let mut started = Instant::now();
        let written = self
            .allocate(active, end, ahead)
            .and_then(|()| {
                started = Instant::now();
                active.file.write_all_at(&bytes, active.len)
            })
            .and_then(|()| active.file.sync_data());
        let took = started.elapsed();
        if let Err(e) = written {
            // Leave no partial record behind this point for the next append to follow.
            if active.file.set_len(active.len).is_ok() {
                active.allocated = active.len;
            }
            return Err(write_error(e));
        }
        active.len = end;
        Ok((locations, took))
    }

    /// The segment a write of entries from `first_index` on goes to: the active one, or a new
    /// one if there is none or it is full.
    fn active_from<'w>(
        &self,
        writer: &'w mut Writer,
        first_index: u64,
    ) -> Result<&'w mut Active, StorageError> {
        if let Some(active) = writer.active.take_if(|active| active.len < SEGMENT_BYTES) {
            return Ok(writer.active.insert(active));
        }
        let path = segment_path(&self.dir, first_index);
        let file = self
            .disk
            .open(&path, Open::Truncated)
            .map_err(write_error)?;
        self.disk.sync_dir(&self.dir).map_err(write_error)?;
        lock(&self.index).segments.insert(first_index, file.clone());
        Ok(writer.active.insert(Active {
            first: first_index,
            file,
            len: 0,
            allocated: 0,
        }))
    }

    /// Allocates the active segment's blocks past `end`, the end of the write about to be made,
    /// and writes zeros into them, when fewer than `ahead` bytes past it are (or the write
    /// would go past them): a step ahead, up to the segment's size. Appends then write over
    /// blocks the file has written before, and their `fdatasync`s carry their own bytes alone.
    /// Blocks only allocated, the file system marks unwritten, and the first write into each
    /// must mark it written in its journal within the `fdatasync`: on this VM's ext4, a 4 KiB
    /// append and its `fdatasync` took 133 µs at the median into allocated blocks against
    /// 86-97 into written ones (and 115-156 growing the file), and a node's writes at 64
    /// clients 206-276 µs on average against 151-228. The price: every byte of the log is
    /// written twice, as zeros and as a record, in a step's write and `fdatasync` per
    /// [`PREALLOCATE_BYTES`]. A step the disk (or the quota) has no room for is not taken: the
    /// write itself decides whether it fits.
    fn allocate(&self, active: &mut Active, end: u64, ahead: u64) -> io::Result<()> {
        let to = (end + self.preallocate).min(SEGMENT_BYTES);
        if end + ahead <= active.allocated || to <= end.max(active.allocated) {
            return Ok(());
        }
        match step(active, to) {
            Ok(()) => active.allocated = to,
            // Whatever of the step was written is zeros past the records, which recovery reads
            // as room and the next step writes again: the file's length goes back if it can. A
            // user's quota spent (`EDQUOT`) leaves no more room than a full disk (`ENOSPC`).
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
                ) =>
            {
                let _ = active.file.set_len(active.allocated.max(active.len));
            }
            Err(e) => return Err(e),
        }
        Ok(())
    }

    /// Notes that a write and its `fdatasync` took `took`: the last in `last_write`, each in
    /// `metrics`.
    fn timed(&self, took: Duration, metrics: Option<&crate::metrics::Metrics>) {
        self.wrote_in(took);
        if let Some(metrics) = metrics {
            metrics.log_fsync_duration.observe(took.as_secs_f64());
        }
    }

    /// Notes that the last write and its `fdatasync` took `took`.
    fn wrote_in(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.last_write
            .store(micros, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether `entries` go on the records' end, into room written ahead for them: no truncate
    /// and no step of zeros before them (a small append's, so `kept` is room enough).
    fn roomy_for(&self, entries: &[Entry]) -> bool {
        follows(lock(&self.index).last_log_id(), entries) && lock(&self.writer).room() >= self.kept
    }

    /// Whether the last write and its `fdatasync` took longer than `limit`.
    fn slow(&self, limit: Duration) -> bool {
        let micros = self.last_write.load(std::sync::atomic::Ordering::Relaxed);
        Duration::from_micros(micros) > limit
    }

    /// The flusher: writes what is queued, in batches, until the queue is empty, telling each
    /// append's callback once its entries are durable. Runs on the blocking pool. The writer
    /// is held per batch, from before the batch is taken until the index says where it went,
    /// so that a truncate or purge (which hold it) always sees the queue and the disk agree.
    fn flush_queue(&self, metrics: Option<&crate::metrics::Metrics>) {
        loop {
            let mut writer = lock(&self.writer);
            let (batch, callbacks): (Vec<Arc<Entry>>, Vec<LogFlushed<TypeConfig>>) = {
                let mut index = lock(&self.index);
                if index.queue.entries.is_empty() {
                    index.queue.flushing = false;
                    return;
                }
                let queue = &mut index.queue;
                (
                    queue.entries.iter().cloned().collect(),
                    queue.callbacks.drain(..).collect(),
                )
            };
            let written = self.write(&mut writer, &batch, Thread::BlockingPool);
            if let Ok((_, took)) = &written {
                self.timed(*took, metrics);
            }
            // The index learns where the batch is before the writer is let go: a purge or
            // truncate that takes it next must find the batch on disk, not in neither place.
            let failed = {
                let mut index = lock(&self.index);
                match written {
                    Ok((locations, _)) => {
                        index.entries.extend(locations);
                        index.queue.entries.drain(..batch.len());
                        None
                    }
                    Err(e) => {
                        let queue = &mut index.queue;
                        let why = e.to_string();
                        queue.failed = Some(why.clone());
                        queue.entries.clear();
                        queue.flushing = false;
                        Some((why, queue.callbacks.drain(..).collect::<Vec<_>>()))
                    }
                }
            };
            drop(writer);
            let Some((why, later)) = failed else {
                // The entries are durable (fdatasync returned) before openraft is told so, and
                // counted flushed only once it is told: an append that waits for them (see
                // `drained`) is told after them.
                let told = callbacks.len() as u64;
                callbacks
                    .into_iter()
                    .for_each(|c| c.log_io_completed(Ok(())));
                lock(&self.index).queue.flushed += told;
                self.flushes.notify_waiters();
                continue;
            };
            for callback in callbacks.into_iter().chain(later) {
                callback.log_io_completed(Err(io::Error::other(why.clone())));
            }
            self.flushes.notify_waiters();
            return;
        }
    }

    /// Waits until every append queued before the call is durable and openraft told so, and
    /// says whether a flush failed: what a truncate, a purge, a vote and an append off the
    /// queue do first, so that none of them finds an earlier append still in flight. (Not
    /// "until the queue is empty": under a steady load it may never be.)
    async fn drained(&self) -> Result<(), StorageError> {
        let target = lock(&self.index).queue.queued;
        loop {
            let flushed = self.flushes.notified();
            tokio::pin!(flushed);
            flushed.as_mut().enable();
            {
                let index = lock(&self.index);
                if let Some(e) = index.queue.refusal() {
                    return Err(write_error(e));
                }
                if index.queue.flushed >= target {
                    return Ok(());
                }
            }
            flushed.await;
        }
    }

    /// Removes every entry from `since` on, durably.
    fn truncate(&self, writer: &mut Writer, since: u64) -> Result<(), StorageError> {
        let (cut, later, file) = {
            let mut index = lock(&self.index);
            let Some(first) = index.entries.front().map(|l| l.log_id.index) else {
                return Ok(());
            };
            let Some(at) = since
                .checked_sub(first)
                .and_then(|i| usize::try_from(i).ok())
            else {
                return Err(write_error(format!(
                    "truncating at {since}, before the first entry {first}"
                )));
            };
            let Some(cut) = index.entries.get(at).copied() else {
                return Ok(()); // Nothing at or after `since`.
            };
            index.entries.truncate(at);
            let later: Vec<u64> = index
                .segments
                .range(cut.segment + 1..)
                .map(|(first, _)| *first)
                .collect();
            for first in &later {
                index.segments.remove(first);
            }
            let file = index
                .segments
                .get(&cut.segment)
                .cloned()
                .ok_or_else(|| write_error("the segment to cut is missing"))?;
            (cut, later, file)
        };
        // Later segments go first, newest first, each durably before the next (a file system
        // may make unsynced removals durable in any order), so that a crash part way leaves the
        // log a prefix of itself, never a gap before a segment that survived.
        for first in later.iter().rev() {
            let path = segment_path(&self.dir, *first);
            self.disk.remove_file(&path).map_err(write_error)?;
            self.disk.sync_dir(&self.dir).map_err(write_error)?;
        }
        file.set_len(cut.offset).map_err(write_error)?;
        file.sync_all().map_err(write_error)?;
        writer.active = Some(Active {
            first: cut.segment,
            file,
            len: cut.offset,
            allocated: cut.offset,
        });
        Ok(())
    }

    /// Forgets every entry up to `upto`: the marker first, durably, then whole segments.
    fn purge(&self, writer: &mut Writer, upto: LogId) -> Result<(), StorageError> {
        writer.state.last_purged = Some(upto);
        self.write_state(&mut writer.state)?;
        let doomed = {
            let mut index = lock(&self.index);
            index.last_purged = Some(upto);
            while index
                .entries
                .front()
                .is_some_and(|l| l.log_id.index <= upto.index)
            {
                index.entries.pop_front();
            }
            // A segment goes once every entry in it is purged: all before the first kept
            // entry's segment, or every segment if no entry is kept.
            let keep_from = index.entries.front().map_or(u64::MAX, |l| l.segment);
            let doomed: Vec<u64> = index.segments.range(..keep_from).map(|(f, _)| *f).collect();
            for first in &doomed {
                index.segments.remove(first);
            }
            doomed
        };
        if writer
            .active
            .as_ref()
            .is_some_and(|active| doomed.contains(&active.first))
        {
            writer.active = None;
        }
        // Not synced: a removal a crash undoes brings back a segment whose entries are all
        // purged, and open skips them.
        for first in doomed {
            let path = segment_path(&self.dir, first);
            self.disk.remove_file(&path).map_err(write_error)?;
        }
        Ok(())
    }
}

/// The items of `items`, whose indexes (`index_of`) are consecutive, with indexes in
/// `start..end`.
fn slice<T>(
    items: &VecDeque<T>,
    index_of: impl Fn(&T) -> u64,
    start: u64,
    end: u64,
) -> std::collections::vec_deque::Iter<'_, T> {
    let Some(first) = items.front().map(index_of) else {
        return items.range(0..0);
    };
    let from = start.saturating_sub(first).min(items.len() as u64) as usize;
    let to = end.saturating_sub(first).min(items.len() as u64) as usize;
    items.range(from..to.max(from))
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let start = match range.start_bound() {
            Bound::Included(i) => *i,
            Bound::Excluded(i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => i.saturating_add(1),
            Bound::Excluded(i) => *i,
            Bound::Unbounded => u64::MAX,
        };
        // Read under the lock, so that a truncation cannot pull the bytes away between finding
        // an entry and reading it, nor the flusher move an entry from the queue to the disk;
        // decode after.
        let (payloads, queued): (Vec<Vec<u8>>, Vec<Entry>) = {
            let index = lock(&self.shared.index);
            let on_disk = slice(&index.entries, |l| l.log_id.index, start, end);
            let mut payloads = Vec::with_capacity(on_disk.len());
            for location in on_disk {
                let file = index
                    .segments
                    .get(&location.segment)
                    .ok_or_else(|| read_error("an entry's segment is missing"))?;
                let mut payload = vec![0; location.len as usize];
                file.read_exact_at(&mut payload, location.offset + HEADER)
                    .map_err(read_error)?;
                payloads.push(payload);
            }
            let queued = slice(&index.queue.entries, |e| e.log_id.index, start, end);
            (payloads, queued.map(|e| Entry::clone(e)).collect())
        };
        let mut entries = payloads
            .iter()
            .map(|payload| decode(payload).map_err(read_error))
            .collect::<Result<Vec<Entry>, _>>()?;
        entries.extend(queued);
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let index = lock(&self.shared.index);
        Ok(LogState {
            last_purged_log_id: index.last_purged,
            last_log_id: index.last_log_id(),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let vote = *vote;
        // Every earlier append durable first: a vote for a new term must not find this node's
        // former term's entries still in flight once it leads (a new leader counts its whole
        // log toward quorums).
        self.shared.drained().await?;
        self.with_writer(move |shared, writer| {
            writer.state.vote = Some(vote);
            shared.write_state(&mut writer.state)
        })
        .await
        .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        Ok(lock(&self.shared.writer).state.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        *lock(&self.shared.committed) = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(*lock(&self.shared.committed))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries = self.prepare(entries).await?;
        let Some((entries, callback)) = self.queue(entries, callback)? else {
            return Ok(());
        };
        // Not simply the next entries (from inside the log, or after a purge past its end):
        // placed and written on an empty queue.
        self.write_now(entries, callback, Thread::BlockingPool)
            .await
    }

    /// A follower's append (openraft as patched): a small one is written on this thread, on
    /// an empty queue, before this returns, unless the disk is slow (or, see `write_now`, the
    /// room written ahead runs short); a bigger one goes as a leader's does. See
    /// [`INLINE_APPEND_COMMANDS`], [`INLINE_APPEND_WRITE`] and [`ROOM_KEPT_BYTES`].
    async fn append_awaited<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let small = commands(&entries) <= INLINE_APPEND_COMMANDS;
        if !small || self.shared.slow(INLINE_APPEND_WRITE) {
            return self.append(entries, callback).await;
        }
        let entries = self.prepare(entries).await?;
        self.write_now(entries, callback, Thread::This).await
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.settle_deferred(false).await?;
        self.shared.drained().await?;
        self.with_writer(move |shared, writer| shared.truncate(writer, log_id.index))
            .await
    }

    /// Made durable before the snapshot covering it, a purge would leave a crash a log with a
    /// hole between the snapshot and the first entry, so it waits for that snapshot. openraft
    /// awaits this call in its core loop (`RaftCore`), right after handing a received snapshot
    /// to the state machine worker, and a wait here would hold up that loop (heartbeats, votes,
    /// the election timer) for as long as the install takes. So a purge the snapshot does not
    /// cover yet runs behind openraft's back, in a task: openraft has already forgotten the
    /// entries and reads none of them again. Until it is done the log keeps them, which a
    /// restart can always recover from; an append that would leave a hole behind them waits
    /// for it first.
    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        let mut deferred = self.deferred.lock().await;
        // Behind an earlier purge still waiting, or ahead of the snapshot on disk: later.
        let waits_for = (self.purge_behind.as_ref())
            .filter(|snapshot| deferred.is_some() || !snapshot.covers(log_id))
            .cloned();
        let Some(snapshot) = waits_for else {
            drop(deferred);
            self.shared.drained().await?;
            return self
                .with_writer(move |shared, writer| shared.purge(writer, log_id))
                .await;
        };
        let before = deferred.take();
        let shared = self.shared.clone();
        *deferred = Some(tokio::spawn(async move {
            if let Some(before) = before {
                before.await.map_err(write_error)??;
            }
            snapshot.wait_covers(log_id).await?;
            // Appends queued from here on all follow `log_id`: openraft purges only what it
            // has committed.
            shared.drained().await?;
            on_writer(shared, move |shared, writer| shared.purge(writer, log_id)).await
        }));
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::raft::snapshot_file::{SlowWork, SnapshotFile, SnapshotFiles};
    use leasehold_core::{Batch, Command, Op};
    use openraft::storage::RaftLogStorageExt;
    use openraft::testing::log_id;
    use openraft::EntryPayload;
    use std::fs;
    use std::time::Duration;

    proptest::proptest! {
        /// A state file of any bytes decodes to a state or an error, never a panic.
        #[test]
        fn a_state_file_of_any_bytes_decodes_without_a_panic(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)
        ) {
            let _ = parse_state(Path::new("state"), &bytes);
            let mut marked = STATE_MAGIC.to_vec();
            marked.extend_from_slice(&bytes);
            let _ = parse_state(Path::new("state"), &marked);
        }
    }

    /// The vote's state file carries a checksum: a damaged one stops the node and says what to
    /// do, and one written before the checksum is still read.
    #[tokio::test]
    async fn a_damaged_state_file_stops_the_node_and_an_old_one_is_still_read() {
        let dir = tempfile::TempDir::new().unwrap();
        let vote = Vote::new(7, 2);
        {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.save_vote(&vote).await.unwrap();
        }
        let path = dir.path().join(STATE);
        let mut bytes = fs::read(&path).unwrap();
        assert!(bytes.starts_with(STATE_MAGIC));
        *bytes.last_mut().unwrap() ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        let error = LogStore::open(dir.path())
            .err()
            .expect("a damaged vote is refused")
            .to_string();
        assert!(
            error.contains("damaged") && error.contains("checksum") && error.contains("new id"),
            "{error}"
        );

        // A file of zeros would decode, in the format before, as no vote at all.
        fs::write(&path, [0u8; 64]).unwrap();
        let error = LogStore::open(dir.path())
            .err()
            .expect("zeros refused")
            .to_string();
        assert!(error.contains("bytes after its state"), "{error}");

        let old = State {
            vote: Some(vote),
            ..State::default()
        };
        fs::write(&path, encode(&old).unwrap()).unwrap();
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(log.read_vote().await.unwrap(), Some(vote));
    }

    /// Entry `index` of term 1: one plain put, for the storage tests.
    pub(crate) fn entry(index: u64) -> Entry {
        Entry {
            log_id: log_id(1, 1, index),
            payload: EntryPayload::Normal(Batch(vec![Command {
                at_ms: Some(index),
                request: None,
                op: Op::Put {
                    key: format!("k{index}"),
                    value: vec![7; 100],
                    fence: None,
                },
            }])),
        }
    }

    pub(super) async fn indexes(log: &mut LogStore) -> Vec<u64> {
        log.try_get_log_entries(..)
            .await
            .unwrap()
            .iter()
            .map(|e| e.log_id.index)
            .collect()
    }

    #[tokio::test]
    async fn a_torn_tail_is_cut_off_and_the_log_goes_on_from_there() {
        let dir = tempfile::TempDir::new().unwrap();
        let intact = {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=5).map(entry)).await.unwrap();
            records_end(&log)
        };
        // A crash halfway through writing entry 6: its header and part of its payload, in the
        // room allocated for it.
        let segment = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&segment).unwrap();
        let mut torn = Vec::new();
        encode_record(&entry(6), intact, &mut torn).unwrap();
        let half = &torn[..torn.len() / 2];
        bytes[intact as usize..][..half.len()].copy_from_slice(half);
        fs::write(&segment, &bytes).unwrap();

        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5]);
        assert_eq!(
            fs::metadata(&segment).unwrap().len(),
            intact,
            "the tail is cut"
        );
        log.blocking_append([entry(6)]).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5, 6]);
    }

    /// Makes the next append start a segment, as if the active one were full.
    fn fill_active_segment(log: &LogStore) {
        lock(&log.shared.writer).active.as_mut().unwrap().len = SEGMENT_BYTES;
    }

    /// Where the active segment's records end.
    pub(super) fn records_end(log: &LogStore) -> u64 {
        lock(&log.shared.writer).active.as_ref().unwrap().len
    }

    /// The real disk, but its next `short` opens (files and the directory's) fail as they do
    /// when the process is out of descriptors.
    struct ShortOfDescriptors {
        short: std::sync::atomic::AtomicUsize,
    }

    impl ShortOfDescriptors {
        fn spend(&self) -> io::Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            match self
                .short
                .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            {
                Ok(_) => Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::MFILE.raw_os_error(),
                )),
                Err(_) => Ok(()),
            }
        }
    }

    impl Disk for ShortOfDescriptors {
        fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
            StdDisk.create_dir_all(dir)
        }
        fn sync_dir(&self, dir: &Path) -> io::Result<()> {
            self.spend()?;
            StdDisk.sync_dir(dir)
        }
        fn read_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
            StdDisk.read_dir(dir)
        }
        fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
            StdDisk.read(path)
        }
        fn open(&self, path: &Path, how: Open) -> io::Result<Arc<dyn DiskFile>> {
            self.spend()?;
            StdDisk.open(path, how)
        }
        fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
            StdDisk.rename(from, to)
        }
        fn remove_file(&self, path: &Path) -> io::Result<()> {
            StdDisk.remove_file(path)
        }
    }

    /// Safety review 161302a, finding 3: an `EMFILE` on a new segment or the state file was a
    /// storage error, which stops openraft for good.
    #[tokio::test]
    async fn opens_short_of_descriptors_are_retried_and_the_log_goes_on() {
        let dir = tempfile::TempDir::new().unwrap();
        let disk = Arc::new(ShortOfDescriptors { short: 0.into() });
        let mut log = LogStore::open_on(disk.clone(), dir.path(), PREALLOCATE_BYTES).unwrap();
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        fill_active_segment(&log);
        disk.short.store(3, std::sync::atomic::Ordering::SeqCst);
        log.blocking_append([entry(4)]).await.unwrap();
        assert!(segment_path(dir.path(), 4).exists(), "a new segment");
        disk.short.store(3, std::sync::atomic::Ordering::SeqCst);
        log.save_vote(&Vote::new(2, 1)).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
        assert_eq!(log.read_vote().await.unwrap(), Some(Vote::new(2, 1)));
    }

    /// The room ahead of the records is written with zeros, not only allocated: an append into
    /// blocks only allocated would have its `fdatasync` journal each block's first write too.
    /// ext4, xfs, btrfs and tmpfs tell such blocks by `SEEK_HOLE`, as a hole; a written file
    /// has none. Where the file system tells no such thing (say NFS), or stores written zeros
    /// as a hole (ZFS with compression), the test says so and checks nothing.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn the_room_ahead_of_the_records_is_written_with_zeros_not_only_allocated() {
        let hole_at = |file: &fs::File| rustix::fs::seek(file, rustix::fs::SeekFrom::Hole(0));
        let dir = tempfile::TempDir::new().unwrap();
        let probe = dir.path().join("probe");
        fs::write(&probe, [0; 8192]).unwrap();
        let probe = fs::File::options().write(true).open(&probe).unwrap();
        probe.sync_all().unwrap();
        DiskFile::allocate(&probe, 16384).unwrap();
        if hole_at(&probe).unwrap() != 8192 {
            eprintln!("this file system does not tell written blocks from allocated ones");
            return;
        }
        // Steps of 16 KiB, so that appends go through many, and the last leaves blocks of room
        // past the one the records end in.
        let disk = Arc::new(StdDisk);
        let mut log = LogStore::open_on(disk, &dir.path().join("log"), 16 * 1024).unwrap();
        for i in 1..=100 {
            log.blocking_append([entry(i)]).await.unwrap();
        }
        let path = segment_path(&dir.path().join("log"), 1);
        let file = fs::File::open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        assert!(len > records_end(&log) + 8 * 1024, "blocks of room");
        assert_eq!(
            hole_at(&file).unwrap(),
            len,
            "a hole (blocks only allocated)"
        );
        let room = &fs::read(&path).unwrap()[records_end(&log) as usize..];
        assert!(
            !room.is_empty() && room.iter().all(|b| *b == 0),
            "zeros past the records"
        );
    }

    #[tokio::test]
    async fn appends_go_into_allocated_room_and_a_reopened_log_goes_on_after_its_records() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::TempDir::new().unwrap();
        let segment = segment_path(dir.path(), 1);
        let mut log = LogStore::open(dir.path()).unwrap();
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        let first = records_end(&log);
        let on_disk = fs::metadata(&segment).unwrap();
        assert_eq!(
            on_disk.len(),
            first + PREALLOCATE_BYTES,
            "room allocated ahead"
        );
        assert!(
            on_disk.blocks() * 512 >= on_disk.len(),
            "blocks, not a hole"
        );
        log.blocking_append([entry(4)]).await.unwrap();
        assert!(records_end(&log) > first);
        assert_eq!(
            fs::metadata(&segment).unwrap().len(),
            on_disk.len(),
            "written in it"
        );
        let end = records_end(&log);
        drop(log);

        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
        assert_eq!(records_end(&log), end, "the records end where they ended");
        log.blocking_append([entry(5)]).await.unwrap();
        log.truncate(log_id(1, 1, 5)).await.unwrap();
        log.blocking_append([entry(5)]).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn records_zeroed_at_the_end_of_a_segment_before_another_refuse_to_start() {
        let dir = tempfile::TempDir::new().unwrap();
        let zeroed_from = {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=3).map(entry)).await.unwrap();
            let end = records_end(&log);
            log.blocking_append((4..=5).map(entry)).await.unwrap();
            fill_active_segment(&log);
            log.blocking_append([entry(6)]).await.unwrap();
            end
        };
        // A fault zeroes entries 4 and 5, which read like room allocated for more; segment 6's
        // one write is lost too, so no entry of it shows the hole.
        let first = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&first).unwrap();
        bytes[zeroed_from as usize..].fill(0);
        fs::write(&first, &bytes).unwrap();
        fs::write(segment_path(dir.path(), 6), b"").unwrap();
        let error = LogStore::open(dir.path()).err().expect("the hole refused");
        let error = error.to_string();
        assert!(
            error.contains("starts at entry 6 where entry 4 should be"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_flipped_bit_before_the_last_segment_refuses_to_start() {
        let dir = tempfile::TempDir::new().unwrap();
        {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=3).map(entry)).await.unwrap();
        }
        // A second segment after the first, then damage in the first.
        fs::write(segment_path(dir.path(), 4), b"").unwrap();
        let segment = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&segment).unwrap();
        bytes[MAGIC.len() + HEADER as usize + 3] ^= 0x10;
        fs::write(&segment, &bytes).unwrap();
        let error = LogStore::open(dir.path())
            .err()
            .expect("corruption refused");
        assert!(error.to_string().contains("corrupt"), "{error}");
    }

    #[tokio::test]
    async fn damage_before_the_last_record_refuses_to_start_even_in_the_last_segment() {
        let dir = tempfile::TempDir::new().unwrap();
        {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=3).map(entry)).await.unwrap();
        }
        let segment = segment_path(dir.path(), 1);
        let mut bytes = fs::read(&segment).unwrap();
        // In entry 1's payload, with entries 2 and 3 after it.
        bytes[MAGIC.len() + HEADER as usize + 3] ^= 0x10;
        fs::write(&segment, &bytes).unwrap();
        let error = LogStore::open(dir.path())
            .err()
            .expect("corruption refused");
        assert!(
            error.to_string().contains("a payload failing its checksum"),
            "{error}"
        );
    }

    /// One flipped bit in the header of a record in the middle of the last segment: the node
    /// either refuses to start, naming the file and the record, or keeps every entry intact.
    /// It never cuts the acknowledged entries from the damaged one on.
    #[tokio::test]
    async fn every_flipped_header_bit_of_a_middle_record_refuses_or_keeps_every_entry() {
        let dir = tempfile::TempDir::new().unwrap();
        let record_3 = {
            let mut log = LogStore::open(dir.path()).unwrap();
            log.blocking_append((1..=5).map(entry)).await.unwrap();
            let index = lock(&log.shared.index);
            index.entries[2].offset
        };
        let segment = segment_path(dir.path(), 1);
        let pristine = fs::read(&segment).unwrap();
        let mut failures = Vec::new();
        for bit in 0..HEADER * 8 {
            let mut bytes = pristine.clone();
            bytes[(record_3 + bit / 8) as usize] ^= 1 << (bit % 8);
            fs::write(&segment, &bytes).unwrap();
            match LogStore::open(dir.path()) {
                Err(error) => {
                    let error = error.to_string();
                    let named = error.contains(&segment.display().to_string())
                        && error.contains(&format!("byte {record_3}"));
                    if !named {
                        failures.push(format!(
                            "bit {bit}: refused without naming the place: {error}"
                        ));
                    }
                }
                Ok(mut log) => {
                    let entries = log.try_get_log_entries(..).await.unwrap();
                    if entries != (1..=5).map(entry).collect::<Vec<_>>() {
                        let kept: Vec<u64> = entries.iter().map(|e| e.log_id.index).collect();
                        failures.push(format!("bit {bit}: opened with entries {kept:?}"));
                    }
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} bits:\n{}",
            failures.len(),
            HEADER * 8,
            failures.join("\n")
        );
    }

    #[tokio::test]
    async fn a_segment_of_the_old_format_is_refused_with_what_to_do() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut bytes = Vec::new();
        for i in 1..=3 {
            let payload = encode(&entry(i)).unwrap();
            bytes.extend_from_slice(&(payload.len() as u32).to_le_bytes());
            bytes.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
            bytes.extend_from_slice(&payload);
        }
        let segment = segment_path(dir.path(), 1);
        fs::write(&segment, &bytes).unwrap();
        let error = LogStore::open(dir.path())
            .err()
            .expect("old format refused")
            .to_string();
        assert!(error.contains("format 1"), "{error}");
        assert!(error.contains("add it back under a new id"), "{error}");
        assert_eq!(fs::read(&segment).unwrap(), bytes, "left untouched");
    }

    #[tokio::test]
    async fn purge_deletes_whole_segments_and_survives_reopen() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut log = LogStore::open(dir.path()).unwrap();
        // Force one segment per append: every append finds the last one full.
        for i in 1..=6 {
            log.blocking_append([entry(i)]).await.unwrap();
            fill_active_segment(&log);
        }
        log.purge(log_id(1, 1, 3)).await.unwrap();
        assert_eq!(indexes(&mut log).await, vec![4, 5, 6]);
        assert!(
            !segment_path(dir.path(), 3).exists(),
            "purged segment deleted"
        );
        assert!(segment_path(dir.path(), 4).exists());
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![4, 5, 6]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 3)));
        // Purging past the end (a snapshot installed ahead of the log) empties it.
        log.purge(log_id(2, 1, 10)).await.unwrap();
        assert_eq!(indexes(&mut log).await, Vec::<u64>::new());
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(2, 1, 10)));
        log.blocking_append([entry(11)]).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![11]);
    }

    /// Writes a snapshot covering `upto` to `files`, durably, as an install does.
    async fn write_snapshot(files: &SnapshotFiles, upto: LogId) {
        let meta = openraft::SnapshotMeta {
            last_log_id: Some(upto),
            snapshot_id: format!("covering-{}", upto.index),
            ..Default::default()
        };
        let file = SnapshotFile {
            meta,
            data: Vec::new(),
        };
        files.write(upto.index, file).await.unwrap();
    }

    /// A log purging behind the snapshots of `files`, each in a directory of its own.
    fn behind_snapshots() -> (
        tempfile::TempDir,
        tempfile::TempDir,
        SnapshotFiles,
        LogStore,
    ) {
        let dir = tempfile::TempDir::new().unwrap();
        let snapshots = tempfile::TempDir::new().unwrap();
        let (files, _) = SnapshotFiles::open(snapshots.path(), SlowWork::BlockingPool).unwrap();
        let log = LogStore::open(dir.path())
            .unwrap()
            .purging_behind(files.durable());
        (dir, snapshots, files, log)
    }

    /// A snapshot installed ahead of the log: a purge through 20, past the log's end (which
    /// holds `kept`), then entry 21, which must wait for the snapshot covering 20: written
    /// first, a crash would leave it behind a hole.
    async fn purge_past_the_end_then_append(
        log: &mut LogStore,
        files: &SnapshotFiles,
        kept: &[u64],
    ) {
        log.purge(log_id(1, 1, 20)).await.unwrap();
        let mut appender = log.clone();
        let append = tokio::spawn(async move { appender.blocking_append([entry(21)]).await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !append.is_finished(),
            "entry 21 was written after {kept:?} before the snapshot covering 20 was durable"
        );
        assert_eq!(indexes(log).await, kept);
        write_snapshot(files, log_id(1, 1, 20)).await;
        append.await.unwrap().unwrap();
        assert_eq!(indexes(log).await, vec![21]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 20)));
    }

    /// openraft awaits `purge` in its core loop right after handing an install to the state
    /// machine worker: a purge that waited there for the snapshot held up heartbeats, votes
    /// and the election timer for the whole install (review e8637e4, section 6).
    #[tokio::test]
    async fn a_purge_ahead_of_the_snapshot_returns_at_once_and_happens_once_it_is_durable() {
        let (dir, _snapshots, files, mut log) = behind_snapshots();
        log.blocking_append((1..=10).map(entry)).await.unwrap();

        let purge = tokio::time::timeout(Duration::from_secs(1), log.purge(log_id(1, 1, 5)));
        purge
            .await
            .expect("the purge held its caller until the snapshot was durable")
            .unwrap();
        // Not purged yet: a crash now must find entries 1 to 5, the snapshot being older.
        assert_eq!(log.get_log_state().await.unwrap().last_purged_log_id, None);
        assert_eq!(indexes(&mut log).await, (1..=10).collect::<Vec<_>>());
        log.blocking_append([entry(11)]).await.unwrap();

        write_snapshot(&files, log_id(1, 1, 5)).await;
        log.settle_deferred(true).await.unwrap();
        assert_eq!(indexes(&mut log).await, (6..=11).collect::<Vec<_>>());
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 5)));

        let kept: Vec<u64> = (6..=11).collect();
        purge_past_the_end_then_append(&mut log, &files, &kept).await;
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![21]);
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_purged_log_id, Some(log_id(1, 1, 20)));
    }

    /// A node joining a cluster whose log was compacted has an empty log: it installs a
    /// snapshot, and its first entries after the snapshot's come next. Written before the
    /// snapshot was durable, a crash left them behind a hole: no snapshot, nothing purged, and
    /// a log starting past index 0.
    #[tokio::test]
    async fn on_an_empty_log_the_first_append_after_a_purge_waits_for_the_snapshot() {
        let (_dir, _snapshots, files, mut log) = behind_snapshots();
        purge_past_the_end_then_append(&mut log, &files, &[]).await;
    }

    /// openraft's storage contract lets an append start at or before the end of the log: it
    /// replaces what follows, as a truncate would. Written after the old records instead, the
    /// log would be out of order on disk, and recovery would refuse to start on it.
    #[tokio::test]
    async fn an_append_from_inside_the_log_replaces_what_follows() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut log = LogStore::open(dir.path()).unwrap();
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        let mut again = entry(2);
        again.log_id = log_id(2, 1, 2);
        log.blocking_append([again]).await.unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2]);
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        let entries = log.try_get_log_entries(..).await.unwrap();
        let ids: Vec<_> = entries
            .iter()
            .map(|e| (e.log_id.leader_id.term, e.log_id.index))
            .collect();
        assert_eq!(ids, vec![(1, 1), (2, 2)]);
    }

    /// What recovery refuses to start on, an entry that does not follow the one before it, the
    /// append refuses to write: a log with a hole never reaches the disk.
    #[tokio::test]
    async fn an_append_that_would_leave_a_hole_is_refused_and_writes_nothing() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut log = LogStore::open(dir.path()).unwrap();
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        let skipped = log.blocking_append([entry(5)]).await.unwrap_err();
        assert!(
            skipped
                .to_string()
                .contains("entry 5 where entry 4 should be"),
            "{skipped}"
        );
        let inside = log.blocking_append([entry(4), entry(6)]).await.unwrap_err();
        assert!(
            inside
                .to_string()
                .contains("entry 6 where entry 5 should be"),
            "{inside}"
        );
        // From inside the log, with a hole further on: refused before the truncate.
        let overlapping = log.blocking_append([entry(2), entry(4)]).await.unwrap_err();
        assert!(
            overlapping
                .to_string()
                .contains("entry 4 where entry 3 should be"),
            "{overlapping}"
        );
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3]);
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3]);
    }

    #[tokio::test]
    async fn truncate_across_segments_survives_reopen() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut log = LogStore::open(dir.path()).unwrap();
        log.blocking_append((1..=3).map(entry)).await.unwrap();
        fill_active_segment(&log);
        log.blocking_append((4..=6).map(entry)).await.unwrap();
        log.truncate(log_id(1, 1, 3)).await.unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2]);
        assert!(
            !segment_path(dir.path(), 4).exists(),
            "later segment deleted"
        );
        log.blocking_append((3..=4).map(entry)).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).unwrap();
        assert_eq!(indexes(&mut log).await, vec![1, 2, 3, 4]);
    }
}
