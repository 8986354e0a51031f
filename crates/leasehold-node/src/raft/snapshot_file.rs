//! The snapshot file, `snapshot.bin`: written whole, never replaced by an older snapshot, and
//! announced once durable, so that the log is purged no further than a snapshot on disk.
//!
//! openraft 0.9.25 does not order these for us:
//! - To install a received snapshot, its engine queues the install on the state machine worker
//!   and, in the same step, issues `PurgeLog` for the log the snapshot covers
//!   (`engine/handler/following_handler/mod.rs`, `install_full_snapshot`). `PurgeLog` carries no
//!   condition (`engine/command.rs`, `Command::condition`), so `RaftCore` purges, durably, while
//!   the worker may still be writing the snapshot. A crash between the two left the log purged
//!   past the snapshot on disk: on restart openraft re-applies the committed log after the old
//!   snapshot and finds it gone (`storage/helper.rs`, `reapply_committed`), and the node would
//!   offer the old snapshot to followers whose missing entries it no longer has. So the log's
//!   purge waits for [`DurableSnapshot::wait_covers`], which only a durable rename satisfies,
//!   in a task of its own, so that `RaftCore` goes on meanwhile (see the log store's `purge`).
//! - A build runs in a task of its own (`core/sm/worker.rs`, `build_snapshot`) while the worker
//!   goes on, perhaps to an install. A build that read the state before the install could
//!   rename its file after it, putting back a snapshot older than the applied state and the
//!   purged log. So a file replaces the current one only if it is at least as new, compared and
//!   renamed under one lock.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use openraft::storage::SnapshotMeta;

use super::descriptors::retrying;
use openraft::{AnyError, BasicNode, ErrorSubject, ErrorVerb, StorageIOError};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::codec::encode;
use super::{LogId, StorageError};
use crate::limits::{PURGE_WAIT, SNAPSHOT_SYNC_BYTES};
use crate::NodeId;
use leasehold_core::format::{Format, FORMAT_1, TABLE_FORMAT};

type Meta = SnapshotMeta<NodeId, BasicNode>;

/// What a snapshot file of a log format newer than 1 starts with, followed by its format's
/// byte (issue 41, item 8). A file of format 1 is as every build before 0.2.0 wrote it, with
/// nothing before the meta (whose first byte, an option's tag, is 0 or 1: never these bytes).
const FORMAT_MAGIC: &[u8; 7] = b"LHSNAP\0";

/// A snapshot file this build does not read.
#[derive(Debug, thiserror::Error)]
enum Unreadable {
    #[error("{0}")]
    Bytes(#[from] postcard::Error),
    #[error(
        "the snapshot's table is of format {0}, newer than this build ({v}) reads (up to \
         {TABLE_FORMAT}): a newer Leasehold wrote this data dir; run that version on it",
        v = env!("CARGO_PKG_VERSION")
    )]
    Newer(Format),
}

/// What the snapshot file holds: openraft's meta and the encoded table. The file's bytes are
/// postcard's encoding of this struct: the meta, the data's length, the data; after
/// [`FORMAT_MAGIC`] and the format's byte if the table's format is newer than 1.
#[derive(Serialize, Deserialize)]
pub(super) struct SnapshotFile {
    pub meta: Meta,
    pub data: Vec<u8>,
}

impl SnapshotFile {
    /// Writes the file's bytes in its parts, the data as it is: encoding the whole struct would
    /// copy the data (tens of megabytes at a million leases) into a second buffer first.
    fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        // The table is laid out in the oldest format that holds it, which its id names.
        let format = table_format(&self.meta);
        if format > FORMAT_1 {
            out.write_all(FORMAT_MAGIC)?;
            out.write_all(&[format])?;
        }
        let header = encode(&(&self.meta, self.data.len())).map_err(std::io::Error::other)?;
        out.write_all(&header)?;
        out.write_all(&self.data)
    }

    /// The file from its bytes, read in its parts: the data is what follows the header, kept
    /// in the same buffer, neither copied nor decoded byte by byte. Bytes after the data are
    /// ignored, as postcard's decoding of the whole struct ignores them.
    fn from_bytes(mut bytes: Vec<u8>) -> Result<SnapshotFile, Unreadable> {
        if bytes.starts_with(FORMAT_MAGIC) {
            match bytes.get(FORMAT_MAGIC.len()) {
                Some(&format) if format > TABLE_FORMAT => return Err(Unreadable::Newer(format)),
                Some(_) => drop(bytes.drain(..=FORMAT_MAGIC.len())),
                None => return Err(postcard::Error::DeserializeUnexpectedEnd.into()),
            }
        }
        let ((meta, len), rest): ((Meta, usize), &[u8]) = postcard::take_from_bytes(&bytes)?;
        if rest.len() < len {
            return Err(postcard::Error::DeserializeUnexpectedEnd.into());
        }
        let header = bytes.len() - rest.len();
        bytes.truncate(header + len);
        bytes.drain(..header);
        Ok(SnapshotFile { meta, data: bytes })
    }
}

