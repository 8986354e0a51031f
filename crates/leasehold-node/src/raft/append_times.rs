//! When this process appended each recent log entry, on its own monotonic clock: what lets a
//! new leader count the time since the newest stamp it holds was taken, including an election
//! that started before that entry was applied here (see `node::clock`).
//!
//! Keyed by the whole log id, term included, so an entry truncated and replaced at the same
//! index never lends its instant to the one that replaced it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use super::LogId;
use crate::limits::APPEND_TIMES_KEPT;

#[derive(Clone, Default)]
pub struct AppendTimes(Arc<Mutex<BTreeMap<u64, (LogId, Instant)>>>);

impl AppendTimes {
    /// Notes that the entries with these ids are being appended now.
    pub fn appended(&self, ids: impl IntoIterator<Item = LogId>) {
        let now = Instant::now();
        let mut times = self.0.lock().unwrap_or_else(|p| p.into_inner());
        for id in ids {
            times.insert(id.index, (id, now));
        }
        while times.len() > APPEND_TIMES_KEPT {
            times.pop_first();
        }
    }

    /// When the entry `id` was appended here, if it was and is still remembered.
    pub fn when(&self, id: &LogId) -> Option<Instant> {
        let times = self.0.lock().unwrap_or_else(|p| p.into_inner());
        times
            .get(&id.index)
            .filter(|(appended, _)| appended == id)
            .map(|(_, at)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::CommittedLeaderId;

    fn id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn an_entry_replaced_at_its_index_does_not_lend_its_instant() {
        let times = AppendTimes::default();
        times.appended([id(1, 5), id(1, 6)]);
        assert!(times.when(&id(1, 6)).is_some());
        assert_eq!(
            times.when(&id(2, 6)),
            None,
            "another term's entry at that index"
        );
        times.appended([id(2, 6)]);
        assert_eq!(times.when(&id(1, 6)), None, "the truncated entry is gone");
        assert!(times.when(&id(2, 6)).is_some());
    }

    #[test]
    fn only_the_newest_entries_are_remembered() {
        let times = AppendTimes::default();
        times.appended((1..=APPEND_TIMES_KEPT as u64 + 10).map(|i| id(1, i)));
        assert_eq!(times.when(&id(1, 10)), None);
        assert!(times.when(&id(1, APPEND_TIMES_KEPT as u64 + 10)).is_some());
    }
}
