//! Whether this node may campaign: the operator's choice, a recent refusal for a shorter log
//! (see [`VotePenalty`]), and its clock (an odd one, see `clock_probe`, must not lead), applied
//! to openraft's election timer.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::raft::VotePenalty;

use super::Node;

/// Checks every heartbeat interval whether this node may campaign (elections enabled, no
/// [`VotePenalty`] holding, its clock not odd) and sets openraft's election timer to match. Runs until aborted.
///
/// A heartbeat is soon enough: a penalty starts with the answer to this node's own campaign,
/// and openraft campaigns again no sooner than `election_timeout_min` after that.
pub async fn watch_elections(node: Node, penalty: Arc<VotePenalty>) {
    let heartbeat = Duration::from_millis(node.raft().config().heartbeat_interval);
    let mut check = tokio::time::interval(heartbeat);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut held = false;
    loop {
        check.tick().await;
        let holds = penalty.holds();
        if holds != held {
            held = holds;
            tracing::info!(
                campaigns = !holds,
                "{}",
                if holds {
                    "a peer refused this node's vote for a longer log: no campaign for a while"
                } else {
                    "the wait after a refused vote is over"
                }
            );
        }
        let enabled = node.inner.elections.load(Ordering::Relaxed);
        node.raft()
            .runtime_config()
            .elect(enabled && !holds && !node.clock_bars_campaign());
    }
}