/// What a snapshot's id ends with when its table is of a format newer than 1, followed by the
/// format's number: the id travels with the snapshot (in every chunk a leader sends, and into
/// the file a follower writes), so an install is marked with the format it needs without
/// decoding the table.
const FORMAT_SUFFIX: &str = "-table";

/// `snapshot_id` naming its table's `format`.
pub(crate) fn with_table_format(snapshot_id: String, format: Format) -> String {
    match format > FORMAT_1 {
        true => format!("{snapshot_id}{FORMAT_SUFFIX}{format}"),
        false => snapshot_id,
    }
}

/// The table format a snapshot's id names: 1 if it names none.
pub(crate) fn table_format(meta: &Meta) -> Format {
    let id = &meta.snapshot_id;
    id.rfind(FORMAT_SUFFIX)
        .and_then(|at| id[at + FORMAT_SUFFIX.len()..].parse().ok())
        .unwrap_or(FORMAT_1)
}

fn snapshot_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)).into()
}

/// Where a node keeps its snapshot, in its data dir.
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshot.bin")
}

/// A file written through this is fdatasynced after every `every` bytes. The log's fsyncs share
/// the disk with a snapshot's write, and every write waits on them: on this VM, a log fsync
/// waited up to 78 ms behind a 54 MB file (a million leases) flushed whole, and 31 to 33 ms
/// behind one flushed a MiB at a time. The build takes a little longer, off the write path.
struct SyncedEvery<'a> {
    file: &'a std::fs::File,
    every: usize,
    unsynced: usize,
    syncs: u64,
}

impl<'a> SyncedEvery<'a> {
    fn new(file: &'a std::fs::File, every: usize) -> Self {
        assert!(every > 0, "a sync every 0 bytes");
        SyncedEvery {
            file,
            every,
            unsynced: 0,
            syncs: 0,
        }
    }
}

impl Write for SyncedEvery<'_> {
    /// A full step is synced before the next write, not after the one that filled it: an
    /// error then means nothing of this call was written, as `Write` promises. The caller's
    /// `sync_all` covers the last step.
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.unsynced == self.every {
            self.file.sync_data()?;
            self.unsynced = 0;
            self.syncs += 1;
        }
        let room = self.every - self.unsynced;
        let written = self.file.write(&buf[..buf.len().min(room)])?;
        self.unsynced += written;
        Ok(written)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A snapshot file waiting in a temporary file, written and fsynced, to be renamed over the
/// current one.
struct Staged {
    tmp: PathBuf,
    last_log_id: Option<LogId>,
}

/// The snapshot file of one node's directory. Cheap to clone: clones share one file and lock.
#[derive(Clone)]
pub(super) struct SnapshotFiles {
    inner: Arc<Files>,
}

/// Where the slow work on a whole snapshot (reading, writing and decoding it) runs, and
/// where entries are applied (see `apply_thread`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SlowWork {
    /// On tokio's blocking pool, so that a large snapshot never holds up a runtime thread, and
    /// the heartbeats behind it; entries on a thread of their own. What a node uses.
    #[default]
    BlockingPool,
    /// On the calling task. For the simulation: work on the blocking pool finishes in real
    /// time while the simulation's clock is virtual, so with it a seed would not replay.
    Inline,
}

impl SlowWork {
    pub(super) async fn run<T, F>(self, work: F) -> Result<T, tokio::task::JoinError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        match self {
            SlowWork::BlockingPool => tokio::task::spawn_blocking(work).await,
            SlowWork::Inline => Ok(work()),
        }
    }
}

struct Files {
    dir: PathBuf,
    slow: SlowWork,
    /// The last log id of the snapshot on disk (`None` before the first). Held from the
    /// comparison through the rename and the directory's fsync, so that two writers cannot both
    /// pass the comparison and then rename in the wrong order. A std mutex, taken only on
    /// blocking threads.
    durable: Mutex<Option<LogId>>,
    /// The same, sent once the rename is durable, for the log's purge to wait on.
    announced: watch::Sender<Option<LogId>>,
}

/// Whether a write replaced the snapshot file.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Written {
    Replaced,
    /// The file on disk was newer: the write was dropped.
    KeptNewer(Option<LogId>),
}

