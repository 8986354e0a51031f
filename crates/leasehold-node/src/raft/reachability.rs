//! Whether each peer answers this node's Raft messages, said in the log when it changes.
//!
//! A leader tries a peer it cannot reach again every `UNREACHABLE_RETRY` (100 ms), and
//! openraft logs every failed try as warnings and errors of its replication: with one node of
//! three stopped for maintenance, a leader wrote 40-60 lines a second. `serve`'s default log
//! filter turns those off, and this says it instead: once when a peer stops answering, again
//! every [`UNREACHABLE_REMINDER`] while it stays so, and once when it answers again.

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
    /// It answered before (or never was asked) and now it does not.
    Unreachable,
    /// It has not answered for `for_`, through `failures` tries.
    StillUnreachable { for_: Duration, failures: u64 },
    /// It answers again, after `after` and `failures` failed tries.
    AnswersAgain { after: Duration, failures: u64 },
}

impl Reachability {
    /// A call to `peer` failed, with `why`.
    pub fn failed(&self, peer: NodeId, why: &str) {
        match self.note(peer, false, Instant::now()) {
            Some(Said::Unreachable) => tracing::warn!(peer, error = why, "a peer does not answer"),
            Some(Said::StillUnreachable { for_, failures }) => tracing::warn!(
                peer,
                error = why,
                for_s = for_.as_secs(),
                failures,
                "a peer still does not answer"
            ),
            _ => {}
        }
    }

    /// A call to `peer` was answered.
    pub fn answered(&self, peer: NodeId) {
        if let Some(Said::AnswersAgain { after, failures }) = self.note(peer, true, Instant::now())
        {
            let after_ms = after.as_millis() as u64;
            tracing::info!(peer, after_ms, failures, "a peer answers again");
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
