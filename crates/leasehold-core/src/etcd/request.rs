//! What an etcd client asks, as the log carries it: [`EtcdOp`], and the requests inside a
//! transaction. etcd's own messages, minus what only the wire needs (headers, the revision and
//! consistency of a read outside a transaction, which never reach the log).

use serde::{Deserialize, Serialize};

/// An etcd write, logged as [`Op::Etcd`](crate::Op::Etcd) (log format 3). A `Put` and a
/// `DeleteRange` are transactions without compares, one request long: one command and at most
/// one revision each, as a `Txn` is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdOp {
    /// Compares, then the success or the failure branch, at one revision.
    Txn(Txn),
    /// A new lease of `ttl_s` seconds from the command's store time; `id` 0 lets the store
    /// choose one.
    LeaseGrant {
        /// The id asked for, or 0.
        id: i64,
        /// Its time to live, in seconds.
        ttl_s: i64,
    },
    /// Ends a lease now, deleting its keys at one revision.
    LeaseRevoke {
        /// The lease.
        id: i64,
    },
    /// Moves a live lease's expiry to its full TTL from the command's store time.
    LeaseKeepAlive {
        /// The lease.
        id: i64,
    },
    /// Forgets the events before `revision`: watches and reads no longer start before it.
    Compact {
        /// The oldest revision whose events stay.
        revision: i64,
    },
}

/// A transaction: every compare holds, or not, and the branch chosen runs in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Txn {
    /// All must hold for the success branch.
    pub compare: Vec<Compare>,
    /// Run when every compare holds.
    pub success: Vec<RequestOp>,
    /// Run otherwise.
    pub failure: Vec<RequestOp>,
}

/// One request of a transaction's branch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestOp {
    /// Reads keys, seeing the branch's writes before it.
    Range(RangeRequest),
    /// Writes one key.
    Put(PutRequest),
    /// Deletes keys.
    DeleteRange(DeleteRangeRequest),
    /// A transaction inside the branch, at the same revision.
    Txn(Txn),
}

/// etcd's `RangeRequest`, but for the revision and consistency (read where it is served).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeRequest {
    /// The first key, or the only one.
    pub key: Vec<u8>,
    /// Empty: `key` alone; `[0]`: every key from `key` on; else the keys before it.
    pub range_end: Vec<u8>,
    /// The most keys answered; 0 for no limit (up to the store's own, see `limits`).
    pub limit: i64,
    /// In what order.
    pub sort_order: SortOrder,
    /// By what.
    pub sort_target: SortTarget,
    /// Keys without their values.
    pub keys_only: bool,
    /// Only how many keys there are.
    pub count_only: bool,
    /// Only keys last changed at or after this revision (0: no bound).
    pub min_mod_revision: i64,
    /// Only keys last changed at or before this revision (0: no bound).
    pub max_mod_revision: i64,
    /// Only keys created at or after this revision (0: no bound).
    pub min_create_revision: i64,
    /// Only keys created at or before this revision (0: no bound).
    pub max_create_revision: i64,
}

/// The order of a range's answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortOrder {
    /// As stored (by key), unless a target other than the key is named: then ascending.
    #[default]
    None,
    /// Smallest first.
    Ascend,
    /// Largest first.
    Descend,
}

/// What a range's answer is sorted by.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SortTarget {
    /// The key's bytes.
    #[default]
    Key,
    /// How often the key was written since it was created.
    Version,
    /// The revision that created it.
    Create,
    /// The revision that last changed it.
    Mod,
    /// The value's bytes.
    Value,
}

/// etcd's `PutRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PutRequest {
    /// The key.
    pub key: Vec<u8>,
    /// Its new value (empty with `ignore_value`).
    pub value: Vec<u8>,
    /// The lease the key is attached to, deleted with it; 0 for none.
    pub lease: i64,
    /// Answer the key's value before the put.
    pub prev_kv: bool,
    /// Keep the key's value: only its lease (or nothing) changes.
    pub ignore_value: bool,
    /// Keep the key's lease.
    pub ignore_lease: bool,
}

