//! `LeaseTable::apply`: the one place where the store's state changes.

use std::ops::Bound;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::creators::Creators;
use super::limits::FORGET_BATCH;
use super::session::{fingerprint, Admission, Sessions};
use super::tally::Tally;
use super::{Encoded, Map, Name, Set};
use crate::auth::{Denied, Policy};
use crate::etcd::{EtcdOp, Keyspace};
use crate::format::{Format, FORMAT_1, FORMAT_3};
use crate::holder_names::RecentHolders;
use crate::{
    Command, Event, EventKind, Fence, Op, Outcome, ReleaseRefusal, Renewal, Renewed, RequestId,
};

/// A row's value, shared by the table and its clones: a change next to it while a snapshot's
/// clone shares its node copies the pointer, not up to 64 KiB. Encoded as a `Vec<u8>` is.
type Row = Arc<[u8]>;

/// The whole replicated state. Ordered maps, so iteration and serialization are
/// deterministic; persistent ones ([`Map`]), so a clone for a snapshot is cheap.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct LeaseTable {
    /// Store time: the largest stamp or advance applied so far. Never goes backwards.
    now_ms: u64,
    /// Held leases, and free ones until they are forgotten (see [`Op::Forget`]). Each name is
    /// stored once, shared with `expiries`.
    #[serde(serialize_with = "crate::encode_map")]
    leases: Map<Name, Lease>,
    #[serde(serialize_with = "crate::encode_map")]
    rows: Map<String, Row>,
    /// Registered clients and their recent answers: a request retried after a lost answer (a
    /// dead connection, a leader change) gets its first answer back instead of being applied
    /// twice.
    sessions: Sessions,
    /// The largest token of any forgotten lease: a name not in `leases` is granted above it,
    /// and a fenced write on such a name with a token at or below it is stale. So no token is
    /// ever handed out twice for a name, however often it is forgotten.
    forgotten_floor: u64,
    /// Who may do what: changed only by [`Op::Auth`], consulted for every [`Op::As`] and for
    /// every client operation logged without an identity.
    policy: Policy,
    /// The identity that opened each session opened with one: only it may send requests under
    /// the session, so that another identity can neither read its answers nor use up its
    /// sequence numbers. Kept while the session lives.
    #[serde(serialize_with = "crate::encode_map")]
    session_owners: Map<u64, String>,
    /// The identity that created each row, and each lease, created by a caller with one, kept
    /// until the row is deleted or the lease forgotten, and counted per identity: what the
    /// leader's caps on the rows and leases one identity keeps count (see `creators`).
    /// Advisory: outside the digest, and encoded last, where builds before 0.5.0 stop reading
    /// (see [`StoredBeforeCreators`]).
    #[serde(serialize_with = "encode_creators")]
    row_creators: Creators<String>,
    #[serde(serialize_with = "encode_creators")]
    lease_creators: Creators<Name>,
    /// etcd's keyspace (log format 3), encoded after everything else and only when something
    /// was ever written to it: a table without it is encoded as every earlier build encoded
    /// it, and one with it is of table format 3 (see [`LeaseTable::format`]). Decoded by
    /// [`LeaseTable::from_bytes`].
    #[serde(serialize_with = "encode_etcd")]
    etcd: Keyspace,
    /// `(expires_at_ms, name)` of every lease: the next expiry of a held lease (those after
    /// now) and the longest-free leases (a free lease's `expires_at_ms` is when it became
    /// free), without a scan. Derived from `leases`, so not stored: rebuilt on load.
    #[serde(skip)]
    expiries: Set<(u64, Name)>,
    /// The names of recently granted holders, so that a holder of ten thousand leases keeps
    /// one copy of its name, not ten thousand. Not state: equal in every table.
    #[serde(skip)]
    holders: RecentHolders,
    /// How many leases are held now: those in `expiries` after `now_ms`. Kept at every grant,
    /// release and expiry, so that a metrics scrape does not count a million leases under the
    /// state lock. Derived: rebuilt on load.
    #[serde(skip)]
    held: usize,
    /// The sums (wrapping) of [`entry_hash`] over `leases` and over `rows`, kept at every change
    /// of either, so that [`digest`](Self::digest) costs the same at any size. Derived: rebuilt
    /// on load.
    #[serde(skip)]
    lease_sum: u64,
    #[serde(skip)]
    row_sum: u64,
    /// The hash of `policy` when it is not the default, 0 when it is: the digest takes it in
    /// without encoding the policy on every call, and a table that never had a policy keeps
    /// the digest earlier builds gave it. Derived: rebuilt on load and on every change.
    #[serde(skip)]
    policy_hash: u64,
    /// What `session_owners` adds up to: the digest's sum and each identity's count. Derived:
    /// rebuilt on load.
    #[serde(skip)]
    owners: OwnerIndex,
}

/// Encodes the etcd keyspace: as nothing (postcard writes no byte for `()`) when it is empty.
fn encode_etcd<S: serde::Serializer>(etcd: &Keyspace, encoder: S) -> Result<S::Ok, S::Error> {
    match etcd.is_empty() {
        true => ().serialize(encoder),
        false => etcd.stored().serialize(encoder),
    }
}

/// The derived side of `session_owners`: the sum (wrapping) of every owner's hash, for the
/// digest as `lease_sum` is, and how many sessions each identity holds, for the leader's cap
/// on them (see the node's `caps`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct OwnerIndex {
    sum: u64,
    counts: Tally,
}

impl OwnerIndex {
    fn of(owners: &Map<u64, String>) -> OwnerIndex {
        let mut index = OwnerIndex::default();
        for (client, identity) in owners {
            index.add(*client, identity);
        }
        index
    }

    fn add(&mut self, client: u64, identity: &str) {
        self.sum = self.sum.wrapping_add(owner_hash(client, identity));
        self.counts.add(identity);
    }

    fn remove(&mut self, client: u64, identity: &str) {
        self.sum = self.sum.wrapping_sub(owner_hash(client, identity));
        self.counts.remove(identity);
    }
}

fn owner_hash(client: u64, identity: &str) -> u64 {
    super::fnv1a_of(&(client, identity))
}

/// A policy change refused by the policy's own rules, as the answer says it.
fn policy_refused(refusal: crate::InvalidInput) -> Outcome {
    Outcome::PolicyRefused {
        reason: refusal.to_string(),
    }
}

fn policy_hash(policy: &Policy) -> u64 {
    match *policy == Policy::default() {
        true => 0,
        false => super::fnv1a_of(policy),
    }
}

/// One lease's or row's share of the digest: its name and value, as postcard encodes them.
fn entry_hash(name: &str, value: &impl Serialize) -> u64 {
    super::fnv1a_of(&(name, value))
}

/// Keeps a digest sum in step with an entry that goes from `before` to `after` (each its
/// [`entry_hash`], `None` where the entry is not in the table).
fn rehash(sum: &mut u64, before: Option<u64>, after: Option<u64>) {
    *sum = sum
        .wrapping_sub(before.unwrap_or(0))
        .wrapping_add(after.unwrap_or(0));
}

/// What a table stores: everything but what is derived. Same fields, same order (the first
/// seven within `earlier`).
#[derive(Deserialize)]
struct Stored {
    /// Every field up to the creators, in a struct of their own, which postcard encodes as the
    /// same fields in line.
    earlier: StoredBeforeCreators,
    #[serde(deserialize_with = "decode_creators")]
    row_creators: Map<String, Name>,
    #[serde(deserialize_with = "decode_creators")]
    lease_creators: Map<Name, Name>,
}

impl Stored {
    /// A table stored before rows and leases had creators: none has one.
    fn without_creators(earlier: StoredBeforeCreators) -> Stored {
        Stored {
            earlier,
            row_creators: Map::new(),
            lease_creators: Map::new(),
        }
    }
}

/// What a table stored before rows and leases had creators (every build before 0.5.0).
#[derive(Deserialize)]
struct StoredBeforeCreators {
    now_ms: u64,
    #[serde(deserialize_with = "decode_leases")]
    leases: Map<Name, Lease>,
    #[serde(deserialize_with = "crate::decode_map")]
    rows: Map<String, Row>,
    sessions: Sessions,
    forgotten_floor: u64,
    policy: Policy,
    #[serde(deserialize_with = "crate::decode_map")]
    session_owners: Map<u64, String>,
}

/// What a table stored before it had a policy: the default policy, which is off.
#[derive(Deserialize)]
struct StoredBeforePolicy {
    now_ms: u64,
    #[serde(deserialize_with = "decode_leases")]
    leases: Map<Name, Lease>,
    #[serde(deserialize_with = "crate::decode_map")]
    rows: Map<String, Row>,
    sessions: Sessions,
    forgotten_floor: u64,
}

/// What a table stored before leases could be forgotten: no floor, which is then 0.
#[derive(Deserialize)]
struct StoredBeforeForgetting {
    now_ms: u64,
    #[serde(deserialize_with = "decode_leases")]
    leases: Map<Name, Lease>,
    #[serde(deserialize_with = "crate::decode_map")]
    rows: Map<String, Row>,
    sessions: Sessions,
}

/// Decodes the leases, each holder's name shared by the leases that name it (through
/// [`RecentHolders`], so in bounded memory, however many holders there are).
fn decode_leases<'de, D: serde::Deserializer<'de>>(
    decoder: D,
) -> Result<Map<Name, Lease>, D::Error> {
    let mut holders = RecentHolders::default();
    crate::decode_map_with(decoder, |name, mut lease: Lease| {
        lease.holder = lease.holder.map(|holder| holders.share(holder));
        (name, lease)
    })
}

/// Encodes creators as their map.
fn encode_creators<S, K>(creators: &Creators<K>, encoder: S) -> Result<S::Ok, S::Error>
where
    S: serde::Serializer,
    K: Serialize + Ord + Clone + std::borrow::Borrow<str>,
{
    crate::encode_map(creators.map(), encoder)
}

/// Decodes creators, each identity's name shared by what it created.
fn decode_creators<'de, D, K>(decoder: D) -> Result<Map<K, Name>, D::Error>
where
    D: serde::Deserializer<'de>,
    K: Deserialize<'de> + Ord + Clone,
{
    let mut identities = RecentHolders::default();
    crate::decode_map_with(decoder, |key, creator: Name| {
        (key, identities.share(creator))
    })
}

/// Leases from which a load derives the expiry index on a thread of its own: below, a thread
/// would cost more than it saves.
const DERIVE_BESIDE_FROM: usize = 10_000;

/// Where a listing of `prefix` continues: after `after`, or at the prefix itself.
fn start_bound<'a>(prefix: &'a str, after: &'a str) -> Bound<&'a str> {
    match after {
        "" => Bound::Included(prefix),
        after => Bound::Excluded(after),
    }
}