impl SnapshotFiles {
    /// The snapshot files of `dir`, and the snapshot found there. Temporary files a crash left
    /// behind are removed: no one will rename them now.
    pub fn open(dir: &Path, slow: SlowWork) -> Result<(Self, Option<SnapshotFile>), StorageError> {
        let found = read_snapshot(dir)?;
        if let Ok(listing) = std::fs::read_dir(dir) {
            for name in listing.filter_map(|e| e.ok()?.file_name().into_string().ok()) {
                if name.starts_with("snapshot.") && name.ends_with(".tmp") {
                    let _ = std::fs::remove_file(dir.join(name));
                }
            }
        }
        let last = found.as_ref().and_then(|f| f.meta.last_log_id);
        let files = SnapshotFiles {
            inner: Arc::new(Files {
                dir: dir.to_owned(),
                slow,
                durable: Mutex::new(last),
                announced: watch::Sender::new(last),
            }),
        };
        Ok((files, found))
    }

    pub(super) fn slow(&self) -> SlowWork {
        self.inner.slow
    }

    /// What the log's purge waits on.
    pub fn durable(&self) -> DurableSnapshot {
        DurableSnapshot {
            announced: self.inner.announced.subscribe(),
            wait: PURGE_WAIT,
        }
    }

    /// The snapshot on disk, read on the blocking pool: a snapshot can be large, and a runtime
    /// thread held on it delays heartbeats.
    pub async fn read(&self) -> Result<Option<SnapshotFile>, StorageError> {
        let dir = self.inner.dir.clone();
        self.inner
            .slow
            .run(move || read_snapshot(&dir))
            .await
            .map_err(|e| snapshot_error(ErrorVerb::Read, e))?
    }

    /// Writes `file` on the blocking pool (see [`SnapshotFiles::read`]), replacing the current
    /// file unless that is newer, and gives `file` back. `id` keeps concurrent writers'
    /// temporary files apart.
    pub async fn write(
        &self,
        id: u64,
        file: SnapshotFile,
    ) -> Result<(SnapshotFile, Written), StorageError> {
        let files = self.clone();
        self.inner
            .slow
            .run(move || {
                let staged = files.stage(id, &file)?;
                let written = files.commit(staged)?;
                Ok((file, written))
            })
            .await
            .map_err(|e| snapshot_error(ErrorVerb::Write, e))?
    }

    /// Writes and fsyncs `file` beside the current one; a crash now leaves the current one.
    fn stage(&self, id: u64, file: &SnapshotFile) -> Result<Staged, StorageError> {
        let tmp = self.inner.dir.join(format!("snapshot.{id}.tmp"));
        let write = || -> std::io::Result<()> {
            let out = retrying(&tmp.display(), || std::fs::File::create(&tmp))?;
            file.write_to(&mut SyncedEvery::new(&out, SNAPSHOT_SYNC_BYTES))?;
            out.sync_all()
        };
        write().map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        Ok(Staged {
            tmp,
            last_log_id: file.meta.last_log_id,
        })
    }

    /// Renames a staged file over the current one, unless the current one is newer; then
    /// announces it. Two snapshots at the same log id hold the same state, so either may stay.
    fn commit(&self, staged: Staged) -> Result<Written, StorageError> {
        let mut durable = self
            .inner
            .durable
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if staged.last_log_id < *durable {
            let _ = std::fs::remove_file(&staged.tmp);
            return Ok(Written::KeptNewer(*durable));
        }
        let rename = || -> std::io::Result<()> {
            std::fs::rename(&staged.tmp, snapshot_path(&self.inner.dir))?;
            let dir = &self.inner.dir;
            retrying(&dir.display(), || std::fs::File::open(dir))?.sync_all()
        };
        rename().map_err(|e| snapshot_error(ErrorVerb::Write, e))?;
        *durable = staged.last_log_id;
        self.inner.announced.send_replace(staged.last_log_id);
        Ok(Written::Replaced)
    }
}

fn read_snapshot(dir: &Path) -> Result<Option<SnapshotFile>, StorageError> {
    let path = snapshot_path(dir);
    match retrying(&path.display(), || std::fs::read(&path)) {
        Ok(bytes) => Ok(Some(
            SnapshotFile::from_bytes(bytes).map_err(|e| snapshot_error(ErrorVerb::Read, e))?,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(snapshot_error(ErrorVerb::Read, e)),
    }
}

/// Why the log was not purged.
#[derive(Debug, thiserror::Error)]
pub enum PurgeWaitError {
    #[error(
        "purging the log through index {upto} waited {waited_ms} ms for a durable snapshot \
         covering it; the snapshot on disk ends at index {durable:?}"
    )]
    TimedOut {
        upto: u64,
        durable: Option<u64>,
        waited_ms: u128,
    },
    #[error(
        "purging the log through index {upto}: the state machine stopped before a snapshot \
         covering it was durable"
    )]
    StateMachineStopped { upto: u64 },
}

/// Whether a durable snapshot ending at `durable` covers `upto`.
fn covered(durable: &Option<LogId>, upto: LogId) -> bool {
    durable.is_some_and(|d| d.index >= upto.index)
}

