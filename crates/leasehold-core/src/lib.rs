//! Leasehold's core: what the replicated state is and how one logged command changes it.
//!
//! Everything here is pure. No async, no I/O, no clock: time arrives inside the command,
//! so every replica that applies the same log reaches the same state. A crate of its own, on
//! serde, postcard, thiserror, imbl and arcstr alone, so that nothing here can reach for Raft, the
//! network or the clock, and the fault suite's checkers use these types without compiling a
//! node.
//!
//! - `command`: what is logged (commands with their stamped store time) and what a command
//!   answers ([`Outcome`]).
//! - [`format`]: log formats, numbered: which operations an entry may hold, so that a leader
//!   logs nothing a voter of an older build cannot read.
//! - `table`: [`LeaseTable::apply`], leases, tokens, fences, rows, and the digest kept along.
//! - [`limits`]: sizes, TTL bounds and names, validated before a command reaches the log.
//! - `checked`: [`validate`], the one check of an operation before it is logged.
//! - `session`: client sessions, so a retried request is answered, never applied twice.
//! - `kept_answers`: the answers a session keeps for its retries, in one array.
//! - `event`: what a command did to leases, for watches.
//! - `holder_names`: holder names shared between the leases that name the same holder.
//! - `creators`: the identity that created each row and lease, for the leader's caps.
//! - [`etcd`]: etcd's v3 keyspace (keys, revisions, etcd's leases, transactions, recent
//!   events), in the same log and snapshots as the table and apart from it.
//! - `tally`: counts by identity (sessions, rows and leases created) kept along with the
//!   table, for the leader's caps.
//! - [`auth`]: who may do what: roles on lease and key prefixes, the admin permission, and
//!   holders bound to the identity that owns them; a pure policy, changed only by
//!   [`auth::AuthChange`].

#![warn(missing_docs)]

pub mod auth;
#[cfg(test)]
mod authorized;
mod checked;
mod command;
mod creators;
pub mod etcd;
mod event;
pub mod format;
mod holder_names;
mod kept_answers;
pub mod limits;
pub(crate) mod session;
mod table;
mod tally;

pub use checked::validate;
pub use command::{
    Batch, Command, Fence, Op, Outcome, ReleaseRefusal, Renewal, Renewed, RequestId,
};
pub use event::{Event, EventKind};
pub use limits::{InvalidInput, Limits, FORGET_BATCH, SESSION_IDLE_MS};
pub use table::{Lease, LeaseTable, TokenCheck};

/// An ordered map whose clone shares every node with the original (a B+tree of `Arc`ed
/// nodes): a snapshot clones the table in O(1) under the state lock and encodes the clone
/// outside it, while applies go on, each copying only the few nodes it changes, and only while
/// a clone still shares them. Encoded exactly as a `BTreeMap`, so the log and snapshots of
/// earlier builds still decode.
type Map<K, V> = imbl::OrdMap<K, V>;
/// The set counterpart of [`Map`], encoded as a `BTreeSet`.
type Set<T> = imbl::OrdSet<T>;
/// A lease's or a holder's name as the table keeps it: shared by the lease map, the expiry
/// index, the leases of one holder and the events kept for watchers, behind a pointer of 8
/// bytes (the length sits in the allocation), where an `Arc<str>` takes 16. Each name is in
/// two B-tree entries and most holder names in many, in leaves with room for 16 entries used
/// or not: with `Arc<str>`, a million leases as `bench` names them took 211 heap bytes per
/// lease, with this 161. Encoded as a `str`, as `Arc<str>` was, so snapshots and digests are
/// those of earlier builds.
pub type Name = arcstr::ArcStr;

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

/// Decodes a [`Map`] entry by entry, straight into the map (no `BTreeMap` on the way, which
/// made a restarted node's load of a million leases more than twice as long). Nothing is
/// allocated ahead of the entries that decode: imbl's own serde support trusts the encoded
/// length, and random bytes decoded as a snapshot with it asked for 208 TB, and the process
/// aborted. A key given twice keeps its last value, as a `BTreeMap` did.
fn decode_map<'de, D, K, V>(decoder: D) -> Result<Map<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord + Clone,
    V: serde::Deserialize<'de> + Clone,
{
    decode_map_with(decoder, |key, value| (key, value))
}

/// [`decode_map`], passing each entry through `each` on its way into the map.
fn decode_map_with<'de, D, K, V>(
    decoder: D,
    each: impl FnMut(K, V) -> (K, V),
) -> Result<Map<K, V>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: serde::Deserialize<'de> + Ord + Clone,
    V: serde::Deserialize<'de> + Clone,
{
    struct Entries<K, V, F>(F, std::marker::PhantomData<(K, V)>);

    impl<'de, K, V, F> serde::de::Visitor<'de> for Entries<K, V, F>
    where
        K: serde::Deserialize<'de> + Ord + Clone,
        V: serde::Deserialize<'de> + Clone,
        F: FnMut(K, V) -> (K, V),
    {
        type Value = Map<K, V>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map")
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(
            mut self,
            mut entries: A,
        ) -> Result<Map<K, V>, A::Error> {
            let mut map = Map::new();
            while let Some((key, value)) = entries.next_entry()? {
                let (key, value) = (self.0)(key, value);
                map.insert(key, value);
            }
            Ok(map)
        }
    }

    decoder.deserialize_map(Entries(each, std::marker::PhantomData))
}

/// FNV-1a over `value`'s postcard encoding: stable across processes and builds, unlike std's
/// hasher, so replicas and checkers agree on it. Hashed as the encoding is written, not
/// through a buffer: the digest's sums hash an entry at every change, and a load hashes every
/// lease. The same as hashing `postcard::to_allocvec(value)` (no bytes, should the encoding
/// fail), as every digest so far was computed.
fn fnv1a_of(value: &(impl serde::Serialize + ?Sized)) -> u64 {
    postcard::serialize_with_flavor(value, Fnv1a(FNV_OFFSET)).unwrap_or(FNV_OFFSET)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

fn fnv1a_step(hash: u64, byte: &u8) -> u64 {
    (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// A postcard output that folds each byte into an FNV-1a hash.
struct Fnv1a(u64);

impl postcard::ser_flavors::Flavor for Fnv1a {
    type Output = u64;

    fn try_push(&mut self, byte: u8) -> postcard::Result<()> {
        self.0 = fnv1a_step(self.0, &byte);
        Ok(())
    }

    fn try_extend(&mut self, bytes: &[u8]) -> postcard::Result<()> {
        self.0 = bytes.iter().fold(self.0, fnv1a_step);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<u64> {
        Ok(self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashing_as_written_equals_hashing_the_encoding() {
        fn over_bytes(value: &impl serde::Serialize) -> u64 {
            let bytes = postcard::to_allocvec(value).unwrap();
            bytes.iter().fold(FNV_OFFSET, fnv1a_step)
        }
        let lease = Lease {
            holder: Some("holder".into()),
            token: 300,
            expires_at_ms: u64::MAX,
            fence: 7,
        };
        assert_eq!(
            fnv1a_of(&("a-lease", &lease)),
            over_bytes(&("a-lease", &lease))
        );
        assert_eq!(fnv1a_of(&(1u64, 2u64, "")), over_bytes(&(1u64, 2u64, "")));
        assert_eq!(
            fnv1a_of(&()),
            FNV_OFFSET,
            "no bytes hash to the offset basis"
        );
        assert_ne!(fnv1a_of(&1u8), fnv1a_of(&2u8));
    }
}
