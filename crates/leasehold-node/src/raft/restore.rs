//! A new node's data dir from a saved snapshot (`leasehold snapshot restore`): the state as the
//! state machine's snapshot file, a membership of the new cluster's voters, and a vote in the
//! snapshot's term, so that the new cluster's first election is in a later term than every
//! entry the state includes.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Cursor;
use std::path::Path;

use openraft::storage::{RaftLogStorage, RaftStateMachine, SnapshotMeta};
use openraft::{BasicNode, CommittedLeaderId, Membership, StoredMembership, Vote};

use super::{LogId, LogStore, StateMachineStore};
use crate::NodeId;

/// Where a saved state was taken.
#[derive(Clone, Copy, Debug)]
pub struct SavedAt {
    /// The last log entry the state covers.
    pub log_index: u64,
    /// That entry's term.
    pub term: u64,
    /// The leader that wrote that entry.
    pub leader_id: NodeId,
}

/// Prepares `dir` (absent or empty) for node `id` of a new cluster of `peers` (id to peer
/// address), from `state`, a snapshot's bytes taken at `at`, with tokens and session ids moved
/// `gap` on (see [`LeaseTable::restored`](leasehold_core::LeaseTable::restored)). Returns the
/// restored state's digest.
pub async fn restore_data_dir(
    dir: &Path,
    id: NodeId,
    peers: &BTreeMap<NodeId, String>,
    at: SavedAt,
    state: Vec<u8>,
    gap: u64,
) -> Result<u64, String> {
    if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(format!(
            "--data-dir {} is not empty; restore into a new directory",
            dir.display()
        ));
    }
    if !peers.contains_key(&id) {
        return Err(format!("--peers must include this node's own id {id}"));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // Decoded before anything is written: a state that does not decode makes no data dir.
    let table = super::state_machine::decode_table(&state)
        .map_err(|e| format!("the state: {e}"))?
        .restored(gap);
    let (digest, format) = (table.digest(), table.format());
    let state = super::codec::encode_sized(&table).map_err(|e| format!("the state: {e}"))?;
    let log_id = LogId::new(CommittedLeaderId::new(at.term, at.leader_id), at.log_index);
    let voters: BTreeSet<NodeId> = peers.keys().copied().collect();
    let nodes: BTreeMap<NodeId, BasicNode> = peers
        .iter()
        .map(|(id, addr)| (*id, BasicNode { addr: addr.clone() }))
        .collect();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id),
        last_membership: StoredMembership::new(Some(log_id), Membership::new(vec![voters], nodes)),
        snapshot_id: super::snapshot_file::with_table_format(
            format!("restored-{}-{}", at.term, at.log_index),
            format,
        ),
    };
    let mut state_machine = StateMachineStore::open(dir).map_err(|e| e.to_string())?;
    state_machine
        .install_snapshot(&meta, Box::new(Cursor::new(state)))
        .await
        .map_err(|e| format!("writing the snapshot: {e}"))?;
    let mut log = LogStore::open(&dir.join("raft-log")).map_err(|e| e.to_string())?;
    // Raft's terms never go back: the new cluster elects in a term after the snapshot's.
    log.save_vote(&Vote::new(at.term, id))
        .await
        .map_err(|e| format!("writing the vote: {e}"))?;
    Ok(digest)
}
