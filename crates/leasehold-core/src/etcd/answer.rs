//! What the etcd keyspace answers: etcd's responses, and its refusals as typed values that
//! carry etcd's own words, so that its clients recognise them.

use serde::{Deserialize, Serialize};

use super::Bytes;

/// A key and what the store keeps of it, as etcd's `mvccpb.KeyValue`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyValue {
    /// The key.
    pub key: Bytes,
    /// The revision that created it (since its last deletion).
    pub create_revision: i64,
    /// The revision that last changed it.
    pub mod_revision: i64,
    /// How many times it was written since it was created: 1 after its first put.
    pub version: i64,
    /// Its value.
    pub value: Bytes,
    /// The lease it is attached to, 0 for none.
    pub lease: i64,
}

/// What an [`EtcdOp`](super::EtcdOp) answered, at the keyspace's revision after it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdOutcome {
    /// The keyspace's revision once the command applied (etcd's header revision).
    pub revision: i64,
    /// The answer.
    pub answer: EtcdAnswer,
}

/// The answer proper.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdAnswer {
    /// A transaction (or a put or delete) applied, with each of its branch's answers.
    Txn(TxnAnswer),
    /// A lease granted.
    LeaseGranted {
        /// Its id.
        id: i64,
        /// Its TTL, in seconds.
        ttl_s: i64,
    },
    /// A lease revoked, its keys deleted.
    LeaseRevoked,
    /// A lease kept alive: it runs its full TTL from the command's store time.
    LeaseKeptAlive {
        /// Its id.
        id: i64,
        /// Its TTL, in seconds.
        ttl_s: i64,
    },
    /// Events before the revision asked for are forgotten.
    Compacted,
    /// Refused: nothing changed.
    Refused(EtcdRefusal),
}

/// A transaction's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxnAnswer {
    /// Whether every compare held (the success branch ran).
    pub succeeded: bool,
    /// The branch's answers, one per request, in order.
    pub responses: Vec<OpAnswer>,
}

/// One request's answer within a transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OpAnswer {
    /// A range's.
    Range(RangeAnswer),
    /// A put's: the key before it, if asked for and there was one.
    Put {
        /// The key before the put.
        prev_kv: Option<KeyValue>,
    },
    /// A delete's.
    DeleteRange {
        /// How many keys it deleted.
        deleted: i64,
        /// Those keys before the delete, if asked for.
        prev_kvs: Vec<KeyValue>,
    },
    /// A nested transaction's.
    Txn(TxnAnswer),
}

/// A range's answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeAnswer {
    /// The keys, filtered, sorted and limited as asked (none for `count_only`).
    pub kvs: Vec<KeyValue>,
    /// Whether keys beyond the limit matched.
    pub more: bool,
    /// How many keys the range holds, before filters and the limit.
    pub count: i64,
}

/// Why the keyspace refused a request, in etcd's words (its clients match some of them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum EtcdRefusal {
    /// The lease does not exist, or expired.
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    /// A grant asked for an id in use.
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    /// A read or a watch at a revision whose events are forgotten (this store keeps each
    /// key's latest version only, so any revision before the current one).
    #[error("mvcc: required revision has been compacted")]
    Compacted {
        /// The oldest revision still served.
        compact_revision: i64,
    },
    /// A read or compaction at a revision the store has not reached.
    #[error("mvcc: required revision is a future revision")]
    FutureRevision,
    /// `ignore_value` or `ignore_lease` on a key that does not exist.
    #[error("etcdserver: key not found")]
    KeyNotFound,
    /// The lease belongs to another identity (authorization on): only its granter uses it.
    #[error(
        "etcdserver: permission denied: lease {id:x} was granted to another identity, and only \
         it may renew, revoke or attach keys to it"
    )]
    NotLeaseOwner {
        /// The lease.
        id: i64,
    },
    /// A put would attach one key more to a lease that holds the most keys one may.
    #[error(
        "etcdserver: lease {id:x} holds {max} keys, the most one lease may: attach this key to \
         another lease"
    )]
    TooManyLeaseKeys {
        /// The lease.
        id: i64,
        /// The bound.
        max: usize,
    },
    /// A delete would delete more keys than one command may.
    #[error(
        "etcdserver: a delete removes at most {max} keys at once, and {matched} match: delete \
         the range in parts"
    )]
    TooManyDeletes {
        /// The bound.
        max: usize,
        /// How many keys matched.
        matched: usize,
    },
    /// A range would answer more keys than a node sends at once.
    #[error(
        "etcdserver: a range answers at most {max} keys, and {matched} match: set `limit` (at \
         most {max}) and page from the last key"
    )]
    TooManyKeys {
        /// The bound.
        max: usize,
        /// How many keys matched.
        matched: usize,
    },
}
