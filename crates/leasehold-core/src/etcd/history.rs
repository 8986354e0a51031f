//! The keyspace's recent events, for watches that start at a revision: bounded in count and
//! bytes (see `limits`), the oldest forgotten first, and forgotten wholesale by a compaction.
//! Kept in snapshots (outside the digest), so that a node that loads one still serves a watch
//! from the revision a client just read at, as etcd's lock and election do after every read; a
//! watch older than the events kept is told it was compacted, as etcd tells it.
//!
//! The events are a persistent vector, as the table's maps are persistent maps: a snapshot's
//! capture clones the table under the state lock, and a clone of 100,000 events one by one held
//! every apply for as long.

use imbl::Vector;
use serde::{Deserialize, Serialize};

use super::answer::KeyValue;
use super::request::Span;
use crate::limits::{ETCD_HISTORY_BYTES, ETCD_HISTORY_EVENTS};

/// What happened to a key at a revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdEvent {
    /// A put or a delete.
    pub kind: EtcdEventKind,
    /// The key after the event: for a delete, its key and the revision of the delete only.
    pub kv: KeyValue,
    /// The key before the event, if it existed.
    pub prev_kv: Option<KeyValue>,
}

/// etcd's event types.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdEventKind {
    /// The key was written.
    Put,
    /// The key was deleted (by a request, or with its lease).
    Delete,
}

impl EtcdEvent {
    /// Its revision.
    pub fn revision(&self) -> i64 {
        self.kv.mod_revision
    }

    /// What it costs to keep, roughly: the bytes of its keys and values.
    fn bytes(&self) -> usize {
        let of = |kv: &KeyValue| kv.key.len() + kv.value.len() + 48;
        of(&self.kv) + self.prev_kv.as_ref().map_or(0, of)
    }
}

/// The events kept, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct History {
    events: Vector<EtcdEvent>,
    bytes: usize,
    /// The oldest revision a watch may start at: every event from it on is kept.
    first_kept: i64,
}

impl History {
    /// A history as a snapshot stored it: its events, oldest first, and the oldest revision a
    /// watch may start at.
    pub fn restored(first_kept: i64, events: Vec<EtcdEvent>) -> History {
        let bytes = events.iter().map(EtcdEvent::bytes).sum();
        History {
            events: events.into(),
            bytes,
            first_kept,
        }
    }

    /// Its events, oldest first, for a snapshot.
    pub fn events(&self) -> impl Iterator<Item = &EtcdEvent> {
        self.events.iter()
    }

    /// The oldest revision a watch may start at.
    pub fn first_kept(&self) -> i64 {
        self.first_kept
    }

    /// Keeps `event`, forgetting the oldest revisions while the bounds are exceeded. A
    /// revision is forgotten whole, never part of it, so a watch never sees half of one.
    pub fn push(&mut self, event: EtcdEvent) {
        self.bytes += event.bytes();
        self.events.push_back(event);
        while self.events.len() > ETCD_HISTORY_EVENTS || self.bytes > ETCD_HISTORY_BYTES {
            let Some(oldest) = self.events.front().map(EtcdEvent::revision) else {
                break;
            };
            // The newest revision is never forgotten: it is the one being written.
            if oldest == self.events.back().map_or(oldest, EtcdEvent::revision) {
                break;
            }
            self.forget_before(oldest + 1);
        }
    }

    /// Forgets every event before `revision`.
    pub fn forget_before(&mut self, revision: i64) {
        while self.events.front().is_some_and(|e| e.revision() < revision) {
            if let Some(event) = self.events.pop_front() {
                self.bytes -= event.bytes();
            }
        }
        self.first_kept = self.first_kept.max(revision);
    }

    /// The events from revision `from` on whose keys are in `span`, at most `max` of them and
    /// never part of a revision unless one revision alone is more, and the revision to go on
    /// from if they stop short of the newest (`None`: every kept event was looked at). `Err`
    /// with the oldest revision kept when events from `from` on are no longer all kept.
    pub fn since<'a>(&'a self, from: i64, span: Span<'_>, max: usize) -> Result<Since<'a>, i64> {
        if from < self.first_kept {
            return Err(self.first_kept);
        }
        // The first event at or after `from`: the comparison never answers "equal", so the
        // search ends where it would insert, past every earlier revision.
        let start = (self.events.binary_search_by(|e| match e.revision() < from {
            true => std::cmp::Ordering::Less,
            false => std::cmp::Ordering::Greater,
        }))
        .unwrap_or_else(|at| at);
        let mut since = Since::default();
        for event in self.events.focus().narrow(start..) {
            let last = since.events.last().map(|e| e.revision());
            if since.events.len() >= max && last != Some(event.revision()) {
                since.resume_at = Some(event.revision());
                break;
            }
            if span.contains(&event.kv.key) {
                since.events.push(event);
            }
        }
        Ok(since)
    }
}

/// What [`History::since`] found.
#[derive(Debug, Default)]
pub struct Since<'a> {
    /// The events, oldest first.
    pub events: Vec<&'a EtcdEvent>,
    /// Where to go on from, if they stopped short of the newest kept event.
    pub resume_at: Option<i64>,
}
