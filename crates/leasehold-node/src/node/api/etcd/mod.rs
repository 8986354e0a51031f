//! etcd's v3 calls on the typed API: `(credentials, deadline, request) -> Result<answer,
//! NodeError>` with etcd's messages, as the `LeaseStore` calls are with Leasehold's. Writes are
//! logged as [`Op::Etcd`] and decided by the core's keyspace (`leasehold_core::etcd`), forwarded
//! to the leader as any write; reads are linearizable on the leader (a follower forwards them
//! over the peer plane) unless the client asks for a serializable one.
//!
//! - `convert`: etcd's messages as the core's requests, and back.
//! - `watch`: the Watch stream's watchers, read from the keyspace's recent events.
//! - `streams`: the streams (Watch, LeaseKeepAlive, Observe), each a task over its inbound
//!   messages, which gRPC and the JSON gateway both run.
//! - `concurrency`: etcd's lock and election services, made of the calls here, as etcd makes
//!   them of its own client.

mod concurrency;
mod convert;
mod streams;
mod watch;

use std::sync::Arc;

use super::caller::{Caller, Credentials};
use super::{ClusterApi, Deadline, Plane};
use crate::limits::{LEADERS_FOLLOWED, QUORUM_WAIT};
use crate::metrics::Metrics;
use crate::node::link::{EtcdRead, EtcdReadAnswer};
use crate::node::{Node, NodeError, Reading};
use crate::proto::etcd::etcdserverpb as pb;
use crate::proto::v1 as lh;
use leasehold_core::auth::Action;
use leasehold_core::etcd::{self as core, EtcdAnswer, EtcdOp, EtcdOutcome};
use leasehold_core::{Op, Outcome};

pub(crate) use streams::Answers as EtcdAnswers;

/// etcd's calls on one plane.
#[derive(Clone)]
pub(crate) struct EtcdApi {
    node: Node,
    plane: Plane,
    cluster: Arc<ClusterApi>,
    metrics: Option<Arc<Metrics>>,
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
}

impl EtcdApi {
    pub fn new(node: Node, plane: Plane, cluster: Arc<ClusterApi>) -> Self {
        EtcdApi {
            node,
            plane,
            cluster,
            metrics: None,
            stopping: None,
        }
    }

