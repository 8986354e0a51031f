//! [`Keyspace`]: etcd's keys, revisions and leases, changed only by [`Keyspace::apply`] and
//! [`Keyspace::expire`], pure functions of the logged command and its store time.
//!
//! A request runs on a draft (the maps are persistent, so the draft's clone costs O(1) and its
//! changes copy only the nodes they touch): a transaction refused halfway, say by a put to a
//! lease that ran out, leaves the keyspace as it was, as etcd checks every request first. A
//! request that cannot be refused once it has changed something (one op a branch, a revoke,
//! an expiry) runs on the keyspace's own maps instead, which it changes in place.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};

use super::answer::{KeyValue, OpAnswer, RangeAnswer, TxnAnswer};
use super::history::{EtcdEvent, EtcdEventKind, History};
use super::leases::{EtcdLease, Leases};
use super::request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, EtcdOp, PutRequest, RangeRequest,
    RequestOp, SortOrder, SortTarget, Span, Txn,
};
use super::{Bytes, EtcdAnswer, EtcdOutcome, Refusal};
use crate::limits::{ETCD_EXPIRY_WORK, ETCD_MAX_KEYS_PER_LEASE, ETCD_MAX_RANGE_KEYS};
use crate::{Map, Name};

/// The keyspace: every key's latest version, the leases, the revision, and recent events.
/// Equal to another when their stored state is (the recent events are this process's, and a
/// keyspace loaded from a snapshot has none of the events before it).
#[derive(Clone, Debug, Default)]
pub struct Keyspace {
    /// Revisions made so far: the revision is one more (etcd's first is 1, before any write).
    changes: i64,
    keys: Map<Bytes, KeyValue>,
    leases: Leases,
    /// Compacted to: no read or watch starts before it.
    compacted: i64,
    /// Derived: not stored, nor in the digest.
    history: History,
    /// The sum (wrapping) of every key's and lease's hash, kept at every change. Derived.
    sum: u64,
}

impl PartialEq for Keyspace {
    fn eq(&self, other: &Keyspace) -> bool {
        (self.changes, &self.keys, &self.leases, self.compacted)
            == (other.changes, &other.keys, &other.leases, other.compacted)
    }
}

impl Eq for Keyspace {}

/// What a keyspace stores: everything but what is derived.
#[derive(Serialize, Deserialize)]
pub(crate) struct Stored {
    changes: i64,
    #[serde(
        serialize_with = "crate::encode_map",
        deserialize_with = "crate::decode_map"
    )]
    keys: Map<Bytes, KeyValue>,
    #[serde(
        serialize_with = "crate::encode_map",
        deserialize_with = "crate::decode_map"
    )]
    leases: Map<i64, EtcdLease>,
    last_lease_id: i64,
    compacted: i64,
    /// The recent events (see `history`): the oldest revision a watch may start at, then the
    /// events from it on.
    first_kept: i64,
    events: Vec<EtcdEvent>,
}

impl From<Stored> for Keyspace {
    fn from(stored: Stored) -> Keyspace {
        let mut leases = Leases::loaded(stored.leases, stored.last_lease_id);
        for (key, kv) in &stored.keys {
            leases.attach(kv.lease, key);
        }
        let mut keyspace = Keyspace {
            changes: stored.changes,
            keys: stored.keys,
            leases,
            compacted: stored.compacted,
            history: History::restored(stored.first_kept, stored.events),
            sum: 0,
        };
        keyspace.sum = keyspace.rehashed();
        keyspace
    }
}

impl Keyspace {
    /// What is stored of it.
    pub(crate) fn stored(&self) -> Stored {
        Stored {
            changes: self.changes,
            keys: self.keys.clone(),
            leases: self.leases.by_id.clone(),
            last_lease_id: self.leases.last_id,
            compacted: self.compacted,
            first_kept: self.history.first_kept(),
            events: self.history.events().cloned().collect(),
        }
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.changes + 1
    }

    /// The revision compacted to: reads and watches start at it or after.
    pub fn compacted(&self) -> i64 {
        self.compacted
    }

