//! openraft glue: the type configuration, the durable log, the state machine adapter and the
//! peer network. Nothing here knows gRPC's public API or the command line.

// openraft's storage traits return its `StorageError` by value; helpers here return the same
// type rather than boxing it only to unbox it at the trait boundary.
#![allow(clippy::result_large_err)]

mod append_times;
mod apply_thread;
pub mod codec;
#[cfg(test)]
mod decoding_tests;
pub(crate) mod descriptors;
pub(crate) mod events;
pub(crate) mod incarnation;
pub(crate) mod lane;
mod log_store;
mod network;
mod proposer;
pub mod protocol;
mod reachability;
mod reads;
mod restore;
pub(crate) mod runtime;
mod snapshot_file;
pub(crate) mod state_machine;
mod vote_penalty;

use std::io::Cursor;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use log_store::LogStore;
pub use network::{ClockMode, CLOCK_KEY};
pub use restore::{restore_data_dir, SavedAt};
pub use state_machine::{decode_table, StateMachineStore};

pub(crate) use append_times::AppendTimes;
pub(crate) use log_store::REPLACE_NODE;
#[cfg(test)]
pub(crate) use network::unreachable_backoff;
pub(crate) use network::{Channels, PeerNetwork};
pub(crate) use proposer::{weight, Proposer, WriteError};
pub(crate) use reads::Reads;
pub(crate) use snapshot_file::snapshot_path;
// The simulation (`crate::sim`) reads and writes snapshot files on its one thread.
#[cfg(test)]
pub(crate) use snapshot_file::SlowWork;
pub(crate) use state_machine::{SharedState, StampSeen};
pub(crate) use vote_penalty::VotePenalty;

use crate::limits::{
    ELECTION_TIMEOUT_MAX_MS, ELECTION_TIMEOUT_MIN_MS, HEARTBEAT_MS, MAX_PAYLOAD_ENTRIES,
    SNAPSHOT_CHUNK_BYTES,
};
use leasehold_core::{Batch, Outcome};

openraft::declare_raft_types!(
    /// Leasehold's Raft types: batches of commands in, one applied outcome per command out,
    /// nodes addressed by gRPC address.
    pub TypeConfig:
        D = Batch,
        R = Vec<Applied>,
        NodeId = u64,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = runtime::Runtime,
);

use crate::NodeId;
pub(crate) type Raft = openraft::Raft<TypeConfig>;
pub(crate) type LogId = openraft::LogId<NodeId>;
/// What the log store and the state machine report to openraft when the disk fails them.
pub type StorageError = openraft::StorageError<NodeId>;

/// What the state machine answers for one command: the outcome, where, and at what store time.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    /// The log entry the command was applied in.
    pub log_index: u64,
    /// The command's place in its entry's batch.
    pub position: u32,
    /// The store's time when the entry was applied.
    pub store_time_ms: u64,
    /// What the table answered.
    pub outcome: Outcome,
}

/// What a node found on disk when it started: the last log index and the term of its vote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct BootLog {
    pub last_index: u64,
    pub vote_term: u64,
}

impl BootLog {
    /// Whether the wait for the log found at start-up is over, as `metrics` show the node: that
    /// log is applied, or the node's term moved on (its confirmation then belongs to a term that
    /// is over, so the read is confirmed again), or the log no longer reaches that far (a newer
    /// leader truncated the uncommitted tail: there is nothing there to wait for).
    fn wait_is_over(&self, metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
        self.applied(metrics)
            || metrics.current_term != self.vote_term
            || metrics.last_log_index.unwrap_or(0) < self.last_index
    }

    fn applied(&self, metrics: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
        metrics.last_applied.map_or(0, |id| id.index) >= self.last_index
    }
}

/// Raft's ReadIndex, made safe across restarts. openraft confirms leadership with a quorum and
/// waits until everything committed before the read is applied. Upstream openraft 0.9 restores
/// a leader whose vote was committed as leader of the same term at start-up, and then its
/// ReadIndex may lie below entries it acknowledged before the restart (the committed index is
/// not fsynced), so in that term this also waits until the node has applied `boot.last_index`:
/// everything it ever acknowledged is there. (The fault suite caught reads going back in time
/// after a full restart without this wait.) As patched (`third_party/openraft/PATCH.md`, change
/// 2), a restarted leader leads again only in a later term, so the wait no longer arises; it
/// stays as a guard of the same promise.
///
/// Only in that term. In a later term the ReadIndex is at least this leader's first entry, which
/// follows everything committed before: no wait is needed, and waiting would be wrong, since the
/// last index found at boot can include an uncommitted tail that a newer leader truncated and
/// nothing will ever fill again (review finding 1: every read and every first stamp of the term
/// hung). If the term moves on during the wait, the confirmation is stale and is taken again.
pub(crate) async fn read_index(
    raft: &Raft,
    boot: BootLog,
) -> Result<
    (),
    openraft::error::RaftError<
        NodeId,
        openraft::error::CheckIsLeaderError<NodeId, openraft::BasicNode>,
    >,