    /// Counts every call in `metrics`, under `etcd.` and the call's name.
    pub fn counting_in(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Long-lived streams end when `stopping` turns true.
    pub fn stopping_on(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// etcd's response header at `revision`. Leasehold's clusters carry no id of their own,
    /// so the cluster id is 0; etcd's clients do not compare it.
    pub fn header(&self, revision: i64) -> pb::ResponseHeader {
        pb::ResponseHeader {
            cluster_id: 0,
            member_id: self.node.id(),
            revision,
            raft_term: self.node.raft().metrics().borrow().current_term,
        }
    }

    /// The keyspace's revision as this node applied it.
    fn applied_revision(&self) -> i64 {
        self.node.state().read().table.etcd().revision()
    }

    /// The header at the revision this node applied.
    pub fn header_now(&self) -> pb::ResponseHeader {
        self.header(self.applied_revision())
    }

    /// Where streams learn that the node stops.
    pub fn stopping(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.stopping.clone()
    }

    /// Room for one more watch stream, of the node's watch budget, held while it runs.
    pub fn admit_watch(&self) -> Result<tokio::sync::OwnedSemaphorePermit, NodeError> {
        let permit = self.node.admit_watch()?;
        self.node.auth_set_up()?;
        Ok(permit)
    }

    /// Answers with `answer` for the caller, until `deadline`, counted as `rpc`.
    async fn counted<T, F>(
        &self,
        rpc: &'static str,
        credentials: &Credentials,
        deadline: Deadline,
        write: bool,
        answer: impl FnOnce(Caller) -> F,
    ) -> Result<T, NodeError>
    where
        F: std::future::Future<Output = Result<T, NodeError>>,
    {
        let started = std::time::Instant::now();
        let result = match Caller::of(&self.node, credentials) {
            Ok(caller) => deadline.bound(write, answer(caller)).await,
            Err(refused) => Err(refused),
        };
        if let Some(metrics) = &self.metrics {
            let outcome = result.as_ref().map(|_| None).map_err(NodeError::code);
            metrics.request(rpc, started.elapsed(), outcome);
        }
        result
    }

    /// Logs `op` for `caller` (forwarded to the leader by a follower): what the keyspace
    /// answered, or its refusal as the error.
    async fn write(&self, caller: Caller, op: EtcdOp) -> Result<EtcdOutcome, NodeError> {
        core::validate(&op)?;
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let repeatable = op.repeatable();
        let op = caller.log(Op::Etcd(op));
        let mut tries = 0;
        let applied = loop {
            tries += 1;
            let answered = self.node.write_or_forward(op.clone(), None).await;
            let lost_with = match &answered {
                // The leader could not be reached, so nothing was sent: as etcd holds a
                // proposal through an election, the write goes to the next leader (a killed
                // leader's followers refuse its connections well before one of them leads).
                Err(NodeError::LeaderUnreachable { leader, .. }) => Some(*leader),
                // Its answer was lost with the leader: sent again where applying it twice
                // changes nothing a client sees (a fresh lease nobody holds runs out by itself).
                Err(NodeError::ForwardLost { leader, .. }) if repeatable => Some(*leader),
                _ => None,
            };
            match lost_with {
                Some(leader) if tries < LEADERS_FOLLOWED => {
                    let moved = self.node.leader_moves_from(leader);
                    if tokio::time::timeout(QUORUM_WAIT, moved).await.is_err() {
                        return Err(NodeError::NoLeader(QUORUM_WAIT));
                    }
                }
                _ => break answered?,
            }
        };
        match applied.outcome {
            Outcome::Etcd(outcome) => match outcome.answer {
                EtcdAnswer::Refused(refusal) => Err(NodeError::Etcd(refusal)),
                _ => Ok(*outcome),
            },
            Outcome::Denied(denied) => Err(NodeError::Denied(*denied)),
            other => Err(NodeError::Invariant(format!(
                "an etcd write was answered {other:?}"
            ))),
        }
    }

    /// Reads with `read` once the policy lets the caller do `action`: linearizable on the
    /// leader, or, `serializable`, this node's applied state as it is. A follower forwards a
    /// linearizable read to the leader as `forward`, unless it was forwarded here.
    async fn read<T>(
        &self,
        caller: Caller,
        action: Action<'_>,
        serializable: bool,
        read: impl FnOnce(&Reading) -> Result<T, NodeError>,
        forward: impl FnOnce() -> EtcdRead,
        answered: impl FnOnce(EtcdReadAnswer) -> Option<T>,
    ) -> Result<T, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let checked = |s: &Reading| caller.may(s.table.policy(), &action).and_then(|()| read(s));
        if serializable {
            return self.node.read_applied(checked)?.0;
        }
        let error = match self.node.read(checked).await {
            Ok((answer, _)) => return answer,
            Err(e) => e,
        };
        let NodeError::NotLeader {
            leader: Some((leader, addr)),
            ..
        } = &error
        else {
            return Err(error);
        };
        if self.plane == Plane::Peer {
            return Err(error);
        }
        let link = self.node.link();
        let answer = link.etcd_read(*leader, addr.clone(), caller.on_behalf(), forward());
        answered(answer.await?).ok_or_else(|| {
            NodeError::Invariant("the leader answered a forwarded etcd read with another's".into())
        })
    }
}

/// The KV service's calls.
impl EtcdApi {
    pub async fn range(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::RangeRequest,
    ) -> Result<pb::RangeResponse, NodeError> {
        self.counted(
            "etcd.Range",
            credentials,
            deadline,
            false,
            |caller| async move {
                let request = convert::range(m.clone())?;
                core::range_fields(&request)?;
                let prefix = core::span_prefix(&request.key, &request.range_end);
                let revision = m.revision;
                self.read(
                    caller,
                    Action::ReadKey(&prefix),
                    m.serializable,
                    |s| {
                        let etcd = s.table.etcd();
                        let answer = etcd.range(&request, revision).map_err(NodeError::Etcd)?;
                        Ok(convert::range_response(
                            answer,
                            self.header(etcd.revision()),
                        ))
                    },
                    || EtcdRead::Range(m),
                    |answer| match answer {
                        EtcdReadAnswer::Range(r) => Some(r),
                        _ => None,
                    },
                )
                .await
            },
        )
        .await
    }

