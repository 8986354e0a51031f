//! Holder names shared between the leases that name the same holder.

use std::sync::Arc;

/// How many names [`RecentHolders`] keeps: room for the holders granting at one time, so that
/// few of them share a slot, in 16 KiB that a snapshot's clone of the table copies.
const SLOTS: usize = 1024;

/// The names of recently granted holders, so that a holder granted many leases stores its name
/// once for all of them: a grant to a holder whose name is here shares it. A direct-mapped
/// cache (a name takes the slot its hash picks, pushing out the one there), so a holder that no
/// other lease names costs its leases nothing more than its own copy. A count of every holder
/// named would have shared every name, but at about 60 bytes more per lease when each lease has
/// a holder of its own, as `Holder`'s unique names give.
///
/// Not state: which names share storage changes no answer, so tables that differ only here
/// are equal, and a loaded table starts with none (its leases' names are shared as they decode).
#[derive(Clone, Default)]
pub(crate) struct RecentHolders(Vec<Option<Arc<str>>>);

impl RecentHolders {
    /// `holder`'s name, shared with the last lease granted to it if that grant is remembered.
    pub(crate) fn name(&mut self, holder: &str) -> Arc<str> {
        if self.0.is_empty() {
            self.0 = vec![None; SLOTS];
        }
        let slot = &mut self.0[(crate::fnv1a_of(holder) % SLOTS as u64) as usize];
        match slot {
            Some(name) if **name == *holder => name.clone(),
            _ => slot.insert(Arc::from(holder)).clone(),
        }
    }
}

impl PartialEq for RecentHolders {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for RecentHolders {}

impl std::fmt::Debug for RecentHolders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.0.iter().flatten().count();
        write!(f, "RecentHolders({kept} names)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_granted_again_is_shared_and_the_cache_stays_bounded() {
        let mut recent = RecentHolders::default();
        let first = recent.name("h");
        assert!(Arc::ptr_eq(&first, &recent.name("h")));
        for i in 0..10 * SLOTS {
            recent.name(&format!("holder-{i}"));
        }
        assert_eq!(recent.0.len(), SLOTS, "never more names than slots");
        assert_eq!(&*recent.name("h"), "h");
    }
}