    /// Whether nothing was ever written, granted or compacted (the table then stores no
    /// keyspace at all).
    pub fn is_empty(&self) -> bool {
        let untouched = (self.changes, self.leases.last_id, self.compacted) == (0, 0, 0);
        untouched && self.leases.by_id.is_empty()
    }

    /// The recent events, for watches.
    pub fn history(&self) -> &History {
        &self.history
    }

    /// How many keys there are.
    pub fn key_count(&self) -> usize {
        self.keys.len()
    }

    /// The lease `id`, live or not yet expired through the log.
    pub fn lease(&self, id: i64) -> Option<&EtcdLease> {
        self.leases.by_id.get(&id)
    }

    /// Every lease's id, in order.
    pub fn lease_ids(&self) -> impl Iterator<Item = i64> + '_ {
        self.leases.by_id.keys().copied()
    }

    /// The keys attached to lease `id`.
    pub fn lease_keys(&self, id: i64) -> impl Iterator<Item = &Bytes> {
        self.leases.keys_of(id)
    }

    /// The key from `key` up to `range_end` created first (a lock's or an election's first in
    /// line), found in one pass.
    pub fn first_created(&self, key: &[u8], range_end: &[u8]) -> Option<KeyValue> {
        let first =
            in_span(&self.keys, Span::of(key, range_end)).min_by_key(|kv| kv.create_revision);
        first.cloned()
    }

    /// When the next lease runs out, in store time: a tick is due then.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.leases.next_expiry_ms()
    }

    /// A fingerprint of the stored state, kept at every change.
    pub fn digest(&self) -> u64 {
        let parts = (self.changes, self.compacted, self.leases.last_id);
        crate::fnv1a_of(&(parts, self.keys.len(), self.leases.by_id.len(), self.sum))
    }

    fn rehashed(&self) -> u64 {
        let keys = self.keys.values().map(key_hash);
        let leases = self.leases.by_id.iter().map(|(id, l)| lease_hash(*id, l));
        keys.chain(leases).fold(0, u64::wrapping_add)
    }

    /// A range read outside a transaction, at `revision` (0: the current one). This store keeps
    /// each key's latest version only, so an older revision is refused as compacted.
    pub fn range(&self, request: &RangeRequest, revision: i64) -> Result<RangeAnswer, Refusal> {
        // A compaction never passes the current revision, which is the oldest served.
        match revision {
            ..=0 => {}
            r if r > self.revision() => return Err(Refusal::FutureRevision),
            r if r < self.revision() => {
                let compact_revision = self.revision();
                return Err(Refusal::Compacted { compact_revision });
            }
            _ => {}
        }
        range(&self.keys, request)
    }

    /// Applies `op` at store time `now_ms` for `identity` (`enforced`: the policy is on, so a
    /// lease serves only the identity that granted it).
    pub fn apply(
        &mut self,
        op: &EtcdOp,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
    ) -> EtcdOutcome {
        let caller = Caller { identity, enforced };
        let answer = match op {
            EtcdOp::Txn(txn) => self.txn(txn, now_ms, caller).map(EtcdAnswer::Txn),
            EtcdOp::LeaseGrant { id, ttl_s } => {
                // Kept whether the policy is on or not: it may be turned on later.
                let owner = identity.map(Name::from);
                let granted = self.leases.grant(*id, *ttl_s, now_ms, owner);
                granted.map(|id| {
                    self.sum = self
                        .sum
                        .wrapping_add(lease_hash(id, &self.leases.by_id[&id]));
                    EtcdAnswer::LeaseGranted { id, ttl_s: *ttl_s }
                })
            }
            EtcdOp::LeaseKeepAlive { id } => self.keep_alive(*id, now_ms, caller),
            EtcdOp::LeaseRevoke { id } => self.revoke(*id, now_ms, caller),
            EtcdOp::Compact { revision } => self.compact(*revision),
        };
        EtcdOutcome {
            revision: self.revision(),
            answer: answer.unwrap_or_else(EtcdAnswer::Refused),
        }
    }

    /// Deletes the keys of leases run out by `now_ms`, each lease's at a revision of its own,
    /// at most [`ETCD_EXPIRY_WORK`] keys and leases in all: whether more are due (a tick should
    /// follow at once).
    pub fn expire(&mut self, now_ms: u64) -> bool {
        let mut work = ETCD_EXPIRY_WORK;
        while let Some(id) = self.leases.first_due(now_ms) {
            // A lease holds at most as many keys as one command ends, so each lease ends whole,
            // at one revision, in the first command with the work left for it.
            let cost = self.leases.key_count(id).max(1);
            if cost > work {
                return true;
            }
            work -= cost;
            let keys: Vec<Bytes> = self.leases.keys_of(id).cloned().collect();
            let mut draft = self.take_draft();
            for key in &keys {
                draft.delete_key(key, false);
            }
            draft.drop_lease(id);
            self.commit(draft);
        }
        false
    }

    fn keep_alive(&mut self, id: i64, now_ms: u64, caller: Caller) -> Result<EtcdAnswer, Refusal> {
        caller.may_use(&self.leases, id, now_ms)?;
        let before = lease_hash(id, &self.leases.by_id[&id]);
        let ttl_s = self
            .leases
            .keep_alive(id, now_ms)
            .ok_or(Refusal::LeaseNotFound)?;
        let after = lease_hash(id, &self.leases.by_id[&id]);
        self.sum = self.sum.wrapping_sub(before).wrapping_add(after);
        Ok(EtcdAnswer::LeaseKeptAlive { id, ttl_s })
    }

    fn revoke(&mut self, id: i64, now_ms: u64, caller: Caller) -> Result<EtcdAnswer, Refusal> {
        caller.may_use(&self.leases, id, now_ms)?;
        let mut draft = self.take_draft();
        let keys: Vec<Bytes> = draft.leases.keys_of(id).cloned().collect();
        for key in &keys {
            draft.delete_key(key, false);
        }
        draft.drop_lease(id);
        self.commit(draft);
        Ok(EtcdAnswer::LeaseRevoked)
    }

    fn compact(&mut self, revision: i64) -> Result<EtcdAnswer, Refusal> {
        if revision > self.revision() {
            return Err(Refusal::FutureRevision);
        }
        if revision <= self.compacted {
            return Err(Refusal::Compacted {
                compact_revision: self.compacted,
            });
        }
        self.compacted = revision;
        self.history.forget_before(revision);
        Ok(EtcdAnswer::Compacted)
    }

    fn txn(&mut self, txn: &Txn, now_ms: u64, caller: Caller) -> Result<TxnAnswer, Refusal> {
        // Each op checks everything it may be refused for before it changes anything, so a
        // branch of one op is refused, if at all, before any change. Such a transaction (a Put,
        // a DeleteRange, a lock's Txn) runs in place: a clone's changes would copy every map
        // node on their path (a node holds up to 16 keys) and free the old ones at the commit.
        let one_op = |branch: &[RequestOp]| {
            branch.len() <= 1 && !matches!(branch.first(), Some(RequestOp::Txn(_)))
        };
        let in_place = one_op(&txn.success) && one_op(&txn.failure);
        let mut draft = if in_place {
            self.take_draft()
        } else {
            self.draft()
        };
        let answer = draft.txn(txn, now_ms, caller);
        debug_assert!(
            answer.is_ok() || !in_place || draft.events.is_empty(),
            "a request of one op a branch was refused after it changed the keyspace"
        );
        // Refused, a draft of clones is dropped; one of the keyspace's own maps is the keyspace
        // as it was, and goes back unchanged.
        if answer.is_ok() || in_place {
            self.commit(draft);
        }
        answer
    }

    /// A draft of the next revision, on clones of the maps: dropped, it leaves the keyspace as
    /// it was.
    fn draft(&self) -> Draft {
        Draft {
            keys: self.keys.clone(),
            leases: self.leases.clone(),
            sum: self.sum,
            revision: self.revision() + 1,
            events: Vec::new(),
        }
    }

    /// A draft of the next revision on the keyspace's own maps, changed in place, for a change
    /// that is committed whatever happens: until then the keyspace has no keys nor leases (nor
    /// after a panic in between, which ends the apply thread and with it the node's applying).
    fn take_draft(&mut self) -> Draft {
        Draft {
            keys: std::mem::take(&mut self.keys),
            leases: std::mem::take(&mut self.leases),
            sum: self.sum,
            revision: self.revision() + 1,
            events: Vec::new(),
        }
    }

    /// Makes `draft` the keyspace, a revision later if it changed a key.
    fn commit(&mut self, draft: Draft) {
        let Draft {
            keys,
            leases,
            sum,
            events,
            ..
        } = draft;
        if !events.is_empty() {
            self.changes += 1;
        }
        (self.keys, self.leases, self.sum) = (keys, leases, sum);
        for event in events {
            self.history.push(event);
        }
    }
}

