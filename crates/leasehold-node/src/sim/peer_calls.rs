//! Peer calls: a follower's batch of writes reaches the leader's node through the router, as
//! the internal Propose call does between processes, and so does a new leader's CarriedTime.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use openraft::LogId;

use super::router::{Router, Undelivered};
use crate::node::{
    Carried, ClusterApi, Credentials, Deadline, ForwardAnswer, Forwarded, LeaseApi, NodeError,
    OnBehalf, PeerLink, Plane, Read, ReadAnswer,
};
use crate::node::{EtcdRead, EtcdReadAnswering};
use crate::proto::v1 as pb;

pub(super) struct SimLink {
    pub(super) from: u64,
    pub(super) router: Router,
}

impl PeerLink for SimLink {
    fn propose(
        &self,
        leader: u64,
        addr: String,
        writes: Vec<Forwarded>,
    ) -> Pin<Box<dyn Future<Output = Vec<ForwardAnswer>> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let count = writes.len();
            let error = match router
                .deliver(from, leader, async |node| node.write_many(writes).await)
                .await
            {
                Ok(answers) => return answers,
                // Certainly not applied.
                Err(Undelivered::Dropped(e)) => NodeError::LeaderUnreachable {
                    leader,
                    addr,
                    reason: e.to_string(),
                },
                // They may have applied.
                Err(lost) => NodeError::ForwardLost {
                    leader,
                    addr,
                    reason: lost.to_string(),
                },
            };
            vec![Err(error); count]
        })
    }

    fn carried_time(
        &self,
        peer: u64,
        _addr: String,
        oldest: Option<LogId<u64>>,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<Carried, String>> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let asked = router.deliver(from, peer, async |node| {
                node.carried_time_from(oldest).await
            });
            match tokio::time::timeout(timeout, asked).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err("timed out".into()),
            }
        })
    }

    fn clock_reading(
        &self,
        peer: u64,
        _addr: String,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<crate::node::ClockReading, String>> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let asked = router.deliver(from, peer, async |node| node.clock_reading());
            match tokio::time::timeout(timeout, asked).await {
                Ok(answer) => answer.map_err(|e| e.to_string()),
                Err(_) => Err("timed out".into()),
            }
        })
    }

    fn hand_over(
        &self,
        peer: u64,
        _addr: String,
        from: openraft::Vote<u64>,
        to: u64,
        timeout: Duration,
    ) -> Pin<Box<dyn Future<Output = Result<(), String>> + Send>> {
        let (me, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let told = router.deliver(me, peer, async move |node| {
                node.raft().trigger().hand_over(from, to).await
            });
            match tokio::time::timeout(timeout, told).await {
                Ok(Ok(Ok(()))) => Ok(()),
                Ok(Ok(Err(fatal))) => Err(fatal.to_string()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("timed out".into()),
            }
        })
    }

    /// The simulation's clients speak Leasehold's API only.
    fn etcd_read(&self, leader: u64, addr: String, _: OnBehalf, _: EtcdRead) -> EtcdReadAnswering {
        Box::pin(std::future::ready(Err(NodeError::LeaderUnreachable {
            leader,
            addr,
            reason: "the simulation forwards no etcd reads".into(),
        })))
    }

    fn read(&self, leader: u64, addr: String, caller: OnBehalf, call: Read) -> ReadAnswer {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            let credentials = Credentials::Member {
                identity: caller.identity,
                bearer: caller.bearer,
            };
            // The leader's peer plane answers it, as a forwarded read reaches it between
            // processes.
            let asked = router.deliver(from, leader, async move |node| {
                let api = LeaseApi::new(node.clone(), Plane::Peer);
                api.call(&credentials, Deadline::NONE, call).await
            });
            match asked.await {
                Ok(answer) => answer,
                // A read changes nothing: never sent, or lost, it can be asked again.
                Err(e) => Err(NodeError::LeaderUnreachable {
                    leader,
                    addr,
                    reason: e.to_string(),
                }),
            }
        })
    }

    fn status(
        &self,
        id: u64,
        addr: String,
    ) -> Pin<Box<dyn Future<Output = pb::NodeStatus> + Send>> {
        let (from, router) = (self.from, self.router.clone());
        Box::pin(async move {
            // The member's peer plane answers it, as between processes.
            let asked = router.deliver(from, id, async move |node| {
                let api = ClusterApi::new(node.clone(), Plane::Peer);
                api.node_status(&Credentials::Anonymous, pb::NodeStatusRequest {})
                    .await
            });
            match asked.await {
                Ok(Ok(status)) => status,
                Ok(Err(e)) => unreachable_status(id, addr, e.to_string()),
                Err(e) => unreachable_status(id, addr, e.to_string()),
            }
        })
    }
}

/// What a member that could not be asked is in a status: unreachable, and why.
fn unreachable_status(id: u64, peer_address: String, error: String) -> pb::NodeStatus {
    pb::NodeStatus {
        id,
        peer_address,
        role: pb::Role::Unreachable as i32,
        error,
        ..Default::default()
    }
}
