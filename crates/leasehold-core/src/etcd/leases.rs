//! etcd's leases: an id, a TTL in seconds, an expiry in store time, and the keys attached, which
//! go with the lease. Not Leasehold's leases (no holder, no token): an etcd client's session.

use serde::{Deserialize, Serialize};

use super::{Bytes, Refusal};
use crate::{Map, Name, Set};

/// One lease.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdLease {
    /// The TTL it was granted with, in seconds: each keep-alive runs it again from then.
    pub ttl_s: i64,
    /// When it runs out, in store time (ms), unless kept alive.
    pub expires_at_ms: u64,
    /// The identity that granted it, if the caller had one: only it may use the lease while
    /// authorization is on.
    pub owner: Option<Name>,
}

impl EtcdLease {
    /// Whether it still runs at `now_ms`.
    pub fn live_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms > now_ms
    }
}

/// Every lease, with the indexes derived from them and the keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Leases {
    pub by_id: Map<i64, EtcdLease>,
    /// The largest id granted so far: a chosen id is the next one free after it.
    pub last_id: i64,
    /// `(expires_at_ms, id)` of every lease. Derived.
    expiries: Set<(u64, i64)>,
    /// The keys attached to each lease. Derived from the keys.
    keys: Map<i64, Set<Bytes>>,
}

impl Leases {
    /// The leases as stored, with their indexes rebuilt; the keys are attached after.
    pub fn loaded(by_id: Map<i64, EtcdLease>, last_id: i64) -> Leases {
        let expiries = by_id
            .iter()
            .map(|(id, lease)| (lease.expires_at_ms, *id))
            .collect();
        Leases {
            by_id,
            last_id,
            expiries,
            keys: Map::new(),
        }
    }

    /// The lease `id` if it runs at `now_ms`.
    pub fn live(&self, id: i64, now_ms: u64) -> Option<&EtcdLease> {
        self.by_id.get(&id).filter(|lease| lease.live_at(now_ms))
    }

    /// The lease `id` if it runs at `now_ms` and `identity` may use it (`enforced`: the
    /// policy is on).
    pub fn usable(
        &self,
        id: i64,
        now_ms: u64,
        identity: Option<&str>,
        enforced: bool,
    ) -> Result<&EtcdLease, Refusal> {
        let lease = self.live(id, now_ms).ok_or(Refusal::LeaseNotFound)?;
        match &lease.owner {
            Some(owner) if enforced && identity != Some(owner.as_str()) => {
                Err(Refusal::NotLeaseOwner { id })
            }
            _ => Ok(lease),
        }
    }

    /// Grants a lease of `ttl_s` from `now_ms`; `id` 0 chooses the next id free.
    pub fn grant(
        &mut self,
        id: i64,
        ttl_s: i64,
        now_ms: u64,
        owner: Option<Name>,
    ) -> Result<i64, Refusal> {
        let id = match id {
            0 => next_free(self.last_id, |id| self.by_id.contains_key(&id)),
            id if self.by_id.contains_key(&id) => return Err(Refusal::LeaseExists),
            id => id,
        };
        self.last_id = self.last_id.max(id);
        let expires_at_ms = now_ms.saturating_add(ttl_ms(ttl_s));
        self.expiries.insert((expires_at_ms, id));
        let lease = EtcdLease {
            ttl_s,
            expires_at_ms,
            owner,
        };
        self.by_id.insert(id, lease);
        Ok(id)
    }

    /// Runs lease `id` its full TTL again from `now_ms`: its TTL.
    pub fn keep_alive(&mut self, id: i64, now_ms: u64) -> Option<i64> {
        let lease = self.by_id.get_mut(&id)?;
        self.expiries.remove(&(lease.expires_at_ms, id));
        lease.expires_at_ms = now_ms.saturating_add(ttl_ms(lease.ttl_s));
        self.expiries.insert((lease.expires_at_ms, id));
        Some(lease.ttl_s)
    }

    /// The first lease run out at `now_ms`, if any.
    pub fn first_due(&self, now_ms: u64) -> Option<i64> {
        let (at, id) = self.expiries.get_min()?;
        (*at <= now_ms).then_some(*id)
    }

    /// When the next lease runs out.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.expiries.get_min().map(|(at, _)| *at)
    }

    /// Removes lease `id` (its keys stay: the keyspace deletes them first).
    pub fn remove(&mut self, id: i64) {
        if let Some(lease) = self.by_id.remove(&id) {
            self.expiries.remove(&(lease.expires_at_ms, id));
        }
        self.keys.remove(&id);
    }

    /// How many keys are attached to lease `id`.
    pub fn key_count(&self, id: i64) -> usize {
        self.keys.get(&id).map_or(0, |keys| keys.len())
    }

    /// The keys attached to lease `id`.
    pub fn keys_of(&self, id: i64) -> impl Iterator<Item = &Bytes> {
        self.keys.get(&id).into_iter().flatten()
    }

    /// Attaches `key` to lease `id` (0: none).
    pub fn attach(&mut self, id: i64, key: &Bytes) {
        if id != 0 {
            self.keys.entry(id).or_default().insert(key.clone());
        }
    }

    /// Detaches `key` from lease `id` (0: none).
    pub fn detach(&mut self, id: i64, key: &[u8]) {
        if let Some(keys) = self.keys.get_mut(&id) {
            keys.remove(key);
            if keys.is_empty() {
                self.keys.remove(&id);
            }
        }
    }
}

/// The id a grant that names none gets: the first free after `last`, the largest granted so
/// far, wrapping to 1 past `i64::MAX` (a client may name that id itself); `i64::MAX` only if
/// every id is taken, which no node's memory allows.
pub fn next_free(last: i64, taken: impl Fn(i64) -> bool) -> i64 {
    (last.saturating_add(1)..=i64::MAX)
        .chain(1..=last)
        .find(|id| !taken(*id))
        .unwrap_or(i64::MAX)
}

/// `ttl_s` in milliseconds (TTLs are bounded at the edge; saturating all the same).
fn ttl_ms(ttl_s: i64) -> u64 {
    u64::try_from(ttl_s).unwrap_or(0).saturating_mul(1000)
}