/// Who asks, for the leases' owners.
#[derive(Clone, Copy)]
struct Caller<'a> {
    identity: Option<&'a str>,
    enforced: bool,
}

impl Caller<'_> {
    fn may_use(&self, leases: &Leases, id: i64, now_ms: u64) -> Result<(), Refusal> {
        leases
            .usable(id, now_ms, self.identity, self.enforced)
            .map(|_| ())
    }
}

/// A request's changes, not yet the keyspace's.
struct Draft {
    keys: Map<Bytes, KeyValue>,
    leases: Leases,
    sum: u64,
    /// The revision its changes are made at.
    revision: i64,
    events: Vec<EtcdEvent>,
}

impl Draft {
    fn txn(&mut self, txn: &Txn, now_ms: u64, caller: Caller) -> Result<TxnAnswer, Refusal> {
        let succeeded = txn.compare.iter().all(|c| holds(&self.keys, c));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let mut responses = Vec::with_capacity(branch.len());
        for request in branch {
            responses.push(match request {
                RequestOp::Range(r) => OpAnswer::Range(range(&self.keys, r)?),
                RequestOp::Put(put) => self.put(put, now_ms, caller)?,
                RequestOp::DeleteRange(delete) => self.delete_range(delete)?,
                RequestOp::Txn(nested) => OpAnswer::Txn(self.txn(nested, now_ms, caller)?),
            });
        }
        Ok(TxnAnswer {
            succeeded,
            responses,
        })
    }