/// The expiry index of `leases`. Sorted before it is built: a B-tree is filled faster in key
/// order than at random, and as densely (third_party/imbl/PATCH.md). The leases come in name
/// order, so a stable sort by expiry alone puts them in the index's order without comparing a
/// name.
fn expiry_index(leases: &Map<Name, Lease>) -> Set<(u64, Name)> {
    let mut order: Vec<(u64, Name)> = leases
        .iter()
        .map(|(name, lease)| (lease.expires_at_ms, name.clone()))
        .collect();
    order.sort_by_key(|(expires_at_ms, _)| *expires_at_ms);
    order.into_iter().collect()
}

impl From<Stored> for LeaseTable {
    fn from(stored: Stored) -> Self {
        let Stored {
            earlier:
                StoredBeforeCreators {
                    now_ms,
                    leases,
                    rows,
                    sessions,
                    forgotten_floor,
                    policy,
                    session_owners,
                },
            row_creators,
            lease_creators,
        } = stored;
        let lease_sum = || {
            leases.iter().fold(0u64, |sum, (name, lease)| {
                sum.wrapping_add(entry_hash(name, lease))
            })
        };
        // The expiry index, the longer to derive (0.4 s of a 715,000-lease snapshot's load, the
        // sum 0.06 s), is built beside the digest's sum in a large table.
        let (expiries, lease_sum) = if leases.len() < DERIVE_BESIDE_FROM {
            (expiry_index(&leases), lease_sum())
        } else {
            std::thread::scope(|both| {
                let expiries = both.spawn(|| expiry_index(&leases));
                let lease_sum = lease_sum();
                let expiries = expiries
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (expiries, lease_sum)
            })
        };
        let row_sum = rows.iter().fold(0u64, |sum, (key, value)| {
            sum.wrapping_add(entry_hash(key, value))
        });
        // A lease's creator under the name the lease map stores, so that the two share it; a
        // creator of what the table does not keep (none, unless a bug left it) is dropped.
        let lease_creators = lease_creators
            .into_iter()
            .filter_map(|(name, creator)| {
                let (name, _) = leases.get_key_value(&name)?;
                Some((name.clone(), creator))
            })
            .collect();
        let row_creators = row_creators
            .into_iter()
            .filter(|(key, _)| rows.contains_key(key))
            .collect();
        LeaseTable {
            now_ms,
            leases,
            rows,
            sessions,
            forgotten_floor,
            policy_hash: policy_hash(&policy),
            policy,
            owners: OwnerIndex::of(&session_owners),
            session_owners,
            row_creators: Creators::from_map(row_creators),
            lease_creators: Creators::from_map(lease_creators),
            etcd: Keyspace::default(),
            held: held_after(&expiries, now_ms),
            expiries,
            holders: RecentHolders::default(),
            lease_sum,
            row_sum,
        }
    }
}

impl LeaseTable {
    /// A table from its encoding: the table, then the etcd keyspace if one follows. (A
    /// derived decoder cannot tell a keyspace from the end of the bytes.)
    pub fn from_bytes(bytes: &[u8]) -> Result<LeaseTable, postcard::Error> {
        let (mut table, rest): (LeaseTable, _) = postcard::take_from_bytes(bytes)?;
        if !rest.is_empty() {
            let stored: crate::etcd::Stored = postcard::from_bytes(rest)?;
            table.etcd = Keyspace::from(stored);
        }
        Ok(table)
    }

    /// The oldest table format that holds this table: 3 once the etcd keyspace was written to,
    /// 1 before, so that a cluster that never spoke etcd still installs its snapshots on builds
    /// that do not.
    pub fn format(&self) -> Format {
        match self.etcd.is_empty() {
            true => FORMAT_1,
            false => FORMAT_3,
        }
    }

    /// A table stored by an earlier version (a snapshot it left): before rows and leases had
    /// creators, before the policy, or before leases could be forgotten.
    pub fn from_older_bytes(bytes: &[u8]) -> Result<LeaseTable, postcard::Error> {
        // Whole or not at all: a layout that reads part of the bytes is not theirs (a newer
        // build's table, or a damaged one), and loading it would drop what it does not know.
        fn whole<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
            match postcard::take_from_bytes(bytes)? {
                (stored, []) => Ok(stored),
                _ => Err(postcard::Error::DeserializeBadEncoding),
            }
        }
        let earlier = if let Ok(old) = whole::<StoredBeforeCreators>(bytes) {
            old
        } else if let Ok(old) = whole::<StoredBeforePolicy>(bytes) {
            StoredBeforeCreators {
                now_ms: old.now_ms,
                leases: old.leases,
                rows: old.rows,
                sessions: old.sessions,
                forgotten_floor: old.forgotten_floor,
                policy: Policy::default(),
                session_owners: Map::new(),
            }
        } else {
            let old: StoredBeforeForgetting = whole(bytes)?;
            StoredBeforeCreators {
                now_ms: old.now_ms,
                leases: old.leases,
                rows: old.rows,
                sessions: old.sessions,
                forgotten_floor: 0,
                policy: Policy::default(),
                session_owners: Map::new(),
            }
        };
        Ok(LeaseTable::from(Stored::without_creators(earlier)))
    }
}

/// The answer to "is this token the lease's current one?" (see [`LeaseTable::check_token`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TokenCheck {
    /// Held, not expired, with this token.
    Current {
        /// The current holder's name.
        holder: String,
        /// When its grant runs out, in store time (ms), unless it renews.
        expires_at_ms: u64,
    },
    /// Not the lease's current grant: a later token was granted, or the lease is free now.
    /// `current_token` is the latest grant's (0 for a lease not in the table), `holder` whoever
    /// holds it now.
    Stale {
        /// The latest grant's token; 0 for a lease not in the table.
        current_token: u64,
        /// Who holds the lease now; `None` when it is free.
        holder: Option<String>,
    },
    /// A token the store never handed out for this lease.
    Unknown {
        /// The largest token the lease has handed out (the floor for a lease not in the
        /// table): the checked one is above it.
        latest_token: u64,
    },
}

/// One lease: its latest grant and its fence. Kept while free, so that its tokens go on from
/// where they were, until an [`Op::Forget`] drops it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// `None` once released. An expired lease keeps its last holder, so a read can name it.
    pub holder: Option<Name>,
    /// The token of the latest grant; 0 for a lease never granted.
    pub token: u64,
    /// When the latest grant runs out, in store time (ms); for a released lease, the store
    /// time of the release. A free lease's is when it became free.
    pub expires_at_ms: u64,
    /// The largest token the store has seen for this lease: raised by every grant and by every
    /// accepted fenced write (put or delete). A fenced write below it is stale.
    pub fence: u64,
}

impl Lease {
    /// Who holds the lease at store time `now_ms`, if anyone.
    pub fn holder_at(&self, now_ms: u64) -> Option<&Name> {
        match &self.holder {
            Some(holder) if now_ms < self.expires_at_ms => Some(holder),
            _ => None,
        }
    }
}

/// How many of `expiries` are held at `now_ms`: held means expiring after it, and a free
/// lease's expiry is not after it.
fn held_after(expiries: &Set<(u64, Name)>, now_ms: u64) -> usize {
    expiries.range(first_at(now_ms.saturating_add(1))..).count()
}

/// The first place in `expiries` at store time `at_ms`, before every name: a range bound that
/// uses the empty name, which allocates nothing.
fn first_at(at_ms: u64) -> (u64, Name) {
    (at_ms, Name::new())
}

/// Keeps `expiries` in step with a lease whose expiry goes from `before` to `after` (`None`:
/// the lease is not in the table).
fn reindex(expiries: &mut Set<(u64, Name)>, name: &Name, before: Option<u64>, after: Option<u64>) {
    if before == after {
        return;
    }
    if let Some(at) = before {
        expiries.remove(&(at, name.clone()));
    }
    if let Some(at) = after {
        expiries.insert((at, name.clone()));
    }
}

impl LeaseTable {
    /// Store time, in milliseconds: the largest stamp or advance applied so far. It moves only
    /// through logged commands, so every replica that applied the same log reads the same.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The lease named `name`, held or free; `None` if it was never granted or was forgotten.
    pub fn lease(&self, name: &str) -> Option<&Lease> {
        self.leases.get(name)
    }

    /// Who may do what.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The value stored under `key`, if any.
    pub fn row(&self, key: &str) -> Option<&[u8]> {
        self.rows.get(key).map(|value| &**value)
    }

