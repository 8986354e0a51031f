//! Fencing and mutual exclusion, judged on the replayed log on their own terms: these do not
//! trust the table that produced the outcomes.

use std::collections::BTreeMap;

use crate::history::{Anomaly, Completion, Operation, Replayed, Request};
use crate::limits::ROUNDING_NS;
use leasehold_core::{Fence, Op, Outcome, Renewal, Renewed};

/// The leases a renewal renewed, each with the expiry it logged.
fn renewed<'a>(op: &'a Op, outcome: &'a Outcome) -> impl Iterator<Item = (&'a Renewal, u64)> {
    let (asked, answered) = match (op, outcome) {
        (Op::Renew { leases }, Outcome::Renewed(answers)) => {
            (leases.as_slice(), answers.as_slice())
        }
        _ => (&[][..], &[][..]),
    };
    asked
        .iter()
        .zip(answered)
        .filter_map(|(renewal, answer)| match answer {
            Renewed::Until { expires_at_ms } => Some((renewal, *expires_at_ms)),
            Renewed::Refused(_) => None,
        })
}

/// Tokens of successive grants of a lease strictly increase; a renewal keeps the current token;
/// no fenced put or delete is accepted with a token older than one granted or accepted before it (so a
/// holder paused past its expiry never lands a write after its successor's grant).
pub fn fencing(applied: &[Replayed]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let mut granted: BTreeMap<&str, u64> = BTreeMap::new();
    let mut accepted: BTreeMap<&str, u64> = BTreeMap::new();
    // A retry repeats its first answer; it grants and writes nothing.
    for a in applied.iter().filter(|a| !a.retry) {
        for (Renewal { lease, token, .. }, _) in renewed(&a.op, &a.outcome) {
            let latest = granted.get(lease.as_str()).copied().unwrap_or(0);
            if *token != latest {
                anomalies.push(Anomaly::new(
                    "fencing",
                    format!("a renewal of {lease:?} at index {} renewed token {token}, but the grant is {latest}", a.index),
                ));
            }
        }
        match (&a.op, &a.outcome) {
            (Op::Acquire { lease, .. }, Outcome::Granted { token, renewed, .. }) => {
                let latest = granted.entry(lease).or_insert(0);
                if *renewed && token != latest {
                    anomalies.push(Anomaly::new(
                        "fencing",
                        format!("a renewal of {lease:?} at index {} kept token {token}, but the grant is {latest}", a.index),
                    ));
                }
                if !renewed && token <= latest {
                    anomalies.push(Anomaly::new(
                        "fencing",
                        format!(
                            "the grant of {lease:?} at index {} handed out token {token}, not above {latest}",
                            a.index
                        ),
                    ));
                }
                *latest = (*latest).max(*token);
            }
            (
                Op::Put {
                    fence: Some(Fence { lease, token }),
                    ..
                },
                Outcome::Written,
            )
            | (
                Op::Delete {
                    fence: Some(Fence { lease, token }),
                    ..
                },
                Outcome::Deleted { .. },
            ) => {
                let newest = granted.get(lease.as_str()).copied().unwrap_or(0);
                let seen = accepted.entry(lease).or_insert(0);
                if *token < newest || token < seen {
                    anomalies.push(Anomaly::new(
                        "fencing",
                        format!(
                            "a fenced write on {lease:?} with token {token} was accepted at index {}, \
                             after token {} was granted or accepted: a stale token got through",
                            a.index,
                            newest.max(*seen)
                        ),
                    ));
                }
                *seen = (*seen).max(*token);
            }
            _ => {}
        }
    }
    anomalies
}

/// No two grants of a lease overlap in store time: a grant starts no earlier than the previous
/// holder's expiry (or release).
pub fn mutual_exclusion(applied: &[Replayed]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    // Per lease: who holds it and until when, in store time.
    let mut held: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    for a in applied.iter().filter(|a| !a.retry) {
        for (Renewal { lease, holder, .. }, expires_at_ms) in renewed(&a.op, &a.outcome) {
            match held.get_mut(lease.as_str()) {
                Some((current, until_ms)) if current == holder && *until_ms > a.store_time_ms => {
                    *until_ms = expires_at_ms;
                }
                _ => anomalies.push(Anomaly::new(
                    "mutual exclusion",
                    format!(
                        "{holder:?} renewed {lease:?} at store time {} (index {}) without holding it",
                        a.store_time_ms, a.index
                    ),
                )),
            }
        }
        match (&a.op, &a.outcome) {
            (
                Op::Acquire { lease, holder, .. },
                Outcome::Granted {
                    expires_at_ms,
                    renewed,
                    ..
                },
            ) => {
                if let Some((previous, until_ms)) = held.get(lease.as_str()) {
                    if !renewed && *until_ms > a.store_time_ms {
                        anomalies.push(Anomaly::new(
                            "mutual exclusion",
                            format!(
                                "{holder:?} was granted {lease:?} at store time {} (index {}) while {previous:?} held it until {until_ms}",
                                a.store_time_ms, a.index
                            ),
                        ));
                    }
                }
                held.insert(lease, (holder, *expires_at_ms));
            }
            (Op::Release { lease, .. }, Outcome::Released { .. }) => {
                if let Some((_, until_ms)) = held.get_mut(lease.as_str()) {
                    *until_ms = (*until_ms).min(a.store_time_ms);
                }
            }
            _ => {}
        }
    }
    anomalies
}

/// Who a lease was last granted to, and what its holder was told.
struct Holding<'a> {
    holder: &'a str,
    token: u64,
    /// `None` until an acknowledged grant or renewal told the holder it may act.
    promise: Option<Promise>,
}

