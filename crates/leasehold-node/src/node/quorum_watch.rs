//! Whether this node leads without a quorum.
//!
//! openraft 0.9 has no CheckQuorum step-down: a leader cut off from its followers leads its term
//! until it hears of a newer one, and a leader whose messages to its peers are lost never does.
//! Clients still reach it (the fault suite's IsolateLeader and OneWayFromLeader), and every write
//! it took waited out the whole quorum wait there, and so did every client attempt that went to
//! it: the fault suite saw leases live a client attempt past their TTL so. A leader whose quorum
//! has been silent for [`QUORUM_SILENCE`] therefore gives up the writes it holds (they may still
//! apply: indeterminate) and refuses new ones and reads before it proposes anything
//! (determinate), so that the client asks another node at once.

use std::time::Duration;

use openraft::ServerState;
use tokio::sync::watch;

use crate::raft::{NodeId, Raft, LONGEST_ELECTION_MS};

/// How long a leader's quorum may be silent before the leader stops taking requests: the
/// longest a follower that hears nothing waits before it campaigns, by when the others may well
/// have elected another leader. Heartbeats every `HEARTBEAT_MS` keep a live quorum far inside
/// it.
pub const QUORUM_SILENCE: Duration = Duration::from_millis(LONGEST_ELECTION_MS);

/// Whether this node leads with a quorum silent for over [`QUORUM_SILENCE`], as its Raft's
/// metrics last said. Cheap to clone: every clone watches the same task.
#[derive(Clone)]
pub struct QuorumWatch {
    silent: watch::Receiver<bool>,
}

impl QuorumWatch {
    /// Watches `raft`'s metrics until it stops. openraft reports them on every turn of its core
    /// loop, a heartbeat tick included, so the silence they report grows while no answer comes.
    pub fn start(raft: Raft) -> Self {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            let mut metrics = raft.metrics();
            loop {
                let now = silent(&metrics.borrow_and_update());
                tx.send_if_modified(|was| std::mem::replace(was, now) != now);
                if metrics.changed().await.is_err() {
                    return;
                }
            }
        });
        QuorumWatch { silent: rx }
    }

    /// Whether the quorum is silent now.
    pub fn is_silent(&self) -> bool {
        *self.silent.borrow()
    }

    /// Returns once the quorum is silent; never, once the Raft it watched has stopped.
    pub async fn until_silent(&self) {
        let mut silent = self.silent.clone();
        if silent.wait_for(|silent| *silent).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Whether `m` is a leader's whose quorum last answered over [`QUORUM_SILENCE`] ago. A leader
/// no follower has answered yet reports no time: its election was a quorum's answer.
fn silent(m: &openraft::RaftMetrics<NodeId, openraft::BasicNode>) -> bool {
    m.state == ServerState::Leader
        && m.current_leader == Some(m.id)
        && m.millis_since_quorum_ack
            .is_some_and(|ms| u128::from(ms) > QUORUM_SILENCE.as_millis())
}
