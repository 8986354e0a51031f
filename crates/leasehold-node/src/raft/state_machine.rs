//! Applies committed entries to the [`LeaseTable`]; builds, stores and installs snapshots.
//!
//! The table lives in memory. Durability comes from the log plus a snapshot file written
//! atomically (temp file, fsync, rename, fsync of the directory) and loaded before Raft starts;
//! [`snapshot_file`](super::snapshot_file) keeps that file from going back, and tells the log
//! when it may purge.

use std::io::Cursor;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use openraft::storage::{RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, BasicNode, EntryPayload, ErrorSubject, ErrorVerb, RaftSnapshotBuilder,
    StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use super::apply_thread::ApplyThread;
use super::codec::encode_sized;
use super::events::{EventHistory, NotedEvent};
use super::snapshot_file::{
    with_table_format, DurableSnapshot, SlowWork, SnapshotFile, SnapshotFiles, Written,
};
use super::{AppendTimes, Applied, LogId, StorageError, TypeConfig};
use crate::metrics::Metrics;
use crate::NodeId;
use leasehold_core::format::{Format, FORMAT_1};
use leasehold_core::{Batch, EventKind, LeaseTable};

type Entry = openraft::Entry<TypeConfig>;
type Meta = SnapshotMeta<NodeId, BasicNode>;

/// The applied state, shared with the gRPC services that read it after `ensure_linearizable`.
pub struct SharedState {
    inner: RwLock<Applying>,
    /// The lease events of the entries applied here, for watchers.
    events: Mutex<EventHistory>,
    /// The last applied index, sent after its events are in `events`: watchers wait on it.
    applied: tokio::sync::watch::Sender<u64>,
    /// The newest store time this process applied, and when its entry was appended here, on
    /// this process's monotonic clock: what a new leader on this node carries its time on from
    /// (see `node::clock`).
    stamp_seen: Mutex<Option<StampSeen>>,
    /// The applied table's format (`LeaseTable::format`), for a write's check without the
    /// lock, which the apply thread holds across whole batches.
    format: AtomicU8,
}

/// A store time, the entry that brought it, and the instant of this process's monotonic clock
/// at which that entry was appended here (or applied, where the append was not noted). The
/// stamp was taken before its entry was proposed, so the instant is no earlier than the stamp;
/// the entry is applied, so it is committed and will never be replaced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StampSeen {
    pub ms: u64,
    /// The newest entry applied here that carried a stamp (or moved time): a leader counts a
    /// peer's carried time only from an entry at least as new as its own (see `node::clock`).
    pub entry: LogId,
    pub at: tokio::time::Instant,
}

#[derive(Default, Clone, Serialize, Deserialize)]
pub struct Applying {
    pub table: LeaseTable,
    pub last_applied: Option<LogId>,
    pub last_membership: StoredMembership<NodeId, BasicNode>,
}

impl Default for SharedState {
    fn default() -> Self {
        SharedState {
            inner: RwLock::default(),
            events: Mutex::default(),
            applied: tokio::sync::watch::channel(0).0,
            stamp_seen: Mutex::default(),
            format: AtomicU8::new(FORMAT_1),
        }
    }
}

