//! `LeaseTable::apply`: the one place where the store's state changes.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::lease::{Command, Fence, Op, Outcome, ReleaseRefusal, RequestId};

/// How many answers each client session keeps: far more than a client has in flight.
const SESSION_ANSWERS: usize = 128;
/// A client not heard from for this long in store time is forgotten.
const SESSION_IDLE_MS: u64 = 60 * 60 * 1000;

/// The whole replicated state. `BTreeMap`s, so iteration and serialization are deterministic.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "Stored")]
pub struct LeaseTable {
    /// Store time: the largest stamp or advance applied so far. Never goes backwards.
    now_ms: u64,
    /// Leases are never forgotten, even when free: their token must keep growing.
    leases: BTreeMap<String, Lease>,
    rows: BTreeMap<String, Vec<u8>>,
    /// Recent answers per client: a request retried after a lost answer (a dead connection,
    /// a leader change) gets its first answer back instead of being applied twice.
    sessions: BTreeMap<u64, Session>,
    /// `(expires_at_ms, name)` of every lease with a holder, expired or not: the next expiry
    /// without a scan of every lease. Derived from `leases`, so not stored: rebuilt on load.
    #[serde(skip)]
    expiries: BTreeSet<(u64, String)>,
}

/// What a table stores: everything but what is derived. Same fields, same order.
#[derive(Deserialize)]
struct Stored {
    now_ms: u64,
    leases: BTreeMap<String, Lease>,
    rows: BTreeMap<String, Vec<u8>>,
    sessions: BTreeMap<u64, Session>,
}

