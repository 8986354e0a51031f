//! etcd's v3 keyspace, in the same log and snapshots as the lease table and apart from it:
//! keys with their revisions and versions, etcd's leases (which delete their keys when they run
//! out by store time, through the log), transactions, and the recent events watches resume
//! from. Pure, as the table is: the node's etcd edge turns etcd's messages into [`EtcdOp`]s
//! and reads, and this module decides what they do.
//!
//! - `request`: what is logged ([`EtcdOp`]) and the requests inside a transaction.
//! - `answer`: what applying or reading answers, and etcd's refusals ([`EtcdRefusal`]).
//! - `keyspace`: [`Keyspace`], its apply, its range reads and lease expiry.
//! - `leases`: etcd's leases and their expiry index.
//! - `history`: the bounded recent events.
//! - `checks` (below): sizes and names, validated before a request is logged, and what the
//!   policy must allow.
//!
//! Revisions: each request that changes a key is one revision (a transaction too, however many
//! keys it writes); a lease that runs out deletes its keys at a revision of its own. This store
//! keeps each key's latest version, not its history of versions, so a read at an older
//! revision is refused as compacted, as etcd refuses a read before its compaction.

mod answer;
mod history;
mod keyspace;
mod leases;
mod request;

pub use answer::{
    EtcdAnswer, EtcdOutcome, EtcdRefusal, KeyValue, OpAnswer, RangeAnswer, TxnAnswer,
};
pub use history::{EtcdEvent, EtcdEventKind, History, Since};
pub use keyspace::Keyspace;
pub(crate) use keyspace::Stored;
pub use leases::EtcdLease;
pub use request::{
    Compare, CompareResult, CompareTarget, DeleteRangeRequest, EtcdOp, PutRequest, RangeRequest,
    RequestOp, SortOrder, SortTarget, Span, Txn,
};

use crate::limits::{ETCD_MAX_KEY_BYTES, ETCD_MAX_LEASE_TTL_S, ETCD_MAX_TXN_OPS};
use crate::{InvalidInput, Limits};

/// Keys and values as the keyspace keeps them: shared by the keyspace, its clones and the
/// events kept for watches.
pub type Bytes = std::sync::Arc<[u8]>;

type Refusal = EtcdRefusal;

/// What the policy must allow for a request: a permission on the prefix that spans its keys.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Need {
    /// Read the keys.
    Read(String),
    /// Write a key.
    Write(String),
    /// Delete the keys.
    Delete(String),
    /// An admin's.
    Admin(&'static str),
}

impl Need {
    /// The policy's action for it.
    pub fn action(&self) -> crate::auth::Action<'_> {
        use crate::auth::Action;
        match self {
            Need::Read(prefix) => Action::ReadKey(prefix),
            Need::Write(prefix) => Action::Write(prefix),
            Need::Delete(prefix) => Action::Delete(prefix),
            Need::Admin(what) => Action::Admin(what),
        }
    }
}

impl EtcdOp {
    /// What the policy must allow, every one of it. Leases need nothing of the policy but an
    /// identity (`Keyspace::apply` refuses an anonymous grant while it is on): each serves only
    /// the identity that granted it, and a revoke needs the delete of the lease's keys, which
    /// only the keyspace knows (`Keyspace::lease_keys`).
    pub fn needs(&self) -> Vec<Need> {
        let mut needs = Vec::new();
        match self {
            EtcdOp::Txn(txn) => txn_needs(txn, &mut needs),
            EtcdOp::Compact { .. } => needs.push(Need::Admin("compact the etcd keyspace")),
            EtcdOp::LeaseGrant { .. }
            | EtcdOp::LeaseRevoke { .. }
            | EtcdOp::LeaseKeepAlive { .. } => {}
        }
        needs
    }
}

impl EtcdOp {
    /// Whether applying it twice makes no difference a client sees: a grant of a lease whose id
    /// the store chooses (the one not answered is never used, and runs out), and a keep-alive.
    /// A node sends these again when its forward's answer was lost with the leader.
    pub fn repeatable(&self) -> bool {
        matches!(
            self,
            EtcdOp::LeaseGrant { id: 0, .. } | EtcdOp::LeaseKeepAlive { .. }
        )
    }

    /// The bytes of keys and values it carries, and a few for each request: what it adds to
    /// an entry, near enough to bound entries by size.
    pub fn bytes(&self) -> usize {
        match self {
            EtcdOp::Txn(txn) => txn_bytes(txn),
            _ => 16,
        }
    }
}

