//! Reads: linearizable reads of the applied state on the leader, and the read-back of applied
//! log entries (`ReadLog`).

use super::{Node, NodeError};
use crate::limits::{READ_LOG_MAX_BYTES, READ_LOG_MAX_ENTRIES};
use crate::raft::state_machine::Applying;
use crate::raft::Applied;
use leasehold_core::{Batch, Command};

/// The last index a `ReadLog` call for `from..=to` reads, with `applied` entries applied: no
/// further than what is applied, nor than [`READ_LOG_MAX_ENTRIES`] entries.
fn read_log_end(from: u64, to: u64, applied: u64) -> u64 {
    to.min(applied)
        .min(from.saturating_add(READ_LOG_MAX_ENTRIES - 1))
}

/// The applied state as one read sees it, and the store time the read is answered at.
///
/// What the state says (a lease's holder, whether it is due) is what its last applied entry
/// left, at that entry's store time, the same on every node. But store time moves only with
/// logged commands, so in a cluster with nothing to log (a lease held for a minute, say) that
/// time stands still while the leases' time runs out, and a lease's time left counted from it
/// would not count down. So a read on the leader is answered at the time the leader would stamp
/// a write with then (a stamp taken: no later answer of its term is at an earlier time), as
/// etcd's leader answers a lease's time to live by its own clock; a serializable read at the
/// applied time, the only one a follower knows. A new leader counts its time from what was
/// logged and carried, and may start a little behind a read its predecessor answered.
pub struct Reading<'a> {
    state: &'a Applying,
    /// The store time the read is answered at, for a lease's time left: never before the
    /// applied time.
    pub now_ms: u64,
}

impl std::ops::Deref for Reading<'_> {
    type Target = Applying;

    fn deref(&self) -> &Applying {
        self.state
    }
}

impl Node {
    /// A linearizable read: never served from a stale follower or a deposed leader, and
    /// answered at the leader's store time now (see [`Reading`]).
    pub async fn read<T>(
        &self,
        read: impl FnOnce(&Reading) -> T,
    ) -> Result<(T, Applied), NodeError> {
        let term = self.serving_leader().await?;
        self.confirm_leadership().await?;
        // A stamp taken, as the expiry ticker takes one to see what is due: every later stamp
        // of the term is at least it, so no answer after this one is at an earlier time. (A
        // new leader's first stamps may be: see `Reading`.) Under the manual clock, store time
        // moves only by `advance`.
        let now = match self.inner.manual_clock {
            true => None,
            false => self.inner.clock.stamp(term),
        };
        Ok(self.read_here(read, now))
    }

    /// A serializable read: this member's applied state as it stands, possibly behind the
    /// leader's, without asking anyone (a node that is no member refuses, as for any read).
    pub fn read_applied<T>(
        &self,
        read: impl FnOnce(&Reading) -> T,
    ) -> Result<(T, Applied), NodeError> {
        self.membership_standing()?;
        Ok(self.read_here(read, None))
    }

    /// `read` of the applied state, at `now` if that is later than the applied time, and
    /// where it stands.
    fn read_here<T>(&self, read: impl FnOnce(&Reading) -> T, now: Option<u64>) -> (T, Applied) {
        let state = self.inner.state.read();
        let now_ms = state.table.now_ms().max(now.unwrap_or(0));
        let at = Applied {
            log_index: state.last_applied.map_or(0, |id| id.index),
            position: 0,
            store_time_ms: now_ms,
            outcome: leasehold_core::Outcome::Nothing,
        };
        let reading = Reading {
            state: &state,
            now_ms,
        };
        (read(&reading), at)
    }

    /// The applied entries of this node's log with indexes in `from..=to`: each index with its
    /// commands, none for Raft's own entries. Purged entries are absent.
    pub async fn applied_log(
        &self,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, Vec<Command>)>, NodeError> {
        let applied = self
            .inner
            .state
            .read()
            .last_applied
            .map_or(0, |id| id.index);
        let to = read_log_end(from, to, applied);
        if from > to {
            return Ok(Vec::new());
        }
        let Some(mut reader) = self.inner.log.clone() else {
            return Err(NodeError::Raft(
                "this node keeps no log reader (an in-memory log)".into(),
            ));
        };
        let entries = openraft::RaftLogReader::try_get_log_entries(&mut reader, from..=to)
            .await
            .map_err(|e| NodeError::Raft(e.to_string()))?;
        let mut bytes = 0;
        let mut answer = Vec::with_capacity(entries.len());
        for entry in entries {
            let commands = match entry.payload {
                openraft::EntryPayload::Normal(Batch(commands)) => commands,
                _ => Vec::new(),
            };
            // The first entry always goes, so that every call makes progress.
            if !answer.is_empty() && bytes >= READ_LOG_MAX_BYTES {
                break;
            }
            bytes += commands
                .iter()
                .map(|c| crate::raft::weight(&c.op))
                .sum::<usize>();
            answer.push((entry.log_id.index, commands));
        }
        Ok(answer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_read_back_is_bounded_per_call_and_by_what_is_applied() {
        assert_eq!(read_log_end(1, u64::MAX, 5_000), READ_LOG_MAX_ENTRIES);
        assert_eq!(read_log_end(4_500, u64::MAX, 5_000), 5_000);
        assert_eq!(read_log_end(10, 20, 5_000), 20);
        assert_eq!(read_log_end(u64::MAX, u64::MAX, 5_000), 5_000);
    }
}