impl SharedState {
    /// The kept lease events, under their lock: held only for a scan, never across an await.
    pub fn events(&self) -> std::sync::MutexGuard<'_, EventHistory> {
        self.events.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Follows the last applied index; every event up to it is in [`events`](Self::events).
    pub fn applied_index(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// A read guard. Held only for a lookup: never across an await.
    pub fn read(&self) -> RwLockReadGuard<'_, Applying> {
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The applied table's format, as of the last batch applied or snapshot restored.
    pub fn table_format(&self) -> Format {
        self.format.load(Ordering::Relaxed)
    }

    /// The newest store time this process applied, and when its entry was appended; `None`
    /// before its first one (after a restart, or when the state came whole in a snapshot).
    pub fn stamp_seen(&self) -> Option<StampSeen> {
        *self.stamp_seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// openraft's state machine: applies each committed batch to the table through
/// `LeaseTable::apply`, builds and installs snapshots, and keeps the applied state that reads
/// and watches see.
pub struct StateMachineStore {
    state: Arc<SharedState>,
    /// When the log store appended each recent entry (see `append_times`); unset, a stamp's
    /// instant is when it is applied.
    appends: Option<AppendTimes>,
    files: SnapshotFiles,
    /// Distinguishes snapshots built at the same log id, and their temporary files.
    snapshot_count: u64,
    /// Where commands per entry and expiries are counted.
    metrics: Option<Arc<Metrics>>,
    /// Where openraft's worker applies entries: a thread of the table's own (see
    /// `apply_thread`), or, in the simulation, a task on the node's runtime.
    thread: Option<ApplyThread>,
}

/// Whether `entry` may apply after `last`: `last_applied` only grows. openraft applies the log
/// in order, each entry once (its storage suite does skip indexes, so a skip is let through);
/// an entry applied again or out of order would leave this replica's table unlike the others'
/// with no error, so it stops the node instead.
fn next_to_apply(last: Option<LogId>, entry: &LogId) -> Result<(), StorageError> {
    match last {
        Some(last) if entry.index <= last.index => Err(sm_error(
            ErrorVerb::Write,
            std::io::Error::other(format!(
                "applying entry {} after entry {}: the applied index only grows",
                entry.index, last.index
            )),
        )),
        _ => Ok(()),
    }
}

fn sm_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::StateMachine, verb, AnyError::new(&e)).into()
}

fn snapshot_error(verb: ErrorVerb, e: impl std::error::Error + 'static) -> StorageError {
    StorageIOError::new(ErrorSubject::Snapshot(None), verb, AnyError::new(&e)).into()
}

impl StateMachineStore {
    /// Opens the state machine in `dir`, restoring the last snapshot if there is one.
    pub fn open(dir: &Path) -> Result<Self, StorageError> {
        Self::open_with(dir, SlowWork::BlockingPool)
    }

    /// [`StateMachineStore::open`], with the snapshot's slow work run where `slow` says.
    pub fn open_with(dir: &Path, slow: SlowWork) -> Result<Self, StorageError> {
        let (files, found) = SnapshotFiles::open(dir, slow)?;
        let store = StateMachineStore {
            state: Arc::default(),
            appends: None,
            files,
            snapshot_count: 0,
            metrics: None,
            thread: match slow {
                SlowWork::BlockingPool => {
                    Some(ApplyThread::spawn().map_err(|e| sm_error(ErrorVerb::Write, e))?)
                }
                SlowWork::Inline => None,
            },
        };
        if let Some(file) = found {
            store.restore(&file.meta, decode_table(&file.data)?);
        }
        Ok(store)
    }

    /// The applied state, shared with the node's reads and watches.
    pub fn shared(&self) -> Arc<SharedState> {
        self.state.clone()
    }

    /// Takes a stamp's instant from when its entry was appended, as `appends` noted it.
    pub fn timing_appends(mut self, appends: AppendTimes) -> Self {
        self.appends = Some(appends);
        self
    }