    /// The leases, held or free, whose names start with `prefix`, in name order, from the
    /// first after `after` (from the first of all when it is empty): a page of a listing costs
    /// the tree's depth and the page, however many leases there are.
    pub fn leases_under<'a>(
        &'a self,
        prefix: &'a str,
        after: &str,
    ) -> impl Iterator<Item = (&'a Name, &'a Lease)> + 'a {
        let from = start_bound(prefix, after);
        (self.leases.range::<_, str>((from, Bound::Unbounded)))
            .take_while(move |(name, _)| name.starts_with(prefix))
    }

    /// The rows whose keys start with `prefix`, in key order, from the first after `after`, as
    /// [`leases_under`](Self::leases_under).
    pub fn rows_under<'a>(
        &'a self,
        prefix: &'a str,
        after: &str,
    ) -> impl Iterator<Item = (&'a String, &'a [u8])> + 'a {
        let from = start_bound(prefix, after);
        (self.rows.range::<_, str>((from, Bound::Unbounded)))
            .take_while(move |(key, _)| key.starts_with(prefix))
            .map(|(key, value)| (key, &**value))
    }

    /// A fingerprint of the whole state, equal on replicas that applied the same log, and
    /// cheap at any number of leases and rows: FNV-1a (stable across processes and builds,
    /// unlike std's hasher) over the clock, the floor, the sessions, and the sums of every
    /// lease's, row's, session's and kept answer's own hash, which every change keeps up to
    /// date.
    pub fn digest(&self) -> u64 {
        let parts = (
            self.now_ms,
            self.forgotten_floor,
            self.sessions.digest_parts(),
            self.leases.len(),
            self.lease_sum,
            self.rows.len(),
            self.row_sum,
        );
        let digest = super::fnv1a_of(&parts);
        let digest = match (self.policy_hash, self.session_owners.len()) {
            // The default policy, and no session opened by an identity, leave the digest as it
            // was before there were either.
            (0, 0) => digest,
            (policy, owners) => {
                let parts = (digest, policy, owners, self.owners.sum);
                super::fnv1a_of(&parts)
            }
        };
        // So does an etcd keyspace never written to.
        match self.etcd.is_empty() {
            true => digest,
            false => super::fnv1a_of(&(digest, self.etcd.digest())),
        }
    }

    /// The digests a backup's header may name that were this table's under an earlier
    /// definition: the sums with the sessions encoded whole (before their digest was kept up
    /// to date), and the whole encoding (before any sum was). O(state): for `snapshot
    /// restore` only.
    pub fn older_digests(&self) -> [u64; 2] {
        let sessions_whole = (
            self.now_ms,
            self.forgotten_floor,
            &self.sessions,
            self.leases.len(),
            self.lease_sum,
            self.rows.len(),
            self.row_sum,
        );
        // The whole encoding as it was before the policy: the same fields without it.
        let whole = (
            self.now_ms,
            Encoded(&self.leases),
            Encoded(&self.rows),
            &self.sessions,
            self.forgotten_floor,
        );
        [super::fnv1a_of(&sessions_whole), super::fnv1a_of(&whole)]
    }

    /// The table a cluster restored from a backup starts with: every token, fence and the floor
    /// `gap` higher, no session, and session ids `gap` past the saved ones. The old cluster may
    /// have gone on after the save; as long as it handed out fewer than `gap` tokens per lease
    /// and `gap` sessions since, no token or session id of the new cluster is one it handed
    /// out, and a holder of the old cluster finds its token stale here.
    pub fn restored(mut self, gap: u64) -> LeaseTable {
        // etcd's keyspace has no tokens: it goes on as it was saved.
        let etcd = std::mem::take(&mut self.etcd);
        self.leases = (self.leases.iter())
            .map(|(name, lease)| {
                let token = lease.token.saturating_add(gap);
                let fence = lease.fence.saturating_add(gap);
                let lease = Lease {
                    token,
                    fence,
                    ..lease.clone()
                };
                (name.clone(), lease)
            })
            .collect();
        self.forgotten_floor = self.forgotten_floor.saturating_add(gap);
        self.sessions.restored(gap);
        let stored = Stored {
            earlier: StoredBeforeCreators {
                now_ms: self.now_ms,
                leases: self.leases,
                rows: self.rows,
                sessions: self.sessions,
                forgotten_floor: self.forgotten_floor,
                policy: self.policy,
                // No session goes on, so neither does any owner.
                session_owners: Map::new(),
            },
            row_creators: self.row_creators.map().clone(),
            lease_creators: self.lease_creators.map().clone(),
        };
        // Rebuilt as a load would: the digest's sums follow the new tokens.
        LeaseTable {
            etcd,
            ..LeaseTable::from(stored)
        }
    }

    /// How many client sessions are open.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// How many of them `identity` opened.
    pub fn sessions_of(&self, identity: &str) -> usize {
        self.owners.counts.of(identity)
    }

    /// How many of the leases kept now (held, or free until forgotten) `identity` created:
    /// acquired first, or again once forgotten.
    pub fn leases_created_by(&self, identity: &str) -> usize {
        self.lease_creators.of(identity)
    }

    /// How many of the rows kept now `identity` created.
    pub fn rows_created_by(&self, identity: &str) -> usize {
        self.row_creators.of(identity)
    }

    /// How many leases the table keeps, free ones included.
    pub fn lease_count(&self) -> usize {
        self.leases.len()
    }

    /// How many rows the table keeps.
    pub fn row_count(&self) -> usize {
        self.rows.len()
    }

    /// How many leases are held now (granted and not expired).
    pub fn held_count(&self) -> usize {
        self.held
    }

    /// The earliest expiry of a lease that is still held, or of an etcd lease not yet ended
    /// (which may be past, while ending them takes more than one command): when the next tick
    /// is due.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        // Held at `now_ms` means expiring after it; a free lease's expiry is not after it.
        let after_now = first_at(self.now_ms.saturating_add(1));
        let lease = self.expiries.range(after_now..).next().map(|(at, _)| *at);
        lease.into_iter().chain(self.etcd.next_expiry_ms()).min()
    }

    /// etcd's keyspace.
    pub fn etcd(&self) -> &Keyspace {
        &self.etcd
    }

    /// When the longest-free lease will have been free for `retention_ms`, so that an
    /// [`Op::Forget`] with that retention drops it; `None` when no lease is free.
    pub fn next_forget_ms(&self, retention_ms: u64) -> Option<u64> {
        let (free_since, _) = self.expiries.get_min()?;
        (*free_since <= self.now_ms).then(|| free_since.saturating_add(retention_ms))
    }

    /// The largest token of any forgotten lease.
    pub fn forgotten_floor(&self) -> u64 {
        self.forgotten_floor
    }

    /// Whether `token` is `name`'s current grant now: held, not expired, this token.
    pub fn check_token(&self, name: &str, token: u64) -> TokenCheck {
        let Some(lease) = self.leases.get(name) else {
            // Never granted, or forgotten: nobody holds it, and tokens up to the floor may
            // have been a forgotten lease's.
            return if (1..=self.forgotten_floor).contains(&token) {
                TokenCheck::Stale {
                    current_token: 0,
                    holder: None,
                }
            } else {
                TokenCheck::Unknown {
                    latest_token: self.forgotten_floor,
                }
            };
        };
        let holder = lease.holder_at(self.now_ms);
        match holder {
            _ if token > lease.token => TokenCheck::Unknown {
                latest_token: lease.token,
            },
            Some(holder) if token == lease.token => TokenCheck::Current {
                holder: holder.to_string(),
                expires_at_ms: lease.expires_at_ms,
            },
            _ => TokenCheck::Stale {
                current_token: lease.token,
                holder: holder.map(Name::to_string),
            },
        }
    }

    /// Applies one logged command. Pure: the same table and command give the same outcome on
    /// every replica. A refusal changes no lease and no row; the clock still moves to the
    /// command's stamp, because time passing is not the command's doing.
    pub fn apply(&mut self, command: &Command) -> Outcome {
        self.apply_noting(command, &mut Vec::new())
    }

    /// [`apply`](Self::apply), noting in `events` what happened to leases: the expiries the
    /// command's time brought, in expiry order, then the command's own grant, renewal or
    /// release. A retry answered from its session changes nothing and notes nothing.
    pub fn apply_noting(&mut self, command: &Command, events: &mut Vec<Event>) -> Outcome {
        if let Some(at_ms) = command.at_ms {
            // Invariant: store time never goes backwards, whatever a (new) leader stamped.
            self.pass_time(at_ms, events);
        }
        // Sessions expire by store time on every command, lease or not: state stays the size
        // of the clients seen in the last hour.
        let (owners, index) = (&mut self.session_owners, &mut self.owners);
        self.sessions.expire(self.now_ms, |client| {
            if let Some(owner) = owners.remove(&client) {
                index.remove(client, &owner);
            }
        });
        // etcd's leases run out by store time too, a bounded number per command.
        self.etcd.expire(self.now_ms);
        let Some(request) = command.request else {
            return self.apply_op(&command.op, events);
        };
        if let Some(refused) = self.foreign_session(request, command.op.identity()) {
            return refused;
        }
        if *command.op.bare() == Op::Close {
            // Not admitted as a request: a closed session keeps no answer, so a retry of the
            // close finds none and is answered as the first was.
            return self.close_session(request.client);
        }
        let print = fingerprint(&command.op);
        match self.sessions.admit(request, print, self.now_ms) {
            Admission::Answer(outcome) => outcome,
            Admission::Apply => {
                let outcome = self.apply_op(&command.op, events);
                self.sessions.record(request, print, &outcome);
                outcome
            }
        }
    }

    /// The refusal of a request under a session another identity opened (or, for a request
    /// without an identity, any identity): not admitted, so it neither reads the session's
    /// answers nor uses its sequence numbers.
    fn foreign_session(&self, request: RequestId, asker: Option<&str>) -> Option<Outcome> {
        let owner = self.session_owners.get(&request.client)?;
        (Some(owner.as_str()) != asker)
            .then(|| Outcome::Denied(Box::new(Denied::foreign_session(asker, request.client))))
    }

    /// Closes session `client` and forgets its owner, as its expiry would.
    fn close_session(&mut self, client: u64) -> Outcome {
        if self.sessions.close(client) {
            if let Some(owner) = self.session_owners.remove(&client) {
                self.owners.remove(client, &owner);
            }
        }
        Outcome::Closed
    }

    /// An etcd write, once the policy allows everything it touches.
    fn etcd_op(&mut self, op: &EtcdOp, identity: Option<&str>, bearer: Option<&str>) -> Outcome {
        for need in op.needs() {
            if let Err(denied) = self.policy.check_caller(identity, bearer, &need.action()) {
                return Outcome::Denied(Box::new(denied));
            }
        }
        let keys = |id| self.etcd.lease_keys(id).cloned().collect();
        if let Err(denied) = crate::etcd::lease_allowed(op, &self.policy, identity, bearer, keys) {
            return Outcome::Denied(Box::new(denied));
        }
        let enforced = self.policy.enabled();
        let outcome = self.etcd.apply(op, self.now_ms, identity, enforced);
        Outcome::Etcd(Box::new(outcome))
    }

    /// Moves store time to `to_ms` if that is later, noting the leases held until then whose
    /// grant ran out on the way.
    fn pass_time(&mut self, to_ms: u64, events: &mut Vec<Event>) {
        if to_ms <= self.now_ms {
            return;
        }
        // A free lease's expiry is not after now, so the range holds held leases only.
        let (after_now, past_to) = (first_at(self.now_ms + 1), first_at(to_ms.saturating_add(1)));
        for (at, name) in self.expiries.range(after_now..past_to) {
            self.held -= 1;
            if let Some(Lease {
                holder: Some(holder),
                token,
                ..
            }) = self.leases.get(name)
            {
                events.push(Event {
                    kind: EventKind::Expired,
                    lease: name.clone(),
                    holder: holder.clone(),
                    token: *token,
                    expires_at_ms: *at,
                });
            }
        }
        self.now_ms = to_ms;
    }

    fn apply_op(&mut self, op: &Op, events: &mut Vec<Event>) -> Outcome {
        // Authorized here, at apply, so that every replica decides by the policy in force at
        // this index, whatever the node that took the request believed.
        let (identity, bearer, op) = (op.identity(), op.bearer(), op.bare());
        for action in op.actions() {
            if let Err(denied) = self.policy.check_caller(identity, bearer, &action) {
                return Outcome::Denied(Box::new(denied));
            }
        }
        let outcome = match op {
            Op::Acquire {
                lease,
                holder,
                ttl_ms,
            } => self.acquire(lease, holder, *ttl_ms, identity),
            Op::Release {
                lease,
                holder,
                token,
            } => self.release(lease, holder, *token),
            Op::Renew { leases } => {
                Outcome::Renewed(leases.iter().map(|r| self.renew(r, events)).collect())
            }
            Op::Put { key, value, fence } => self.put(key, value, fence.as_ref(), identity),
            Op::Advance { by_ms } => {
                self.pass_time(self.now_ms.saturating_add(*by_ms), events);
                self.etcd.expire(self.now_ms);
                Outcome::Advanced
            }
            // Carries nothing but its stamp: expiries happen by the time it brings.
            Op::Tick => Outcome::Ticked,
            Op::Register => {
                let client = self.sessions.register(self.now_ms);
                if let Some(identity) = identity {
                    self.owners.add(client, identity);
                    self.session_owners.insert(client, identity.to_owned());
                }
                Outcome::Registered { client }
            }
            Op::Delete { key, fence } => self.delete(key, fence.as_ref()),
            Op::Forget { retention_ms } => self.forget(*retention_ms),
            // Outside any session (a close names its session in its request): nothing to close.
            Op::Close => Outcome::Closed,
            Op::Etcd(etcd) => self.etcd_op(etcd, identity, bearer),
            // An admin acting as another identity: that identity's operation, checked as its.
            Op::As { .. } => return self.apply_op(op, events),
            Op::Auth(change) => match self
                .policy
                .check_change(identity, bearer, change)
                .map_err(|denied| Outcome::Denied(Box::new(denied)))
                .and_then(|()| self.policy.apply(change).map_err(policy_refused))
            {
                Ok(()) => {
                    self.policy_hash = policy_hash(&self.policy);
                    Outcome::PolicyChanged
                }
                Err(refusal) => refusal,
            },
        };
        self.note(op, &outcome, events);
        outcome
    }

    /// `lease`'s and `holder`'s names as the table stores them, so that an event kept for
    /// watchers shares them rather than copying them; a name the table does not hold (a
    /// released lease's holder) is copied.
    fn names(&self, lease: &str, holder: &str) -> (Name, Name) {
        match self.leases.get_key_value(lease) {
            Some((name, stored)) => (
                name.clone(),
                match &stored.holder {
                    Some(stored) if **stored == *holder => stored.clone(),
                    _ => Name::from(holder),
                },
            ),
            None => (Name::from(lease), Name::from(holder)),
        }
    }

    /// Notes in `events` what `op`, answered `outcome`, did to its lease.
    fn note(&self, op: &Op, outcome: &Outcome, events: &mut Vec<Event>) {
        match (op, outcome) {
            (
                Op::Acquire { lease, holder, .. },
                Outcome::Granted {
                    token,
                    expires_at_ms,
                    renewed,
                },
            ) => {
                let (lease, holder) = self.names(lease, holder);
                events.push(Event {
                    kind: if *renewed {
                        EventKind::Renewed
                    } else {
                        EventKind::Granted
                    },
                    lease,
                    holder,
                    token: *token,
                    expires_at_ms: *expires_at_ms,
                })
            }
            (Op::Release { lease, holder, .. }, Outcome::Released { token }) => {
                let (lease, holder) = self.names(lease, holder);
                events.push(Event {
                    kind: EventKind::Released,
                    lease,
                    holder,
                    token: *token,
                    expires_at_ms: self.now_ms,
                })
            }
            _ => {}
        }
    }

    /// Drops the leases free for at least `retention_ms`, longest-free first, at most
    /// [`FORGET_BATCH`]; the floor rises to the largest token among them.
    fn forget(&mut self, retention_ms: u64) -> Outcome {
        let mut forgotten = 0;
        while forgotten < FORGET_BATCH {
            let Some((free_since, name)) = self.expiries.get_min().cloned() else {
                break;
            };
            // A lease's expiry is no later than now exactly when it is free.
            if free_since > self.now_ms || free_since.saturating_add(retention_ms) > self.now_ms {
                break;
            }
            self.expiries.remove_min();
            if let Some(lease) = self.leases.remove(&*name) {
                self.lease_creators.removed(&name);
                rehash(&mut self.lease_sum, Some(entry_hash(&name, &lease)), None);
                self.forgotten_floor = self.forgotten_floor.max(lease.token).max(lease.fence);
            }
            forgotten += 1;
        }
        Outcome::Forgot { leases: forgotten }
    }

    /// Grants `name` to `holder` if it is free, renews it if `holder` holds it; a lease
    /// `identity` brings into the table is counted as its until forgotten.
    fn acquire(
        &mut self,
        name: &str,
        holder: &str,
        ttl_ms: u64,
        identity: Option<&str>,
    ) -> Outcome {
        let now_ms = self.now_ms;
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        if let Some(lease) = self.leases.get_mut(name) {
            match lease.holder_at(now_ms) {
                Some(current) if current == holder => {
                    let token = lease.token;
                    self.change_lease(name, |lease| lease.expires_at_ms = expires_at_ms);
                    return Outcome::Granted {
                        token,
                        expires_at_ms,
                        renewed: true,
                    };
                }
                Some(current) => {
                    return Outcome::HeldBy {
                        holder: current.clone(),
                        token: lease.token,
                        expires_at_ms: lease.expires_at_ms,
                    };
                }
                None => {}
            }
        }
        // Indexed by its expiry if it is in the table already, under the name stored there.
        let stored = self.leases.get_key_value(name);
        let before = stored.map(|(_, lease)| lease.expires_at_ms);
        let hashed = stored.map(|(_, lease)| entry_hash(name, lease));
        let key = stored.map_or_else(|| Name::from(name), |(key, _)| key.clone());
        if let (None, Some(identity)) = (stored, identity) {
            let creator = self.holders.name(identity);
            self.lease_creators.created(key.clone(), creator);
        }
        let floor = self.forgotten_floor;
        let lease = self.leases.entry(key.clone()).or_insert_with(|| Lease {
            // A name not in the table (never seen, or forgotten) starts above every token a
            // forgotten lease handed out.
            token: floor,
            fence: floor,
            ..Lease::default()
        });
        let token = lease.token + 1;
        debug_assert!(
            token > lease.fence,
            "a new grant's token must exceed the fence"
        );
        *lease = Lease {
            holder: Some(self.holders.name(holder)),
            token,
            expires_at_ms,
            fence: token,
        };
        let rehashed = entry_hash(name, lease);
        rehash(&mut self.lease_sum, hashed, Some(rehashed));
        reindex(&mut self.expiries, &key, before, Some(expires_at_ms));
        // Granted only when not held, so one more is.
        self.held += 1;
        Outcome::Granted {
            token,
            expires_at_ms,
            renewed: false,
        }
    }

    fn release(&mut self, name: &str, holder: &str, token: u64) -> Outcome {
        if let Err(refusal) = self.holds(name, holder, token) {
            return Outcome::ReleaseRefused(refusal);
        }
        let now_ms = self.now_ms;
        self.change_lease(name, |lease| {
            lease.holder = None;
            // Free at once: the next acquire must not wait for the old expiry.
            lease.expires_at_ms = now_ms;
        });
        self.held -= 1;
        Outcome::Released { token }
    }

    /// Renews one lease of an [`Op::Renew`], noting the renewal in `events`.
    fn renew(&mut self, renewal: &Renewal, events: &mut Vec<Event>) -> Renewed {
        let Renewal {
            lease,
            holder,
            token,
            ttl_ms,
        } = renewal;
        if let Err(refusal) = self.holds(lease, holder, *token) {
            return Renewed::Refused(refusal);
        }
        let expires_at_ms = self.now_ms.saturating_add(*ttl_ms);
        self.change_lease(lease, |lease| lease.expires_at_ms = expires_at_ms);
        let (lease, holder) = self.names(lease, holder);
        events.push(Event {
            kind: EventKind::Renewed,
            lease,
            holder,
            token: *token,
            expires_at_ms,
        });
        Renewed::Until { expires_at_ms }
    }

    /// Whether `holder` holds the lease `name` now under `token`, and if not, why not.
    fn holds(&self, name: &str, holder: &str, token: u64) -> Result<(), ReleaseRefusal> {
        let lease = self.leases.get(name).ok_or(ReleaseRefusal::NotHeld)?;
        match lease.holder_at(self.now_ms) {
            None => Err(ReleaseRefusal::NotHeld),
            Some(current) if current != holder => Err(ReleaseRefusal::HeldByOther {
                holder: current.clone(),
                token: lease.token,
                expires_at_ms: lease.expires_at_ms,
            }),
            Some(_) if token != lease.token => Err(ReleaseRefusal::WrongToken {
                current_token: lease.token,
            }),
            Some(_) => Ok(()),
        }
    }

    /// Changes the lease `name` in the table by `change`, keeping its expiry's place in
    /// `expiries` and its share of the digest in step.
    fn change_lease(&mut self, name: &str, change: impl FnOnce(&mut Lease)) {
        let Some((key, _)) = self.leases.get_key_value(name) else {
            return;
        };
        let key = key.clone();
        let Some(lease) = self.leases.get_mut(name) else {
            return;
        };
        let (before, hashed) = (lease.expires_at_ms, entry_hash(name, lease));
        change(lease);
        let (after, rehashed) = (lease.expires_at_ms, entry_hash(name, lease));
        reindex(&mut self.expiries, &key, Some(before), Some(after));
        rehash(&mut self.lease_sum, Some(hashed), Some(rehashed));
    }

    /// Writes row `key`; a row `identity` creates is counted as its until deleted.
    fn put(
        &mut self,
        key: &str,
        value: &[u8],
        fence: Option<&Fence>,
        identity: Option<&str>,
    ) -> Outcome {
        if let Err(refusal) = self.pass_fence(fence) {
            return refusal;
        }
        let replaced = self.rows.insert(key.to_owned(), Row::from(value));
        if let (None, Some(identity)) = (&replaced, identity) {
            let creator = self.holders.name(identity);
            self.row_creators.created(key.to_owned(), creator);
        }
        let hashed = replaced.map(|old| entry_hash(key, &old));
        rehash(&mut self.row_sum, hashed, Some(entry_hash(key, &value)));
        Outcome::Written
    }

    fn delete(&mut self, key: &str, fence: Option<&Fence>) -> Outcome {
        if let Err(refusal) = self.pass_fence(fence) {
            return refusal;
        }
        let removed = self.rows.remove(key);
        self.row_creators.removed(key);
        let hashed = removed.as_ref().map(|old| entry_hash(key, old));
        rehash(&mut self.row_sum, hashed, None);
        Outcome::Deleted {
            existed: removed.is_some(),
        }
    }

    /// A fenced write's check: the refusal when its token is stale or was never handed out;
    /// otherwise the lease's fence rises to the token and the write goes ahead.
    fn pass_fence(&mut self, fence: Option<&Fence>) -> Result<(), Outcome> {
        let Some(Fence { lease: name, token }) = fence else {
            return Ok(());
        };
        let Some(latest_token) = self.leases.get(name.as_str()).map(|lease| lease.token) else {
            // Not in the table: never granted, or forgotten. A token at or below the floor may
            // be a forgotten lease's: stale. Above it, none was handed out.
            let floor = self.forgotten_floor;
            return Err(if (1..=floor).contains(token) {
                Outcome::StaleToken { fence: floor }
            } else {
                Outcome::UnknownToken {
                    lease: name.as_str().into(),
                    latest_token: floor,
                }
            });
        };
        if *token > latest_token {
            return Err(Outcome::UnknownToken {
                lease: name.as_str().into(),
                latest_token,
            });
        }
        // Total, never a panic: a committed command is applied on every replica and on every
        // replay, so one that crashed here would crash them all, forever.
        let Some(lease) = self.leases.get_mut(name.as_str()) else {
            return Err(Outcome::UnknownToken {
                lease: name.as_str().into(),
                latest_token,
            });
        };
        if *token < lease.fence {
            return Err(Outcome::StaleToken { fence: lease.fence });
        }
        let hashed = entry_hash(name, lease);
        lease.fence = *token;
        rehash(
            &mut self.lease_sum,
            Some(hashed),
            Some(entry_hash(name, lease)),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RequestId, SESSION_IDLE_MS};

    fn at(at_ms: u64, op: Op) -> Command {
        Command {
            at_ms: Some(at_ms),
            request: None,
            op,
        }
    }
    fn acquire(lease: &str, holder: &str, ttl_ms: u64) -> Op {
        Op::Acquire {
            lease: lease.into(),
            holder: holder.into(),
            ttl_ms,
        }
    }
    fn release(lease: &str, holder: &str, token: u64) -> Op {
        Op::Release {
            lease: lease.into(),
            holder: holder.into(),
            token,
        }
    }
    fn fenced(key: &str, value: &str, lease: &str, token: u64) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            fence: Some(Fence {
                lease: lease.into(),
                token,
            }),
        }
    }
    fn plain(key: &str, value: &str) -> Op {
        Op::Put {
            key: key.into(),
            value: value.into(),
            fence: None,
        }
    }
    fn granted(token: u64, expires_at_ms: u64, renewed: bool) -> Outcome {
        Outcome::Granted {
            token,
            expires_at_ms,
            renewed,
        }
    }

    /// Opens a session at `at_ms`; its id.
    fn register(t: &mut LeaseTable, at_ms: u64) -> u64 {
        match t.apply(&at(at_ms, Op::Register)) {
            Outcome::Registered { client } => client,
            other => panic!("register answered {other:?}"),
        }
    }

    /// Applies a command that must be refused, and checks it changed nothing but the clock.
    fn assert_refused_unchanged(table: &mut LeaseTable, command: Command) -> Outcome {
        let mut before = table.clone();
        before.now_ms = before.now_ms.max(command.at_ms.unwrap_or(0));
        let outcome = table.apply(&command);
        assert!(!outcome.accepted(), "expected a refusal, got {outcome:?}");
        assert_eq!(
            postcard::to_allocvec(table).unwrap(),
            postcard::to_allocvec(&before).unwrap(),
            "a refused command must leave the table byte-for-byte unchanged"
        );
        outcome
    }

    #[test]
    fn a_listing_under_a_prefix_goes_in_name_order_and_continues_after_its_last_name() {
        let mut t = LeaseTable::default();
        for name in ["jobs/b", "jobs0", "jobs/a", "job", "jobs/c", "other"] {
            t.apply(&at(0, acquire(name, "h", 10_000)));
            t.apply(&at(0, plain(name, "v")));
        }
        let leases = |after: &str| -> Vec<String> {
            (t.leases_under("jobs/", after))
                .map(|(name, _)| name.to_string())
                .collect()
        };
        assert_eq!(leases(""), ["jobs/a", "jobs/b", "jobs/c"]);
        assert_eq!(leases("jobs/a"), ["jobs/b", "jobs/c"]);
        assert_eq!(leases("jobs/c"), Vec::<String>::new());
        let rows: Vec<&String> = t.rows_under("jobs", "jobs/b").map(|(k, _)| k).collect();
        assert_eq!(rows, ["jobs/c", "jobs0"]);
        assert_eq!(t.rows_under("", "").count(), 6);
    }

    #[test]
    fn the_seed_scenario_fences_the_frozen_holder() {
        let mut t = LeaseTable::default();
        assert_eq!(
            t.apply(&at(0, acquire("l", "a", 10_000))),
            granted(1, 10_000, false)
        );
        let refused = assert_refused_unchanged(&mut t, at(0, acquire("l", "b", 10_000)));
        assert_eq!(
            refused,
            Outcome::HeldBy {
                holder: "a".into(),
                token: 1,
                expires_at_ms: 10_000
            }
        );
        assert_eq!(
            t.apply(&at(15_000, acquire("l", "b", 10_000))),
            granted(2, 25_000, false)
        );
        assert_eq!(
            t.apply(&at(15_000, plain("plain", "by b"))),
            Outcome::Written
        );
        assert_eq!(
            t.apply(&at(15_000, fenced("fenced", "by b", "l", 2))),
            Outcome::Written
        );
        assert_eq!(
            t.apply(&at(15_000, plain("plain", "by a"))),
            Outcome::Written
        );
        let stale = assert_refused_unchanged(&mut t, at(15_000, fenced("fenced", "by a", "l", 1)));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
        assert_eq!(t.row("plain"), Some(&b"by a"[..]));
        assert_eq!(t.row("fenced"), Some(&b"by b"[..]));
    }

    fn delete(key: &str, fence: Option<(&str, u64)>) -> Op {
        Op::Delete {
            key: key.into(),
            fence: fence.map(|(lease, token)| Fence {
                lease: lease.into(),
                token,
            }),
        }
    }

    #[test]
    fn a_delete_removes_the_row_plain_or_fenced_and_a_stale_one_changes_nothing() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, plain("k", "v")));
        assert_eq!(
            t.apply(&at(0, delete("k", None))),
            Outcome::Deleted { existed: true }
        );
        assert_eq!(t.row("k"), None);
        assert_eq!(
            t.apply(&at(0, delete("k", None))),
            Outcome::Deleted { existed: false },
            "deleting what is not there is no refusal"
        );

        t.apply(&at(0, acquire("l", "a", 1_000)));
        t.apply(&at(0, plain("k", "by a")));
        t.apply(&at(2_000, acquire("l", "b", 1_000)));
        let stale = assert_refused_unchanged(&mut t, at(2_000, delete("k", Some(("l", 1)))));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
        assert_eq!(
            t.row("k"),
            Some(&b"by a"[..]),
            "a stale delete leaves the row"
        );
        let unknown = assert_refused_unchanged(&mut t, at(2_000, delete("k", Some(("l", 3)))));
        assert!(matches!(
            unknown,
            Outcome::UnknownToken {
                latest_token: 2,
                ..
            }
        ));
        assert_eq!(
            t.apply(&at(2_000, delete("k", Some(("l", 2))))),
            Outcome::Deleted { existed: true }
        );
        // The delete's token raised the fence as a put's does.
        let stale = assert_refused_unchanged(&mut t, at(2_000, fenced("k", "late", "l", 1)));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
    }

    #[test]
    fn a_lease_free_past_the_retention_is_forgotten_and_its_tokens_never_come_back() {
        let mut t = LeaseTable::default();
        assert_eq!(
            t.apply(&at(0, acquire("l", "a", 1_000))),
            granted(1, 1_000, false)
        );
        t.apply(&at(0, fenced("k", "by a", "l", 1)));
        assert_eq!(
            t.apply(&at(1_000, acquire("l", "b", 1_000))),
            granted(2, 2_000, false)
        );
        assert_eq!(
            t.apply(&at(1_500, release("l", "b", 2))),
            Outcome::Released { token: 2 }
        );
        // Free since 1,500; with a retention of 1,000 it is due at 2,500, not before.
        assert_eq!(t.next_forget_ms(1_000), Some(2_500));
        assert_eq!(
            t.apply(&at(
                2_499,
                Op::Forget {
                    retention_ms: 1_000
                }
            )),
            Outcome::Forgot { leases: 0 }
        );
        assert_eq!(
            t.apply(&at(
                2_500,
                Op::Forget {
                    retention_ms: 1_000
                }
            )),
            Outcome::Forgot { leases: 1 }
        );
        assert_eq!(t.lease("l"), None);
        assert_eq!(t.lease_count(), 0);
        assert_eq!(t.forgotten_floor(), 2);
        assert_eq!(t.next_forget_ms(1_000), None);

        // Its old tokens are stale, never unknown; a token above the floor was never handed out.
        let stale = assert_refused_unchanged(&mut t, at(2_500, fenced("k", "late", "l", 1)));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
        let stale = assert_refused_unchanged(&mut t, at(2_500, delete("k", Some(("l", 2)))));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
        let unknown = assert_refused_unchanged(&mut t, at(2_500, fenced("k", "x", "l", 3)));
        assert!(matches!(
            unknown,
            Outcome::UnknownToken {
                latest_token: 2,
                ..
            }
        ));
        assert_eq!(t.row("k"), Some(&b"by a"[..]));

        // A new grant, of it or of a name never seen, starts above the floor.
        assert_eq!(
            t.apply(&at(2_500, acquire("l", "c", 1_000))),
            granted(3, 3_500, false)
        );
        assert_eq!(
            t.apply(&at(2_500, acquire("m", "c", 1_000))),
            granted(3, 3_500, false)
        );
        assert_eq!(
            t.apply(&at(2_500, fenced("k", "by c", "l", 3))),
            Outcome::Written
        );
    }

    #[test]
    fn a_token_is_current_only_while_its_grant_holds() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        let current = TokenCheck::Current {
            holder: "a".into(),
            expires_at_ms: 1_000,
        };
        assert_eq!(t.check_token("l", 1), current);
        assert_eq!(
            t.check_token("l", 2),
            TokenCheck::Unknown { latest_token: 1 }
        );
        t.apply(&at(1_000, Op::Tick));
        assert_eq!(
            t.check_token("l", 1),
            TokenCheck::Stale {
                current_token: 1,
                holder: None
            },
            "expired: no longer current, though no later grant came"
        );
        t.apply(&at(1_000, acquire("l", "b", 1_000)));
        assert_eq!(
            t.check_token("l", 1),
            TokenCheck::Stale {
                current_token: 2,
                holder: Some("b".into())
            }
        );
        assert_eq!(
            t.check_token("never", 1),
            TokenCheck::Unknown { latest_token: 0 }
        );
    }

    #[test]
    fn a_held_lease_is_never_forgotten_and_one_forget_drops_at_most_a_batch() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("held", "a", 100_000)));
        for i in 0..FORGET_BATCH + 5 {
            let name = format!("l{i}");
            t.apply(&at(0, acquire(&name, "a", 10)));
        }
        let forget = || at(50_000, Op::Forget { retention_ms: 0 });
        assert_eq!(
            t.apply(&forget()),
            Outcome::Forgot {
                leases: FORGET_BATCH
            }
        );
        assert_eq!(t.apply(&forget()), Outcome::Forgot { leases: 5 });
        assert_eq!(t.apply(&forget()), Outcome::Forgot { leases: 0 });
        assert_eq!(t.lease_count(), 1);
        assert!(t.lease("held").is_some());
    }

    #[test]
    fn a_clone_shares_the_maps_and_keeps_its_state_while_the_original_changes() {
        let mut t = LeaseTable::default();
        for i in 0..1_000 {
            t.apply(&at(i, acquire(&format!("l{i}"), "a", 60_000)));
        }
        t.apply(&at(1_000, plain("k", "v")));
        let copy = t.clone();
        assert!(
            copy.leases.ptr_eq(&t.leases),
            "a snapshot's clone copies no lease"
        );
        assert!(copy.expiries.ptr_eq(&t.expiries) && copy.rows.ptr_eq(&t.rows));
        let encoded = postcard::to_allocvec(&copy).unwrap();
        t.apply(&at(1_001, acquire("l0", "b", 60_000)));
        t.apply(&at(1_002, acquire("new", "b", 60_000)));
        t.apply(&at(1_003, plain("k", "w")));
        assert!(!copy.leases.ptr_eq(&t.leases));
        assert_eq!(postcard::to_allocvec(&copy).unwrap(), encoded);
        assert_eq!(copy.row("k"), Some(&b"v"[..]));
    }

    #[test]
    fn each_lease_name_is_stored_once_shared_by_its_place_among_the_expiries() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        t.apply(&at(1, acquire("l", "a", 2_000)));
        t.apply(&at(2, release("l", "a", 1)));
        t.apply(&at(3, acquire("l", "b", 1_000)));
        let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
        for table in [&t, &loaded] {
            let (name, _) = table.leases.get_min().unwrap();
            assert_eq!(
                Name::strong_count(name),
                Some(2),
                "the map's key and the expiry's"
            );
        }
    }

    #[test]
    fn the_trees_hold_names_by_a_thin_pointer() {
        // What a lease costs in the B-trees, whose leaves keep room for 16 entries used or
        // not: 16 bytes more for each with an `Arc<str>` name and holder, 8 in the expiries.
        assert_eq!(
            std::mem::size_of::<(Name, Lease)>(),
            40,
            "a lease map entry"
        );
        assert_eq!(std::mem::size_of::<(u64, Name)>(), 16, "an expiry entry");
    }

    #[test]
    fn a_name_is_encoded_and_decoded_as_a_string_is() {
        let name = Name::from("lease-1");
        let as_string = postcard::to_allocvec("lease-1").unwrap();
        assert_eq!(postcard::to_allocvec(&name).unwrap(), as_string);
        assert_eq!(postcard::from_bytes::<Name>(&as_string).unwrap(), name);
        let lease = Lease {
            holder: Some(Name::from("h")),
            token: 7,
            expires_at_ms: 9,
            fence: 8,
        };
        let as_strings = postcard::to_allocvec(&(Some("h".to_string()), 7u64, 9u64, 8u64));
        assert_eq!(postcard::to_allocvec(&lease).unwrap(), as_strings.unwrap());
    }

    /// Creators are the table's last part: a table stored before them loads with none, and a
    /// build before them (whose layout reads up to the session owners and stops) loads a table
    /// that has them, as the same table without.
    #[test]
    fn creators_ride_at_the_end_of_the_table_where_earlier_builds_stop_reading() {
        let mut t = LeaseTable::default();
        let by_a = |op| Op::As {
            identity: "team-a".into(),
            bearer: None,
            op: Box::new(op),
        };
        t.apply(&at(1, by_a(plain("k", "v"))));
        t.apply(&at(1, by_a(acquire("l", "team-a", 1_000))));
        let created = |t: &LeaseTable| (t.rows_created_by("team-a"), t.leases_created_by("team-a"));
        assert_eq!(created(&t), (1, 1));
        let bytes = postcard::to_allocvec(&t).unwrap();
        let earlier: StoredBeforeCreators = postcard::from_bytes(&bytes).unwrap();
        let without = LeaseTable::from(Stored::without_creators(earlier));
        assert_eq!(created(&without), (0, 0));
        assert_eq!(without.row("k"), t.row("k"));
        // Advisory: the digest is the table's without them.
        assert_eq!(without.digest(), t.digest());
        // Two empty maps, a byte each, end a table without creators.
        let earlier_bytes = postcard::to_allocvec(&without).unwrap();
        let stored_earlier = &earlier_bytes[..earlier_bytes.len() - 2];
        assert!(postcard::from_bytes::<LeaseTable>(stored_earlier).is_err());
        assert_eq!(
            LeaseTable::from_older_bytes(stored_earlier).unwrap(),
            without
        );
    }

    #[test]
    fn an_event_shares_the_names_the_table_stores() {
        let mut t = LeaseTable::default();
        let mut events = Vec::new();
        t.apply_noting(&at(0, acquire("l", "h", 1_000)), &mut events);
        t.apply_noting(&at(1, acquire("l", "h", 1_000)), &mut events);
        let renew = Op::Renew {
            leases: vec![Renewal {
                lease: "l".into(),
                holder: "h".into(),
                token: 1,
                ttl_ms: 1_000,
            }],
        };
        t.apply_noting(&at(2, renew), &mut events);
        t.apply_noting(&at(2_000, Op::Tick), &mut events);
        let (name, lease) = t.leases.get_key_value("l").unwrap();
        let (name, holder) = (name.clone(), lease.holder.clone().unwrap());
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(kinds, [Granted, Renewed, Renewed, Expired]);
        for event in &events {
            assert!(Name::ptr_eq(&event.lease, &name), "{event:?}");
            assert!(Name::ptr_eq(&event.holder, &holder), "{event:?}");
        }
        // A released lease keeps no holder, so its release event has a copy of the name.
        events.clear();
        t.apply_noting(&at(2_001, acquire("l", "h", 1_000)), &mut events);
        t.apply_noting(&at(2_002, release("l", "h", 2)), &mut events);
        let released = events.last().unwrap();
        assert_eq!(released.kind, Released);
        assert!(Name::ptr_eq(&released.lease, &name), "{released:?}");
        assert_eq!(&*released.holder, "h");
    }

    #[test]
    fn a_holders_name_is_stored_once_for_its_leases_granted_and_loaded() {
        let mut t = LeaseTable::default();
        for (i, lease) in ["l1", "l2", "l3"].into_iter().enumerate() {
            t.apply(&at(i as u64, acquire(lease, "h", 1_000)));
        }
        t.apply(&at(3, acquire("other", "g", 1_000)));
        let loaded: LeaseTable = postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
        for table in [&t, &loaded] {
            let named = |lease| table.lease(lease).unwrap().holder.clone().unwrap();
            assert!(Name::ptr_eq(&named("l1"), &named("l2")));
            assert!(Name::ptr_eq(&named("l1"), &named("l3")));
            assert!(!Name::ptr_eq(&named("l1"), &named("other")));
        }
    }

    #[test]
    fn a_table_stored_before_forgetting_loads_with_a_floor_of_zero() {
        #[derive(Serialize)]
        struct Old<'a> {
            now_ms: u64,
            #[serde(serialize_with = "crate::encode_map")]
            leases: &'a Map<Name, Lease>,
            #[serde(serialize_with = "crate::encode_map")]
            rows: &'a Map<String, Row>,
            sessions: &'a Sessions,
        }
        let mut t = LeaseTable::default();
        t.apply(&at(5, acquire("l", "a", 1_000)));
        t.apply(&at(5, plain("k", "v")));
        let old = postcard::to_allocvec(&Old {
            now_ms: t.now_ms,
            leases: &t.leases,
            rows: &t.rows,
            sessions: &t.sessions,
        })
        .unwrap();
        assert!(postcard::from_bytes::<LeaseTable>(&old).is_err());
        assert_eq!(LeaseTable::from_older_bytes(&old).unwrap(), t);
    }

    /// `(kind, lease, holder, token, expires_at_ms)` of what `command` noted.
    fn noted(t: &mut LeaseTable, command: Command) -> Vec<(EventKind, String, String, u64, u64)> {
        let mut events = Vec::new();
        t.apply_noting(&command, &mut events);
        events
            .into_iter()
            .map(|e| {
                (
                    e.kind,
                    e.lease.to_string(),
                    e.holder.to_string(),
                    e.token,
                    e.expires_at_ms,
                )
            })
            .collect()
    }

    #[test]
    fn events_note_grants_renewals_releases_and_expiries_when_time_passes_them() {
        use EventKind::*;
        let mut t = LeaseTable::default();
        let ev = |kind, lease: &str, holder: &str, token, at| {
            (kind, lease.to_owned(), holder.to_owned(), token, at)
        };
        assert_eq!(
            noted(&mut t, at(0, acquire("a", "x", 100))),
            [ev(Granted, "a", "x", 1, 100)]
        );
        assert_eq!(
            noted(&mut t, at(10, acquire("b", "y", 50))),
            [ev(Granted, "b", "y", 1, 60)]
        );
        assert_eq!(
            noted(&mut t, at(20, acquire("a", "x", 100))),
            [ev(Renewed, "a", "x", 1, 120)]
        );
        // Refused and plain writes note nothing; time short of an expiry neither.
        assert!(noted(&mut t, at(59, acquire("a", "z", 100))).is_empty());
        assert!(noted(&mut t, at(59, plain("k", "v"))).is_empty());
        // The expiry is noted by the command whose time passes it, before its own event.
        assert_eq!(
            noted(&mut t, at(60, acquire("b", "z", 100))),
            [ev(Expired, "b", "y", 1, 60), ev(Granted, "b", "z", 2, 160)]
        );
        assert_eq!(
            noted(&mut t, at(70, release("b", "z", 2))),
            [ev(Released, "b", "z", 2, 70)]
        );
        // A released lease does not expire later; an expired one is noted once.
        assert_eq!(
            noted(&mut t, at(500, Op::Tick)),
            [ev(Expired, "a", "x", 1, 120)]
        );
        assert!(noted(&mut t, at(900, Op::Tick)).is_empty());
        // Under the manual clock an advance passes the expiries.
        let mut m = LeaseTable::default();
        let manual = |op| Command {
            at_ms: None,
            request: None,
            op,
        };
        noted(&mut m, manual(acquire("c", "x", 100)));
        assert_eq!(
            noted(&mut m, manual(Op::Advance { by_ms: 100 })),
            [ev(Expired, "c", "x", 1, 100)]
        );
    }

    #[test]
    fn a_retry_answered_from_its_session_notes_nothing() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 0);
        let command = Command {
            at_ms: Some(1),
            request: Some(RequestId {
                client,
                sequence: 1,
            }),
            op: acquire("a", "x", 100),
        };
        assert_eq!(noted(&mut t, command.clone()).len(), 1);
        assert!(noted(&mut t, command).is_empty());
    }

    #[test]
    fn lease_expires_exactly_at_now_equal_expires() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_refused_unchanged(&mut t, at(999, acquire("l", "b", 1_000)));
        assert_eq!(
            t.apply(&at(1_000, acquire("l", "b", 1_000))),
            granted(2, 2_000, false)
        );
    }

    #[test]
    fn renew_keeps_the_token_and_extends_from_now() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            t.apply(&at(500, acquire("l", "a", 1_000))),
            granted(1, 1_500, true)
        );
    }

    fn renew(leases: &[(String, String, u64)]) -> Op {
        Op::Renew {
            leases: leases
                .iter()
                .map(|(lease, holder, token)| Renewal {
                    lease: lease.clone(),
                    holder: holder.clone(),
                    token: *token,
                    ttl_ms: 2_000,
                })
                .collect(),
        }
    }

    #[test]
    fn one_renewal_renews_each_lease_its_holder_holds_and_refuses_the_rest_unchanged() {
        let mut t = LeaseTable::default();
        for (lease, holder) in [("a", "h"), ("b", "h"), ("c", "other"), ("d", "h")] {
            t.apply(&at(0, acquire(lease, holder, 1_000)));
        }
        t.apply(&at(0, release("d", "h", 1)));
        t.apply(&at(0, acquire("e", "h", 100)));
        let ask = |lease: &str, token| (lease.to_owned(), "h".to_owned(), token);
        let before: Vec<_> = ["c", "d", "e"].map(|l| t.lease(l).cloned()).into();
        let mut events = Vec::new();
        let outcome = t.apply_noting(
            &at(
                500,
                renew(&[
                    ask("a", 1),
                    ask("b", 2),
                    ask("c", 1),
                    ask("d", 1),
                    ask("e", 1),
                ]),
            ),
            &mut events,
        );
        let until = Renewed::Until {
            expires_at_ms: 2_500,
        };
        let expected = vec![
            until.clone(),
            Renewed::Refused(ReleaseRefusal::WrongToken { current_token: 1 }),
            Renewed::Refused(ReleaseRefusal::HeldByOther {
                holder: "other".into(),
                token: 1,
                expires_at_ms: 1_000,
            }),
            // Released, and expired: a renewal never grants a free lease again.
            Renewed::Refused(ReleaseRefusal::NotHeld),
            Renewed::Refused(ReleaseRefusal::NotHeld),
        ];
        assert_eq!(outcome, Outcome::Renewed(expected));
        assert_eq!(t.lease("a").unwrap().expires_at_ms, 2_500);
        assert_eq!(t.lease("a").unwrap().token, 1, "a renewal keeps the token");
        assert_eq!(t.lease("b").unwrap().expires_at_ms, 1_000);
        let after: Vec<_> = ["c", "d", "e"].map(|l| t.lease(l).cloned()).into();
        assert_eq!(before, after, "a refused lease is unchanged");
        let renewed: Vec<_> = events.iter().map(|e| (e.kind, e.lease.as_str())).collect();
        assert_eq!(
            renewed,
            [(EventKind::Expired, "e"), (EventKind::Renewed, "a")]
        );
        assert_eq!(t.next_expiry_ms(), Some(1_000), "b's expiry, then a's");
    }

    #[test]
    fn renew_by_another_holder_is_refused() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        let outcome = assert_refused_unchanged(&mut t, at(10, acquire("l", "b", 5_000)));
        assert!(matches!(outcome, Outcome::HeldBy { holder, .. } if holder == "a"));
    }

    #[test]
    fn the_same_holder_after_expiry_gets_a_new_token() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            t.apply(&at(1_000, acquire("l", "a", 1_000))),
            granted(2, 2_000, false)
        );
    }

    #[test]
    fn release_needs_the_current_holder_and_token() {
        let mut t = LeaseTable::default();
        assert_eq!(
            assert_refused_unchanged(&mut t, at(0, release("l", "a", 1))),
            Outcome::ReleaseRefused(ReleaseRefusal::NotHeld)
        );
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            assert_refused_unchanged(&mut t, at(1, release("l", "b", 1))),
            Outcome::ReleaseRefused(ReleaseRefusal::HeldByOther {
                holder: "a".into(),
                token: 1,
                expires_at_ms: 1_000
            })
        );
        assert_eq!(
            assert_refused_unchanged(&mut t, at(2, release("l", "a", 7))),
            Outcome::ReleaseRefused(ReleaseRefusal::WrongToken { current_token: 1 })
        );
        assert_eq!(
            t.apply(&at(3, release("l", "a", 1))),
            Outcome::Released { token: 1 }
        );
        // Free at once, and the next grant gets the next token.
        assert_eq!(
            t.apply(&at(4, acquire("l", "b", 1_000))),
            granted(2, 1_004, false)
        );
    }

    #[test]
    fn release_after_expiry_is_refused() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            assert_refused_unchanged(&mut t, at(1_000, release("l", "a", 1))),
            Outcome::ReleaseRefused(ReleaseRefusal::NotHeld)
        );
    }

    #[test]
    fn fenced_put_with_token_equal_to_fence_is_accepted() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(t.apply(&at(1, fenced("k", "1", "l", 1))), Outcome::Written);
        assert_eq!(t.apply(&at(2, fenced("k", "2", "l", 1))), Outcome::Written);
        assert_eq!(t.lease("l").unwrap().fence, 1);
    }

    #[test]
    fn a_grant_fences_the_previous_holder_before_the_successor_writes() {
        let mut t = LeaseTable::default();
        t.apply(&at(0, acquire("l", "a", 1_000)));
        t.apply(&at(1_000, acquire("l", "b", 1_000)));
        let stale = assert_refused_unchanged(&mut t, at(1_001, fenced("k", "a", "l", 1)));
        assert_eq!(stale, Outcome::StaleToken { fence: 2 });
    }

    #[test]
    fn a_token_never_handed_out_is_unknown() {
        let mut t = LeaseTable::default();
        assert_eq!(
            assert_refused_unchanged(&mut t, at(0, fenced("k", "v", "nope", 1))),
            Outcome::UnknownToken {
                lease: "nope".into(),
                latest_token: 0
            }
        );
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            assert_refused_unchanged(&mut t, at(0, fenced("k", "v", "l", 2))),
            Outcome::UnknownToken {
                lease: "l".into(),
                latest_token: 1
            }
        );
    }

    #[test]
    fn a_fenced_put_with_token_zero_on_an_unknown_lease_is_refused_not_a_panic() {
        // Edge validation keeps token 0 out, but a command that reached the log anyway (an old
        // build, a forged peer message) is applied on every replica: it must be a refusal.
        let mut t = LeaseTable::default();
        assert_eq!(
            assert_refused_unchanged(&mut t, at(0, fenced("k", "v", "nope", 0))),
            Outcome::UnknownToken {
                lease: "nope".into(),
                latest_token: 0
            }
        );
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(
            assert_refused_unchanged(&mut t, at(1, fenced("k", "v", "l", 0))),
            Outcome::StaleToken { fence: 1 }
        );
    }

    #[test]
    fn store_time_never_goes_backwards() {
        let mut t = LeaseTable::default();
        t.apply(&at(5_000, Op::Tick));
        t.apply(&at(3_000, Op::Tick));
        assert_eq!(t.now_ms(), 5_000);
        t.apply(&Command {
            at_ms: None,
            request: None,
            op: Op::Advance { by_ms: 15_000 },
        });
        assert_eq!(t.now_ms(), 20_000);
    }

    #[test]
    fn digest_tells_states_apart_and_ignores_how_they_were_reached() {
        let mut a = LeaseTable::default();
        let mut b = LeaseTable::default();
        a.apply(&at(5, plain("k", "v")));
        b.apply(&at(5, plain("k", "x")));
        assert_ne!(a.digest(), b.digest());
        b.apply(&at(5, plain("k", "v")));
        assert_eq!(a.digest(), b.digest());
    }

    #[test]
    fn a_retried_request_is_answered_again_not_applied_twice() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 0);
        let request = Some(RequestId {
            client,
            sequence: 1,
        });
        let put = |at_ms, value: &str| Command {
            at_ms: Some(at_ms),
            request,
            op: fenced("k", value, "l", 1),
        };
        t.apply(&at(0, acquire("l", "a", 1_000)));
        assert_eq!(t.apply(&put(1, "v")), Outcome::Written);
        t.apply(&at(2, acquire("l", "a", 1_000))); // a renewal in between
        let before = t.clone();
        assert_eq!(
            t.apply(&put(3, "v")),
            Outcome::Written,
            "the first answer, again"
        );
        assert_eq!(t.rows, before.rows);
        assert_eq!(t.leases, before.leases);
        // A new sequence number is a new request.
        let next = Command {
            request: Some(RequestId {
                client,
                sequence: 2,
            }),
            ..put(4, "w")
        };
        assert_eq!(t.apply(&next), Outcome::Written);
        assert_eq!(t.row("k"), Some(&b"w"[..]));
    }

    #[test]
    fn a_retry_older_than_the_kept_answers_is_refused_not_applied_again() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 0);
        let command = |sequence, op| Command {
            at_ms: Some(sequence),
            request: Some(RequestId { client, sequence }),
            op,
        };
        let first = command(1, acquire("l", "a", 1_000));
        assert!(matches!(t.apply(&first), Outcome::Granted { token: 1, .. }));
        t.apply(&command(2, release("l", "a", 1)));
        // Enough later requests that the first one's answer is dropped.
        for sequence in 3..3 + crate::limits::SESSION_ANSWERS as u64 {
            t.apply(&command(sequence, plain("k", "v")));
        }
        let before = t.clone();
        // The first acquire, retried late: the lease is free, yet nothing is granted again.
        assert_eq!(t.apply(&first), Outcome::Forgotten);
        assert_eq!(t.leases, before.leases);
        assert_eq!(t.lease("l").unwrap().token, 1);
    }

    #[test]
    fn a_late_retry_after_its_session_expired_is_refused_not_applied_again() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 0);
        let command = |at_ms, sequence, value: &str| Command {
            at_ms: Some(at_ms),
            request: Some(RequestId { client, sequence }),
            op: plain("k", value),
        };
        assert_eq!(t.apply(&command(0, 1, "first")), Outcome::Written);
        assert_eq!(t.apply(&command(1, 2, "second")), Outcome::Written);
        // An hour of store time passes, brought by any command (no lease is held).
        t.apply(&at(SESSION_IDLE_MS + 2, plain("other", "x")));
        assert_eq!(t.session_count(), 0, "the idle session expired");
        // Sequence 1, stuck on a paused node for an hour, reaches the log at last.
        let before = t.clone();
        let late = t.apply(&command(SESSION_IDLE_MS + 3, 1, "first"));
        assert_eq!(late, Outcome::UnknownSession);
        assert_eq!(t.rows, before.rows, "the acknowledged write stays");
        assert_eq!(t.row("k"), Some(&b"second"[..]));
    }

    #[test]
    fn a_request_naming_no_open_session_is_refused() {
        let mut t = LeaseTable::default();
        let stray = Command {
            at_ms: Some(0),
            request: Some(RequestId {
                client: 99,
                sequence: 1,
            }),
            op: plain("k", "v"),
        };
        assert_eq!(
            assert_refused_unchanged(&mut t, stray),
            Outcome::UnknownSession
        );
    }

    #[test]
    fn a_request_id_reused_for_another_operation_is_refused() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 0);
        let request = Some(RequestId {
            client,
            sequence: 1,
        });
        let put = Command {
            at_ms: Some(1),
            request,
            op: plain("k", "v"),
        };
        assert_eq!(t.apply(&put), Outcome::Written);
        let other = Command {
            at_ms: Some(2),
            request,
            op: acquire("l", "a", 1_000),
        };
        let outcome = t.apply(&other);
        assert_eq!(outcome, Outcome::RequestIdReused);
        assert!(t.lease("l").is_none(), "the acquire was not applied");
    }

    #[test]
    fn sessions_expire_by_store_time_with_no_lease_held() {
        let mut t = LeaseTable::default();
        let first = register(&mut t, 0);
        let second = register(&mut t, 10);
        assert_ne!(first, second, "every registration gets a new id");
        let seen = |at_ms, client| Command {
            at_ms: Some(at_ms),
            request: Some(RequestId {
                client,
                sequence: at_ms,
            }),
            op: plain("k", "v"),
        };
        t.apply(&seen(SESSION_IDLE_MS - 1, second));
        assert_eq!(t.session_count(), 2);
        t.apply(&at(SESSION_IDLE_MS, plain("k", "w")));
        assert_eq!(
            t.session_count(),
            1,
            "the first expired an hour after it was seen"
        );
        t.apply(&at(2 * SESSION_IDLE_MS - 1, plain("k", "w")));
        assert_eq!(
            t.session_count(),
            0,
            "the second an hour after its last request"
        );
        // A table loaded from its encoding (a snapshot) expires the same way.
        let third = register(&mut t, 3 * SESSION_IDLE_MS);
        let mut loaded: LeaseTable =
            postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
        assert_eq!(loaded, t);
        loaded.apply(&at(4 * SESSION_IDLE_MS, plain("k", "x")));
        assert_eq!(
            loaded.session_count(),
            0,
            "session {third} expired after load"
        );
    }

    #[test]
    fn next_expiry_ignores_free_and_expired_leases() {
        let mut t = LeaseTable::default();
        assert_eq!(t.next_expiry_ms(), None);
        t.apply(&at(0, acquire("a", "x", 1_000)));
        t.apply(&at(0, acquire("b", "x", 500)));
        assert_eq!(t.next_expiry_ms(), Some(500));
        t.apply(&at(600, Op::Tick));
        assert_eq!(t.next_expiry_ms(), Some(1_000));
        t.apply(&at(600, release("a", "x", 1)));
        assert_eq!(t.next_expiry_ms(), None);
    }

    /// The digest kept up to date by every change equals the one a table loaded from the same
    /// state computes from scratch, after every kind of command.
    #[test]
    fn the_digest_and_held_count_kept_along_equal_those_of_the_state_loaded_afresh() {
        let mut t = LeaseTable::default();
        let mut seed = 7u64;
        let mut next = |below: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
            (seed >> 33) % below
        };
        let mut now = 0;
        // Each registered client and its last sequence.
        let mut clients: Vec<(u64, u64)> = Vec::new();
        // The most leases, rows and sessions the table held at once, and of one identity's
        // leases and rows.
        let mut most = (0, 0, 0, 0, 0);
        // Holders owned by identity `i` (two) and by `j`.
        let holder = |n: u64| ["i", "i/h1", "j/h2"][n as usize].to_string();
        for step in 0..3_000 {
            // Now and then a jump past the sessions' idle time, so that sessions expire.
            now += if step % 1_000 == 499 {
                SESSION_IDLE_MS
            } else {
                next(300)
            };
            let name = format!("l{}", next(8));
            let op = match next(8) {
                // A session at least every 500 commands, one just after each expiry.
                _ if step % 500 == 0 => Op::Register,
                // By the identity that owns the holder, which counts as its creator.
                0 | 1 => {
                    let holder = holder(next(3));
                    Op::As {
                        identity: holder[..1].into(),
                        bearer: None,
                        op: Box::new(acquire(&name, &holder, 200 + next(800))),
                    }
                }
                2 => {
                    let token = t
                        .lease(&name)
                        .map_or(1, |l| l.token)
                        .saturating_sub(next(2));
                    release(&name, &holder(next(3)), token)
                }
                3 => {
                    // The current token, or one before it: accepted, raising the fence, or stale.
                    let token = t
                        .lease(&name)
                        .map_or(1, |l| l.token)
                        .saturating_sub(next(2));
                    fenced(&format!("k{}", next(5)), "v", &name, token)
                }
                4 => plain(&format!("k{}", next(5)), &format!("v{}", next(3))),
                5 => Op::Delete {
                    key: format!("k{}", next(5)),
                    fence: None,
                },
                // Rarely, so that the newest sessions fill past their window of answers.
                6 if next(32) == 0 => Op::Register,
                // Rows an identity creates, and deletes as any other.
                6 if next(2) == 0 => Op::As {
                    identity: "i".into(),
                    bearer: None,
                    op: Box::new(plain(&format!("k{}", next(5)), "w")),
                },
                // Two leases at their current tokens, or one before: renewed or refused.
                6 => renew(&[0, 1].map(|i| {
                    let lease = format!("l{}", (next(8) + i) % 8);
                    let token = t
                        .lease(&lease)
                        .map_or(1, |l| l.token)
                        .saturating_sub(next(2));
                    (lease, holder(next(3)), token.max(1))
                })),
                // Now and then a policy change (off: it decides nothing, but is state).
                // Now and then a session of an identity's own, which takes none of the bare
                // requests below.
                7 if next(16) == 1 => Op::As {
                    identity: "i".into(),
                    bearer: None,
                    op: Box::new(Op::Register),
                },
                7 if next(16) == 0 => Op::Auth(crate::auth::AuthChange::PutRole {
                    name: format!("r{}", next(3)),
                    grants: vec![],
                }),
                _ => Op::Forget { retention_ms: 500 },
            };
            // Most commands carry a request id, so that the newest sessions fill past their
            // window of answers: new, a retry of the one before, or (for another operation) a
            // reused one; some name a session that expired.
            let request = match clients.len() {
                0 => None,
                n if next(4) != 0 => {
                    let newest = n - 1 - next(n.min(2) as u64) as usize;
                    let (client, sequence) = &mut clients[newest];
                    if next(4) != 0 {
                        *sequence += 1;
                    }
                    Some(RequestId {
                        client: *client,
                        sequence: *sequence,
                    })
                }
                _ => None,
            };
            let outcome = t.apply(&Command {
                at_ms: Some(now),
                request,
                op,
            });
            if let Outcome::Registered { client } = outcome {
                clients.push((client, 0));
            }
            most.0 = most.0.max(t.lease_count());
            most.1 = most.1.max(t.row_count());
            most.2 = most.2.max(t.session_count());
            let loaded: LeaseTable =
                postcard::from_bytes(&postcard::to_allocvec(&t).unwrap()).unwrap();
            assert_eq!(
                t.digest(),
                loaded.digest(),
                "step {step}: {} leases, {} sessions",
                t.lease_count(),
                t.session_count()
            );
            assert_eq!(
                t.held_count(),
                loaded.held_count(),
                "step {step}: held, kept and counted"
            );
            let per_identity = |t: &LeaseTable| {
                ["i", "j"].map(|id| (t.leases_created_by(id), t.rows_created_by(id)))
            };
            assert_eq!(per_identity(&t), per_identity(&loaded), "step {step}");
            most.3 = most.3.max(t.leases_created_by("i"));
            most.4 = most.4.max(t.rows_created_by("i"));
            // A creator is kept while what it created is, no longer.
            assert!(
                t.row_creators
                    .map()
                    .keys()
                    .all(|key| t.rows.contains_key(key)),
                "step {step}: a creator outlived its row"
            );
            assert!(
                t.lease_creators
                    .map()
                    .keys()
                    .all(|name| t.leases.contains_key(name)),
                "step {step}: a creator outlived its lease"
            );
        }
        assert!(most.0 > 0 && most.1 > 0 && most.2 > 0, "{most:?}");
        assert!(most.3 > 0 && most.4 > 0, "{most:?}");
    }

    /// A backup's header names the digest of the build that saved it, so `snapshot restore`
    /// keeps accepting every earlier definition. The value is what the build before the
    /// sessions' digest was kept up to date (9f553b7) printed for this table.
    #[test]
    fn a_digest_named_by_an_earlier_build_is_still_recognised() {
        let mut t = LeaseTable::default();
        let client = register(&mut t, 5);
        t.apply(&Command {
            at_ms: Some(6),
            request: Some(RequestId {
                client,
                sequence: 1,
            }),
            op: acquire("l", "a", 1_000),
        });
        t.apply(&at(7, plain("k", "v")));
        assert!(t.older_digests().contains(&0xfad6_91b4_23d2_e898));
        assert!(!t.older_digests().contains(&t.digest()));
    }
}