/// The last log id of the durable snapshot, as the log store sees it.
#[derive(Clone)]
pub struct DurableSnapshot {
    announced: watch::Receiver<Option<LogId>>,
    wait: Duration,
}

impl DurableSnapshot {
    /// Whether the snapshot on disk covers `upto` now.
    pub fn covers(&self, upto: LogId) -> bool {
        covered(&self.announced.borrow(), upto)
    }

    /// Waits, up to [`PURGE_WAIT`], until the snapshot on disk covers `upto`. Indexes are
    /// compared, not log ids: the snapshot and the purge point come from one committed log, so
    /// an index names one entry.
    pub async fn wait_covers(&self, upto: LogId) -> Result<(), StorageError> {
        let mut announced = self.announced.clone();
        let waited = tokio::time::timeout(self.wait, announced.wait_for(|d| covered(d, upto)))
            .await
            .map(|seen| seen.is_ok());
        let error = match waited {
            Ok(true) => return Ok(()),
            Ok(false) => PurgeWaitError::StateMachineStopped { upto: upto.index },
            Err(_elapsed) => PurgeWaitError::TimedOut {
                upto: upto.index,
                durable: self.announced.borrow().map(|d| d.index),
                waited_ms: self.wait.as_millis(),
            },
        };
        Err(
            StorageIOError::new(ErrorSubject::Logs, ErrorVerb::Delete, AnyError::new(&error))
                .into(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::testing::log_id;

    #[tokio::test]
    async fn a_purge_waiting_on_a_stopped_state_machine_fails_at_once() {
        let dir = tempfile::TempDir::new().unwrap();
        let (files, _) = SnapshotFiles::open(dir.path(), SlowWork::BlockingPool).unwrap();
        let durable = files.durable();
        drop(files);
        let error = durable.wait_covers(log_id(1, 1, 5)).await.unwrap_err();
        assert!(error.to_string().contains("stopped"), "{error}");
    }

    /// A file written through `SyncedEvery` holds what was written, synced once per full step
    /// that more bytes followed.
    #[test]
    fn a_file_is_synced_once_per_full_step_and_holds_what_was_written() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("file");
        let bytes: Vec<u8> = (0..3_500u32).map(|i| i as u8).collect();
        let file = std::fs::File::create(&path).unwrap();
        let mut out = SyncedEvery::new(&file, 1_000);
        out.write_all(&bytes[..10]).unwrap();
        out.write_all(&bytes[10..]).unwrap();
        assert_eq!(out.syncs, 3, "after 1,000, 2,000 and 3,000 bytes");
        assert_eq!(out.unsynced, 500, "left for the caller's sync_all");
        assert_eq!(std::fs::read(&path).unwrap(), bytes);
    }

    /// The file is written and read in its parts, but its bytes are still postcard's encoding
    /// of the whole struct: files written before read back, and files written now read in
    /// earlier builds.
    #[test]
    fn a_snapshot_file_in_parts_is_the_whole_structs_encoding() {
        let file = SnapshotFile {
            meta: Meta {
                last_log_id: Some(log_id(3, 1, 70_000)),
                last_membership: Default::default(),
                snapshot_id: "3-70000-1".into(),
            },
            data: (0..300u32).map(|i| (i * 7) as u8).collect(),
        };
        let whole = encode(&file).unwrap();
        let mut parts = Vec::new();
        file.write_to(&mut parts).unwrap();
        assert_eq!(parts, whole);

        let read = SnapshotFile::from_bytes(whole.clone()).unwrap();
        assert_eq!(read.meta, file.meta);
        assert_eq!(read.data, file.data);
        let mut trailing = whole.clone();
        trailing.extend_from_slice(b"junk");
        assert_eq!(SnapshotFile::from_bytes(trailing).unwrap().data, file.data);
        let cut = whole[..whole.len() - 1].to_vec();
        assert!(SnapshotFile::from_bytes(cut).is_err(), "a file cut short");

        // Issue 41, item 8: a file marked with a format this build reads reads as the same
        // file; one of a newer format is named so.
        let mut marked = FORMAT_MAGIC.to_vec();
        marked.push(TABLE_FORMAT);
        marked.extend_from_slice(&whole);
        assert_eq!(SnapshotFile::from_bytes(marked).unwrap().data, file.data);
        let mut newer = FORMAT_MAGIC.to_vec();
        newer.push(TABLE_FORMAT + 1);
        newer.extend_from_slice(&whole);
        let refused = SnapshotFile::from_bytes(newer).err().unwrap().to_string();
        assert!(
            refused.contains(&format!("of format {}", TABLE_FORMAT + 1)),
            "{refused}"
        );
    }
}
