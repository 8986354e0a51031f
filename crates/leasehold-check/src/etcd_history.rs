//! What etcd clients saw in a fault run, judged against the log's replay.
//!
//! etcd's answers name no log index, only the keyspace's revision, so the native checkers'
//! shortcut (each answer names its place) is not open here. Instead:
//! - an acknowledged write is looked up in the log by what it asked (the workload makes every
//!   write it sends unique, but for the keep-alives, whose answers tell them apart) and must
//!   stand there with the answer the model gives: else it was lost, or answered wrongly;
//! - a write the client sent once is applied at most once;
//! - a read must answer what the model's keyspace answers at the revision the read names;
//! - revisions follow real time: an operation that began after another completed names a
//!   revision no lower, and a strictly higher one if it changed the keyspace. A refused write
//!   names none (its answer carries no header): some entry of it that answers so must stand no
//!   lower, and it orders nothing after it.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::etcd_model::EtcdModel;
use crate::history::{replay_observing, Anomaly, Log};
use crate::linearizable::after_the_latest;
use leasehold_core::etcd::{
    EtcdAnswer, EtcdOp, EtcdOutcome, EtcdRefusal, RangeAnswer, RangeRequest,
};
use leasehold_core::{Op, Outcome};

/// What an etcd client asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdRequest {
    /// A write, as the node logs it (a put or a delete is a transaction of one request).
    Write(EtcdOp),
    /// A linearizable range.
    Range(RangeRequest),
}

/// How an etcd operation ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EtcdCompletion {
    /// A write answered: the revision and answer as the client read them.
    Wrote(EtcdOutcome),
    /// A write the keyspace refused once it was logged (a lease gone), in etcd's words.
    Refused(EtcdRefusal),
    /// A range answered at `revision`.
    Read {
        /// The header's revision.
        revision: i64,
        /// The keys.
        answer: RangeAnswer,
    },
    /// Timed out or unavailable: it may have happened once, or not at all.
    Indeterminate(String),
}

/// One etcd client operation, with its invocation and completion times since the run began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdOperation {
    /// Which client sent it.
    pub client: u32,
    /// What it asked.
    pub request: EtcdRequest,
    /// When it was sent, on the clients' clock.
    pub invoked_ns: u64,
    /// When its answer came, or the client gave up.
    pub completed_ns: u64,
    /// How it ended.
    pub completion: EtcdCompletion,
}

/// An etcd command of the log, as the model applied it.
struct Place {
    index: u64,
    position: u32,
    outcome: Outcome,
    /// The keyspace's revision once it applied.
    revision: i64,
    /// Whether the keyspace changed at it (a lease's expiry there counts: no operation could
    /// see that revision before the command applied either).
    changed: bool,
    /// Whether a node may have applied it more often than it was sent (see
    /// [`applied_at_most_once`]).
    repeatable: bool,
}

/// The log's etcd commands by what they asked, and the keyspace after each revision.
struct Replay {
    places: HashMap<String, Vec<Place>>,
    states: BTreeMap<i64, EtcdModel>,
}

fn replay(log: &Log) -> Result<Replay, Anomaly> {
    let mut replay = Replay {
        places: HashMap::new(),
        states: BTreeMap::from([(1, EtcdModel::default())]),
    };
    let mut last = 1;
    replay_observing(log, |model, replayed| {
        let revision = model.etcd().revision();
        if let Op::Etcd(op) = &replayed.op {
            let place = Place {
                index: replayed.index,
                position: replayed.position,
                outcome: replayed.outcome,
                revision,
                changed: revision > last,
                repeatable: op.repeatable(),
            };
            replay
                .places
                .entry(format!("{op:?}"))
                .or_default()
                .push(place);
        }
        if revision > last {
            replay.states.insert(revision, model.etcd().clone());
            last = revision;
        }
    })?;
    Ok(replay)
}

/// Whether the model's `outcome` is what the client saw as `completion`.
fn answers(outcome: &Outcome, completion: &EtcdCompletion) -> bool {
    match (outcome, completion) {
        (Outcome::Etcd(outcome), EtcdCompletion::Wrote(seen)) => **outcome == *seen,
        (Outcome::Etcd(outcome), EtcdCompletion::Refused(seen)) => {
            outcome.answer == EtcdAnswer::Refused(seen.clone())
        }
        _ => false,
    }
}

/// Where an acknowledged operation took effect: its revision, and whether it changed the
/// keyspace. A refused write's answer carries no revision, and the entry it claimed may be
/// another send's of the same request: its revision is the latest of the entries that answer
/// as it was answered, the least it must reach, and it stands for nobody else's order.
struct Point<'a> {
    op: &'a EtcdOperation,
    revision: i64,
    changed: bool,
    refused: bool,
}