    pub async fn put(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::PutRequest,
    ) -> Result<pb::PutResponse, NodeError> {
        self.counted(
            "etcd.Put",
            credentials,
            deadline,
            true,
            |caller| async move {
                let op = one(core::RequestOp::Put(convert::put(m)));
                let (mut responses, header) = self.txn_of(caller, op).await?;
                match responses.pop() {
                    Some(core::OpAnswer::Put { prev_kv }) => Ok(pb::PutResponse {
                        header: Some(header),
                        prev_kv: prev_kv.as_ref().map(convert::key_value),
                    }),
                    _ => Err(answered_otherwise("a put")),
                }
            },
        )
        .await
    }

    pub async fn delete_range(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::DeleteRangeRequest,
    ) -> Result<pb::DeleteRangeResponse, NodeError> {
        self.counted(
            "etcd.DeleteRange",
            credentials,
            deadline,
            true,
            |caller| async move {
                let op = one(core::RequestOp::DeleteRange(convert::delete_range(m)));
                let (mut responses, header) = self.txn_of(caller, op).await?;
                match responses.pop() {
                    Some(core::OpAnswer::DeleteRange { deleted, prev_kvs }) => {
                        Ok(pb::DeleteRangeResponse {
                            header: Some(header),
                            deleted,
                            prev_kvs: prev_kvs.iter().map(convert::key_value).collect(),
                        })
                    }
                    _ => Err(answered_otherwise("a delete")),
                }
            },
        )
        .await
    }

    pub async fn txn(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::TxnRequest,
    ) -> Result<pb::TxnResponse, NodeError> {
        self.counted(
            "etcd.Txn",
            credentials,
            deadline,
            true,
            |caller| async move {
                let op = EtcdOp::Txn(convert::txn(m)?);
                let outcome = self.write(caller, op).await?;
                match outcome.answer {
                    EtcdAnswer::Txn(answer) => {
                        Ok(convert::txn_response(answer, self.header(outcome.revision)))
                    }
                    _ => Err(answered_otherwise("a transaction")),
                }
            },
        )
        .await
    }

    pub async fn compact(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::CompactionRequest,
    ) -> Result<pb::CompactionResponse, NodeError> {
        self.counted(
            "etcd.Compact",
            credentials,
            deadline,
            true,
            |caller| async move {
                let op = EtcdOp::Compact {
                    revision: m.revision,
                };
                let outcome = self.write(caller, op).await?;
                Ok(pb::CompactionResponse {
                    header: Some(self.header(outcome.revision)),
                })
            },
        )
        .await
    }

    /// A one-request transaction's answers and header.
    async fn txn_of(
        &self,
        caller: Caller,
        op: EtcdOp,
    ) -> Result<(Vec<core::OpAnswer>, pb::ResponseHeader), NodeError> {
        let outcome = self.write(caller, op).await?;
        match outcome.answer {
            EtcdAnswer::Txn(answer) => Ok((answer.responses, self.header(outcome.revision))),
            _ => Err(answered_otherwise("a one-request transaction")),
        }
    }
}

/// The Lease service's calls.
impl EtcdApi {
    pub async fn lease_grant(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::LeaseGrantRequest,
    ) -> Result<pb::LeaseGrantResponse, NodeError> {
        self.counted(
            "etcd.LeaseGrant",
            credentials,
            deadline,
            true,
            |caller| async move {
                let op = EtcdOp::LeaseGrant {
                    id: m.id,
                    ttl_s: m.ttl,
                };
                let outcome = self.write(caller, op).await?;
                let EtcdAnswer::LeaseGranted { id, ttl_s } = outcome.answer else {
                    return Err(answered_otherwise("a lease grant"));
                };
                Ok(pb::LeaseGrantResponse {
                    header: Some(self.header(outcome.revision)),
                    id,
                    ttl: ttl_s,
                    error: String::new(),
                })
            },
        )
        .await
    }

