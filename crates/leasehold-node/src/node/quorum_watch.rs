//! Whether this node leads without a quorum.
//!
//! openraft 0.9 has no CheckQuorum step-down: a leader cut off from its followers leads its term
//! until it hears of a newer one, and a leader whose messages to its peers are lost never does.
//! Clients still reach it (the fault suite's IsolateLeader and OneWayFromLeader), and every write
//! it took waited out the whole quorum wait there, and so did every client attempt that went to
//! it: the fault suite saw a lease live a client attempt past its TTL so. A leader whose quorum
//! has been silent for [`QUORUM_SILENCE`] therefore gives up the writes it holds (they may still
//! apply: indeterminate) and refuses new ones and reads before it proposes anything
//! (determinate), so that the client asks another node at once.

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::limits::QUORUM_SILENCE;
use crate::raft::Raft;
use crate::NodeId;

/// In which term, if any, this node leads with a quorum silent for over [`QUORUM_SILENCE`], as
/// its Raft's metrics last said. Cheap to clone: every clone watches the same task.
#[derive(Clone)]
pub struct QuorumWatch {
    silent_in: watch::Receiver<Option<u64>>,
}

impl QuorumWatch {
    /// Watches `raft`'s metrics until it stops. openraft reports them on every turn of its core
    /// loop, a heartbeat tick included, so the silence they report grows while no answer comes.
    pub fn start(raft: Raft) -> Self {
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            let mut metrics = raft.metrics();
            let mut leading_since = None;
            loop {
                let now = {
                    let m = metrics.borrow_and_update();
                    silent_in(&m, &mut leading_since, Instant::now())
                };
                tx.send_if_modified(|was| std::mem::replace(was, now) != now);
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        });
        QuorumWatch { silent_in: rx }
    }

    /// Whether this node leads `term` with its quorum silent now.
    pub fn is_silent(&self, term: u64) -> bool {
        *self.silent_in.borrow() == Some(term)
    }

    /// Returns once this node leads `term` with its quorum silent; never, once the Raft it
    /// watched has stopped.
    pub async fn until_silent(&self, term: u64) {
        let mut silent_in = self.silent_in.clone();
        if silent_in.wait_for(|t| *t == Some(term)).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// The term `m` leads with its quorum's last answer over [`QUORUM_SILENCE`] before `now`.
/// `leading_since` keeps when this node was first seen leading the term: a leader no follower
/// has answered yet reports no answer at all, and is silent once it has led that long so.
fn silent_in(
    m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>,
    leading_since: &mut Option<(u64, Instant)>,
    now: Instant,
) -> Option<u64> {
    if m.state != ServerState::Leader || m.current_leader != Some(m.id) {
        *leading_since = None;
        return None;
    }
    let term = m.current_term;
    let since = match *leading_since {
        Some((t, since)) if t == term => since,
        _ => leading_since.insert((term, now)).1,
    };
    let silence = match m.millis_since_quorum_ack {
        Some(ms) => Duration::from_millis(ms),
        None => now.saturating_duration_since(since),
    };
    (silence > QUORUM_SILENCE).then_some(term)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leader(
        term: u64,
        acked_ms_ago: Option<u64>,
    ) -> openraft::RaftMetrics<NodeId, openraft::BasicNode> {
        let mut m = openraft::RaftMetrics::new_initial(1);
        m.state = ServerState::Leader;
        m.current_leader = Some(1);
        m.current_term = term;
        m.millis_since_quorum_ack = acked_ms_ago;
        m
    }

    #[test]
    fn a_leader_is_silent_once_its_quorum_last_answered_over_the_bound_ago() {
        let now = Instant::now();
        let mut since = None;
        let bound = QUORUM_SILENCE.as_millis() as u64;
        assert_eq!(silent_in(&leader(2, Some(60)), &mut since, now), None);
        assert_eq!(silent_in(&leader(2, Some(bound)), &mut since, now), None);
        assert_eq!(
            silent_in(&leader(2, Some(bound + 1)), &mut since, now),
            Some(2)
        );
        let mut follower = leader(2, Some(bound + 1));
        follower.state = ServerState::Follower;
        follower.current_leader = Some(3);
        assert_eq!(silent_in(&follower, &mut since, now), None);
    }

    #[test]
    fn a_leader_no_follower_ever_answered_is_silent_once_it_has_led_that_long() {
        let start = Instant::now();
        let mut since = None;
        assert_eq!(silent_in(&leader(4, None), &mut since, start), None);
        let later = start + QUORUM_SILENCE + Duration::from_millis(1);
        assert_eq!(silent_in(&leader(4, None), &mut since, later), Some(4));
        // A new term starts the count again.
        assert_eq!(silent_in(&leader(5, None), &mut since, later), None);
    }
}
