//! Counts by name, kept along with the table at every change: how many sessions, leases and
//! rows each identity has, so that the leader's caps on them (the node's `caps`) read a
//! number instead of scanning the table. Never stored: rebuilt from the table on load.

use super::{Map, Name};

/// How many of something each name has; a name with none is not kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally(Map<Name, usize>);

impl Tally {
    /// One more for `name`.
    pub fn add(&mut self, name: &str) {
        self.add_many(name, 1);
    }

    /// `more` more for `name`.
    pub fn add_many(&mut self, name: &str, more: usize) {
        match self.0.get_mut(name) {
            Some(count) => *count += more,
            None if more > 0 => {
                self.0.insert(Name::from(name), more);
            }
            None => {}
        }
    }

    /// One fewer for `name`; nothing if it has none.
    pub fn remove(&mut self, name: &str) {
        if let Some(count) = self.0.get_mut(name) {
            *count -= 1;
            if *count == 0 {
                self.0.remove(name);
            }
        }
    }

    /// How many `name` has.
    pub fn of(&self, name: &str) -> usize {
        self.0.get(name).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::Tally;

    #[test]
    fn a_name_counted_down_to_none_is_not_kept() {
        let mut tally = Tally::default();
        tally.add("a");
        tally.add("a");
        tally.add("b");
        tally.remove("a");
        tally.remove("nobody");
        assert_eq!(
            (tally.of("a"), tally.of("b"), tally.of("nobody")),
            (1, 1, 0)
        );
        tally.remove("a");
        tally.remove("b");
        assert_eq!(tally, Tally::default());
    }
}
