//! Holder names shared between the leases that name the same holder.

use crate::Name;

/// How many names [`RecentHolders`] keeps: room for the holders granting at one time, so that
/// few of them share a slot, in 16 KiB.
const SLOTS: usize = 1024;

/// The names of recently granted holders, so that a holder granted many leases stores its name
/// once for all of them: a grant to a holder whose name is here shares it. A direct-mapped
/// cache (a name takes the slot its hash picks, pushing out the one there), so a holder that no
/// other lease names costs its leases nothing more than its own copy. A count of every holder
/// named would have shared every name, but at about 60 bytes more per lease when each lease has
/// a holder of its own, as `Holder`'s unique names give.
///
/// Not state: which names share storage changes no answer, so tables that differ only here
/// are equal, and a clone (a snapshot's) starts empty instead of copying 16 KiB under the
/// state lock. A load shares the names of its leases through one as it decodes, and the table
/// starts with an empty one: a holder granted again after a load keeps a second copy of its
/// name, for its new grants.
#[derive(Default)]
pub(crate) struct RecentHolders(Vec<Option<Name>>);

impl RecentHolders {
    /// `holder`'s name, shared with the last lease granted to it if that grant is remembered.
    pub(crate) fn name(&mut self, holder: &str) -> Name {
        self.remember(holder, || Name::from(holder))
    }

    /// `holder`, or the equal name remembered in its stead.
    pub(crate) fn share(&mut self, holder: Name) -> Name {
        self.remember(&holder.clone(), || holder)
    }

    /// The name remembered as `holder`, or `made` remembered in its slot.
    fn remember(&mut self, holder: &str, made: impl FnOnce() -> Name) -> Name {
        if self.0.is_empty() {
            self.0 = vec![None; SLOTS];
        }
        match &mut self.0[(crate::fnv1a_of(holder) % SLOTS as u64) as usize] {
            Some(name) if **name == *holder => name.clone(),
            slot => slot.insert(made()).clone(),
        }
    }
}

impl Clone for RecentHolders {
    fn clone(&self) -> Self {
        RecentHolders::default()
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
        assert!(Name::ptr_eq(&first, &recent.name("h")));
        for i in 0..10 * SLOTS {
            recent.name(&format!("holder-{i}"));
        }
        assert_eq!(recent.0.len(), SLOTS, "never more names than slots");
        assert_eq!(&*recent.name("h"), "h");
        let decoded = Name::from("h");
        assert!(Name::ptr_eq(&recent.share(decoded), &recent.name("h")));
        assert!(recent.clone().0.is_empty(), "a clone copies nothing");
    }
}
