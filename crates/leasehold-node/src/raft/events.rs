//! The lease events of the entries this node applied, kept for watchers: a bounded window of
//! the newest, so a watch can resume from a recent log index and one that fell too far behind
//! is told so instead of holding memory.

use std::collections::VecDeque;

use crate::limits::KEPT_EVENTS;
use leasehold_core::Event;

/// An event and the entry that caused it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotedEvent {
    pub log_index: u64,
    pub store_time_ms: u64,
    pub event: Event,
}

/// The window. Every event of an index from `first_kept` on is in it; none before.
#[derive(Debug)]
pub struct EventHistory {
    kept: VecDeque<NotedEvent>,
    first_kept: u64,
    capacity: usize,
}

/// The asked start is before the window: its events are gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    pub first_kept: u64,
}

impl Default for EventHistory {
    fn default() -> Self {
        EventHistory::with_capacity(KEPT_EVENTS)
    }
}

impl EventHistory {
    pub fn with_capacity(capacity: usize) -> Self {
        EventHistory {
            kept: VecDeque::new(),
            first_kept: 1,
            capacity: capacity.max(1),
        }
    }

    /// Forgets everything: the state jumped to a snapshot, so the next events are those of the
    /// entries from `first` on.
    pub fn reset(&mut self, first: u64) {
        self.kept.clear();
        self.first_kept = first;
    }

    /// The first index whose events are all kept.
    pub fn first_kept(&self) -> u64 {
        self.first_kept
    }

    /// Adds the events of applied entries, in order; drops the oldest entries' events, whole,
    /// past the capacity. Room is made before each entry goes in, and the deque grows no
    /// further than the capacity: a `VecDeque` left to itself doubles when full, and 65,536
    /// kept events then held room for 131,072 (heaptrack saw the deque at 9.2 MB). An entry
    /// with more events than the capacity is not kept at all.
    pub fn push(&mut self, noted: impl IntoIterator<Item = NotedEvent>) {
        let mut entry: Vec<NotedEvent> = Vec::new();
        for event in noted {
            if entry.last().is_some_and(|e| e.log_index != event.log_index) {
                self.push_entry(std::mem::take(&mut entry));
            }
            entry.push(event);
        }
        self.push_entry(entry);
    }

    /// Adds the events of one entry (see [`EventHistory::push`]).
    fn push_entry(&mut self, entry: Vec<NotedEvent>) {
        let Some(last) = entry.last() else {
            return;
        };
        if entry.len() > self.capacity {
            self.kept.clear();
            self.first_kept = last.log_index + 1;
            return;
        }
        while self.kept.len() + entry.len() > self.capacity {
            self.drop_oldest_entry();
        }
        // Grown as a Vec grows (doubling), but never past the capacity.
        let needed = self.kept.len() + entry.len();
        if needed > self.kept.capacity() {
            let room = (self.kept.capacity() * 2).clamp(needed, self.capacity);
            self.kept.reserve_exact(room - self.kept.len());
        }
        self.kept.extend(entry);
    }

    /// Drops the events of the oldest entry kept.
    fn drop_oldest_entry(&mut self) {
        let Some(dropped) = self.kept.pop_front() else {
            return;
        };
        self.first_kept = dropped.log_index + 1;
        while self
            .kept
            .front()
            .is_some_and(|e| e.log_index < self.first_kept)
        {
            self.kept.pop_front();
        }
    }

    /// The events `keep` selects at indexes `from..=upto`, whole entries only: past `max`
    /// events it stops after the entry it is in. Returns them and the last index covered.
    pub fn since(
        &self,
        from: u64,
        upto: u64,
        keep: impl Fn(&leasehold_core::Event) -> bool,
        max: usize,
    ) -> Result<(Vec<NotedEvent>, u64), Compacted> {
        if from < self.first_kept {
            return Err(Compacted {
                first_kept: self.first_kept,
            });
        }
        let start = self.kept.partition_point(|e| e.log_index < from);
        let mut found: Vec<NotedEvent> = Vec::new();
        for noted in self.kept.range(start..) {
            if noted.log_index > upto {
                break;
            }
            if found.len() >= max && found.last().is_some_and(|l| l.log_index < noted.log_index) {
                let covered = noted.log_index - 1;
                return Ok((found, covered));
            }
            if keep(&noted.event) {
                found.push(noted.clone());
            }
        }
        Ok((found, upto))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::EventKind;

    fn at(log_index: u64, lease: &str) -> NotedEvent {
        NotedEvent {
            log_index,
            store_time_ms: log_index * 10,
            event: Event {
                kind: EventKind::Granted,
                lease: lease.into(),
                holder: "h".into(),
                token: log_index,
                expires_at_ms: 0,
            },
        }
    }

    fn indexes(found: &[NotedEvent]) -> Vec<u64> {
        found.iter().map(|e| e.log_index).collect()
    }

    #[test]
    fn past_its_capacity_the_window_drops_whole_entries_and_says_where_it_starts() {
        let mut history = EventHistory::with_capacity(3);
        history.push([at(1, "a")]);
        history.push([at(2, "a"), at(2, "b")]);
        history.push([at(3, "a"), at(3, "b")]);
        // Four events past a capacity of three: entry 1 goes, then entry 2's second event
        // would be alone, so all of entry 2 goes.
        assert_eq!(history.first_kept(), 3);
        assert_eq!(
            history.since(2, 3, |_| true, 10),
            Err(Compacted { first_kept: 3 })
        );
        let (found, covered) = history.since(3, 3, |_| true, 10).unwrap();
        assert_eq!((indexes(&found), covered), (vec![3, 3], 3));
    }

    #[test]
    fn the_window_never_holds_room_for_more_than_its_capacity() {
        let mut history = EventHistory::with_capacity(64);
        for index in 1..=100 {
            history.push((0..5).map(|_| at(index, "a")));
        }
        // Twelve whole entries of five fit in 64.
        assert_eq!(history.first_kept(), 89);
        assert_eq!(history.kept.len(), 60);
        assert!(
            history.kept.capacity() <= 64,
            "room for {}",
            history.kept.capacity()
        );
        // An entry larger than the window is not kept, and nothing before it is; the entries
        // after it in the same push are.
        history.push((0..65).map(|_| at(101, "a")).chain([at(102, "a")]));
        assert_eq!(history.first_kept(), 102);
        assert_eq!(history.kept.len(), 1);
    }

    #[test]
    fn a_scan_filters_and_stops_only_between_entries() {
        let mut history = EventHistory::default();
        history.push([at(1, "a"), at(1, "b")]);
        history.push([at(2, "b")]);
        history.push([at(4, "a")]);
        let only_a = |e: &Event| e.lease == "a";
        let (found, covered) = history.since(1, 5, only_a, 10).unwrap();
        assert_eq!((indexes(&found), covered), (vec![1, 4], 5));
        // A cap of one still returns entry 1 whole, and says only it was covered.
        let (found, covered) = history.since(1, 5, |_| true, 1).unwrap();
        assert_eq!((indexes(&found), covered), (vec![1, 1], 1));
        let (found, covered) = history.since(2, 3, |_| true, 10).unwrap();
        assert_eq!((indexes(&found), covered), (vec![2], 3));
        history.reset(10);
        assert_eq!(
            history.since(9, 12, |_| true, 10),
            Err(Compacted { first_kept: 10 })
        );
    }
}
