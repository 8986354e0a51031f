//! The node's typed API: one plain async method per RPC, `(credentials, deadline, request) ->
//! Result<answer, NodeError>`, which every transport calls (gRPC's unary calls and its `Batch`
//! stream, HTTP/JSON, the client lanes). Checks, admission (`--max-requests`), authorization,
//! forwarding to the leader, metrics and the denial log happen here once; a transport only finds
//! the caller's credentials and deadline, and maps a `NodeError` to its own wire once.
//!
//! - `lease`: the `LeaseStore` service's calls; `Call` and `Answer` (the `Batch` stream's oneofs)
//!   are the one table of its unary calls, dispatched by [`LeaseApi::call`].
//! - `listing`: `ListLeases` and `ListKeys`, the leases and rows under a prefix, paged.
//! - `cluster`: the `Cluster` service's calls (status, members, policy, snapshots).
//! - `caller`: who is asking ([`Credentials`] a transport found, the [`Caller`] they give).
//! - `watch`: the `Watch` stream's task.
//! - `etcd`: etcd's v3 calls (KV, Lease, Watch's watchers, lock and election), with etcd's
//!   messages.
//! - `convert`: what the state machine answered, as the API's messages.

mod caller;
mod cluster;
mod convert;
mod etcd;
mod lease;
mod listing;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

pub(crate) use caller::{certificate_name, set_up, Caller, Credentials, SetUp};
pub(crate) use cluster::ClusterApi;
pub(crate) use etcd::{EtcdAnswers, EtcdApi};
pub(crate) use lease::{Call, LeaseApi};

use super::{Node, NodeError};
use crate::metrics::Metrics;

/// Which plane an API answers on: the client plane counts its requests and logs its refusals;
/// the peer plane's answers (reads a follower forwards, a member's own status) were counted
/// where the client sent them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    Client,
    Peer,
}

/// When the caller stops waiting for an answer; `None`: the transport bounds the call itself
/// (tonic applies a unary call's `grpc-timeout`; HTTP ends with its connection).
#[derive(Clone, Copy, Debug, Default)]
pub struct Deadline(Option<(Instant, Duration)>);

impl Deadline {
    /// No deadline of the API's own.
    pub const NONE: Deadline = Deadline(None);

    /// `timeout` from now.
    pub fn after(timeout: Duration) -> Deadline {
        Deadline(Some((Instant::now() + timeout, timeout)))
    }

    /// `answer`, given up once the deadline passes: a write (`write`) given up may still apply,
    /// a read changed nothing.
    pub async fn bound<T>(
        self,
        write: bool,
        answer: impl std::future::Future<Output = Result<T, NodeError>>,
    ) -> Result<T, NodeError> {
        match self.0 {
            Some((at, timeout)) => tokio::time::timeout_at(at, answer).await.unwrap_or(Err(
                NodeError::DeadlinePassed {
                    after: timeout,
                    write,
                },
            )),
            None => answer.await,
        }
    }
}

/// Resolves once the node stops (never, for an API not told when it stops): what a long-lived
/// stream's task waits on beside its work.
pub(crate) async fn until_stopped(stopping: Option<tokio::sync::watch::Receiver<bool>>) {
    match stopping {
        Some(mut stopping) => {
            let _ = stopping.wait_for(|stop| *stop).await;
        }
        None => std::future::pending().await,
    }
}

/// The client plane's API, one of each service, shared by every transport (so the admission
/// limit, the metrics and the denial log are the same whichever a client speaks).
#[derive(Clone)]
pub(crate) struct Api {
    pub lease: Arc<LeaseApi>,
    pub cluster: Arc<ClusterApi>,
    pub etcd: Arc<EtcdApi>,
}

impl Api {
    pub(crate) fn client(
        node: &Node,
        metrics: &Arc<Metrics>,
        stopping: tokio::sync::watch::Receiver<bool>,
    ) -> Self {
        let cluster = Arc::new(ClusterApi::new(node.clone(), Plane::Client));
        let etcd = EtcdApi::new(node.clone(), Plane::Client, cluster.clone())
            .stopping_on(stopping.clone())
            .counting_in(metrics.clone());
        Api {
            lease: Arc::new(
                LeaseApi::new(node.clone(), Plane::Client)
                    .stopping_on(stopping)
                    .counting_in(metrics.clone()),
            ),
            cluster,
            etcd: Arc::new(etcd),
        }
    }

    /// The peer plane's: reads a follower forwards, and each member's own status.
    pub(crate) fn peer(node: &Node, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        let cluster = Arc::new(ClusterApi::new(node.clone(), Plane::Peer));
        let etcd = EtcdApi::new(node.clone(), Plane::Peer, cluster.clone());
        Api {
            lease: Arc::new(LeaseApi::new(node.clone(), Plane::Peer).stopping_on(stopping.clone())),
            cluster,
            etcd: Arc::new(etcd.stopping_on(stopping)),
        }
    }
}
