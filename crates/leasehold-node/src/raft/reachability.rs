//! Whether each peer takes this node's Raft messages, said in the log when it changes.
//!
//! A leader tries a peer it cannot reach again every `UNREACHABLE_RETRY` (100 ms), and
//! openraft logged every failed try as warnings and errors of its replication: with one node of
//! three stopped for maintenance, a leader wrote 40-60 lines a second. openraft as patched logs
//! a try's network failure at debug (`third_party/openraft/PATCH.md`, change 8), and this says
//! it instead: once when calls to a peer start failing (no answer, a refusal, or none in time:
//! see [`Attempt`]), again every [`UNREACHABLE_REMINDER`] while they still do, and once when
//! one succeeds again.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::limits::UNREACHABLE_REMINDER;
use crate::NodeId;

/// The peers that do not answer, since when, and how often they failed.
#[derive(Clone, Default)]
pub struct Reachability {
    failing: Arc<Mutex<BTreeMap<NodeId, Failing>>>,
}

#[derive(Clone, Copy)]
struct Failing {
    since: Instant,
    failures: u64,
    said_at: Instant,
}

/// What a call's outcome has to say of its peer.
#[derive(Debug, PartialEq)]
enum Said {
    /// Calls to it succeeded before (or none was made) and this one failed.
    Unreachable,
    /// Calls to it have failed for `for_`, `failures` of them.
    StillUnreachable { for_: Duration, failures: u64 },
    /// A call to it succeeded again, after `after` and `failures` failed calls.
    AnswersAgain { after: Duration, failures: u64 },
}

/// One call to a peer, under way: it failed, for want of an answer, unless it is said to have
/// succeeded or failed first. openraft drops a call it gives up at its timeout (an
/// AppendEntries' is the heartbeat interval), and the node's own deadline for the call is the
/// same, so a paused or cut-off peer's calls often end this way.
pub struct Attempt<'a> {
    peers: &'a Reachability,
    peer: NodeId,
    given: Duration,
    ended: bool,
}

impl Attempt<'_> {
    /// The peer answered.
    pub fn answered(mut self) {
        self.ended = true;
        self.peers.note_answered(self.peer);
    }

    /// The call failed, with `why`.
    pub fn failed(mut self, why: &str) {
        self.ended = true;
        self.peers.note_failed(self.peer, why);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let why = format!("no answer within {} ms", self.given.as_millis());
            self.peers.note_failed(self.peer, &why);
        }
    }
}

impl Reachability {
    /// A call to `peer`, given `given` to be answered in.
    pub fn attempt(&self, peer: NodeId, given: Duration) -> Attempt<'_> {
        Attempt {
            peers: self,
            peer,
            given,
            ended: false,
        }
    }

    fn note_failed(&self, peer: NodeId, why: &str) {
        match self.note(peer, false, Instant::now()) {
            Some(Said::Unreachable) => tracing::warn!(peer, error = why, "calls to a peer fail"),
            Some(Said::StillUnreachable { for_, failures }) => tracing::warn!(
                peer,
                error = why,
                for_s = for_.as_secs(),
                failures,
                "calls to a peer still fail"
            ),
            _ => {}
        }
    }

    fn note_answered(&self, peer: NodeId) {
        if let Some(Said::AnswersAgain { after, failures }) = self.note(peer, true, Instant::now())
        {
            let after_ms = after.as_millis() as u64;
            tracing::info!(peer, after_ms, failures, "calls to a peer succeed again");
        }
    }

    /// Notes a call to `peer` at `now` that was `answered` or not; what to say of it, if
    /// anything.
    fn note(&self, peer: NodeId, answered: bool, now: Instant) -> Option<Said> {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if answered {
            let was = failing.remove(&peer)?;
            return Some(Said::AnswersAgain {
                after: now.saturating_duration_since(was.since),
                failures: was.failures,
            });
        }
        let Some(was) = failing.get_mut(&peer) else {
            let first = Failing {
                since: now,
                failures: 1,
                said_at: now,
            };
            failing.insert(peer, first);
            return Some(Said::Unreachable);
        };
        was.failures += 1;
        if now.saturating_duration_since(was.said_at) < UNREACHABLE_REMINDER {
            return None;
        }
        was.said_at = now;
        Some(Said::StillUnreachable {
            for_: now.saturating_duration_since(was.since),
            failures: was.failures,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_given_up_unanswered_counts_as_failed_and_one_answered_does_not() {
        let peers = Reachability::default();
        drop(peers.attempt(2, Duration::from_millis(60)));
        peers.attempt(3, Duration::from_millis(60)).answered();
        peers
            .attempt(4, Duration::from_millis(60))
            .failed("refused");
        let failures = |peer| match peers.note(peer, true, Instant::now()) {
            Some(Said::AnswersAgain { failures, .. }) => failures,
            _ => 0,
        };
        assert_eq!((failures(2), failures(3), failures(4)), (1, 0, 1));
    }

    #[test]
    fn a_peer_that_stops_answering_is_said_once_then_each_reminder_then_once_when_back() {
        let peers = Reachability::default();
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(peers.note(2, true, at(0)), None, "answering, as before");
        assert_eq!(peers.note(2, false, at(100)), Some(Said::Unreachable));
        let quiet = (2..600).map(|i| peers.note(2, false, at(100 * i)));
        assert!(
            quiet.into_iter().all(|said| said.is_none()),
            "silent in between"
        );
        let reminder = UNREACHABLE_REMINDER.as_millis() as u64;
        assert_eq!(
            peers.note(2, false, at(100 + reminder)),
            Some(Said::StillUnreachable {
                for_: UNREACHABLE_REMINDER,
                failures: 600
            })
        );
        assert_eq!(
            peers.note(3, false, at(200)),
            Some(Said::Unreachable),
            "each peer"
        );
        assert_eq!(
            peers.note(2, true, at(200 + reminder)),
            Some(Said::AnswersAgain {
                after: UNREACHABLE_REMINDER + Duration::from_millis(100),
                failures: 600
            })
        );
        assert_eq!(peers.note(2, true, at(300 + reminder)), None);
        assert_eq!(
            peers.note(2, false, at(400 + reminder)),
            Some(Said::Unreachable),
            "a new spell"
        );
    }
}
