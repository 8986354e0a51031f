//! Which data dir a node runs on. A node's vote lives on its disk: a node whose disk was wiped
//! (or swapped for another's) comes back having forgotten whom it voted for, and could vote twice
//! in one term, or ack entries it never stored. So every data dir gets an incarnation, a random
//! number drawn when it is created, and every node notes (durably) the incarnation each peer
//! showed first. Raft messages carry the sender's incarnation and the one the sender knows for
//! the receiver; a node refuses a message from a peer whose incarnation changed, a node refuses
//! a message that knew it under another incarnation (and says why in its log), and a reply from
//! a changed peer is not counted. So a node that comes back on a new disk under its old id is
//! kept out by every node that knew it before; only a node that never heard from it (one added
//! while it was down) would take it as new. The notes are each node's own, not replicated.

use std::collections::BTreeMap;
use std::hash::{BuildHasher, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::limits::INCARNATION_LOG_EVERY;
use crate::NodeId;

pub use leasehold_proto::wire::{INCARNATION_KEY as FROM_KEY, TO_INCARNATION_KEY as TO_KEY};

const MINE: &str = "incarnation";
const KNOWN: &str = "peer-incarnations";

#[derive(Clone)]
pub struct Incarnations {
    inner: Arc<Inner>,
}

struct Inner {
    me: NodeId,
    mine: u64,
    dir: PathBuf,
    known: Mutex<BTreeMap<NodeId, u64>>,
    logged: Mutex<Option<Instant>>,
}

/// Writes `bytes` to `dir/name` whole or not at all, durably.
fn write_durably(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(name))?;
    std::fs::File::open(dir)?.sync_all()
}

impl Incarnations {
    /// This data dir's incarnation (drawn now if the dir has none) and the peers' it noted.
    pub fn open(dir: &Path, me: NodeId) -> std::io::Result<Incarnations> {
        let mine = match std::fs::read_to_string(dir.join(MINE)) {
            Ok(text) => u64::from_str_radix(text.trim(), 16)
                .map_err(|e| std::io::Error::other(format!("{}: {e}", dir.join(MINE).display())))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // std's hasher is seeded at random per process: a fresh number per data dir.
                let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
                hasher.write_u128(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default()
                        .as_nanos(),
                );
                let drawn = hasher.finish() | 1;
                write_durably(dir, MINE, format!("{drawn:016x}").as_bytes())?;
                drawn
            }
            Err(e) => return Err(e),
        };
        let known = match std::fs::read(dir.join(KNOWN)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::other(format!("{}: {e}", dir.join(KNOWN).display()))
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Incarnations {
            inner: Arc::new(Inner {
                me,
                mine,
                dir: dir.to_owned(),
                known: Mutex::new(known),
                logged: Mutex::new(None),
            }),
        })
    }

    /// This node's incarnation.
    pub fn mine(&self) -> u64 {
        self.inner.mine
    }

    /// The incarnation this node noted for `id`.
    pub fn known(&self, id: NodeId) -> Option<u64> {
        self.lock().get(&id).copied()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<NodeId, u64>> {
        self.inner.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that node `id` shows `theirs`, the incarnation it showed first; notes it, durably,
    /// if it is the first. Nothing to check without one (a message no node sent).
    pub fn check_peer(&self, id: NodeId, theirs: Option<u64>) -> Result<(), String> {
        let Some(theirs) = theirs else { return Ok(()) };
        let mut known = self.lock();
        match known.get(&id) {
            Some(k) if *k == theirs => Ok(()),
            Some(k) => Err(format!(
                "node {id} runs on a new data dir (incarnation {theirs:016x}; node {} knew it as \
                 {k:016x}): the vote it cast from its old disk is lost, so it cannot take part as \
                 node {id} again. Remove it (`leasehold member remove {id}`) and add the new node \
                 under a new id (`serve --join`, then `leasehold member add`)",
                self.inner.me
            )),
            None => {
                known.insert(id, theirs);
                let bytes = serde_json::to_vec(&*known).unwrap_or_default();
                write_durably(&self.inner.dir, KNOWN, &bytes).map_err(|e| {
                    known.remove(&id);
                    format!("noting node {id}'s incarnation: {e}")
                })
            }
        }
    }

    /// Checks that `sender` knew this node under its incarnation, when it knew one.
    pub fn check_me(&self, sender: NodeId, believed: Option<u64>) -> Result<(), String> {
        match believed {
            Some(b) if b != self.inner.mine => Err(format!(
                "node {sender} knew node {me} with another data dir (incarnation {b:016x}; this \
                 one is {mine:016x}): node {me}'s disk was wiped or replaced, and the vote it cast \
                 from it is lost, so this node cannot take part as node {me}. Remove it \
                 (`leasehold member remove {me}`) and start it on an empty data dir under a new \
                 id (`serve --join`, then `leasehold member add`)",
                me = self.inner.me,
                mine = self.inner.mine
            )),
            _ => Ok(()),
        }
    }

    /// Logs `why` at most every few seconds: a refused peer is refused on every heartbeat.
    pub fn log_refusal(&self, why: &str) {
        let mut logged = self.inner.logged.lock().unwrap_or_else(|p| p.into_inner());
        if logged.is_none_or(|at| at.elapsed() >= INCARNATION_LOG_EVERY) {
            *logged = Some(Instant::now());
            tracing::error!("{why}");
        }
    }
}

/// An incarnation as metadata carries it.
pub fn read(metadata: &tonic::metadata::MetadataMap, key: &str) -> Option<u64> {
    let text = metadata.get(key)?.to_str().ok()?;
    u64::from_str_radix(text, 16).ok()
}

/// Sets `key` to `incarnation` in `metadata`.
pub fn write(metadata: &mut tonic::metadata::MetadataMap, key: &'static str, incarnation: u64) {
    if let Ok(value) = format!("{incarnation:016x}").parse() {
        metadata.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_is_held_to_the_first_incarnation_it_showed_across_restarts() {
        let dir = tempfile::TempDir::new().unwrap();
        let a = Incarnations::open(dir.path(), 1).unwrap();
        assert!(a.check_peer(2, Some(7)).is_ok(), "the first is noted");
        assert!(a.check_peer(2, Some(7)).is_ok());
        let changed = a.check_peer(2, Some(8)).unwrap_err();
        assert!(
            changed.contains("new data dir") && changed.contains("member remove 2"),
            "{changed}"
        );
        // Reopened (a restart): the same incarnation, and the peer's is remembered.
        let again = Incarnations::open(dir.path(), 1).unwrap();
        assert_eq!(again.mine(), a.mine());
        assert!(again.check_peer(2, Some(8)).is_err());
        assert_eq!(again.known(2), Some(7));
        // A wiped dir draws another.
        let other = tempfile::TempDir::new().unwrap();
        let wiped = Incarnations::open(other.path(), 1).unwrap();
        assert_ne!(wiped.mine(), a.mine());
        let refused = wiped.check_me(2, Some(a.mine())).unwrap_err();
        assert!(refused.contains("node 1's disk was wiped"), "{refused}");
        assert!(
            wiped.check_me(2, None).is_ok(),
            "a sender that knew no incarnation"
        );
    }
}
