//! A log store in memory that outlives its node, as a disk does: what was synced survives a
//! power loss, the rest is gone. Purged entries are archived for the checkers, which read the
//! log from index 1.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};

use leasehold_core::{Batch, Command};
use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{Entry, EntryPayload, LogId, RaftLogReader, StorageError, Vote};

use crate::raft::TypeConfig;

/// What one node's disk holds.
#[derive(Clone, Default)]
pub(super) struct Disk {
    pub(super) vote: Option<Vote<u64>>,
    pub(super) committed: Option<LogId<u64>>,
    pub(super) purged: Option<LogId<u64>>,
    pub(super) entries: BTreeMap<u64, Entry<TypeConfig>>,
}

/// Set to true, as a temporary patch, to check that the suite catches a log store that tells
/// openraft an append is saved before it is synced: power loss then loses acknowledged writes.
const SKIP_FSYNC: bool = false;

#[derive(Default)]
pub(super) struct MemLogInner {
    /// What the node reads and writes.
    pub(super) live: Disk,
    /// What survives a power loss: `live` as of the last sync.
    pub(super) synced: Disk,
    /// Purged entries, kept for the checkers only (they read the log from index 1); Raft never
    /// sees them again. Purged entries are applied, so they are the cluster's for good.
    pub(super) archive: BTreeMap<u64, Entry<TypeConfig>>,
}

impl MemLogInner {
    pub(super) fn sync(&mut self) {
        self.synced = self.live.clone();
    }
}

#[derive(Clone, Default)]
pub(super) struct MemLog(Arc<Mutex<MemLogInner>>);

impl MemLog {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, MemLogInner> {
        self.0.lock().unwrap()
    }

    /// Power loss: whatever was not synced is gone.
    pub(super) fn lose_power(&self) {
        let mut inner = self.lock();
        inner.live = inner.synced.clone();
    }

    /// Every entry this node holds or purged, from index 1 to `upto` (openraft's own first
    /// entry, at 0, carries no command), with its term.
    pub(super) fn entries(&self, upto: u64) -> Vec<(u64, u64, Vec<Command>)> {
        let inner = self.lock();
        inner
            .archive
            .range(1..=upto)
            .chain(inner.live.entries.range(1..=upto))
            .map(|(index, entry)| {
                let commands = match &entry.payload {
                    EntryPayload::Normal(Batch(commands)) => commands.clone(),
                    _ => Vec::new(),
                };
                (*index, entry.log_id.leader_id.term, commands)
            })
            .collect()
    }
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<TypeConfig>>, StorageError<u64>> {
        Ok(self
            .lock()
            .live
            .entries
            .range(range)
            .map(|(_, e)| e.clone())
            .collect())
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = MemLog;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<u64>> {
        let disk = &self.lock().live;
        let last = disk
            .entries
            .values()
            .next_back()
            .map(|e| e.log_id)
            .or(disk.purged);
        Ok(LogState {
            last_purged_log_id: disk.purged,
            last_log_id: last,
        })
    }
    async fn get_log_reader(&mut self) -> MemLog {
        self.clone()
    }
    async fn save_vote(&mut self, vote: &Vote<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.vote = Some(*vote);
        inner.sync();
        Ok(())
    }
    async fn read_vote(&mut self) -> Result<Option<Vote<u64>>, StorageError<u64>> {
        Ok(self.lock().live.vote)
    }
    async fn save_committed(
        &mut self,
        committed: Option<LogId<u64>>,
    ) -> Result<(), StorageError<u64>> {
        // Not synced, as in the real store: reads wait for the log found at start-up instead.
        self.lock().live.committed = committed;
        Ok(())
    }
    async fn read_committed(&mut self) -> Result<Option<LogId<u64>>, StorageError<u64>> {
        Ok(self.lock().live.committed)
    }
    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<u64>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + Send,
        I::IntoIter: Send,
    {
        {
            let mut inner = self.lock();
            for entry in entries {
                inner.live.entries.insert(entry.log_id.index, entry);
            }
            if !SKIP_FSYNC {
                inner.sync();
            }
        }
        // Saved: synced above, before openraft hears of it.
        callback.log_io_completed(Ok(()));
        Ok(())
    }
    async fn truncate(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.entries.split_off(&log_id.index);
        inner.sync();
        Ok(())
    }
    async fn purge(&mut self, log_id: LogId<u64>) -> Result<(), StorageError<u64>> {
        let mut inner = self.lock();
        inner.live.purged = Some(log_id);
        let kept = inner.live.entries.split_off(&(log_id.index + 1));
        let purged = std::mem::replace(&mut inner.live.entries, kept);
        inner.archive.extend(purged);
        inner.sync();
        Ok(())
    }
}
