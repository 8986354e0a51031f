//! A candidate refused for a shorter log waits before it campaigns again, and only this once.
//!
//! openraft 0.9 does the waiting itself, but keeps the mark: a vote answer that shows a longer
//! log than the candidate's sets a flag that adds `2 × election_timeout_max` to every later
//! election timeout of this node, cleared only when this node next campaigns on its own timer.
//! A node that lost one election while it lagged (a restarted node often does) keeps the penalty
//! long after it caught up, so when a later leader dies it waits 1.45 to 1.6 s instead of 0.65 to
//! 0.8 s; with both survivors marked, the fault suite saw leases live 4.5 s for a 2 s TTL, and
//! two marked survivors can tie round after round. openraft fixed this in 0.10; 0.9.25 is the
//! last 0.9.
//!
//! So the network hands every vote answer through [`VotePenalty::answered`] before openraft sees
//! it: an answer that shows a longer log starts a penalty of the same length here, and reaches
//! openraft with the candidate's own last log id in that field (the field's only use in openraft
//! 0.9 is to set that flag). While the penalty holds, the node's election watch turns openraft's
//! elections off; when it ends, they are back, and nothing of it remains.

use std::sync::Mutex;
use std::time::Duration;

use openraft::raft::{VoteRequest, VoteResponse};
use tokio::time::Instant;

use crate::NodeId;

/// Whether this node was recently refused for a shorter log, and until when it must not
/// campaign because of it.
pub struct VotePenalty {
    length: Duration,
    until: Mutex<Option<Instant>>,
}

impl VotePenalty {
    /// The penalty openraft would give under `config`: `2 × election_timeout_max`.
    pub fn new(config: &openraft::Config) -> Self {
        VotePenalty {
            length: Duration::from_millis(2 * config.election_timeout_max),
            until: Mutex::new(None),
        }
    }

    /// The answer to this node's vote `request`, on its way back to openraft: a longer log in it
    /// starts the penalty and is replaced by the request's own last log id.
    pub fn answered(&self, request: &VoteRequest<NodeId>, answer: &mut VoteResponse<NodeId>) {
        if answer.last_log_id > request.last_log_id {
            *self.until.lock().unwrap_or_else(|e| e.into_inner()) =
                Some(Instant::now() + self.length);
            answer.last_log_id = request.last_log_id;
        }
    }

    /// Whether a penalty holds now.
    pub fn holds(&self) -> bool {
        self.until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until)
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId, Vote};

    use super::*;

    fn log_id(term: u64, index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(term, 0), index))
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_log_in_an_answer_holds_this_node_back_for_a_while_and_openraft_never_sees_it()
    {
        let penalty = VotePenalty::new(&openraft::Config {
            election_timeout_max: 400,
            ..Default::default()
        });
        let request = VoteRequest::new(Vote::new(3, 1), log_id(2, 10));

        let mut shorter = VoteResponse::new(Vote::new(2, 2), log_id(2, 9), false);
        penalty.answered(&request, &mut shorter);
        assert!(!penalty.holds(), "a shorter log is no reason to wait");
        assert_eq!(shorter.last_log_id, log_id(2, 9));

        let mut longer = VoteResponse::new(Vote::new(2, 2), log_id(2, 12), false);
        penalty.answered(&request, &mut longer);
        assert!(penalty.holds());
        assert_eq!(longer.last_log_id, request.last_log_id);

        tokio::time::advance(Duration::from_millis(799)).await;
        assert!(penalty.holds());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            !penalty.holds(),
            "the penalty ends after 2 x election_timeout_max"
        );
    }
}
