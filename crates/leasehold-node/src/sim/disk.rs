//! A log store in memory that outlives its node, as a disk does: what was synced survives a
//! power loss, the rest is gone. Purged entries are archived for the checkers, which read the
//! log from index 1.
//!
//! In the seeded schedules, appends are synced as the real store syncs them
//! (`raft::log_store`): readable at once, synced by a flush that takes the disk's `fsync` (the
//! appends made meanwhile share the next), and only then told saved (a follower's small append,
//! which the real store writes on the thread that waits for it, is flushed here as any other:
//! the follower waits for it either way). So a leader replicates its entries while its own copy
//! is not yet durable, and the schedules' power losses land in that window; a node whose disk
//! is slower than a round trip to the others (the schedules have one) is left out of its own
//! quorums. The scenario tests, which time leases to the millisecond, keep a disk that syncs
//! every append at once (`fsync` zero).

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// What a log tells openraft of the appends of the leader it belongs to.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum OwnAppends {
    /// Saved once synced, as every other append: the product's store.
    #[default]
    SavedWhenSynced,
    /// Saved at once, synced later: a leader that counts its own unsynced copy toward the
    /// quorum, as openraft would if the patch that makes it wait for the flush were wrong
    /// (`third_party/openraft/PATCH.md`). The test that shows the checkers catch it sets this.
    SavedBeforeSynced,
}

#[derive(Default)]
pub(super) struct MemLogInner {
    /// What the node reads and writes.
    pub(super) live: Disk,
    /// What survives a power loss: `live` as of the last sync.
    pub(super) synced: Disk,
    /// Purged entries, kept for the checkers only (they read the log from index 1); Raft never
    /// sees them again. Purged entries are applied, so they are the cluster's for good.
    pub(super) archive: BTreeMap<u64, Entry<TypeConfig>>,
    /// The node whose log this is: its own appends carry its id as their leader's.
    pub(super) owner: u64,
    pub(super) own_appends: OwnAppends,
    /// How long a flush takes here; zero, an append is synced before `append` returns.
    pub(super) fsync: Duration,
    /// The appends in `live` but not yet synced, told saved by the next flush.
    unsynced: Vec<LogFlushed<TypeConfig>>,
    /// Whether an append was made since the last sync, and whether a flush is under way.
    dirty: bool,
    flushing: bool,
}

impl MemLogInner {
    pub(super) fn sync(&mut self) {
        self.synced = self.live.clone();
        self.dirty = false;
    }
}

#[derive(Clone, Default)]
pub(super) struct MemLog(Arc<Mutex<MemLogInner>>);

impl MemLog {
    /// The log of node `owner`.
    pub(super) fn of(owner: u64) -> MemLog {
        let log = MemLog::default();
        log.lock().owner = owner;
        log
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, MemLogInner> {
        self.0.lock().unwrap()
    }

    /// The flush: every `fsync`, syncs whatever was appended and tells those appends they
    /// are saved, until nothing more was appended. Outlives a crash as a disk's write-back
    /// does: it syncs the next incarnation's appends then, and tells a stopped core nothing.
    async fn flush(self) {
        loop {
            let fsync = self.lock().fsync;
            tokio::time::sleep(fsync).await;
            let saved = {
                let mut inner = self.lock();
                inner.sync();
                std::mem::take(&mut inner.unsynced)
            };
            saved.into_iter().for_each(|c| c.log_io_completed(Ok(())));
            let mut inner = self.lock();
            if !inner.dirty {
                inner.flushing = false;
                return;
            }
        }
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
        let mut inner = self.lock();
        let mut own = true;
        for entry in entries {
            own &= entry.log_id.leader_id.node_id == inner.owner;
            inner.live.entries.insert(entry.log_id.index, entry);
        }
        inner.dirty = true;
        if inner.fsync.is_zero() {
            inner.sync();
            drop(inner);
            callback.log_io_completed(Ok(()));
            return Ok(());
        }
        if own && inner.own_appends == OwnAppends::SavedBeforeSynced {
            callback.log_io_completed(Ok(()));
        } else {
            inner.unsynced.push(callback);
        }
        if !std::mem::replace(&mut inner.flushing, true) {
            tokio::spawn(self.clone().flush());
        }
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