    pub async fn lease_revoke(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::LeaseRevokeRequest,
    ) -> Result<pb::LeaseRevokeResponse, NodeError> {
        self.counted(
            "etcd.LeaseRevoke",
            credentials,
            deadline,
            true,
            |caller| async move {
                let outcome = self.write(caller, EtcdOp::LeaseRevoke { id: m.id }).await?;
                Ok(pb::LeaseRevokeResponse {
                    header: Some(self.header(outcome.revision)),
                })
            },
        )
        .await
    }

    /// One keep-alive of the `LeaseKeepAlive` stream: logged, so that the lease's new expiry is
    /// in the replicated state and survives a leader change. A lease that is gone answers TTL
    /// 0, as etcd answers it.
    pub async fn lease_keep_alive(
        &self,
        credentials: &Credentials,
        m: pb::LeaseKeepAliveRequest,
    ) -> Result<pb::LeaseKeepAliveResponse, NodeError> {
        self.counted(
            "etcd.LeaseKeepAlive",
            credentials,
            Deadline::NONE,
            true,
            |caller| async move {
                match self
                    .write(caller, EtcdOp::LeaseKeepAlive { id: m.id })
                    .await
                {
                    Ok(outcome) => {
                        let EtcdAnswer::LeaseKeptAlive { id, ttl_s } = outcome.answer else {
                            return Err(answered_otherwise("a keep-alive"));
                        };
                        Ok(pb::LeaseKeepAliveResponse {
                            header: Some(self.header(outcome.revision)),
                            id,
                            ttl: ttl_s,
                        })
                    }
                    Err(NodeError::Etcd(core::EtcdRefusal::LeaseNotFound)) => {
                        Ok(pb::LeaseKeepAliveResponse {
                            header: Some(self.header(self.applied_revision())),
                            id: m.id,
                            ttl: 0,
                        })
                    }
                    Err(e) => Err(e),
                }
            },
        )
        .await
    }

    pub async fn lease_time_to_live(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::LeaseTimeToLiveRequest,
    ) -> Result<pb::LeaseTimeToLiveResponse, NodeError> {
        self.counted(
            "etcd.LeaseTimeToLive",
            credentials,
            deadline,
            false,
            |caller| async move {
                core::lease_id(m.id)?;
                self.read(
                    caller,
                    Action::ReadKey(""),
                    false,
                    |s| Ok(self.time_to_live(s, &m)),
                    || EtcdRead::TimeToLive(m),
                    |answer| match answer {
                        EtcdReadAnswer::TimeToLive(r) => Some(r),
                        _ => None,
                    },
                )
                .await
            },
        )
        .await
    }

    /// A lease's time left at the read's store time, rounded up to seconds as etcd rounds it:
    /// TTL -1 for a lease that is gone from the state read, 0 for one due whose expiry is not
    /// logged yet.
    fn time_to_live(
        &self,
        s: &Reading,
        m: &pb::LeaseTimeToLiveRequest,
    ) -> pb::LeaseTimeToLiveResponse {
        let (etcd, now_ms) = (s.table.etcd(), s.table.now_ms());
        let header = Some(self.header(etcd.revision()));
        let Some(lease) = etcd.lease(m.id).filter(|l| l.live_at(now_ms)) else {
            return pb::LeaseTimeToLiveResponse {
                header,
                id: m.id,
                ttl: -1,
                granted_ttl: 0,
                keys: Vec::new(),
            };
        };
        let left_ms = lease.expires_at_ms.saturating_sub(s.now_ms);
        let keys = match m.keys {
            true => etcd.lease_keys(m.id).map(|k| k.to_vec()).collect(),
            false => Vec::new(),
        };
        pb::LeaseTimeToLiveResponse {
            header,
            id: m.id,
            ttl: left_ms.div_ceil(1000) as i64,
            granted_ttl: lease.ttl_s,
            keys,
        }
    }