    fn put(&mut self, put: &PutRequest, now_ms: u64, caller: Caller) -> Result<OpAnswer, Refusal> {
        let before = self.keys.get(put.key.as_slice()).cloned();
        if (put.ignore_value || put.ignore_lease) && before.is_none() {
            return Err(Refusal::KeyNotFound);
        }
        let lease = match (&before, put.ignore_lease) {
            (Some(before), true) => before.lease,
            _ => put.lease,
        };
        if lease != 0 && !put.ignore_lease {
            caller.may_use(&self.leases, lease, now_ms)?;
            let moves = before.as_ref().is_none_or(|b| b.lease != lease);
            if moves && self.leases.key_count(lease) >= ETCD_MAX_KEYS_PER_LEASE {
                let max = ETCD_MAX_KEYS_PER_LEASE;
                return Err(Refusal::TooManyLeaseKeys { id: lease, max });
            }
        }
        let (key, value) = match &before {
            Some(before) if put.ignore_value => (before.key.clone(), before.value.clone()),
            Some(before) => (before.key.clone(), Bytes::from(put.value.as_slice())),
            None => (
                Bytes::from(put.key.as_slice()),
                Bytes::from(put.value.as_slice()),
            ),
        };
        let kv = KeyValue {
            create_revision: before.as_ref().map_or(self.revision, |b| b.create_revision),
            mod_revision: self.revision,
            version: before.as_ref().map_or(0, |b| b.version) + 1,
            key: key.clone(),
            value,
            lease,
        };
        if let Some(before) = &before {
            self.leases.detach(before.lease, &key);
            self.sum = self.sum.wrapping_sub(key_hash(before));
        }
        self.leases.attach(lease, &key);
        self.sum = self.sum.wrapping_add(key_hash(&kv));
        self.keys.insert(key, kv.clone());
        self.events.push(EtcdEvent {
            kind: EtcdEventKind::Put,
            kv,
            prev_kv: before.clone(),
        });
        Ok(OpAnswer::Put {
            prev_kv: before.filter(|_| put.prev_kv),
        })
    }

