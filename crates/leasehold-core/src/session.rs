//! Client sessions, as in the Raft dissertation (section 6.3): a client registers through the
//! log and gets its id from the state machine; each of its requests carries that id and a
//! sequence number, so a retry of an applied request is answered, never applied twice.
//!
//! A request whose session is unknown or has expired is refused, never applied: the store can
//! no longer tell a late retry from a new request, and applying a late retry (a forward batch
//! held by a paused node, a suspended VM) could undo what was acknowledged since. Sessions
//! expire by store time, on every command, so their number stays bounded by the clients seen in
//! the last [`SESSION_IDLE_MS`] whether or not any lease is held.

use serde::{Deserialize, Serialize};

use super::kept_answers::{Kept, KeptAnswers};
use super::limits::{SESSION_ANSWERS, SESSION_IDLE_MS};
use super::{Map, Op, Outcome, RequestId, Set};

/// Every live session. Ordered maps, so iteration and serialization are deterministic;
/// persistent ones, so that the table's clone for a snapshot is cheap (see [`Map`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct Sessions {
    /// The id the next registration gets; ids are never reused.
    next_client: u64,
    #[serde(serialize_with = "crate::encode_map")]
    by_client: Map<u64, Session>,
    /// `(last_seen_ms, client)` of every session: the next to expire without a scan. Derived
    /// from `by_client`, so not stored: rebuilt on load.
    #[serde(skip)]
    idle: Set<(u64, u64)>,
    /// The sum (wrapping) of every session's [`meta_hash`] and every kept answer's
    /// [`answer_hash`], kept at every change, so that the table's digest costs the same
    /// however many sessions there are. Derived: rebuilt on load.
    #[serde(skip)]
    sum: u64,
}

/// A session's share of the digest, but for its answers.
fn meta_hash(client: u64, session: &Session) -> u64 {
    let meta = (client, session.last_seen_ms, session.forgotten_through);
    super::fnv1a_of(&meta)
}

/// One kept answer's share of the digest.
fn answer_hash(client: u64, sequence: u64, kept: &Kept) -> u64 {
    super::fnv1a_of(&(client, sequence, kept))
}

/// A whole session's share of the digest.
fn session_hash(client: u64, session: &Session) -> u64 {
    session
        .answers
        .iter()
        .fold(meta_hash(client, session), |sum, (sequence, kept)| {
            sum.wrapping_add(answer_hash(client, sequence, kept))
        })
}

/// What a `Sessions` stores: everything but what is derived. Same fields, same order.
#[derive(Deserialize)]
struct Stored {
    next_client: u64,
    #[serde(deserialize_with = "crate::decode_map")]
    by_client: Map<u64, Session>,
}

impl Sessions {
    /// For a cluster restored from a backup: no session goes on (the old cluster may have
    /// answered requests of each after the save, which a retry here would apply again), and
    /// ids start `gap` past the saved ones, past those the old cluster handed out since.
    pub fn restored(&mut self, gap: u64) {
        self.by_client.clear();
        self.idle.clear();
        self.sum = 0;
        self.next_client = self.next_client.saturating_add(gap);
    }
}

impl From<Stored> for Sessions {
    fn from(stored: Stored) -> Self {
        let idle = stored
            .by_client
            .iter()
            .map(|(client, s)| (s.last_seen_ms, *client))
            .collect();
        let sum = stored.by_client.iter().fold(0u64, |sum, (client, s)| {
            sum.wrapping_add(session_hash(*client, s))
        });
        Sessions {
            next_client: stored.next_client,
            by_client: stored.by_client,
            idle,
            sum,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    last_seen_ms: u64,
    /// Per sequence: the fingerprint of the operation and the answer it got.
    answers: KeptAnswers,
    /// The highest sequence whose answer was dropped to keep `answers` bounded. A request at or
    /// below it without a kept answer is a late retry, and applying it would apply it twice.
    forgotten_through: u64,
}

/// What to do with a request that names a session.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    /// New: apply it, then [`Sessions::record`] the answer.
    Apply,
    /// Answer without applying: a retry's first answer, or a refusal.
    Answer(Outcome),
}

/// A stable fingerprint of an operation (FNV-1a over its canonical encoding), so a request id
/// reused for another operation is told apart from a retry.
pub fn fingerprint(op: &Op) -> u64 {
    super::fnv1a_of(op)
}

impl Sessions {
    /// Opens a session at store time `now_ms` and returns its id.
    pub fn register(&mut self, now_ms: u64) -> u64 {
        self.next_client += 1;
        let client = self.next_client;
        let session = Session {
            last_seen_ms: now_ms,
            ..Session::default()
        };
        self.sum = self.sum.wrapping_add(meta_hash(client, &session));
        self.by_client.insert(client, session);
        self.idle.insert((now_ms, client));
        client
    }

