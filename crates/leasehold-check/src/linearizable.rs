//! Linearizability, checked cheaply because every answer names the log index it was applied
//! at (and a write its position in that entry's batch): each acknowledged write must stand at
//! its place with the answer the log's replay gives there, each read must see the replayed state
//! after its index, an operation that began after
//! another completed must have the later index, and nothing may apply more often than sent.

use std::collections::BTreeMap;

use crate::history::{Anomaly, Answer, Completion, Log, Operation, Replayed, Request};
use crate::model::Model;
use leasehold_core::{LeaseTable, Limits, Op, Outcome};

/// Every acknowledged answer against the replay of the log: each write answered what the model
/// answered at its place, and each read saw the state at the entry it names.
pub fn linearizable(history: &[Operation], log: &Log, applied: &[Replayed]) -> Vec<Anomaly> {
    let mut anomalies = acknowledged_writes(history, log, applied);
    anomalies.extend(reads(history, log));
    anomalies.extend(real_time_order(history));
    anomalies.extend(applied_at_most_once(history, applied));
    anomalies
}

fn last_index(log: &Log) -> u64 {
    log.last().map_or(0, |(index, _)| *index)
}

/// Every acknowledged write is in the log at its index, answered as the replay answers.
fn acknowledged_writes(history: &[Operation], log: &Log, applied: &[Replayed]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let last = last_index(log);
    let by_place: BTreeMap<(u64, u32), &Replayed> =
        applied.iter().map(|a| ((a.index, a.position), a)).collect();
    let mut claimed: BTreeMap<(u64, u32), &Operation> = BTreeMap::new();
    for op in history {
        let (
            Request::Write(write),
            Completion::Ok {
                log_index,
                position,
                store_time_ms,
                answer,
            },
        ) = (&op.request, &op.completion)
        else {
            continue;
        };
        let place = format!("index {log_index} position {position}");
        if let Some(other) = claimed.insert((*log_index, *position), op) {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{write:?} and {:?} were both acknowledged at {place}",
                    other.request
                ),
            ));
        }
        let Some(found) = by_place.get(&(*log_index, *position)) else {
            let where_ = if *log_index > last {
                format!("but the log ends at {last}")
            } else {
                "where the log holds no command".to_owned()
            };
            anomalies.push(Anomaly::new(
                "durability",
                format!("{write:?} was acknowledged at {place}, {where_}: a lost write"),
            ));
            continue;
        };
        if !logged_forms(write).contains(&found.op) {
            anomalies.push(Anomaly::new(
                "durability",
                format!(
                    "{write:?} was acknowledged at {place}, but the log holds {:?} there: a lost write",
                    found.op
                ),
            ));
            continue;
        }
        if *answer != Answer::Outcome(found.outcome.clone())
            || *store_time_ms != found.store_time_ms
        {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{write:?} at {place} was answered {answer:?} at store time {store_time_ms}, \
                     the log's replay gives {:?} at {}",
                    found.outcome, found.store_time_ms
                ),
            ));
        }
    }
    anomalies
}

/// The forms a leader logs a client's `write` in: as sent under the manual clock, and under the
/// default clock with its TTLs held the grant margin longer (`Op::held_longer`). (An op with no
/// TTL has one form, counted once.)
fn logged_forms(write: &Op) -> Vec<Op> {
    let mut forms = vec![
        write.clone(),
        write.clone().held_longer(Limits::GRANT_MARGIN_MS),
    ];
    forms.dedup();
    forms
}

/// What a read should answer on `table`; `None` for a write.
pub fn read_answer(table: &LeaseTable, request: &Request) -> Option<Answer> {
    match request {
        Request::Get { key } => Some(Answer::Value(table.row(key).map(<[u8]>::to_vec))),
        Request::GetLease { lease } => {
            let found = table.lease(lease);
            Some(Answer::Lease {
                holder: found
                    .and_then(|l| l.holder_at(table.now_ms()))
                    .map(|holder| holder.to_string()),
                token: found.map_or(0, |l| l.token),
            })
        }
        Request::Write(_) => None,
    }
}

/// What a read should answer on the reference model's state; `None` for a write.
fn model_answer(model: &Model, request: &Request) -> Option<Answer> {
    match request {
        Request::Get { key } => Some(Answer::Value(model.row(key).map(<[u8]>::to_vec))),
        Request::GetLease { lease } => {
            let (holder, token) = model.lease(lease);
            Some(Answer::Lease {
                holder: holder.map(str::to_owned),
                token,
            })
        }
        Request::Write(_) => None,
    }
}

