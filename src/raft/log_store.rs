//! The durable Raft log, vote and committed index, in one redb file.
//!
//! Every append batch and every vote is one redb transaction committed with
//! `Durability::Immediate` (an fsync) before openraft hears that it is saved.
//!
//! The committed index costs no transaction of its own: openraft reports it after every commit,
//! and it is kept in memory and written with the next transaction that the log needs anyway.
//! After a crash it may come back older than what the node had applied. That costs nothing but
//! re-applying a few entries later, because reads never trust it alone: see
//! [`read_index`](super::read_index), which makes a restarted node apply the whole log it found
//! at start-up before it answers a read. (The deterministic simulation and the fault suite each
//! caught stale reads after a restart before that wait existed.)

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::{Arc, Mutex};

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, ErrorSubject, ErrorVerb, RaftLogReader, StorageIOError, Vote};
use redb::{Database, Durability, ReadableDatabase, ReadableTable, TableDefinition};

use super::codec::{decode, encode};
use super::{LogId, NodeId, StorageError, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");
const META: TableDefinition<&str, &[u8]> = TableDefinition::new("meta");
const VOTE_KEY: &str = "vote";
const COMMITTED_KEY: &str = "committed";
const PURGED_KEY: &str = "last_purged";

/// Cheap to clone: clones share one database, as openraft's log readers expect.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<Database>,
    /// A committed log id reported since the last transaction, to be written with the next.
    unwritten_committed: Arc<Mutex<Option<Option<LogId>>>>,
}

fn io_error(
    subject: ErrorSubject<NodeId>,
    verb: ErrorVerb,
    e: impl std::error::Error + 'static,
) -> StorageError {
    StorageIOError::new(subject, verb, AnyError::new(&e)).into()
}

fn read_error(e: impl std::error::Error + 'static) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Read, e)
}

fn write_error(e: impl std::error::Error + 'static) -> StorageError {
    io_error(ErrorSubject::Logs, ErrorVerb::Write, e)
}

impl LogStore {
    /// Opens (or creates) the log file at `path`.
    pub fn open(path: &Path) -> Result<Self, StorageError> {
        let db = Database::create(path).map_err(write_error)?;
        let txn = db.begin_write().map_err(write_error)?;
        txn.open_table(LOG).map_err(write_error)?;
        txn.open_table(META).map_err(write_error)?;
        txn.commit().map_err(write_error)?;
        Ok(LogStore {
            db: Arc::new(db),
            unwritten_committed: Arc::default(),
        })
    }

    fn read_meta<T: serde::de::DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StorageError> {
        let txn = self.db.begin_read().map_err(read_error)?;
        let table = txn.open_table(META).map_err(read_error)?;
        match table.get(key).map_err(read_error)? {
            Some(bytes) => Ok(Some(decode(bytes.value()).map_err(read_error)?)),
            None => Ok(None),
        }
    }

    fn take_unwritten_committed(&self) -> Option<Option<LogId>> {
        self.unwritten_committed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Runs one fsynced write transaction on the blocking pool, so an fsync never stalls the
    /// runtime. The last committed log id reported rides along.
    async fn write<F>(&self, f: F) -> Result<(), StorageError>
    where
        F: FnOnce(&redb::WriteTransaction) -> Result<(), StorageError> + Send + 'static,
    {
        let db = self.db.clone();
        let committed = self.take_unwritten_committed();
        tokio::task::spawn_blocking(move || {
            let mut txn = db.begin_write().map_err(write_error)?;
            txn.set_durability(Durability::Immediate)
                .map_err(write_error)?;
            f(&txn)?;
            if let Some(committed) = committed {
                put_meta(&txn, COMMITTED_KEY, &committed)?;
            }
            txn.commit().map_err(write_error)
        })
        .await
        .map_err(write_error)?
    }

    fn last_entry_log_id(&self) -> Result<Option<LogId>, StorageError> {
        let txn = self.db.begin_read().map_err(read_error)?;
        let table = txn.open_table(LOG).map_err(read_error)?;
        let last = table.last().map_err(read_error)?;
        let Some((_, bytes)) = last else {
            return Ok(None);
        };
        let entry: Entry = decode(bytes.value()).map_err(read_error)?;
        Ok(Some(entry.log_id))
    }
}

fn put_meta<T: serde::Serialize>(
    txn: &redb::WriteTransaction,
    key: &str,
    value: &T,
) -> Result<(), StorageError> {
    let bytes = encode(value).map_err(write_error)?;
    let mut table = txn.open_table(META).map_err(write_error)?;
    table.insert(key, bytes.as_slice()).map_err(write_error)?;
    Ok(())
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let txn = self.db.begin_read().map_err(read_error)?;
        let table = txn.open_table(LOG).map_err(read_error)?;
        let start = match range.start_bound() {
            Bound::Included(i) => Bound::Included(*i),
            Bound::Excluded(i) => Bound::Excluded(*i),
            Bound::Unbounded => Bound::Unbounded,
        };
        let end = match range.end_bound() {
            Bound::Included(i) => Bound::Included(*i),
            Bound::Excluded(i) => Bound::Excluded(*i),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut entries = Vec::new();
        for item in table.range::<u64>((start, end)).map_err(read_error)? {
            let (_, bytes) = item.map_err(read_error)?;
            entries.push(decode(bytes.value()).map_err(read_error)?);
        }
        Ok(entries)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let last_purged_log_id: Option<LogId> = self.read_meta(PURGED_KEY)?;
        let last_log_id = self.last_entry_log_id()?.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<NodeId>) -> Result<(), StorageError> {
        let vote = *vote;
        self.write(move |txn| put_meta(txn, VOTE_KEY, &vote))
            .await
            .map_err(|e| io_error(ErrorSubject::Vote, ErrorVerb::Write, e))
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<NodeId>>, StorageError> {
        self.read_meta(VOTE_KEY)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        *self
            .unwritten_committed
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        let unwritten = *self
            .unwritten_committed
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        match unwritten {
            Some(committed) => Ok(committed),
            None => Ok(self.read_meta::<Option<LogId>>(COMMITTED_KEY)?.flatten()),
        }
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
        let mut encoded = Vec::new();
        for entry in entries {
            encoded.push((entry.log_id.index, encode(&entry).map_err(write_error)?));
        }
        let result = self
            .write(move |txn| {
                let mut table = txn.open_table(LOG).map_err(write_error)?;
                for (index, bytes) in &encoded {
                    table
                        .insert(*index, bytes.as_slice())
                        .map_err(write_error)?;
                }
                Ok(())
            })
            .await;
        // The entries are durable (the commit fsynced) before openraft is told so.
        match &result {
            Ok(()) => callback.log_io_completed(Ok(())),
            Err(e) => callback.log_io_completed(Err(std::io::Error::other(e.to_string()))),
        }
        result
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.write(move |txn| {
            let mut table = txn.open_table(LOG).map_err(write_error)?;
            table
                .retain_in(log_id.index.., |_, _| false)
                .map_err(write_error)?;
            Ok(())
        })
        .await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The purge marker and the deletion land in one transaction: never a hole, never a lie.
        self.write(move |txn| {
            put_meta(txn, PURGED_KEY, &log_id)?;
            let mut table = txn.open_table(LOG).map_err(write_error)?;
            table
                .retain_in(..=log_id.index, |_, _| false)
                .map_err(write_error)?;
            Ok(())
        })
        .await
    }
}