    fn delete_range(&mut self, delete: &DeleteRangeRequest) -> Result<OpAnswer, Refusal> {
        let span = Span::of(&delete.key, &delete.range_end);
        // Bounded as a range's answer is, so that one command's apply stays short.
        let matched = in_span(&self.keys, span).count();
        if matched > ETCD_MAX_RANGE_KEYS {
            let max = ETCD_MAX_RANGE_KEYS;
            return Err(Refusal::TooManyDeletes { max, matched });
        }
        let doomed: Vec<Bytes> = in_span(&self.keys, span).map(|kv| kv.key.clone()).collect();
        let mut prev_kvs = Vec::new();
        for key in &doomed {
            if let Some(before) = self.delete_key(key, delete.prev_kv) {
                prev_kvs.push(before);
            }
        }
        Ok(OpAnswer::DeleteRange {
            deleted: doomed.len() as i64,
            prev_kvs,
        })
    }

    /// Deletes `key`, noting the event; the key before, if `keep` and it was there.
    fn delete_key(&mut self, key: &[u8], keep: bool) -> Option<KeyValue> {
        let before = self.keys.remove(key)?;
        self.leases.detach(before.lease, key);
        self.sum = self.sum.wrapping_sub(key_hash(&before));
        self.events.push(EtcdEvent {
            kind: EtcdEventKind::Delete,
            kv: KeyValue {
                key: before.key.clone(),
                create_revision: 0,
                mod_revision: self.revision,
                version: 0,
                value: Bytes::from(&[][..]),
                lease: 0,
            },
            prev_kv: Some(before.clone()),
        });
        keep.then_some(before)
    }

    fn drop_lease(&mut self, id: i64) {
        if let Some(lease) = self.leases.by_id.get(&id) {
            self.sum = self.sum.wrapping_sub(lease_hash(id, lease));
        }
        self.leases.remove(id);
    }
}

/// The keys of `span`, in key order.
fn in_span<'a>(
    keys: &'a Map<Bytes, KeyValue>,
    span: Span<'a>,
) -> Box<dyn Iterator<Item = &'a KeyValue> + 'a> {
    use std::ops::Bound::{Excluded, Included, Unbounded};
    match span {
        Span::One(key) => Box::new(keys.get(key).into_iter()),
        Span::From(first) => Box::new(
            keys.range::<_, [u8]>((Included(first), Unbounded))
                .map(|(_, kv)| kv),
        ),
        Span::Between(first, end) if first >= end => Box::new(std::iter::empty()),
        Span::Between(first, end) => Box::new(
            keys.range::<_, [u8]>((Included(first), Excluded(end)))
                .map(|(_, kv)| kv),
        ),
    }
}

/// Whether every key of the compare's range holds it (a missing single key compares as zeros
/// with no value, as etcd compares it).
fn holds(keys: &Map<Bytes, KeyValue>, compare: &Compare) -> bool {
    let span = Span::of(&compare.key, &compare.range_end);
    let mut found = in_span(keys, span).peekable();
    if found.peek().is_none() {
        // No key: a value compare fails (no value is no value), any other compares a key of
        // zeros, as etcd's does, for a range as for one key.
        return match &compare.target {
            CompareTarget::Value(_) => false,
            _ => compared(&zero(), compare),
        };
    }
    found.all(|kv| compared(kv, compare))
}

fn zero() -> KeyValue {
    KeyValue {
        key: Bytes::from(&[][..]),
        create_revision: 0,
        mod_revision: 0,
        version: 0,
        value: Bytes::from(&[][..]),
        lease: 0,
    }
}