> {
    loop {
        // Read before the confirmation: terms only grow, so a confirmation that follows a later
        // term than the boot term belongs to a later term too.
        let term = raft.metrics().borrow().current_term;
        let read_index = raft.ensure_linearizable().await?;
        if term != boot.vote_term || read_index.map_or(0, |id| id.index) >= boot.last_index {
            return Ok(());
        }
        let metrics = raft
            .wait(None)
            .metrics(
                |m| boot.wait_is_over(m),
                "applied the log found at start-up",
            )
            .await
            .map_err(|_| openraft::error::RaftError::Fatal(openraft::error::Fatal::Stopped))?;
        if boot.applied(&metrics) {
            return Ok(());
        }
    }
}

/// Opens a node's log (in `data_dir/raft-log`) and its state machine (snapshot in `data_dir`),
/// the log purging only what the durable snapshot covers (see `snapshot_file` for why openraft
/// needs that enforced).
pub fn open_storage(
    data_dir: &std::path::Path,
    metrics: Arc<crate::metrics::Metrics>,
) -> Result<(LogStore, StateMachineStore), StorageError> {
    // Held from now on, for an open that finds the process out of descriptors.
    descriptors::keep_spares();
    let appends = AppendTimes::default();
    // The snapshot and the log are read side by side: they share nothing until both are open,
    // and at a million leases reading them back is most of a restart.
    fn timed<T>(open: impl FnOnce() -> T) -> (T, u64) {
        let started = std::time::Instant::now();
        (open(), started.elapsed().as_millis() as u64)
    }
    let ((state_machine, snapshot_ms), (log, log_ms)) = std::thread::scope(|both| {
        let log = both.spawn(|| timed(|| LogStore::open(&data_dir.join("raft-log"))));
        let state_machine = timed(|| StateMachineStore::open(data_dir));
        let log = log
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (state_machine, log)
    });
    tracing::info!(snapshot_ms, log_ms, "snapshot and log read back");
    let state_machine = state_machine?
        .timing_appends(appends.clone())
        .counting_in(metrics.clone());
    let log = log?
        .purging_behind(state_machine.durable_snapshot())
        .timing_appends(appends)
        .counting_in(metrics);
    Ok((log, state_machine))
}

/// Timing for a leader's death to cost under a second. openraft's follower waits its leader
/// lease (`election_timeout_max`) plus a random election timeout before campaigning, so a dead
/// leader is replaced after 650 to 800 ms of silence; heartbeats every 60 ms keep a live one
/// well inside that, even with fsyncs and a loaded machine on the path.
///
/// A snapshot is taken every `snapshot_every` applied entries; the log behind it is purged but
/// for a tenth of that, so a briefly lagging follower catches up from the log, not a snapshot.
pub(crate) fn config(snapshot_every: u64) -> openraft::Config {
    openraft::Config {
        cluster_name: "leasehold".into(),
        heartbeat_interval: HEARTBEAT_MS,
        election_timeout_min: ELECTION_TIMEOUT_MIN_MS,
        election_timeout_max: ELECTION_TIMEOUT_MAX_MS,
        install_snapshot_timeout: 2_000,
        // openraft gives each AppendEntries one heartbeat interval to be written, fsynced and
        // answered. An entry holds up to `MAX_ENTRY_BYTES` (128 KiB), so a message of
        // 16 stays within 2 MiB: a follower catching up is never sent more than it can fsync in
        // time. Steady-state messages carry one or two entries.
        max_payload_entries: MAX_PAYLOAD_ENTRIES,
        snapshot_max_chunk_size: SNAPSHOT_CHUNK_BYTES,
        snapshot_policy: openraft::SnapshotPolicy::LogsSinceLast(snapshot_every),
        max_in_snapshot_log_to_keep: snapshot_every / 10,
        ..Default::default()
    }
}
