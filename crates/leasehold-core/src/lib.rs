//! Leasehold's core: what the replicated state is and how one logged command changes it.
//!
//! Everything here is pure. No async, no I/O, no clock: time arrives inside the command,
//! so every replica that applies the same log reaches the same state. A crate of its own, on
//! serde, postcard, thiserror and imbl alone, so that nothing here can reach for Raft, the
//! network or the clock, and the fault suite's checkers use these types without compiling a
//! node.
//!
//! - `command`: what is logged (commands with their stamped store time) and what a command
//!   answers ([`Outcome`]).
//! - `table`: [`LeaseTable::apply`], leases, tokens, fences, rows, and the digest kept along.
//! - [`limits`]: sizes, TTL bounds and names, validated before a command reaches the log.
//! - `session`: client sessions, so a retried request is answered, never applied twice.
//! - `event`: what a command did to leases, for watches.
//! - [`auth`]: who may do what: roles on lease and key prefixes, the admin permission, and
//!   holders bound to the identity that owns them; a pure policy, changed only by
//!   [`auth::AuthChange`].

#![warn(missing_docs)]

pub mod auth;
#[cfg(test)]
mod authorized;
mod command;
mod event;
pub mod limits;
pub(crate) mod session;
mod table;

pub use command::{
    Batch, Command, Fence, Op, Outcome, ReleaseRefusal, Renewal, Renewed, RequestId,
};
pub use event::{Event, EventKind};
pub use limits::{validate, InvalidInput, Limits, FORGET_BATCH, SESSION_IDLE_MS};
pub use table::{Lease, LeaseTable, TokenCheck};

/// An ordered map whose clone shares every node with the original (a B+tree of `Arc`ed
/// nodes): a snapshot clones the table in O(1) under the state lock and encodes the clone
/// outside it, while applies go on, each copying only the few nodes it changes, and only while
/// a clone still shares them. Encoded exactly as a `BTreeMap`, so the log and snapshots of
/// earlier builds still decode.
type Map<K, V> = imbl::OrdMap<K, V>;
/// The set counterpart of [`Map`], encoded as a `BTreeSet`.
type Set<T> = imbl::OrdSet<T>;

/// Encodes a [`Map`] as a `BTreeMap` is encoded: its length, then its entries in order.
/// (imbl's own serde support is off, so that no derive can decode a map without
/// [`decode_map`].)
fn encode_map<S, K, V>(map: &Map<K, V>, encoder: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    K: serde::Serialize + Ord + Clone,
    V: serde::Serialize + Clone,
{
    use serde::ser::SerializeMap;
    let mut entries = encoder.serialize_map(Some(map.len()))?;
    for (key, value) in map {
        entries.serialize_entry(key, value)?;
    }
    entries.end()
}

/// A borrowed [`Map`] that encodes as [`encode_map`] does, where no field attribute can say so
/// (inside a tuple).
struct Encoded<'a, K, V>(&'a Map<K, V>);

impl<K, V> serde::Serialize for Encoded<'_, K, V>
where
    K: serde::Serialize + Ord + Clone,
    V: serde::Serialize + Clone,
{
    fn serialize<S: serde::Serializer>(&self, encoder: S) -> Result<S::Ok, S::Error> {
        encode_map(self.0, encoder)
    }
}

/// Decodes a [`Map`] through std's `BTreeMap`: serde's impl for it caps what it allocates
/// ahead by what the input can hold, where imbl's trusts the encoded length (random bytes
/// decoded as a snapshot asked for 208 TB, and the process aborted).
fn decode_map<'de, D, K, V>(decoder: D) -> Result<Map<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord + Clone,
    V: serde::Deserialize<'de> + Clone,
{
    let decoded: std::collections::BTreeMap<K, V> = serde::Deserialize::deserialize(decoder)?;
    Ok(decoded.into_iter().collect())
}

/// FNV-1a over `bytes`: stable across processes and builds, unlike std's hasher, so replicas
/// and checkers agree on it.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