    pub async fn lease_leases(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::LeaseLeasesRequest,
    ) -> Result<pb::LeaseLeasesResponse, NodeError> {
        self.counted(
            "etcd.LeaseLeases",
            credentials,
            deadline,
            false,
            |caller| async move {
                self.read(
                    caller,
                    Action::ReadKey(""),
                    false,
                    |s| {
                        let (etcd, now_ms) = (s.table.etcd(), s.table.now_ms());
                        let live = etcd
                            .lease_ids()
                            .filter(|id| etcd.lease(*id).is_some_and(|l| l.live_at(now_ms)));
                        Ok(pb::LeaseLeasesResponse {
                            header: Some(self.header(etcd.revision())),
                            leases: live.map(|id| pb::LeaseStatus { id }).collect(),
                        })
                    },
                    || EtcdRead::Leases(m),
                    |answer| match answer {
                        EtcdReadAnswer::Leases(r) => Some(r),
                        _ => None,
                    },
                )
                .await
            },
        )
        .await
    }
}

/// The Cluster and Maintenance calls `etcdctl member list` and `endpoint status` make.
impl EtcdApi {
    pub async fn member_list(
        &self,
        credentials: &Credentials,
    ) -> Result<pb::MemberListResponse, NodeError> {
        let status = self
            .cluster
            .status(credentials, lh::StatusRequest {})
            .await?;
        let voters: Vec<u64> = {
            let metrics = self.node.raft().metrics();
            let m = metrics.borrow();
            m.membership_config.membership().voter_ids().collect()
        };
        let members = status.nodes.into_iter().map(|n| pb::Member {
            id: n.id,
            name: format!("node-{}", n.id),
            peer_ur_ls: match n.peer_address.is_empty() {
                true => Vec::new(),
                false => vec![url(&n.peer_address, self.node.tls())],
            },
            client_ur_ls: vec![url(&n.address, self.node.tls())],
            is_learner: !voters.contains(&n.id),
        });
        Ok(pb::MemberListResponse {
            header: Some(self.header(self.applied_revision())),
            members: members.collect(),
        })
    }

    pub async fn status(&self, credentials: &Credentials) -> Result<pb::StatusResponse, NodeError> {
        Caller::of(&self.node, credentials)?;
        let metrics = self.node.raft().metrics().borrow().clone();
        let (revision, applied) = {
            let state = self.node.state().read();
            let applied = state.last_applied.map_or(0, |id| id.index);
            (state.table.etcd().revision(), applied)
        };
        let db_size = i64::try_from(self.node.snapshot_bytes()).unwrap_or(i64::MAX);
        let voters: Vec<u64> = metrics.membership_config.membership().voter_ids().collect();
        Ok(pb::StatusResponse {
            header: Some(self.header(revision)),
            version: format!("3.5.0 (leasehold {})", env!("CARGO_PKG_VERSION")),
            db_size,
            leader: metrics.current_leader.unwrap_or(0),
            raft_index: metrics.last_log_index.unwrap_or(0),
            raft_term: metrics.current_term,
            raft_applied_index: applied,
            errors: Vec::new(),
            db_size_in_use: db_size,
            is_learner: !voters.contains(&self.node.id()),
            ..pb::StatusResponse::default()
        })
    }

    /// No alarms: Leasehold has none of etcd's (its disk checks refuse writes themselves).
    pub fn alarm_list(&self) -> pb::AlarmResponse {
        pb::AlarmResponse {
            header: Some(self.header(self.applied_revision())),
            alarms: Vec::new(),
        }
    }
}

/// An address as a URL, as etcd lists its members' (`https` with TLS).
fn url(addr: &str, tls: bool) -> String {
    let scheme = if tls { "https" } else { "http" };
    format!("{scheme}://{addr}")
}

fn one(request: core::RequestOp) -> EtcdOp {
    EtcdOp::Txn(core::Txn {
        compare: Vec::new(),
        success: vec![request],
        failure: Vec::new(),
    })
}

fn answered_otherwise(what: &str) -> NodeError {
    NodeError::Invariant(format!(
        "the keyspace answered {what} with another request's answer"
    ))
}
