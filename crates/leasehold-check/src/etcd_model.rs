//! The reference model of etcd's keyspace, written from etcd's documented semantics and the
//! README, sharing no code with the core's `etcd` module but its types: plain maps, every
//! question answered by a scan. The table's property test compares the two command by command.

use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_core::etcd::{
    Compare, CompareResult, CompareTarget, EtcdAnswer, EtcdOp, EtcdOutcome, EtcdRefusal, KeyValue,
    OpAnswer, PutRequest, RangeAnswer, RangeRequest, RequestOp, SortOrder, SortTarget, Txn,
    TxnAnswer,
};
use leasehold_core::limits::{ETCD_EXPIRY_WORK, ETCD_MAX_KEYS_PER_LEASE, ETCD_MAX_RANGE_KEYS};

#[derive(Clone, Debug)]
struct Lease {
    ttl_s: i64,
    expires_at_ms: u64,
    owner: Option<String>,
}

/// The model of an etcd keyspace.
#[derive(Clone, Debug, Default)]
pub struct EtcdModel {
    /// Revisions made: the revision is one more.
    made: i64,
    keys: BTreeMap<Vec<u8>, KeyValue>,
    leases: BTreeMap<i64, Lease>,
    last_lease_id: i64,
    compacted: i64,
}

type Refused = EtcdRefusal;

/// Whether `key` is among the keys `key_of`..`end` names, as etcd reads a range.
fn in_range(key: &[u8], first: &[u8], end: &[u8]) -> bool {
    match end {
        [] => key == first,
        [0] => key >= first,
        end => key >= first && key < end,
    }
}

fn empty() -> Arc<[u8]> {
    Arc::from(&[][..])
}

impl EtcdModel {
    /// The current revision.
    pub fn revision(&self) -> i64 {
        self.made + 1
    }

    /// Every key, in order.
    pub fn keys(&self) -> Vec<KeyValue> {
        self.keys.values().cloned().collect()
    }

    /// The keys attached to lease `id` (none to 0, which is no lease).
    pub fn lease_keys(&self, id: i64) -> Vec<Arc<[u8]>> {
        (self.keys.values().filter(|kv| id != 0 && kv.lease == id))
            .map(|kv| kv.key.clone())
            .collect()
    }

    /// Every lease's id, in order.
    pub fn lease_ids(&self) -> Vec<i64> {
        self.leases.keys().copied().collect()
    }