fn compared(kv: &KeyValue, compare: &Compare) -> bool {
    let order = match &compare.target {
        CompareTarget::Version(v) => kv.version.cmp(v),
        CompareTarget::Create(v) => kv.create_revision.cmp(v),
        CompareTarget::Mod(v) => kv.mod_revision.cmp(v),
        CompareTarget::Value(v) => (*kv.value).cmp(v.as_slice()),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
    };
    match compare.result {
        CompareResult::Equal => order == Ordering::Equal,
        CompareResult::Greater => order == Ordering::Greater,
        CompareResult::Less => order == Ordering::Less,
        CompareResult::NotEqual => order != Ordering::Equal,
    }
}

/// A range over `keys`: counted, filtered, sorted and limited as etcd does, at most
/// [`ETCD_MAX_RANGE_KEYS`] keys answered.
fn range(keys: &Map<Bytes, KeyValue>, r: &RangeRequest) -> Result<RangeAnswer, Refusal> {
    let span = Span::of(&r.key, &r.range_end);
    let count = in_span(keys, span).count() as i64;
    if r.count_only {
        return Ok(RangeAnswer {
            kvs: Vec::new(),
            more: false,
            count,
        });
    }
    let within = |v: i64, min: i64, max: i64| (min == 0 || v >= min) && (max == 0 || v <= max);
    let kept = |kv: &&KeyValue| {
        within(kv.mod_revision, r.min_mod_revision, r.max_mod_revision)
            && within(
                kv.create_revision,
                r.min_create_revision,
                r.max_create_revision,
            )
    };
    let limit = usize::try_from(r.limit).unwrap_or(0);
    let in_key_order = matches!(
        (r.sort_order, r.sort_target),
        (SortOrder::None | SortOrder::Ascend, SortTarget::Key)
    );
    let mut kvs: Vec<&KeyValue> = if in_key_order && (1..=ETCD_MAX_RANGE_KEYS).contains(&limit) {
        // The first keys are the answer, and one past them says whether there are more.
        in_span(keys, span).filter(kept).take(limit + 1).collect()
    } else {
        let matched = in_span(keys, span).filter(kept).count();
        let answered = if limit == 0 {
            matched
        } else {
            matched.min(limit)
        };
        if answered > ETCD_MAX_RANGE_KEYS {
            let max = ETCD_MAX_RANGE_KEYS;
            return Err(Refusal::TooManyKeys { max, matched });
        }
        in_span(keys, span).filter(kept).collect()
    };
    if !in_key_order {
        sort(&mut kvs, r.sort_order, r.sort_target);
    }
    let more = limit > 0 && kvs.len() > limit;
    if more {
        kvs.truncate(limit);
    }
    let answered = |kv: &KeyValue| match r.keys_only {
        true => KeyValue {
            value: Bytes::from(&[][..]),
            ..kv.clone()
        },
        false => kv.clone(),
    };
    Ok(RangeAnswer {
        kvs: kvs.into_iter().map(answered).collect(),
        more,
        count,
    })
}

fn sort(kvs: &mut [&KeyValue], order: SortOrder, target: SortTarget) {
    let by = |a: &&KeyValue, b: &&KeyValue| match target {
        SortTarget::Key => a.key.cmp(&b.key),
        SortTarget::Version => a.version.cmp(&b.version),
        SortTarget::Create => a.create_revision.cmp(&b.create_revision),
        SortTarget::Mod => a.mod_revision.cmp(&b.mod_revision),
        SortTarget::Value => a.value.cmp(&b.value),
    };
    match order {
        SortOrder::Descend => kvs.sort_by(|a, b| by(b, a)),
        SortOrder::None | SortOrder::Ascend => kvs.sort_by(by),
    }
}

fn key_hash(kv: &KeyValue) -> u64 {
    crate::fnv1a_of(kv)
}

fn lease_hash(id: i64, lease: &EtcdLease) -> u64 {
    crate::fnv1a_of(&(id, lease))
}