fn txn_bytes(txn: &Txn) -> usize {
    let compares = txn.compare.iter().map(|c| {
        let value = match &c.target {
            CompareTarget::Value(v) => v.len(),
            _ => 8,
        };
        16 + c.key.len() + c.range_end.len() + value
    });
    let requests = txn.success.iter().chain(&txn.failure).map(|r| {
        16 + match r {
            RequestOp::Range(r) => r.key.len() + r.range_end.len() + 64,
            RequestOp::Put(p) => p.key.len() + p.value.len(),
            RequestOp::DeleteRange(d) => d.key.len() + d.range_end.len(),
            RequestOp::Txn(nested) => txn_bytes(nested),
        }
    });
    compares.chain(requests).sum()
}

/// What the policy decides of a lease operation beside its [`needs`](EtcdOp::needs), with the
/// policy on: an etcd lease is an identity's, so one without an identity is granted none; and a
/// revoke deletes the lease's keys (`keys`, those attached to the lease it names), so the
/// caller must be allowed to delete each.
pub fn lease_allowed(
    op: &EtcdOp,
    policy: &crate::auth::Policy,
    identity: Option<&str>,
    bearer: Option<&str>,
    keys: impl Fn(i64) -> Vec<Bytes>,
) -> Result<(), crate::auth::Denied> {
    if !policy.enabled() {
        return Ok(());
    }
    match op {
        EtcdOp::LeaseGrant { .. } if identity.is_none() => Err(crate::auth::Denied {
            identity: "anonymous".into(),
            action: "grant an etcd lease".into(),
            resource: String::new(),
            reason: Some(
                "authorization is on, and an etcd lease is granted only to an identity: show a \
                 client certificate or a bearer token"
                    .into(),
            ),
        }),
        EtcdOp::LeaseRevoke { id } => keys(*id).iter().try_for_each(|key| {
            let key = String::from_utf8_lossy(key);
            policy.check_caller(identity, bearer, &crate::auth::Action::Delete(&key))
        }),
        _ => Ok(()),
    }
}

/// The prefix that spans `key` to `range_end`, as the policy's text.
pub fn span_prefix(key: &[u8], range_end: &[u8]) -> String {
    String::from_utf8_lossy(Span::of(key, range_end).prefix()).into_owned()
}

fn txn_needs(txn: &Txn, needs: &mut Vec<Need>) {
    for compare in &txn.compare {
        needs.push(Need::Read(span_prefix(&compare.key, &compare.range_end)));
    }
    for request in txn.success.iter().chain(&txn.failure) {
        match request {
            RequestOp::Range(r) => needs.push(Need::Read(span_prefix(&r.key, &r.range_end))),
            RequestOp::Put(p) => {
                needs.push(Need::Write(span_prefix(&p.key, &[])));
                // The key's value before the put comes back: a read, as etcd has it.
                if p.prev_kv {
                    needs.push(Need::Read(span_prefix(&p.key, &[])));
                }
            }
            RequestOp::DeleteRange(d) => {
                let prefix = span_prefix(&d.key, &d.range_end);
                if d.prev_kv {
                    needs.push(Need::Read(prefix.clone()));
                }
                needs.push(Need::Delete(prefix));
            }
            RequestOp::Txn(nested) => txn_needs(nested, needs),
        }
    }
}

/// Checks an etcd write against the limits, in etcd's words where etcd has them.
pub fn validate(op: &EtcdOp) -> Result<(), InvalidInput> {
    match op {
        EtcdOp::Txn(txn) => txn_fields(txn, &mut 0, &[]).map(drop),
        EtcdOp::LeaseGrant { id, ttl_s } => {
            if *id < 0 {
                return Err(InvalidInput::new(
                    "ID",
                    format!("a lease id is positive, got {id}"),
                ));
            }
            if !(1..=ETCD_MAX_LEASE_TTL_S).contains(ttl_s) {
                return Err(InvalidInput::new(
                    "TTL",
                    format!(
                        "etcdserver: too large lease TTL: must be between 1 and \
                         {ETCD_MAX_LEASE_TTL_S} seconds, got {ttl_s}"
                    ),
                ));
            }
            Ok(())
        }
        EtcdOp::LeaseRevoke { id } | EtcdOp::LeaseKeepAlive { id } => lease_id(*id),
        EtcdOp::Compact { revision } => match *revision > 0 {
            true => Ok(()),
            false => Err(InvalidInput::new(
                "revision",
                format!("a compaction names a revision above 0, got {revision}"),
            )),
        },
    }
}

/// A lease id a request names: positive.
pub fn lease_id(id: i64) -> Result<(), InvalidInput> {
    match id > 0 {
        true => Ok(()),
        false => Err(InvalidInput::new(
            "ID",
            format!("etcdserver: requested lease not found: a lease id is positive, got {id}"),
        )),
    }
}