    /// Counts commands per entry and expiries in `metrics`.
    pub fn counting_in(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The snapshot on disk, for the log store: it purges only what this covers.
    pub fn durable_snapshot(&self) -> DurableSnapshot {
        self.files.durable()
    }

    fn restore(&self, meta: &Meta, table: LeaseTable) {
        let mut state = self.state.inner.write().unwrap_or_else(|p| p.into_inner());
        *state = Applying {
            table,
            last_applied: meta.last_log_id,
            last_membership: meta.last_membership.clone(),
        };
        self.state
            .format
            .store(state.table.format(), Ordering::Relaxed);
        // The snapshot holds no events: watchers can start after it only.
        let index = meta.last_log_id.map_or(0, |id| id.index);
        self.state.events().reset(index + 1);
        self.state.applied.send_replace(index);
        // Nor instants: a stamp seen before it may be older than the entries it brought, and
        // would carry time from before grants it holds.
        *self
            .state
            .stamp_seen
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = None;
    }
}

/// Applies `entries` in order to the shared state, then tells watchers: each entry's answers,
/// one per command. `now`, taken once the entries were committed, is a stamp's instant where
/// its append was not noted.
fn apply_entries(
    shared: &SharedState,
    appends: Option<&AppendTimes>,
    metrics: Option<&Metrics>,
    now: tokio::time::Instant,
    entries: Vec<Entry>,
) -> Result<Vec<Vec<Applied>>, StorageError> {
    let mut state = shared.inner.write().unwrap_or_else(|p| p.into_inner());
    let mut seen = None;
    let mut replies = Vec::new();
    let mut noted = Vec::new();
    for entry in entries {
        next_to_apply(state.last_applied, &entry.log_id)?;
        let time_before = state.table.now_ms();
        let answers = apply_entry(metrics, &mut state, &entry, &mut noted);
        // Every entry that carries a stamp, even one equal to the time before, or that moved
        // time: carrying from an older entry's instant would count the time before this
        // entry's stamp twice (see `node::clock`). Not on a leader's blank or a membership
        // entry, which carry no time, so the time from the last stamp to a new leader's
        // election is still carried. The entry's append here is later than its stamp and
        // earlier than its apply, which may wait for an election.
        let stamped = match &entry.payload {
            EntryPayload::Normal(Batch(commands)) => commands.iter().any(|c| c.at_ms.is_some()),
            _ => false,
        };
        if stamped || state.table.now_ms() > time_before {
            let appended = appends.and_then(|a| a.when(&entry.log_id));
            seen = Some(StampSeen {
                ms: state.table.now_ms(),
                entry: entry.log_id,
                at: appended.unwrap_or(now),
            });
        }
        state.last_applied = Some(entry.log_id);
        replies.push(answers);
    }
    shared.format.store(state.table.format(), Ordering::Relaxed);
    if let Some(metrics) = metrics {
        let expired = noted.iter().filter(|n| n.event.kind == EventKind::Expired);
        metrics.expiries.inc_by(expired.count() as u64);
    }
    if let Some(last) = state.last_applied {
        // Events first, then the index: a watcher woken by the index finds them.
        shared.events().push(noted);
        shared.applied.send_replace(last.index);
    }
    if seen.is_some() {
        *shared.stamp_seen.lock().unwrap_or_else(|p| p.into_inner()) = seen;
    }
    Ok(replies)
}

/// Applies one entry's commands to the table (a membership entry to the membership), and
/// notes the events they caused: the table's answers, one per command.
fn apply_entry(
    metrics: Option<&Metrics>,
    state: &mut Applying,
    entry: &Entry,
    noted: &mut Vec<NotedEvent>,
) -> Vec<Applied> {
    let mut answers = Vec::new();
    match &entry.payload {
        EntryPayload::Blank => {}
        EntryPayload::Normal(Batch(commands)) => {
            if let Some(metrics) = metrics {
                metrics.batch_commands.observe(commands.len() as f64);
            }
            let mut events = Vec::new();
            for (position, command) in (0..).zip(commands) {
                let outcome = state.table.apply_noting(command, &mut events);
                let store_time_ms = state.table.now_ms();
                noted.extend(events.drain(..).map(|event| NotedEvent {
                    log_index: entry.log_id.index,
                    store_time_ms,
                    event,
                }));
                answers.push(Applied {
                    log_index: entry.log_id.index,
                    position,
                    store_time_ms,
                    outcome,
                });
            }
        }
        EntryPayload::Membership(membership) => {
            state.last_membership = StoredMembership::new(Some(entry.log_id), membership.clone());
        }
    }
    answers
}

/// A snapshot's table; one written by an earlier version loads as it was then: before rows and
/// leases had creators with none, before the policy with the default (off), before leases
/// could be forgotten with a floor of 0.
pub fn decode_table(data: &[u8]) -> Result<LeaseTable, StorageError> {
    LeaseTable::from_bytes(data).or_else(|e| {
        LeaseTable::from_older_bytes(data).map_err(|_| snapshot_error(ErrorVerb::Read, e))
    })
}

fn to_snapshot(file: SnapshotFile) -> Snapshot<TypeConfig> {
    Snapshot {
        meta: file.meta,
        snapshot: Box::new(Cursor::new(file.data)),
    }
}

/// What a snapshot is built from: the applied state at one moment.
struct Captured {
    table: LeaseTable,
    last_log_id: Option<LogId>,
    last_membership: StoredMembership<NodeId, BasicNode>,
}

/// Builds a snapshot of the table as applied at the moment of the call.
pub struct SnapshotBuilder {
    state: Arc<SharedState>,
    files: SnapshotFiles,
    id: u64,
}

impl SnapshotBuilder {
    /// The table and where it stands, cloned under the state lock: the table's maps are
    /// persistent, so the clone shares their nodes and costs O(1) at any size (plus the
    /// policy, which is small). Applies wait only for this, not for the encoding.
    fn capture(&self) -> Captured {
        let state = self.state.read();
        Captured {
            table: state.table.clone(),
            last_log_id: state.last_applied,
            last_membership: state.last_membership.clone(),
        }
    }