    /// When the next lease runs out (or ran out, and is not ended yet).
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.leases.values().map(|l| l.expires_at_ms).min()
    }

    /// Ends the leases run out by `now_ms`, earliest first, each whole (its keys deleted at one
    /// revision), as many as one command's work allows: a lease costs its keys, or 1.
    pub fn expire(&mut self, now_ms: u64) {
        let mut work = ETCD_EXPIRY_WORK;
        loop {
            let due = self
                .leases
                .iter()
                .filter(|(_, l)| l.expires_at_ms <= now_ms)
                .min_by_key(|(id, l)| (l.expires_at_ms, **id))
                .map(|(id, _)| *id);
            let Some(id) = due else { return };
            let keys = self.lease_keys(id);
            let cost = keys.len().max(1);
            if cost > work {
                return;
            }
            work -= cost;
            for key in &keys {
                self.keys.remove(key.as_ref());
            }
            if !keys.is_empty() {
                self.made += 1;
            }
            self.leases.remove(&id);
        }
    }

    /// Applies `op` at `now_ms` for `identity` (`enforced`: the policy is on).
    pub fn apply(
        &mut self,
        op: &EtcdOp,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
    ) -> EtcdOutcome {
        let answer = match op {
            EtcdOp::Txn(txn) => {
                let mut draft = self.clone();
                let mut wrote = false;
                let rev = self.revision() + 1;
                match draft.txn(txn, rev, now_ms, identity, enforced, &mut wrote) {
                    Ok(answer) => {
                        *self = draft;
                        self.made += i64::from(wrote);
                        Ok(EtcdAnswer::Txn(answer))
                    }
                    Err(refused) => Err(refused),
                }
            }
            EtcdOp::LeaseGrant { id, ttl_s } => self.grant(*id, *ttl_s, now_ms, identity),
            EtcdOp::LeaseKeepAlive { id } => {
                self.usable(*id, now_ms, identity, enforced).map(|()| {
                    let lease = self.leases.get_mut(id).expect("usable");
                    lease.expires_at_ms = now_ms + lease.ttl_s as u64 * 1000;
                    EtcdAnswer::LeaseKeptAlive {
                        id: *id,
                        ttl_s: lease.ttl_s,
                    }
                })
            }
            EtcdOp::LeaseRevoke { id } => self.usable(*id, now_ms, identity, enforced).map(|()| {
                let before = self.keys.len();
                self.keys.retain(|_, kv| kv.lease != *id);
                if self.keys.len() < before {
                    self.made += 1;
                }
                self.leases.remove(id);
                EtcdAnswer::LeaseRevoked
            }),
            EtcdOp::Compact { revision } => {
                if *revision > self.revision() {
                    Err(Refused::FutureRevision)
                } else if *revision <= self.compacted {
                    Err(Refused::Compacted {
                        compact_revision: self.compacted,
                    })
                } else {
                    self.compacted = *revision;
                    Ok(EtcdAnswer::Compacted)
                }
            }
        };
        EtcdOutcome {
            revision: self.revision(),
            answer: answer.unwrap_or_else(EtcdAnswer::Refused),
        }
    }

    fn grant(
        &mut self,
        id: i64,
        ttl_s: i64,
        now_ms: u64,
        identity: Option<&str>,
    ) -> Result<EtcdAnswer, Refused> {
        let id = match id {
            // The first free id after the largest granted, wrapping past i64::MAX to 1.
            0 => (self.last_lease_id.saturating_add(1)..=i64::MAX)
                .chain(1..=self.last_lease_id)
                .find(|id| !self.leases.contains_key(id))
                .unwrap_or(i64::MAX),
            id if self.leases.contains_key(&id) => return Err(Refused::LeaseExists),
            id => id,
        };
        self.last_lease_id = self.last_lease_id.max(id);
        let lease = Lease {
            ttl_s,
            expires_at_ms: now_ms + ttl_s as u64 * 1000,
            owner: identity.map(str::to_owned),
        };
        self.leases.insert(id, lease);
        Ok(EtcdAnswer::LeaseGranted { id, ttl_s })
    }

    fn usable(
        &self,
        id: i64,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
    ) -> Result<(), Refused> {
        let lease = self.leases.get(&id).filter(|l| l.expires_at_ms > now_ms);
        let lease = lease.ok_or(Refused::LeaseNotFound)?;
        match &lease.owner {
            Some(owner) if enforced && identity != Some(owner.as_str()) => {
                Err(Refused::NotLeaseOwner { id })
            }
            _ => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn txn(
        &mut self,
        txn: &Txn,
        rev: i64,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
        wrote: &mut bool,
    ) -> Result<TxnAnswer, Refused> {
        let succeeded = txn.compare.iter().all(|c| self.holds(c));
        let branch = if succeeded {
            &txn.success
        } else {
            &txn.failure
        };
        let mut responses = Vec::new();
        for request in branch {
            responses.push(match request {
                RequestOp::Range(r) => OpAnswer::Range(self.range(r)?),
                RequestOp::Put(p) => self.put(p, rev, now_ms, identity, enforced, wrote)?,
                RequestOp::DeleteRange(d) => {
                    let doomed: Vec<Vec<u8>> = (self.keys.keys())
                        .filter(|k| in_range(k, &d.key, &d.range_end))
                        .cloned()
                        .collect();
                    if doomed.len() > ETCD_MAX_RANGE_KEYS {
                        let (max, matched) = (ETCD_MAX_RANGE_KEYS, doomed.len());
                        return Err(Refused::TooManyDeletes { max, matched });
                    }
                    let mut prev_kvs = Vec::new();
                    for key in &doomed {
                        let before = self.keys.remove(key).expect("listed");
                        if d.prev_kv {
                            prev_kvs.push(before);
                        }
                        *wrote = true;
                    }
                    OpAnswer::DeleteRange {
                        deleted: doomed.len() as i64,
                        prev_kvs,
                    }
                }
                RequestOp::Txn(nested) => {
                    OpAnswer::Txn(self.txn(nested, rev, now_ms, identity, enforced, wrote)?)
                }
            });
        }
        Ok(TxnAnswer {
            succeeded,
            responses,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn put(
        &mut self,
        p: &PutRequest,
        rev: i64,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
        wrote: &mut bool,
    ) -> Result<OpAnswer, Refused> {
        let before = self.keys.get(&p.key).cloned();
        if (p.ignore_value || p.ignore_lease) && before.is_none() {
            return Err(Refused::KeyNotFound);
        }
        let lease = match (&before, p.ignore_lease) {
            (Some(b), true) => b.lease,
            _ => p.lease,
        };
        if lease != 0 && !p.ignore_lease {
            self.usable(lease, now_ms, identity, enforced)?;
            let moves = before.as_ref().is_none_or(|b| b.lease != lease);
            if moves && self.lease_keys(lease).len() >= ETCD_MAX_KEYS_PER_LEASE {
                let max = ETCD_MAX_KEYS_PER_LEASE;
                return Err(Refused::TooManyLeaseKeys { id: lease, max });
            }
        }
        let value = match &before {
            Some(b) if p.ignore_value => b.value.clone(),
            _ => Arc::from(p.value.as_slice()),
        };
        let kv = KeyValue {
            key: Arc::from(p.key.as_slice()),
            create_revision: before.as_ref().map_or(rev, |b| b.create_revision),
            mod_revision: rev,
            version: before.as_ref().map_or(1, |b| b.version + 1),
            value,
            lease,
        };
        self.keys.insert(p.key.clone(), kv);
        *wrote = true;
        Ok(OpAnswer::Put {
            prev_kv: before.filter(|_| p.prev_kv),
        })
    }

    fn holds(&self, c: &Compare) -> bool {
        let found: Vec<&KeyValue> = (self.keys.values())
            .filter(|kv| in_range(&kv.key, &c.key, &c.range_end))
            .collect();
        if found.is_empty() {
            if let CompareTarget::Value(_) = c.target {
                return false;
            }
            let zero = KeyValue {
                key: empty(),
                create_revision: 0,
                mod_revision: 0,
                version: 0,
                value: empty(),
                lease: 0,
            };
            return compares(&zero, c);
        }
        found.into_iter().all(|kv| compares(kv, c))
    }

    /// A range, as etcd answers it.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeAnswer, Refused> {
        let all: Vec<&KeyValue> = (self.keys.values())
            .filter(|kv| in_range(&kv.key, &r.key, &r.range_end))
            .collect();
        let count = all.len() as i64;
        if r.count_only {
            return Ok(RangeAnswer {
                kvs: vec![],
                more: false,
                count,
            });
        }
        let within = |v: i64, min: i64, max: i64| (min == 0 || v >= min) && (max == 0 || v <= max);
        let mut kept: Vec<&KeyValue> = all
            .into_iter()
            .filter(|kv| within(kv.mod_revision, r.min_mod_revision, r.max_mod_revision))
            .filter(|kv| {
                within(
                    kv.create_revision,
                    r.min_create_revision,
                    r.max_create_revision,
                )
            })
            .collect();
        let limit = r.limit.max(0) as usize;
        let answered = if limit == 0 {
            kept.len()
        } else {
            kept.len().min(limit)
        };
        if answered > ETCD_MAX_RANGE_KEYS {
            return Err(Refused::TooManyKeys {
                max: ETCD_MAX_RANGE_KEYS,
                matched: kept.len(),
            });
        }
        let field = |kv: &KeyValue| -> (Vec<u8>, i64) {
            match r.sort_target {
                SortTarget::Key => (kv.key.to_vec(), 0),
                SortTarget::Version => (vec![], kv.version),
                SortTarget::Create => (vec![], kv.create_revision),
                SortTarget::Mod => (vec![], kv.mod_revision),
                SortTarget::Value => (kv.value.to_vec(), 0),
            }
        };
        match r.sort_order {
            SortOrder::Descend => kept.sort_by_key(|kv| std::cmp::Reverse(field(kv))),
            _ => kept.sort_by_key(|kv| field(kv)),
        }
        let more = limit > 0 && kept.len() > limit;
        if more {
            kept.truncate(limit);
        }
        let kvs = kept
            .into_iter()
            .map(|kv| KeyValue {
                value: if r.keys_only {
                    empty()
                } else {
                    kv.value.clone()
                },
                ..kv.clone()
            })
            .collect();
        Ok(RangeAnswer { kvs, more, count })
    }
}

fn compares(kv: &KeyValue, c: &Compare) -> bool {
    let order = match &c.target {
        CompareTarget::Version(v) => kv.version.cmp(v),
        CompareTarget::Create(v) => kv.create_revision.cmp(v),
        CompareTarget::Mod(v) => kv.mod_revision.cmp(v),
        CompareTarget::Value(v) => kv.value.as_ref().cmp(v.as_slice()),
        CompareTarget::Lease(v) => kv.lease.cmp(v),
    };
    match c.result {
        CompareResult::Equal => order.is_eq(),
        CompareResult::Greater => order.is_gt(),
        CompareResult::Less => order.is_lt(),
        CompareResult::NotEqual => order.is_ne(),
    }
}
