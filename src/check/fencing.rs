//! Fencing and mutual exclusion, judged on the replayed log on their own terms: these do not
//! trust the table that produced the outcomes.

use std::collections::BTreeMap;

use super::history::{Anomaly, Applied};
use crate::lease::{Fence, Op, Outcome};

/// Tokens of successive grants of a lease strictly increase; a renewal keeps the current token;
/// no fenced put is accepted with a token older than one granted or accepted before it (so a
/// holder paused past its expiry never lands a write after its successor's grant).
pub fn fencing(applied: &[Applied]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let mut granted: BTreeMap<&str, u64> = BTreeMap::new();
    let mut accepted: BTreeMap<&str, u64> = BTreeMap::new();
    // A retry repeats its first answer; it grants and writes nothing.
    for a in applied.iter().filter(|a| !a.retry) {
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
            ) => {
                let newest = granted.get(lease.as_str()).copied().unwrap_or(0);
                let seen = accepted.entry(lease).or_insert(0);
                if *token < newest || token < seen {
                    anomalies.push(Anomaly::new(
                        "fencing",
                        format!(
                            "a fenced put on {lease:?} with token {token} was accepted at index {}, \
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
pub fn mutual_exclusion(applied: &[Applied]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    // Per lease: who holds it and until when, in store time.
    let mut held: BTreeMap<&str, (&str, u64)> = BTreeMap::new();
    for a in applied.iter().filter(|a| !a.retry) {
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