    /// The captured table encoded, on the slow-work pool (a million leases take about half a
    /// second), while applies go on.
    async fn encode(&self, captured: Captured) -> Result<SnapshotFile, StorageError> {
        let Captured {
            table,
            last_log_id,
            last_membership,
        } = captured;
        let format = table.format();
        let data = self
            .files
            .slow()
            .run(move || encode_sized(&table))
            .await
            .map_err(|e| sm_error(ErrorVerb::Read, e))?
            .map_err(|e| sm_error(ErrorVerb::Read, e))?;
        let snapshot_id = match last_log_id {
            Some(id) => format!("{}-{}-{}", id.leader_id.term, id.index, self.id),
            None => format!("0-0-{}", self.id),
        };
        let snapshot_id = with_table_format(snapshot_id, format);
        Ok(SnapshotFile {
            meta: Meta {
                last_log_id,
                last_membership,
                snapshot_id,
            },
            data,
        })
    }

    /// Writes the captured snapshot, unless an install wrote a newer one since the capture.
    /// Either way openraft gets the captured one back: it keeps only the newest snapshot it has
    /// heard of, which is then the install's.
    async fn persist(&self, file: SnapshotFile) -> Result<Snapshot<TypeConfig>, StorageError> {
        let (file, written) = self.files.write(self.id, file).await?;
        if let Written::Replaced = written {
            tracing::info!(
                index = file.meta.last_log_id.map_or(0, |id| id.index),
                bytes = file.data.len(),
                "snapshot built"
            );
        }
        if let Written::KeptNewer(newer) = written {
            tracing::debug!(
                built = ?file.meta.last_log_id,
                ?newer,
                "a newer snapshot was installed during the build; kept it"
            );
        }
        Ok(to_snapshot(file))
    }
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError> {
        let started = std::time::Instant::now();
        let captured = self.capture();
        // Applying waits for the capture (a clone under the state lock), not for the encoding
        // or the write.
        let capture_time = started.elapsed();
        let file = self.encode(captured).await?;
        let snapshot = self.persist(file).await?;
        tracing::info!(
            capture_ms = capture_time.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "snapshot build timed"
        );
        Ok(snapshot)
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership<NodeId, BasicNode>), StorageError> {
        let state = self.state.read();
        Ok((state.last_applied, state.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Vec<Applied>>, StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        // The clock of the runtime the worker runs on: the apply thread's, whose clock is the
        // node's (no node pauses time), or, in the simulation, the node's paused one.
        let now = tokio::time::Instant::now();
        let (appends, metrics) = (self.appends.as_ref(), self.metrics.as_deref());
        apply_entries(&self.state, appends, metrics, now, entries)
    }

    fn worker_runtime(&self) -> Option<tokio::runtime::Handle> {
        self.thread.as_ref().map(ApplyThread::runtime)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.snapshot_count += 1;
        SnapshotBuilder {
            state: self.state.clone(),
            files: self.files.clone(),
            id: self.snapshot_count,
        }
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &Meta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        // Decoded first, off the runtime threads (it can be large): a snapshot that does not
        // decode must not replace a good file.
        let (data, table) = self
            .files
            .slow()
            .run(move || {
                let table = decode_table(&data)?;
                Ok::<_, StorageError>((data, table))
            })
            .await
            .map_err(|e| sm_error(ErrorVerb::Write, e))??;
        let file = SnapshotFile {
            meta: meta.clone(),
            data,
        };
        // Persisted before the state changes: a crash between the two leaves the new snapshot
        // to load on restart. Its durable rename is also what lets the log's purge, which
        // openraft issued alongside this install, go ahead (see `snapshot_file`). openraft
        // installs only a snapshot past everything committed, so no build has written a newer
        // file.
        self.snapshot_count += 1;
        self.files.write(self.snapshot_count, file).await?;
        self.restore(meta, table);
        tracing::info!(
            index = meta.last_log_id.map_or(0, |id| id.index),
            "installed a snapshot from the leader"
        );
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>, StorageError> {
        // The file on disk is the latest snapshot: builders write it, installs replace it, and
        // neither puts back an older one.
        Ok(self.files.read().await?.map(to_snapshot))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::raft::log_store::tests::entry;
    use openraft::testing::log_id;

    /// A snapshot of entries `1..=upto`, as a leader would send it.
    async fn leader_snapshot(upto: u64) -> Snapshot<TypeConfig> {
        let dir = tempfile::TempDir::new().unwrap();
        let mut leader = StateMachineStore::open(dir.path()).unwrap();
        leader.apply((1..=upto).map(entry)).await.unwrap();
        let mut builder = leader.get_snapshot_builder().await;
        builder.build_snapshot().await.unwrap()
    }

    /// A stamp whose append was not noted takes its instant from the clock of the runtime that
    /// applies it: in the simulation, the node's paused one, not the real clock 60 s behind.
    #[tokio::test(start_paused = true)]
    async fn a_stamps_instant_is_read_on_the_runtimes_clock() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut sm = StateMachineStore::open_with(dir.path(), SlowWork::Inline).unwrap();
        tokio::time::advance(std::time::Duration::from_secs(60)).await;
        sm.apply([entry(1)]).await.unwrap();
        let seen = sm.state.stamp_seen().expect("a stamped entry applied");
        assert_eq!(seen.at, tokio::time::Instant::now());
    }

    /// A node's state machine has openraft run its worker, and so every apply, on the table's
    /// own thread (see `apply_thread`); the simulation's, on the node's runtime.
    #[tokio::test]
    async fn a_nodes_worker_runs_on_the_apply_thread() {
        let dir = tempfile::TempDir::new().unwrap();
        let sm = StateMachineStore::open(dir.path()).unwrap();
        let runtime = sm.worker_runtime().expect("the apply thread's runtime");
        let on = runtime.spawn(async { std::thread::current().name().map(str::to_owned) });
        assert_eq!(on.await.unwrap().as_deref(), Some("leasehold-apply"));
        let dir = tempfile::TempDir::new().unwrap();
        let sim = StateMachineStore::open_with(dir.path(), SlowWork::Inline).unwrap();
        assert!(sim.worker_runtime().is_none());
    }

    /// `last_applied` only grows: an entry applied again, or one older than the last applied,
    /// is refused and changes nothing; the next one applies.
    #[tokio::test]
    async fn an_entry_at_or_below_the_last_applied_is_refused() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        sm.apply((1..=2).map(entry)).await.unwrap();
        let table = sm.state.read().table.digest();
        for (entries, says) in [
            (vec![entry(2)], "entry 2 after entry 2"),
            (vec![entry(1)], "entry 1 after entry 2"),
        ] {
            let error = sm.apply(entries).await.unwrap_err().to_string();
            assert!(error.contains(says), "{error}");
        }
        assert_eq!(sm.state.read().last_applied, Some(log_id(1, 1, 2)));
        assert_eq!(sm.state.read().table.digest(), table, "nothing applied");
        sm.apply([entry(3)]).await.unwrap();
        assert_ne!(
            sm.state.read().table.digest(),
            table,
            "the next entry applies"
        );
    }

    /// openraft runs a build in its own task while the worker goes on to an install: the build
    /// can read the state before the install and rename its file after it.
    #[tokio::test]
    async fn a_build_that_read_the_state_before_an_install_does_not_replace_the_installed_snapshot()
    {
        let dir = tempfile::TempDir::new().unwrap();
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        sm.apply((1..=2).map(entry)).await.unwrap();
        let builder = sm.get_snapshot_builder().await;
        let captured_at_2 = builder.encode(builder.capture()).await.unwrap();

        let installed = leader_snapshot(5).await;
        sm.install_snapshot(&installed.meta, installed.snapshot)
            .await
            .unwrap();
        builder.persist(captured_at_2).await.unwrap();

        let current = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(
            current.meta.last_log_id,
            Some(log_id(1, 1, 5)),
            "the snapshot file went back behind the installed snapshot (and the log purged to it)"
        );
        drop(sm);
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        let (applied, _) = sm.applied_state().await.unwrap();
        assert_eq!(
            applied,
            Some(log_id(1, 1, 5)),
            "restart restores the newer state"
        );
        assert_eq!(sm.shared().read().table.row("k5"), Some(&[7u8; 100][..]));
    }

    #[tokio::test]
    async fn an_installed_snapshot_that_does_not_decode_leaves_the_snapshot_file_alone() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        sm.apply((1..=2).map(entry)).await.unwrap();
        sm.get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        let mut meta = leader_snapshot(5).await.meta;
        meta.snapshot_id = "garbage".into();
        let garbage = Box::new(Cursor::new(vec![0xff; 64]));
        assert!(sm.install_snapshot(&meta, garbage).await.is_err());
        let current = sm.get_current_snapshot().await.unwrap().unwrap();
        assert_eq!(current.meta.last_log_id, Some(log_id(1, 1, 2)));
        drop(sm);
        StateMachineStore::open(dir.path()).expect("the node still starts");
    }

    /// Review of e8637e4, finding 1a: an entry whose stamp equals the time before it must still
    /// lend its instant; else a new leader carries from an older entry's, which came before a
    /// grant stamped with that same time. And an install drops the instant, since the entries
    /// the snapshot brought are newer than it.
    #[tokio::test]
    async fn every_stamped_entry_refreshes_the_instant_and_an_install_drops_it() {
        let dir = tempfile::TempDir::new().unwrap();
        let mut sm = StateMachineStore::open(dir.path()).unwrap();
        sm.apply([entry(1)]).await.unwrap();
        let mut same_time = entry(2);
        if let EntryPayload::Normal(Batch(commands)) = &mut same_time.payload {
            commands[0].at_ms = Some(1);
        }
        sm.apply([same_time]).await.unwrap();
        let seen = sm.shared().stamp_seen().expect("a stamp was applied");
        assert_eq!((seen.ms, seen.entry), (1, log_id(1, 1, 2)));
        sm.apply([Entry {
            log_id: log_id(1, 1, 3),
            payload: EntryPayload::Blank,
        }])
        .await
        .unwrap();
        assert_eq!(
            sm.shared().stamp_seen().map(|seen| seen.entry),
            Some(log_id(1, 1, 2)),
            "a blank entry carries no time, and keeps the instant of the last stamp"
        );

        let installed = leader_snapshot(5).await;
        sm.install_snapshot(&installed.meta, installed.snapshot)
            .await
            .unwrap();
        assert_eq!(sm.shared().stamp_seen(), None);
    }
}