/// etcd's `DeleteRangeRequest`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeleteRangeRequest {
    /// The first key, or the only one.
    pub key: Vec<u8>,
    /// As a range's.
    pub range_end: Vec<u8>,
    /// Answer the deleted keys with their values.
    pub prev_kv: bool,
}

/// One compare of a transaction: every key in its range against one value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compare {
    /// How the key's field must stand to `target`'s value.
    pub result: CompareResult,
    /// Which field, and the value it is compared with.
    pub target: CompareTarget,
    /// The key, or the first of the range.
    pub key: Vec<u8>,
    /// As a range's: every key in it must hold.
    pub range_end: Vec<u8>,
}

/// How a field must stand to a compare's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareResult {
    /// Equal to it.
    Equal,
    /// Greater than it.
    Greater,
    /// Less than it.
    Less,
    /// Anything but equal.
    NotEqual,
}

/// A key's field and the value a compare holds it to. A missing key has version, revisions and
/// lease 0, and no value (so no value compare holds for it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompareTarget {
    /// Its version.
    Version(i64),
    /// The revision that created it.
    Create(i64),
    /// The revision that last changed it.
    Mod(i64),
    /// Its value.
    Value(Vec<u8>),
    /// Its lease.
    Lease(i64),
}

/// Whether `end` comes no later than the first key past every key that starts with `first`
/// (`first` with its last byte below 0xff raised by one): then every key from `first` up to
/// `end` starts with `first`.
fn ends_within_prefix(first: &[u8], end: &[u8]) -> bool {
    let Some(last) = first.iter().rposition(|b| *b != 0xff) else {
        // Only 0xff bytes (or none): nothing comes past such a prefix but longer keys.
        return !first.is_empty();
    };
    let mut past = first[..=last].to_vec();
    past[last] += 1;
    end <= past.as_slice()
}

/// The keys a request names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Span<'a> {
    /// One key.
    One(&'a [u8]),
    /// Every key from the first on.
    From(&'a [u8]),
    /// The keys from the first up to, not including, the second.
    Between(&'a [u8], &'a [u8]),
}

impl<'a> Span<'a> {
    /// The keys `key` and `range_end` name, as etcd reads them.
    pub fn of(key: &'a [u8], range_end: &'a [u8]) -> Span<'a> {
        match range_end {
            [] => Span::One(key),
            [0] => Span::From(key),
            end => Span::Between(key, end),
        }
    }

    /// Whether `key` is in the span.
    pub fn contains(&self, key: &[u8]) -> bool {
        match *self {
            Span::One(one) => key == one,
            Span::From(first) => key >= first,
            Span::Between(first, end) => key >= first && key < end,
        }
    }

    /// The longest prefix every key of the span starts with: what the policy's key prefixes
    /// are held against (a grant on `P` covers the span if this starts with `P`).
    pub fn prefix(&self) -> &'a [u8] {
        match *self {
            Span::One(key) => key,
            Span::From(_) => &[],
            // `get --prefix app/` asks `app/` to `app0`: every key in it starts with `app/`.
            Span::Between(first, end) if ends_within_prefix(first, end) => first,
            Span::Between(first, end) => {
                let common = first.iter().zip(end).take_while(|(a, b)| a == b).count();
                &first[..common]
            }
        }
    }

    /// Whether the span and `other` share a key: two writes of one transaction may not.
    pub fn overlaps(&self, other: &Span) -> bool {
        match (*self, *other) {
            (Span::One(key), span) | (span, Span::One(key)) => span.contains(key),
            (a, b) => {
                let ((a_first, a_end), (b_first, b_end)) = (a.ranged(), b.ranged());
                let ends_before =
                    |end: Option<&[u8]>, first: &[u8]| end.is_some_and(|e| e <= first);
                !(ends_before(a_end, b_first) || ends_before(b_end, a_first))
            }
        }
    }

    /// A range's first key and end (`None`: no end), the end excluded; a single key's end is
    /// its own (only [`Span::overlaps`] asks, after single keys are handled).
    fn ranged(&self) -> (&'a [u8], Option<&'a [u8]>) {
        match *self {
            Span::One(key) => (key, Some(key)),
            Span::From(first) => (first, None),
            Span::Between(first, end) => (first, Some(end)),
        }
    }
}