/// Every acknowledged etcd answer against the replay of `log` (see the module's doc).
pub fn etcd_linearizable(history: &[EtcdOperation], log: &Log) -> Vec<Anomaly> {
    let replay = match replay(log) {
        Ok(replay) => replay,
        Err(anomaly) => return vec![anomaly],
    };
    let mut anomalies = Vec::new();
    let mut points = Vec::new();
    let mut claimed = std::collections::BTreeSet::new();
    for op in history {
        let found = match (&op.request, &op.completion) {
            (_, EtcdCompletion::Indeterminate(_)) => continue,
            (EtcdRequest::Write(write), _) => write_place(&replay, write, op, &mut claimed),
            (EtcdRequest::Range(range), EtcdCompletion::Read { revision, answer }) => {
                read_at(&replay, range, *revision, answer)
            }
            (EtcdRequest::Range(_), _) => Err(Anomaly::new(
                "linearizability",
                format!("a range was answered as a write: {op:?}"),
            )),
        };
        let refused = matches!(op.completion, EtcdCompletion::Refused(_));
        match found {
            Ok((revision, changed)) => points.push(Point {
                op,
                revision: match refused {
                    true => latest_refusing(&replay, op).unwrap_or(revision),
                    false => revision,
                },
                changed,
                refused,
            }),
            Err(anomaly) => anomalies.push(anomaly),
        }
    }
    anomalies.extend(applied_at_most_once(history, &replay));
    anomalies.extend(revisions_follow_real_time(points));
    anomalies
}

/// The place of an acknowledged write: the first not yet claimed whose command is `write`
/// and whose replayed answer is the one the client saw.
fn write_place(
    replay: &Replay,
    write: &EtcdOp,
    op: &EtcdOperation,
    claimed: &mut std::collections::BTreeSet<(u64, u32)>,
) -> Result<(i64, bool), Anomaly> {
    let Some(places) = replay.places.get(&format!("{write:?}")) else {
        return Err(Anomaly::new(
            "durability",
            format!(
                "{write:?} was answered {:?}, but the log holds no such command: a lost write",
                op.completion
            ),
        ));
    };
    let free = |p: &&Place| !claimed.contains(&(p.index, p.position));
    match places
        .iter()
        .filter(free)
        .find(|p| answers(&p.outcome, &op.completion))
    {
        Some(place) => {
            claimed.insert((place.index, place.position));
            Ok((place.revision, place.changed))
        }
        None => {
            let replayed: Vec<String> = (places.iter())
                .map(|p| format!("{:?} at index {}", p.outcome, p.index))
                .collect();
            Err(Anomaly::new(
                "linearizability",
                format!(
                    "{write:?} was answered {:?}, the log's replay gives {}",
                    op.completion,
                    replayed.join(", ")
                ),
            ))
        }
    }
}

/// A read answered at `revision`: the model's keyspace at that revision must answer the same.
fn read_at(
    replay: &Replay,
    range: &RangeRequest,
    revision: i64,
    answer: &RangeAnswer,
) -> Result<(i64, bool), Anomaly> {
    let Some(state) = replay.states.get(&revision) else {
        return Err(Anomaly::new(
            "linearizability",
            format!("{range:?} was answered at revision {revision}, which no applied state had"),
        ));
    };
    match state.range(range) {
        Ok(expected) if expected == *answer => Ok((revision, false)),
        expected => Err(Anomaly::new(
            "linearizability",
            format!(
                "{range:?} was answered {answer:?} at revision {revision}, where the model \
                 answers {expected:?}: a stale or wrong read"
            ),
        )),
    }
}

/// No etcd write stands in the log more often than clients sent it: etcd's writes carry no
/// request id, so nothing else would catch a node that proposed one twice. (Every write the
/// workload sends is unique but its grants, keep-alives and unlocks, which it counts.) Grants
/// of a lease the store names and keep-alives are exempt: a node sends them again when its
/// forward's answer was lost with the leader, since applying them twice changes nothing a
/// client sees.
fn applied_at_most_once(history: &[EtcdOperation], replay: &Replay) -> Vec<Anomaly> {
    let mut sent: HashMap<String, usize> = HashMap::new();
    for op in history {
        if let EtcdRequest::Write(write) = &op.request {
            *sent.entry(format!("{write:?}")).or_default() += 1;
        }
    }
    let mut anomalies = Vec::new();
    for (write, places) in (replay.places.iter()).filter(|(_, p)| !p[0].repeatable) {
        let count = sent.get(write).copied().unwrap_or(0);
        if places.len() > count {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{write} was sent {count} time(s) and applied {} times",
                    places.len()
                ),
            ));
        }
    }
    anomalies
}