/// Every read saw exactly the replayed state after the entry it was answered at.
fn reads(history: &[Operation], log: &Log) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let last = last_index(log);
    let mut reads: Vec<(&Operation, u64, &Answer)> = history
        .iter()
        .filter(|op| !op.is_write())
        .filter_map(|op| match &op.completion {
            Completion::Ok {
                log_index, answer, ..
            } => Some((op, *log_index, answer)),
            _ => None,
        })
        .collect();
    reads.sort_by_key(|(_, index, _)| *index);
    let mut table = Model::default();
    let mut entries = log.iter().peekable();
    for (op, index, answer) in reads {
        if index > last {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{:?} read at index {index}, beyond the end of the log ({last})",
                    op.request
                ),
            ));
            continue;
        }
        while let Some((_, commands)) = entries.next_if(|(i, _)| *i <= index) {
            for command in commands {
                table.apply(command);
            }
        }
        let expected = model_answer(&table, &op.request);
        if expected.as_ref() != Some(answer) {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{:?} at index {index} returned {answer:?}, but the state there gives {expected:?}",
                    op.request
                ),
            ));
        }
    }
    anomalies
}

/// An operation invoked after another completed must not be applied before it: a write
/// strictly after, a read at or after. (Two writes in one entry were both pending when the leader
/// formed it, so neither can have completed before the other began: comparing entry indexes is
/// enough.)
fn real_time_order(history: &[Operation]) -> Vec<Anomaly> {
    let mut anomalies = Vec::new();
    let completed: Vec<&Operation> = history
        .iter()
        .filter(|op| op.ok_index().is_some())
        .collect();
    let sweep = after_the_latest(
        &completed,
        |op| (op.invoked_ns, op.completed_ns),
        |op| op.ok_index(),
    );
    for (op, before) in sweep {
        let Some(before) = before else { continue };
        let (index, before_index) = (
            op.ok_index().unwrap_or_default(),
            before.ok_index().unwrap_or_default(),
        );
        let went_back = if op.is_write() {
            index <= before_index
        } else {
            index < before_index
        };
        if went_back {
            anomalies.push(Anomaly::new(
                "linearizability",
                format!(
                    "{:?} (client {}, invoked at {} ns) began after {:?} (client {}) completed at index \
                     {before_index} ({} ns), yet was answered at index {index}: it went back in time",
                    op.request, op.client, op.invoked_ns, before.request, before.client, before.completed_ns
                ),
            ));
        }
    }
    anomalies
}

/// Each of `ops` in the order they were invoked, with the one that stands latest (`place`)
/// among those completed before it was invoked (`times`: when it was invoked, when it
/// completed); a sweep in one pass over both orders, for the checks that real time orders the
/// answers.
pub(crate) fn after_the_latest<'a, T, P: PartialOrd>(
    ops: &[&'a T],
    times: impl Fn(&T) -> (u64, u64),
    place: impl Fn(&T) -> P,
) -> Vec<(&'a T, Option<&'a T>)> {
    let mut completed = ops.to_vec();
    completed.sort_by_key(|op| times(op).1);
    let mut invoked = ops.to_vec();
    invoked.sort_by_key(|op| times(op).0);
    let (mut latest, mut next): (Option<&T>, usize) = (None, 0);
    let mut swept = Vec::with_capacity(invoked.len());
    for op in invoked {
        while next < completed.len() && times(completed[next]).1 < times(op).0 {
            if latest.is_none_or(|l| place(completed[next]) > place(l)) {
                latest = Some(completed[next]);
            }
            next += 1;
        }
        swept.push((op, latest));
    }
    swept
}

/// No command applies more often than clients sent it.
fn applied_at_most_once(history: &[Operation], applied: &[Replayed]) -> Vec<Anomaly> {
    // Keyed by the op's encoding: `Op` is compared whole, as the log holds it.
    let mut counts: BTreeMap<Vec<u8>, (usize, usize, &Op)> = BTreeMap::new();
    for a in applied.iter().filter(|a| !a.retry) {
        if matches!(
            a.op,
            Op::Tick
                | Op::Advance { .. }
                | Op::Register
                | Op::Close
                | Op::Forget { .. }
                | Op::Auth(_)
                | Op::Etcd(_)
        ) || matches!(a.outcome, Outcome::Denied(_))
        {
            // The leader's own ticks and forgets; advances are not part of fault runs; registrations are
            // the client library's own, which histories do not record (a lost one is retried
            // and leaves an unused session behind, harmlessly); policy changes are the admin's,
            // which histories do not record either; a denied operation changed nothing, and its
            // client saw a refusal; etcd's writes are counted against etcd's clients' history
            // (`etcd_linearizable`).
            continue;
        }
        let key = postcard::to_allocvec(&a.op).unwrap_or_default();
        counts.entry(key).or_insert((0, 0, &a.op)).0 += 1;
    }
    for op in history {
        let Request::Write(write) = &op.request else {
            continue;
        };
        if matches!(op.completion, Completion::Failed(_)) {
            continue;
        }
        for form in logged_forms(write) {
            let key = postcard::to_allocvec(&form).unwrap_or_default();
            counts.entry(key).or_insert((0, 0, write)).1 += 1;
        }
    }
    counts
        .values()
        .filter(|(in_log, sent, _)| in_log > sent)
        .map(|(in_log, sent, op)| {
            Anomaly::new(
                "linearizability",
                format!("{op:?} was applied {in_log} times, but clients sent it {sent} times"),
            )
        })
        .collect()
}
