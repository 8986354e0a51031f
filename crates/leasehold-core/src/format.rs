//! Log formats: which operations a log entry may hold, numbered.
//!
//! A build reads and writes every format up to [`LOG_FORMAT`]. An operation belongs to the
//! format that introduced it, and an entry's format is that of its newest operation. A leader
//! logs an operation only once every member has announced that it reads the operation's format
//! (the peer handshake, `leasehold-node`'s `raft::protocol`): during a rolling upgrade no member
//! is ever sent an entry it cannot apply, and a node that meets one anyway (a bug, or a
//! downgrade past a feature in use) says which format it met and stops, never guesses. Log
//! records, peer messages and snapshots carry their format for that.

use crate::command::{Batch, Op};

/// A log format's number.
pub type Format = u8;

/// Format 1: every operation up to 0.2.0, the first build that announces its formats
/// (acquire, release, renew, put, delete, advance, tick, register, forget, `As`, policy
/// changes). A data dir or a peer that says nothing of its format is of format 1.
pub const FORMAT_1: Format = 1;

/// Format 2: closing a session ([`Op::Close`]).
pub const FORMAT_2: Format = 2;

/// Format 3: etcd's keyspace ([`Op::Etcd`]), and the table layout that stores it.
pub const FORMAT_3: Format = 3;

/// The newest format this build reads and writes.
pub const LOG_FORMAT: Format = FORMAT_3;

/// The layout of the table a snapshot holds (`LeaseTable`'s encoding), numbered apart from the
/// log's formats: an operation that changes no table field adds a log format and leaves the
/// snapshots as they were, so that an older build still installs them. 1: every build up to
/// 0.2.0, and since; 3: the etcd keyspace after the rest. A table is written in the oldest
/// layout that holds it (see `LeaseTable::format`), so that one without etcd keys still installs
/// on an older build. Never past [`LOG_FORMAT`]: a new layout comes with the log format whose
/// operations need it.
pub const TABLE_FORMAT: Format = FORMAT_3;

const _: () = assert!(TABLE_FORMAT <= LOG_FORMAT);

impl Op {
    /// The log format that introduced this operation (the newest of an `As` and what it
    /// wraps). Every variant is named: a new one must choose its format.
    pub fn format(&self) -> Format {
        match self {
            Op::As { op, .. } => op.format(),
            Op::Acquire { .. }
            | Op::Release { .. }
            | Op::Put { .. }
            | Op::Advance { .. }
            | Op::Tick
            | Op::Register
            | Op::Delete { .. }
            | Op::Forget { .. }
            | Op::Auth(_)
            | Op::Renew { .. } => FORMAT_1,
            Op::Close => FORMAT_2,
            Op::Etcd(_) => FORMAT_3,
        }
    }
}

impl Batch {
    /// The newest format among the entry's operations: what a member must read to apply it.
    pub fn format(&self) -> Format {
        self.0
            .iter()
            .map(|command| command.op.format())
            .max()
            .unwrap_or(FORMAT_1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::Command;

    #[test]
    fn every_operation_of_this_build_is_of_a_format_it_reads() {
        let ops = [
            Op::Tick,
            Op::Register,
            Op::As {
                identity: "a".into(),
                bearer: None,
                op: Box::new(Op::Put {
                    key: "k".into(),
                    value: vec![],
                    fence: None,
                }),
            },
        ];
        let batch = Batch(
            ops.into_iter()
                .map(|op| Command {
                    at_ms: None,
                    request: None,
                    op,
                })
                .collect(),
        );
        assert!(batch.format() <= LOG_FORMAT);
        assert_eq!(Batch::default().format(), FORMAT_1);
    }
}