    /// Drops every session idle for [`SESSION_IDLE_MS`] at store time `now_ms`, telling
    /// `dropped` each one's id.
    pub fn expire(&mut self, now_ms: u64, mut dropped: impl FnMut(u64)) {
        while let Some(&(last_seen_ms, client)) = self.idle.get_min() {
            if last_seen_ms.saturating_add(SESSION_IDLE_MS) > now_ms {
                break;
            }
            self.idle.remove_min();
            if let Some(session) = self.by_client.remove(&client) {
                self.sum = self.sum.wrapping_sub(session_hash(client, &session));
                dropped(client);
            }
        }
    }

    /// Closes session `client`, as its expiry would: false if it was not open.
    pub fn close(&mut self, client: u64) -> bool {
        let Some(session) = self.by_client.remove(&client) else {
            return false;
        };
        self.idle.remove(&(session.last_seen_ms, client));
        self.sum = self.sum.wrapping_sub(session_hash(client, &session));
        true
    }

    /// Decides what `request` for the operation with `fingerprint` gets, and marks its session
    /// seen at `now_ms`. Call [`Sessions::expire`] first.
    pub fn admit(&mut self, request: RequestId, fingerprint: u64, now_ms: u64) -> Admission {
        let Some(session) = self.by_client.get_mut(&request.client) else {
            return Admission::Answer(Outcome::UnknownSession);
        };
        if session.last_seen_ms != now_ms {
            self.idle.remove(&(session.last_seen_ms, request.client));
            self.idle.insert((now_ms, request.client));
            let before = meta_hash(request.client, session);
            session.last_seen_ms = now_ms;
            self.sum = self
                .sum
                .wrapping_sub(before)
                .wrapping_add(meta_hash(request.client, session));
        }
        match session.answers.get(request.sequence) {
            Some((kept, answer)) if *kept == fingerprint => Admission::Answer(answer.clone()),
            Some(_) => Admission::Answer(Outcome::RequestIdReused),
            None if request.sequence <= session.forgotten_through => {
                Admission::Answer(Outcome::Forgotten)
            }
            None => Admission::Apply,
        }
    }

    /// Keeps the answer to an admitted request, for its retries.
    pub fn record(&mut self, request: RequestId, fingerprint: u64, outcome: &Outcome) {
        let Some(session) = self.by_client.get_mut(&request.client) else {
            return; // Admitted only with a session; nothing between admit and record drops it.
        };
        let client = request.client;
        let mut sum = self.sum.wrapping_sub(meta_hash(client, session));
        let kept = (fingerprint, outcome.clone());
        sum = sum.wrapping_add(answer_hash(client, request.sequence, &kept));
        let mut forgotten_through = session.forgotten_through;
        let replaced = session.answers.keep(
            request.sequence,
            kept,
            SESSION_ANSWERS,
            |sequence, dropped| {
                sum = sum.wrapping_sub(answer_hash(client, sequence, &dropped));
                forgotten_through = forgotten_through.max(sequence);
            },
        );
        if let Some(replaced) = replaced {
            // Not reached: `admit` answers a kept sequence without applying it.
            sum = sum.wrapping_sub(answer_hash(client, request.sequence, &replaced));
        }
        session.forgotten_through = forgotten_through;
        self.sum = sum.wrapping_add(meta_hash(client, session));
    }

    /// What the table's digest takes of the sessions: the next id, how many there are, and
    /// the sum of their shares.
    pub(super) fn digest_parts(&self) -> (u64, usize, u64) {
        (self.next_client, self.by_client.len(), self.sum)
    }

    pub(super) fn len(&self) -> usize {
        self.by_client.len()
    }
}