#[derive(Clone, Copy)]
struct Promise {
    /// The holder's request was sent at this instant of the history's clock, plus the TTL.
    until_ns: u64,
    /// The grant or renewal that promised it, and the store-time expiry it logged.
    index: u64,
    expires_at_ms: u64,
}

/// The writes that were answered, by where in the log they were applied.
fn acknowledged_writes(history: &[Operation]) -> BTreeMap<(u64, u32), &Operation> {
    history
        .iter()
        .filter_map(|op| match op.completion {
            Completion::Ok {
                log_index,
                position,
                ..
            } if op.is_write() => Some(((log_index, position), op)),
            _ => None,
        })
        .collect()
}

/// What an acknowledged write asked, as its client sent it: the leader logs every grant and
/// renewal held the grant margin longer than asked (`Op::held_longer`), and a holder counts
/// only the TTL it asked, from its send. The logged op where the answer was lost.
fn asked<'a>(a: &'a Replayed, ack: Option<&&'a Operation>) -> &'a Op {
    match ack.map(|op| &op.request) {
        Some(Request::Write(sent)) => sent,
        _ => &a.op,
    }
}

/// What entry `a`, acknowledged as `ack`, told its holder: that it may act `ttl_ms` (as asked)
/// from its send. Nothing if its answer was lost.
fn promise(
    a: &Replayed,
    ack: Option<&&Operation>,
    ttl_ms: u64,
    expires_at_ms: u64,
) -> Option<Promise> {
    ack.map(|op| Promise {
        until_ns: op.invoked_ns + ttl_ms * 1_000_000,
        index: a.index,
        expires_at_ms,
    })
}

/// What the leases a renewal renewed promise their holders, as a renewing acquire does: the
/// answer, or its loss, is what each holder knows.
fn promise_renewals(held: &mut BTreeMap<&str, Holding>, a: &Replayed, ack: Option<&&Operation>) {
    for (renewal, expires_at_ms) in renewed(asked(a, ack), &a.outcome) {
        if let Some(holding) = held.get_mut(renewal.lease.as_str()) {
            holding.promise = promise(a, ack, renewal.ttl_ms, expires_at_ms);
        }
    }
}

/// The anomaly when `holder` was granted `lease` (token `token`, by `a`, acknowledged as `ack`)
/// before the promise made to `previous`, another holder, ran out.
fn granted_early(
    previous: &Holding,
    lease: &str,
    holder: &str,
    token: u64,
    a: &Replayed,
    ack: Option<&&Operation>,
) -> Option<Anomaly> {
    let (promised, op) = (previous.promise?, ack?);
    if previous.holder == holder || op.completed_ns + ROUNDING_NS >= promised.until_ns {
        return None;
    }
    Some(Anomaly::new(
        "real-time exclusion",
        format!(
            "{holder:?} was granted {lease:?} (token {token}, index {}, store time {}) at {} ns, \
             but {:?} (token {}) had been promised it until {} ns (by index {}, expiring at store \
             time {}): {} ms early",
            a.index,
            a.store_time_ms,
            op.completed_ns,
            previous.holder,
            previous.token,
            promised.until_ns,
            promised.index,
            promised.expires_at_ms,
            (promised.until_ns - op.completed_ns) / 1_000_000
        ),
    ))
}

/// The README's headline claim, in real time as the clients measured it: a grant of a lease to a
/// new holder completes no earlier than the previous holder's acquire (or renewal) was sent plus
/// its TTL, unless that holder released it in between. Judged from the history's clock, not from
/// the store time in the log, so a leader whose clock ran fast fails it.
///
/// Only what the holders knew counts: a grant or renewal whose answer was lost (indeterminate)
/// promised its client nothing, and a renewal replaces what the grant promised (its TTL may be
/// shorter).
pub fn real_time_exclusion(history: &[Operation], applied: &[Replayed]) -> Vec<Anomaly> {
    let acknowledged = acknowledged_writes(history);
    let mut anomalies = Vec::new();
    // Per lease: the holder the store last granted it to, its token, and until when (in the
    // history's nanoseconds) that holder was told it may act; `None` until it was told.
    let mut held: BTreeMap<&str, Holding> = BTreeMap::new();
    for a in applied.iter().filter(|a| !a.retry) {
        let ack = acknowledged.get(&(a.index, a.position));
        promise_renewals(&mut held, a, ack);
        match (&a.op, &a.outcome) {
            (
                Op::Acquire {
                    lease,
                    holder,
                    ttl_ms,
                },
                Outcome::Granted {
                    token,
                    renewed,
                    expires_at_ms,
                },
            ) => {
                let asked_ms = match asked(a, ack) {
                    Op::Acquire { ttl_ms, .. } => ttl_ms,
                    _ => ttl_ms,
                };
                let promise = promise(a, ack, *asked_ms, *expires_at_ms);
                if *renewed {
                    // A renewal sets the expiry to its own send plus its own TTL, shorter or
                    // longer than before. Answered, it is what the holder was told; its answer
                    // lost, the holder cannot know which, and nor can this check: it judges the
                    // lease again from the next answered grant or renewal.
                    if let Some(holding) = held.get_mut(lease.as_str()) {
                        holding.promise = promise;
                    }
                    continue;
                }
                let previous = held.get(lease.as_str());
                if let Some(early) =
                    previous.and_then(|p| granted_early(p, lease, holder, *token, a, ack))
                {
                    anomalies.push(early);
                }
                held.insert(
                    lease,
                    Holding {
                        holder,
                        token: *token,
                        promise,
                    },
                );
            }
            (Op::Release { lease, .. }, Outcome::Released { .. }) => {
                held.remove(lease.as_str());
            }
            _ => {}
        }
    }
    anomalies
}