impl From<Stored> for LeaseTable {
    fn from(stored: Stored) -> Self {
        let expiries = stored
            .leases
            .iter()
            .filter(|(_, lease)| lease.holder.is_some())
            .map(|(name, lease)| (lease.expires_at_ms, name.clone()))
            .collect();
        LeaseTable {
            now_ms: stored.now_ms,
            leases: stored.leases,
            rows: stored.rows,
            sessions: stored.sessions,
            expiries,
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Session {
    last_seen_ms: u64,
    answers: BTreeMap<u64, Outcome>,
    /// The highest sequence whose answer was dropped to keep `answers` bounded. A request at or
    /// below it without a kept answer is a late retry (a node stopped with it queued, say), and
    /// applying it would apply it twice.
    forgotten_through: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// `None` once released. An expired lease keeps its last holder, so a read can name it.
    pub holder: Option<String>,
    /// The token of the latest grant; 0 for a lease never granted.
    pub token: u64,
    pub expires_at_ms: u64,
    /// The largest token the store has seen for this lease: raised by every grant and by every
    /// accepted fenced put. A fenced put below it is stale.
    pub fence: u64,
}

impl Lease {
    /// Who holds the lease at store time `now_ms`, if anyone.
    pub fn holder_at(&self, now_ms: u64) -> Option<&str> {
        match &self.holder {
            Some(holder) if now_ms < self.expires_at_ms => Some(holder),
            _ => None,
        }
    }
}

/// Keeps `expiries` in step with a lease whose expiry while held goes from `before` to `after`
/// (`None`: no holder).
fn reindex(
    expiries: &mut BTreeSet<(u64, String)>,
    name: &str,
    before: Option<u64>,
    after: Option<u64>,
) {
    if before == after {
        return;
    }
    if let Some(at) = before {
        expiries.remove(&(at, name.to_owned()));
    }
    if let Some(at) = after {
        expiries.insert((at, name.to_owned()));
    }
}

impl LeaseTable {
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    pub fn lease(&self, name: &str) -> Option<&Lease> {
        self.leases.get(name)
    }

    pub fn row(&self, key: &str) -> Option<&[u8]> {
        self.rows.get(key).map(Vec::as_slice)
    }

    /// A fingerprint of the whole state, equal on replicas that applied the same log: FNV-1a
    /// over the table's canonical encoding (stable across processes and builds, unlike std's
    /// hasher).
    pub fn digest(&self) -> u64 {
        let bytes = postcard::to_allocvec(self).unwrap_or_default();
        bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
            (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
        })
    }

    /// The earliest expiry of a lease that is still held: when the next tick is due.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        // Held at `now_ms` means expiring after it.
        let after_now = (self.now_ms.saturating_add(1), String::new());
        self.expiries.range(after_now..).next().map(|(at, _)| *at)
    }

    /// Applies one logged command. Pure: the same table and command give the same outcome on
    /// every replica. A refusal changes no lease and no row; the clock still moves to the
    /// command's stamp, because time passing is not the command's doing.
    pub fn apply(&mut self, command: &Command) -> Outcome {
        if let Some(at_ms) = command.at_ms {
            // Invariant: store time never goes backwards, whatever a (new) leader stamped.
            self.now_ms = self.now_ms.max(at_ms);
        }
        let Some(request) = command.request else {
            return self.apply_op(&command.op);
        };
        if let Some(answer) = self.answered(request) {
            return answer.clone();
        }
        if self
            .sessions
            .get(&request.client)
            .is_some_and(|s| request.sequence <= s.forgotten_through)
        {
            return Outcome::Forgotten;
        }
        let outcome = self.apply_op(&command.op);
        let session = self.sessions.entry(request.client).or_default();
        session.last_seen_ms = self.now_ms;
        session.answers.insert(request.sequence, outcome.clone());
        while session.answers.len() > SESSION_ANSWERS {
            if let Some((sequence, _)) = session.answers.pop_first() {
                session.forgotten_through = session.forgotten_through.max(sequence);
            }
        }
        outcome
    }

    /// The answer already given to `request`, if it was applied before.
    fn answered(&self, request: RequestId) -> Option<&Outcome> {
        self.sessions
            .get(&request.client)?
            .answers
            .get(&request.sequence)
    }

    fn apply_op(&mut self, op: &Op) -> Outcome {
        match op {
            Op::Acquire {
                lease,
                holder,
                ttl_ms,
            } => self.acquire(lease, holder, *ttl_ms),
            Op::Release {
                lease,
                holder,
                token,
            } => self.release(lease, holder, *token),
            Op::Put { key, value, fence } => self.put(key, value, fence.as_ref()),
            Op::Advance { by_ms } => {
                self.now_ms = self.now_ms.saturating_add(*by_ms);
                Outcome::Advanced
            }
            Op::Tick => {
                // Ticks are rare (a lease falls due): the place to forget idle clients.
                let now_ms = self.now_ms;
                self.sessions
                    .retain(|_, s| s.last_seen_ms.saturating_add(SESSION_IDLE_MS) > now_ms);
                Outcome::Ticked
            }
        }
    }

    fn acquire(&mut self, name: &str, holder: &str, ttl_ms: u64) -> Outcome {
        let now_ms = self.now_ms;
        let expires_at_ms = now_ms.saturating_add(ttl_ms);
        if let Some(lease) = self.leases.get_mut(name) {
            match lease.holder_at(now_ms) {
                Some(current) if current == holder => {
                    let before = lease.expires_at_ms;
                    lease.expires_at_ms = expires_at_ms;
                    reindex(&mut self.expiries, name, Some(before), Some(expires_at_ms));
                    return Outcome::Granted {
                        token: lease.token,
                        expires_at_ms,
                        renewed: true,
                    };
                }
                Some(current) => {
                    return Outcome::HeldBy {
                        holder: current.to_owned(),
                        token: lease.token,
                        expires_at_ms: lease.expires_at_ms,
                    };
                }
                None => {}
            }
        }
        let lease = self.leases.entry(name.to_owned()).or_default();
        let before = lease.holder.is_some().then_some(lease.expires_at_ms);
        let token = lease.token + 1;
        debug_assert!(
            token > lease.fence,
            "a new grant's token must exceed the fence"
        );
        *lease = Lease {
            holder: Some(holder.to_owned()),
            token,
            expires_at_ms,
            fence: token,
        };
        reindex(&mut self.expiries, name, before, Some(expires_at_ms));
        Outcome::Granted {
            token,
            expires_at_ms,
            renewed: false,
        }
    }

    fn release(&mut self, name: &str, holder: &str, token: u64) -> Outcome {
        let now_ms = self.now_ms;
        let Some(lease) = self.leases.get_mut(name) else {
            return Outcome::ReleaseRefused(ReleaseRefusal::NotHeld);
        };
        match lease.holder_at(now_ms) {
            None => Outcome::ReleaseRefused(ReleaseRefusal::NotHeld),
            Some(current) if current != holder => {
                Outcome::ReleaseRefused(ReleaseRefusal::HeldByOther {
                    holder: current.to_owned(),
                    token: lease.token,
                    expires_at_ms: lease.expires_at_ms,
                })
            }
            Some(_) if token != lease.token => {
                Outcome::ReleaseRefused(ReleaseRefusal::WrongToken {
                    current_token: lease.token,
                })
            }
            Some(_) => {
                let before = lease.expires_at_ms;
                lease.holder = None;
                // Free at once: the next acquire must not wait for the old expiry.
                lease.expires_at_ms = now_ms;
                reindex(&mut self.expiries, name, Some(before), None);
                Outcome::Released { token }
            }
        }
    }

    fn put(&mut self, key: &str, value: &[u8], fence: Option<&Fence>) -> Outcome {
        if let Some(Fence { lease: name, token }) = fence {
            let latest_token = self.leases.get(name).map_or(0, |lease| lease.token);
            if *token > latest_token {
                return Outcome::UnknownToken {
                    lease: name.clone(),
                    latest_token,
                };
            }
            // Total, never a panic: a committed command is applied on every replica and on every
            // replay, so one that crashed here would crash them all, forever. Token 0 on a lease
            // never granted gets here past the check above (0 is not above 0).
            let Some(lease) = self.leases.get_mut(name) else {
                return Outcome::UnknownToken {
                    lease: name.clone(),
                    latest_token,
                };
            };
            if *token < lease.fence {
                return Outcome::StaleToken { fence: lease.fence };
            }
            lease.fence = *token;
        }
        self.rows.insert(key.to_owned(), value.to_vec());
        Outcome::Written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let request = Some(RequestId {
            client: 7,
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
                client: 7,
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
        let command = |sequence, op| Command {
            at_ms: Some(sequence),
            request: Some(RequestId {
                client: 7,
                sequence,
            }),
            op,
        };
        let first = command(1, acquire("l", "a", 1_000));
        assert!(matches!(t.apply(&first), Outcome::Granted { token: 1, .. }));
        t.apply(&command(2, release("l", "a", 1)));
        // Enough later requests that the first one's answer is dropped.
        for sequence in 3..3 + SESSION_ANSWERS as u64 {
            t.apply(&command(sequence, plain("k", "v")));
        }
        let before = t.clone();
        // The first acquire, retried late: the lease is free, yet nothing is granted again.
        assert_eq!(t.apply(&first), Outcome::Forgotten);
        assert_eq!(t.leases, before.leases);
        assert_eq!(t.lease("l").unwrap().token, 1);
    }

    #[test]
    fn idle_sessions_are_forgotten_on_a_tick() {
        let mut t = LeaseTable::default();
        let request = Some(RequestId {
            client: 7,
            sequence: 1,
        });
        t.apply(&Command {
            at_ms: Some(0),
            request,
            op: plain("k", "v"),
        });
        t.apply(&at(SESSION_IDLE_MS - 1, Op::Tick));
        assert_eq!(t.sessions.len(), 1);
        t.apply(&at(SESSION_IDLE_MS, Op::Tick));
        assert!(t.sessions.is_empty());
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

    mod model {
        //! A property test against a deliberately naive model: every lease is a list of grants,
        //! and every question is answered by scanning that history.
        use super::*;
        use proptest::prelude::*;

        #[derive(Default)]
        struct Model {
            now_ms: u64,
            /// Per lease: (holder, token, expires_at_ms, released).
            grants: BTreeMap<String, Vec<(String, u64, u64, bool)>>,
            /// Per lease: every token accepted on a fenced put.
            fenced_tokens: BTreeMap<String, Vec<u64>>,
            rows: BTreeMap<String, Vec<u8>>,
        }

        impl Model {
            fn current(&self, lease: &str) -> Option<&(String, u64, u64, bool)> {
                self.grants
                    .get(lease)
                    .and_then(|g| g.last())
                    .filter(|(_, _, exp, released)| !released && self.now_ms < *exp)
            }
            fn seen(&self, lease: &str) -> u64 {
                let granted = self.grants.get(lease).into_iter().flatten().map(|g| g.1);
                let fenced = self.fenced_tokens.get(lease).into_iter().flatten().copied();
                granted.chain(fenced).max().unwrap_or(0)
            }
            fn apply(&mut self, c: &Command) -> Outcome {
                if let Some(at) = c.at_ms {
                    self.now_ms = self.now_ms.max(at);
                }
                match &c.op {
                    Op::Acquire {
                        lease,
                        holder,
                        ttl_ms,
                    } => {
                        let exp = self.now_ms + ttl_ms;
                        if let Some((h, tok, e, _)) = self.current(lease).cloned() {
                            if &h != holder {
                                return Outcome::HeldBy {
                                    holder: h,
                                    token: tok,
                                    expires_at_ms: e,
                                };
                            }
                            self.grants.get_mut(lease).unwrap().last_mut().unwrap().2 = exp;
                            return granted(tok, exp, true);
                        }
                        let token = self.grants.get(lease).map_or(0, |g| g.len() as u64) + 1;
                        self.grants.entry(lease.clone()).or_default().push((
                            holder.clone(),
                            token,
                            exp,
                            false,
                        ));
                        granted(token, exp, false)
                    }
                    Op::Release {
                        lease,
                        holder,
                        token,
                    } => match self.current(lease).cloned() {
                        None => Outcome::ReleaseRefused(ReleaseRefusal::NotHeld),
                        Some((h, t, e, _)) if &h != holder => {
                            Outcome::ReleaseRefused(ReleaseRefusal::HeldByOther {
                                holder: h,
                                token: t,
                                expires_at_ms: e,
                            })
                        }
                        Some((_, t, _, _)) if t != *token => {
                            Outcome::ReleaseRefused(ReleaseRefusal::WrongToken { current_token: t })
                        }
                        Some(_) => {
                            self.grants.get_mut(lease).unwrap().last_mut().unwrap().3 = true;
                            Outcome::Released { token: *token }
                        }
                    },
                    Op::Put { key, value, fence } => {
                        if let Some(Fence { lease, token }) = fence {
                            let handed_out = self.grants.get(lease).map_or(0, |g| g.len() as u64);
                            // Tokens start at 1: a lease that never granted one knows none.
                            if handed_out == 0 || *token > handed_out {
                                return Outcome::UnknownToken {
                                    lease: lease.clone(),
                                    latest_token: handed_out,
                                };
                            }
                            let seen = self.seen(lease);
                            if *token < seen {
                                return Outcome::StaleToken { fence: seen };
                            }
                            self.fenced_tokens
                                .entry(lease.clone())
                                .or_default()
                                .push(*token);
                        }
                        self.rows.insert(key.clone(), value.clone());
                        Outcome::Written
                    }
                    Op::Advance { by_ms } => {
                        self.now_ms += by_ms;
                        Outcome::Advanced
                    }
                    Op::Tick => Outcome::Ticked,
                }
            }
        }

        fn command() -> impl Strategy<Value = Command> {
            let lease = prop::sample::select(vec!["l1", "l2"]);
            let who = prop::sample::select(vec!["a", "b", "c"]);
            let op = prop_oneof![
                (lease.clone(), who.clone(), 100u64..3_000)
                    .prop_map(|(l, h, ttl)| acquire(l, h, ttl)),
                (lease.clone(), who.clone(), 1u64..5).prop_map(|(l, h, t)| release(l, h, t)),
                // From 0: apply must be total even on tokens edge validation refuses.
                (prop::sample::select(vec!["k1", "k2"]), lease, 0u64..5)
                    .prop_map(|(k, l, t)| fenced(k, "v", l, t)),
                prop::sample::select(vec!["k1", "k2"]).prop_map(|k| plain(k, "p")),
                (1u64..2_000).prop_map(|by_ms| Op::Advance { by_ms }),
                Just(Op::Tick),
            ];
            (prop::option::of(0u64..20_000), op).prop_map(|(at_ms, op)| Command {
                at_ms,
                request: None,
                op,
            })
        }

        proptest! {
            #[test]
            fn table_agrees_with_the_model(commands in prop::collection::vec(command(), 1..80)) {
                let mut table = LeaseTable::default();
                let mut model = Model::default();
                let mut last_token: BTreeMap<String, u64> = BTreeMap::new();
                for c in &commands {
                    let before = table.clone();
                    let outcome = table.apply(c);
                    prop_assert_eq!(&outcome, &model.apply(c), "command {:?}", c);
                    prop_assert!(table.now_ms() >= before.now_ms(), "store time went backwards");
                    if !outcome.accepted() {
                        prop_assert_eq!(&table.leases, &before.leases, "refusal changed a lease");
                        prop_assert_eq!(&table.rows, &before.rows, "refusal changed a row");
                    }
                    for (name, lease) in &table.leases {
                        let last = last_token.entry(name.clone()).or_default();
                        prop_assert!(lease.token >= *last, "token of {} went backwards", name);
                        *last = lease.token;
                    }
                    prop_assert_eq!(&table.rows, &model.rows);
                    // The expiry index answers what a scan of every lease would.
                    let scanned = table
                        .leases
                        .values()
                        .filter(|lease| lease.holder_at(table.now_ms()).is_some())
                        .map(|lease| lease.expires_at_ms)
                        .min();
                    prop_assert_eq!(table.next_expiry_ms(), scanned);
                }
                // A table loaded from its encoding (a snapshot) rebuilds the same index.
                let bytes = postcard::to_allocvec(&table).unwrap();
                let loaded: LeaseTable = postcard::from_bytes(&bytes).unwrap();
                prop_assert_eq!(&loaded, &table);
            }
        }
    }
}
