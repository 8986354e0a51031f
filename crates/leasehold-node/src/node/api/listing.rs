//! `ListLeases` and `ListKeys`: the leases or rows under a prefix, a page at a time, in name
//! order. A page continues after the last name the previous one read (its `next_page_token`),
//! so a listing goes on across writes and leader changes without the node keeping anything per
//! caller. Each page is bounded three ways: the entries the caller asked for (at most
//! `Limits::MAX_LIST_PAGE`), the entries read ([`LIST_SCAN_PER_PAGE`], shown or not, so that a
//! caller the policy lets see few of many cannot make the node scan them all), and, for rows,
//! the bytes ([`LIST_PAGE_BYTES`]). What the policy does not let the caller read is left out.

use super::caller::{Caller, Credentials};
use super::{convert, Deadline, LeaseApi};
use crate::limits::{LIST_PAGE_BYTES, LIST_SCAN_PER_PAGE};
use crate::node::NodeError;
use crate::proto::v1 as pb;
use crate::raft::state_machine::Applying;
use leasehold_core::auth::Action;
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

    /// The entries of `entries` (each with its name, and its size in bytes past it) that `shown` lets
    /// through, as `make` answers them, until the page is full or has read its bound; and the
    /// token that continues after it (empty when no entry follows).
    fn fill<'a, E, A>(
        &self,
        entries: impl Iterator<Item = (&'a str, E)>,
        shown: impl Fn(&str) -> bool,
        size: impl Fn(&E) -> usize,
        make: impl Fn(&str, E) -> A,
    ) -> (Vec<A>, String) {
        let mut entries = entries.peekable();
        let (mut page, mut read, mut bytes, mut last) = (Vec::new(), 0, 0, "");
        for (name, entry) in entries.by_ref() {
            read += 1;
            last = name;
            if shown(name) {
                bytes += name.len() + size(&entry);
                page.push(make(name, entry));
            }
            let full = page.len() == self.limit || bytes >= LIST_PAGE_BYTES;
            if full || read == LIST_SCAN_PER_PAGE {
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
            let list = |s: &Applying, _: &pb::ListLeasesRequest, caller: &Caller| {
                let (table, now_ms) = (&s.table, s.table.now_ms());
                let shown =
                    |name: &str| caller.may(table.policy(), &Action::ReadLease(name)).is_ok();
                let leases = (table.leases_under(&page.prefix, &page.after))
                    .map(|(name, lease)| (name.as_str(), lease));
                let make = |name: &str, lease| convert::lease_entry(name, lease, now_ms);
                Ok(page.fill(leases, shown, |_| 0, make))
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
            let list = |s: &Applying, _: &pb::ListKeysRequest, caller: &Caller| {
                let table = &s.table;
                let shown = |key: &str| caller.may(table.policy(), &Action::ReadKey(key)).is_ok();
                let rows = (table.rows_under(&page.prefix, &page.after))
                    .map(|(key, value)| (key.as_str(), value));
                let make = |key: &str, value: &[u8]| pb::KeyEntry {
                    key: key.to_owned(),
                    value: value.to_vec(),
                };
                Ok(page.fill(rows, shown, |value| value.len(), make))
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