/// Checks a key (and a range's end): not empty, at most [`ETCD_MAX_KEY_BYTES`].
pub fn key_field(key: &[u8], range_end: &[u8]) -> Result<(), InvalidInput> {
    if key.is_empty() {
        return Err(InvalidInput::new("key", "etcdserver: key is not provided"));
    }
    for (field, bytes) in [("key", key), ("range_end", range_end)] {
        if bytes.len() > ETCD_MAX_KEY_BYTES {
            return Err(InvalidInput::new(
                field,
                format!(
                    "etcdserver: request is too large: a key is at most {ETCD_MAX_KEY_BYTES} \
                     bytes, got {}",
                    bytes.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks a range read's fields.
pub fn range_fields(r: &RangeRequest) -> Result<(), InvalidInput> {
    key_field(&r.key, &r.range_end)?;
    let revisions = [
        ("limit", r.limit),
        ("min_mod_revision", r.min_mod_revision),
        ("max_mod_revision", r.max_mod_revision),
        ("min_create_revision", r.min_create_revision),
        ("max_create_revision", r.max_create_revision),
    ];
    for (field, value) in revisions {
        if value < 0 {
            return Err(InvalidInput::new(
                field,
                format!("is 0 or more, got {value}"),
            ));
        }
    }
    Ok(())
}

/// The keys one write of a transaction touches, and whether it is a put (else a delete).
type Written<'a> = (Span<'a>, bool);

/// Checks a transaction's compares and both branches: the keys its branches write, past those
/// `outer` names (what the branch around a nested transaction wrote before it).
fn txn_fields<'a>(
    txn: &'a Txn,
    ops: &mut usize,
    outer: &[Written<'a>],
) -> Result<Vec<Written<'a>>, InvalidInput> {
    *ops += txn
        .compare
        .len()
        .max(txn.success.len())
        .max(txn.failure.len());
    if *ops > ETCD_MAX_TXN_OPS {
        return Err(InvalidInput::new(
            "success",
            format!(
                "etcdserver: too many operations in txn request: at most {ETCD_MAX_TXN_OPS} \
                 compares or requests per branch, nested ones included"
            ),
        ));
    }
    for compare in &txn.compare {
        key_field(&compare.key, &compare.range_end)?;
    }
    let mut wrote = Vec::new();
    for branch in [&txn.success, &txn.failure] {
        let mut written = outer.to_vec();
        branch_fields(branch, ops, &mut written)?;
        wrote.extend_from_slice(&written[outer.len()..]);
    }
    Ok(wrote)
}

/// Checks a branch's requests; `written` gathers the keys its writes touch (a nested
/// transaction's too), which may not overlap, as etcd refuses a transaction that writes a key
/// twice.
fn branch_fields<'a>(
    branch: &'a [RequestOp],
    ops: &mut usize,
    written: &mut Vec<Written<'a>>,
) -> Result<(), InvalidInput> {
    for request in branch {
        let (span, put) = match request {
            RequestOp::Range(r) => {
                range_fields(r)?;
                continue;
            }
            RequestOp::Put(p) => {
                put_fields(p)?;
                (Span::of(&p.key, &[]), true)
            }
            RequestOp::DeleteRange(d) => {
                key_field(&d.key, &d.range_end)?;
                (Span::of(&d.key, &d.range_end), false)
            }
            RequestOp::Txn(nested) => {
                let wrote = txn_fields(nested, ops, written)?;
                written.extend(wrote);
                continue;
            }
        };
        // A put may meet no other write of the key; deletes may overlap each other, as in etcd.
        if written
            .iter()
            .any(|(w, w_put)| (put || *w_put) && w.overlaps(&span))
        {
            return Err(InvalidInput::new(
                "success",
                "etcdserver: duplicate key given in txn request",
            ));
        }
        written.push((span, put));
    }
    Ok(())
}

fn put_fields(p: &PutRequest) -> Result<(), InvalidInput> {
    key_field(&p.key, &[])?;
    if p.value.len() > Limits::MAX_VALUE_BYTES {
        return Err(InvalidInput::new(
            "value",
            format!(
                "etcdserver: request is too large: a value is at most {} bytes, got {}",
                Limits::MAX_VALUE_BYTES,
                p.value.len()
            ),
        ));
    }
    if p.ignore_value && !p.value.is_empty() {
        return Err(InvalidInput::new("value", "etcdserver: value is provided"));
    }
    if p.ignore_lease && p.lease != 0 {
        return Err(InvalidInput::new("lease", "etcdserver: lease is provided"));
    }
    if p.lease < 0 {
        return Err(InvalidInput::new(
            "lease",
            "etcdserver: requested lease not found",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
