//! `ListLeases` and `ListKeys`: the leases or rows under a prefix, a page at a time, in name
//! order. A page continues after the last name the previous one read (its `next_page_token`),
//! so a listing goes on across writes and leader changes without the node keeping anything per
//! caller. A listing reads only where the policy lets the caller read (the page's prefix,
//! narrowed to the caller's grants): it reads no entry it does not show, so a page costs the
//! tree's depth and the entries it holds, and its token never names what the caller may not
//! see. A page holds the entries asked for (at most `Limits::MAX_LIST_PAGE`), and, for rows,
//! ends at [`LIST_PAGE_BYTES`].

use super::caller::{Caller, Credentials};
use super::{convert, Deadline, LeaseApi};
use crate::limits::LIST_PAGE_BYTES;
use crate::node::{NodeError, Reading};
use crate::proto::v1 as pb;
use leasehold_core::auth::Permission;
use leasehold_core::limits::list_page;
use leasehold_core::Limits;

/// A page asked for, checked.
struct Page {
    prefix: String,
    /// Where it continues: after this name, or from the prefix when empty.
    after: String,
    /// The most entries it shows.
    limit: usize,
    serializable: bool,
}

impl Page {
    /// `m` checked, for names of at most `max` bytes.
    fn of(m: Option<&pb::ListPage>, max: usize) -> Result<Page, NodeError> {
        let m = m.cloned().unwrap_or_default();
        let limit = list_page(&m.prefix, &m.page_token, m.limit, max)?;
        Ok(Page {
            prefix: m.prefix,
            after: m.page_token,
            limit,
            serializable: m.serializable,
        })
    }

    /// The prefixes to read, in name order and disjoint: the page's own, narrowed to those the
    /// caller may read (`readable`; `None` for everywhere).
    fn ranges(&self, readable: Option<Vec<String>>) -> Vec<String> {
        let Some(readable) = readable else {
            return vec![self.prefix.clone()];
        };
        let mut ranges: Vec<String> = (readable.into_iter())
            .filter_map(|granted| match () {
                () if granted.starts_with(&self.prefix) => Some(granted),
                () if self.prefix.starts_with(&granted) => Some(self.prefix.clone()),
                () => None,
            })
            .collect();
        ranges.sort();
        // Sorted, a prefix inside another comes right after it (or after one inside it).
        ranges.dedup_by(|inner, outer| inner.starts_with(outer.as_str()));
        ranges
    }

    /// Where the page continues within `range`: after its token, unless the token comes before
    /// the range (then from the range's first name).
    fn after_in(&self, range: &str) -> &str {
        match self.after.as_str() > range {
            true => &self.after,
            false => "",
        }
    }

    /// The entries of `entries` (each with its name, and its size in bytes past the name) as
    /// `make` answers them, until the page is full; and the token that continues after it
    /// (empty when no entry follows).
    fn fill<'a, E, A>(
        &self,
        entries: impl Iterator<Item = (&'a str, E)>,
        size: impl Fn(&E) -> usize,
        make: impl Fn(&str, E) -> A,
    ) -> (Vec<A>, String) {
        let mut entries = entries.peekable();
        let (mut page, mut bytes, mut last) = (Vec::new(), 0, "");
        for (name, entry) in entries.by_ref() {
            last = name;
            bytes += name.len() + size(&entry);
            page.push(make(name, entry));
            if page.len() == self.limit || bytes >= LIST_PAGE_BYTES {
                break;
            }
        }
        let next = match entries.peek() {
            Some(_) => last.to_owned(),
            None => String::new(),
        };
        (page, next)
    }
}

impl LeaseApi {
    pub async fn list_leases(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::ListLeasesRequest,
    ) -> Result<pb::ListLeasesResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let page = Page::of(m.page.as_ref(), Limits::MAX_NAME_BYTES)?;
            let list = |s: &Reading, _: &pb::ListLeasesRequest, caller: &Caller| {
                let (table, now_ms) = (&s.table, s.table.now_ms());
                let ranges = page.ranges(caller.prefixes(table.policy(), Permission::ReadLeases));
                let leases = (ranges.iter())
                    .flat_map(|range| table.leases_under(range, page.after_in(range)))
                    .map(|(name, lease)| (name.as_str(), lease));
                let make = |name: &str, lease| convert::lease_entry(name, lease, now_ms);
                Ok(page.fill(leases, |_| 0, make))
            };
            let answer = |(leases, next_page_token), at| {
                Ok(pb::ListLeasesResponse {
                    applied: convert::applied(&at),
                    leases,
                    next_page_token,
                })
            };
            self.read_as(caller, m, page.serializable, list, answer)
                .await
        })
        .await
    }

    pub async fn list_keys(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::ListKeysRequest,
    ) -> Result<pb::ListKeysResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let page = Page::of(m.page.as_ref(), Limits::MAX_KEY_BYTES)?;
            let list = |s: &Reading, _: &pb::ListKeysRequest, caller: &Caller| {
                let table = &s.table;
                let ranges = page.ranges(caller.prefixes(table.policy(), Permission::ReadKeys));
                let rows = (ranges.iter())
                    .flat_map(|range| table.rows_under(range, page.after_in(range)))
                    .map(|(key, value)| (key.as_str(), value));
                let make = |key: &str, value: &[u8]| pb::KeyEntry {
                    key: key.to_owned(),
                    value: value.to_vec(),
                };
                Ok(page.fill(rows, |value| value.len(), make))
            };
            let answer = |(keys, next_page_token), at| {
                Ok(pb::ListKeysResponse {
                    applied: convert::applied(&at),
                    keys,
                    next_page_token,
                })
            };
            self.read_as(caller, m, page.serializable, list, answer)
                .await
        })
        .await
    }
}
