//! Who created what the table keeps: the identity that created each row, and each lease, created
//! by a caller with one, kept until the row is deleted or the lease forgotten, with how many each
//! identity created. What the leader's caps on the rows and leases one identity keeps count
//! (the node's `caps`).
//!
//! Advisory, as those caps are the leader's: outside the digest, and encoded at the end of the
//! table, where builds before 0.5.0 stop reading (they load such a table without it, and what
//! they hand on counts toward no identity).

use std::borrow::Borrow;

use super::tally::Tally;
use super::{Map, Name};

/// The creator of each key of one kind (row keys or lease names) and each creator's count. The
/// map is stored; the counts are derived from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Creators<K: Ord + Clone> {
    by_key: Map<K, Name>,
    counts: Tally,
}

impl<K: Ord + Clone + Borrow<str>> Creators<K> {
    /// Creators as stored, with their counts rebuilt.
    pub fn from_map(by_key: Map<K, Name>) -> Self {
        let mut counts = Tally::default();
        by_key.values().for_each(|creator| counts.add(creator));
        Creators { by_key, counts }
    }

    /// The stored part.
    pub fn map(&self) -> &Map<K, Name> {
        &self.by_key
    }

    /// `key` was created by `identity`.
    pub fn created(&mut self, key: K, identity: Name) {
        self.counts.add(&identity);
        if let Some(before) = self.by_key.insert(key, identity) {
            // Not reached: a key is created only once until removed. Kept exact regardless.
            self.counts.remove(&before);
        }
    }

    /// `key` is gone from the table.
    pub fn removed(&mut self, key: &str) {
        if let Some(creator) = self.by_key.remove(key) {
            self.counts.remove(&creator);
        }
    }

    /// How many of the keys kept now `identity` created.
    pub fn of(&self, identity: &str) -> usize {
        self.counts.of(identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_creations_and_removals_and_are_rebuilt_from_the_map() {
        let mut rows: Creators<String> = Creators::default();
        rows.created("k1".into(), Name::from("a"));
        rows.created("k2".into(), Name::from("a"));
        rows.created("k3".into(), Name::from("b"));
        rows.removed("k1");
        rows.removed("never");
        assert_eq!((rows.of("a"), rows.of("b"), rows.of("c")), (1, 1, 0));
        assert_eq!(Creators::from_map(rows.map().clone()), rows);
    }
}
