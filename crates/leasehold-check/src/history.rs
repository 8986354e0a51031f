//! What a fault run records, and the replay of the cluster's log.

use serde::{Deserialize, Serialize};

use crate::model::Model;
use leasehold_core::{Command, Op, Outcome, RequestId};

/// What a client asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Request {
    /// A write: acquire, renew, release, put, delete, register, advance.
    Write(Op),
    /// A linearizable read of a row.
    Get {
        /// The row's key.
        key: String,
    },
    /// A linearizable read of a lease's holder and token.
    GetLease {
        /// The lease's name.
        lease: String,
    },
}

/// What a client was told, for an operation that completed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// A write's outcome, as the table answered it.
    Outcome(Outcome),
    /// A row's value, or none.
    Value(Option<Vec<u8>>),
    /// A lease's holder (none once free) and its token.
    Lease {
        /// Who holds it, if anyone.
        holder: Option<String>,
        /// Its latest token.
        token: u64,
    },
}

/// How an operation ended, as its client saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Completion {
    /// Answered.
    Ok {
        /// The log entry it was applied in (a write), or the one the read saw applied.
        log_index: u64,
        /// A write's place in its entry's batch; 0 for a read.
        position: u32,
        /// The store's time the answer carried.
        store_time_ms: u64,
        /// What the client was told.
        answer: Answer,
    },
    /// Refused before it could be applied (bad input): it did not happen.
    Failed(String),
    /// Timed out or unavailable: it may have happened once, or not at all.
    Indeterminate(String),
}

/// One client operation, with its invocation and completion times since the run began.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Operation {
    /// Which client sent it.
    pub client: u32,
    /// What it asked.
    pub request: Request,
    /// When it was sent, on the clients' clock.
    pub invoked_ns: u64,
    /// When its answer came, or the client gave up.
    pub completed_ns: u64,
    /// How it ended.
    pub completion: Completion,
}

impl Operation {
    /// The log index an answered operation names.
    pub fn ok_index(&self) -> Option<u64> {
        match self.completion {
            Completion::Ok { log_index, .. } => Some(log_index),
            _ => None,
        }
    }

    /// Whether it asked for a write.
    pub fn is_write(&self) -> bool {
        matches!(self.request, Request::Write(_))
    }
}

/// The cluster's applied log: each index with its batch of commands, empty for Raft's own
/// entries.
pub type Log = Vec<(u64, Vec<Command>)>;

/// One command of the log as the table applied it, replayed by the checkers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Replayed {
    /// Its log entry.
    pub index: u64,
    /// Its place in the entry's batch.
    pub position: u32,
    /// The store's time after it applied.
    pub store_time_ms: u64,
    /// A retried request appears in the log once per attempt but takes effect once: `retry`
    /// marks the later appearances, which the model answers with the first one's answer (or
    /// refuses, once the session forgot it) and which change nothing.
    pub request: Option<RequestId>,
    /// A later appearance of a request already applied.
    pub retry: bool,
    /// What it asked, as logged: for a client's operation logged with its identity
    /// ([`Op::As`]), the operation itself. A grant or renewal stamped under the default clock
    /// is logged held the grant margin longer than its client asked (`Op::held_longer`).
    pub op: Op,
    /// The identity it was logged with, if any.
    pub identity: Option<String>,
    /// What the model answered.
    pub outcome: Outcome,
}

/// Something a checker found wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Anomaly {
    /// The checker that found it.
    pub checker: &'static str,
    /// What, where, and which operations.
    pub what: String,
}

impl Anomaly {
    /// An anomaly `checker` found.
    pub fn new(checker: &'static str, what: impl Into<String>) -> Self {
        Anomaly {
            checker,
            what: what.into(),
        }
    }
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.checker, self.what)
    }
}

/// Replays `log` through the reference model (not the product's table). The log must run from
/// index 1 without a hole.
pub fn replay(log: &Log) -> Result<Vec<Replayed>, Anomaly> {
    let mut applied = Vec::new();
    replay_observing(log, |_, replayed| applied.push(replayed))?;
    Ok(applied)
}

/// [`replay`], handing each command to `observe` with the model as it stands once the command
/// applied, for checkers that judge reads against the state between commands.
pub fn replay_observing(
    log: &Log,
    mut observe: impl FnMut(&Model, Replayed),
) -> Result<(), Anomaly> {
    let mut table = Model::default();
    let mut requests = std::collections::BTreeSet::new();
    for (expected, (index, commands)) in (1..).zip(log) {
        if *index != expected {
            return Err(Anomaly::new(
                "durability",
                format!("the log has a hole: index {index} stands where {expected} should"),
            ));
        }
        for (position, command) in (0..).zip(commands) {
            let outcome = table.apply(command);
            let identity = command.op.identity().map(str::to_owned);
            let op = command.op.bare().clone();
            let replayed = Replayed {
                index: *index,
                position,
                store_time_ms: table.now_ms(),
                request: command.request,
                retry: command.request.is_some_and(|r| !requests.insert(r)),
                op,
                identity,
                outcome,
            };
            observe(&table, replayed);
        }
    }
    Ok(())
}