/// The latest revision of an entry of `op`'s write that answers as `op` was answered.
fn latest_refusing(replay: &Replay, op: &EtcdOperation) -> Option<i64> {
    let EtcdRequest::Write(write) = &op.request else {
        return None;
    };
    let places = replay.places.get(&format!("{write:?}"))?;
    (places.iter())
        .filter(|p| answers(&p.outcome, &op.completion))
        .map(|p| p.revision)
        .max()
}

/// An operation that began after another completed names a revision no lower than the
/// other's, and a strictly higher one if it changed the keyspace.
fn revisions_follow_real_time(points: Vec<Point>) -> Vec<Anomaly> {
    let points: Vec<&Point> = points.iter().collect();
    let times = |p: &Point| (p.op.invoked_ns, p.op.completed_ns);
    let mut anomalies = Vec::new();
    // A refusal is never the latest: its revision is only what it must reach.
    let place = |p: &Point| (!p.refused).then_some(p.revision);
    for (point, earlier) in after_the_latest(&points, times, place) {
        let Some(earlier) = earlier.filter(|e| !e.refused) else {
            continue;
        };
        let before = earlier.revision;
        if point.revision >= before && !(point.changed && point.revision == before) {
            continue;
        }
        let what = match point.refused {
            true => format!(
                "{:?} was answered {:?}, but every entry that answers so stands at revision {} \
                 or before, and {:?} had completed at revision {before} before it was sent",
                point.op.request, point.op.completion, point.revision, earlier.op.request
            ),
            false => format!(
                "{:?} took effect at revision {}, but began after {:?} had completed at \
                 revision {before}",
                point.op.request, point.revision, earlier.op.request
            ),
        };
        anomalies.push(Anomaly::new("linearizability", what));
    }
    anomalies
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_core::etcd::{KeyValue, OpAnswer, PutRequest, RequestOp, Txn, TxnAnswer};
    use leasehold_core::Command;

    fn put(key: &str, value: &str) -> EtcdOp {
        EtcdOp::Txn(Txn {
            compare: vec![],
            success: vec![RequestOp::Put(PutRequest {
                key: key.into(),
                value: value.into(),
                ..PutRequest::default()
            })],
            failure: vec![],
        })
    }

    fn get(key: &str) -> RangeRequest {
        RangeRequest {
            key: key.into(),
            ..RangeRequest::default()
        }
    }

    /// A log of `ops`, one command per entry, 100 ms apart.
    fn log_of(ops: &[EtcdOp]) -> Log {
        let mut log = vec![(1, vec![])];
        for (i, op) in (0..).zip(ops) {
            let command = Command {
                at_ms: Some(i * 100),
                request: None,
                op: Op::Etcd(op.clone()),
            };
            log.push((i + 2, vec![command]));
        }
        log
    }

    fn wrote(revision: i64) -> EtcdCompletion {
        EtcdCompletion::Wrote(EtcdOutcome {
            revision,
            answer: EtcdAnswer::Txn(TxnAnswer {
                succeeded: true,
                responses: vec![OpAnswer::Put { prev_kv: None }],
            }),
        })
    }

    fn value_at(key: &str, value: &str, created: i64, changed: i64, version: i64) -> RangeAnswer {
        RangeAnswer {
            kvs: vec![KeyValue {
                key: key.as_bytes().into(),
                create_revision: created,
                mod_revision: changed,
                version,
                value: value.as_bytes().into(),
                lease: 0,
            }],
            more: false,
            count: 1,
        }
    }

    fn op(request: EtcdRequest, from: u64, to: u64, completion: EtcdCompletion) -> EtcdOperation {
        EtcdOperation {
            client: 0,
            request,
            invoked_ns: from,
            completed_ns: to,
            completion,
        }
    }

    /// Two puts of `k` (revisions 2 and 3), acknowledged one after the other, and a read of
    /// the second.
    fn honest() -> (Log, Vec<EtcdOperation>) {
        let log = log_of(&[put("k", "1"), put("k", "2")]);
        let history = vec![
            op(EtcdRequest::Write(put("k", "1")), 0, 10, wrote(2)),
            op(EtcdRequest::Write(put("k", "2")), 20, 30, wrote(3)),
            op(
                EtcdRequest::Range(get("k")),
                40,
                50,
                EtcdCompletion::Read {
                    revision: 3,
                    answer: value_at("k", "2", 2, 3, 2),
                },
            ),
        ];
        (log, history)
    }

    #[test]
    fn an_honest_history_passes() {
        let (log, history) = honest();
        assert_eq!(etcd_linearizable(&history, &log), vec![]);
    }

    #[test]
    fn a_write_acknowledged_but_not_in_the_log_is_lost() {
        let (log, mut history) = honest();
        history.push(op(EtcdRequest::Write(put("k", "3")), 60, 70, wrote(4)));
        let anomalies = etcd_linearizable(&history, &log);
        assert!(anomalies[0].what.contains("a lost write"), "{anomalies:?}");
    }

    #[test]
    fn a_write_answered_otherwise_than_the_replay_is_flagged() {
        let (log, mut history) = honest();
        history[1].completion = wrote(7);
        let anomalies = etcd_linearizable(&history, &log);
        assert!(
            anomalies[0].what.contains("the log's replay gives"),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_stale_read_is_flagged_by_its_answer_or_by_real_time() {
        let (log, mut history) = honest();
        // The old value, named at the new revision: the answer is wrong there.
        history[2].completion = EtcdCompletion::Read {
            revision: 3,
            answer: value_at("k", "1", 2, 2, 1),
        };
        let anomalies = etcd_linearizable(&history, &log);
        assert!(
            anomalies[0].what.contains("a stale or wrong read"),
            "{anomalies:?}"
        );
        // The old value at its own revision, after the new one was acknowledged.
        history[2].completion = EtcdCompletion::Read {
            revision: 2,
            answer: value_at("k", "1", 2, 2, 1),
        };
        let anomalies = etcd_linearizable(&history, &log);
        assert!(anomalies[0].what.contains("began after"), "{anomalies:?}");
    }

    #[test]
    fn a_write_that_began_after_a_read_of_its_revision_is_flagged() {
        let (log, mut history) = honest();
        // The second put began after a read had seen its revision.
        history[1].invoked_ns = 55;
        history[1].completed_ns = 60;
        let anomalies = etcd_linearizable(&history, &log);
        assert!(anomalies[0].what.contains("began after"), "{anomalies:?}");
    }

    #[test]
    fn a_write_sent_once_and_applied_twice_is_flagged() {
        let (_, history) = honest();
        let log = log_of(&[put("k", "1"), put("k", "2"), put("k", "2")]);
        let anomalies = etcd_linearizable(&history, &log);
        assert!(
            anomalies[0].what.contains("applied 2 times"),
            "{anomalies:?}"
        );
    }

    #[test]
    fn a_read_at_a_revision_never_reached_is_flagged() {
        let (log, mut history) = honest();
        history[2].completion = EtcdCompletion::Read {
            revision: 9,
            answer: value_at("k", "2", 2, 3, 2),
        };
        let anomalies = etcd_linearizable(&history, &log);
        assert!(
            anomalies[0].what.contains("no applied state had"),
            "{anomalies:?}"
        );
    }

    /// A write the keyspace refused tells its client nothing of where it stood: the same
    /// refused request, sent again (the lock recipe's, while its lease is gone unseen), may be
    /// answered by the entry of a later send while the entry of an earlier one, timed out,
    /// stands before a write that completed in between. A fault run reported that as a
    /// revision going back in real time.
    #[test]
    fn a_refused_write_sent_again_names_no_revision_but_must_stand_after_what_preceded_it() {
        let refused = EtcdOp::Txn(Txn {
            compare: vec![],
            success: vec![RequestOp::Put(PutRequest {
                key: "l".into(),
                lease: 7,
                ..PutRequest::default()
            })],
            failure: vec![],
        });
        let log = log_of(&[refused.clone(), put("k", "1"), refused.clone()]);
        let gone = EtcdCompletion::Refused(EtcdRefusal::LeaseNotFound);
        let history = vec![
            op(
                EtcdRequest::Write(refused.clone()),
                0,
                5,
                EtcdCompletion::Indeterminate("timed out".into()),
            ),
            op(EtcdRequest::Write(put("k", "1")), 10, 20, wrote(2)),
            op(EtcdRequest::Write(refused.clone()), 30, 40, gone.clone()),
        ];
        assert_eq!(etcd_linearizable(&history, &log), vec![]);
        // But a refusal only an entry before the put could have given is stale.
        let log = log_of(&[refused.clone(), put("k", "1")]);
        let history = vec![
            op(EtcdRequest::Write(put("k", "1")), 10, 20, wrote(2)),
            op(EtcdRequest::Write(refused), 30, 40, gone),
        ];
        let anomalies = etcd_linearizable(&history, &log);
        assert!(
            anomalies[0].what.contains("before it was sent"),
            "{anomalies:?}"
        );
    }
}
