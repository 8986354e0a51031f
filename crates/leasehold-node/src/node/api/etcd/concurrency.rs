//! etcd's `v3lock.Lock` and `v3election.Election`, made of the keyspace's transactions as
//! etcd's own client makes them: a waiter writes `name/<lease in hex>` under its lease and holds
//! the lock, or leads, once no key under `name/` was created before its own. Waiting reads this
//! node's applied state: the keys created before the waiter's are all applied once its own is,
//! and only the log deletes them, so the waiter sees each go.

use tokio::sync::watch;

use super::{convert, one, EtcdApi};
use crate::node::api::caller::{Caller, Credentials};
use crate::node::api::Deadline;
use crate::node::NodeError;
use crate::proto::etcd::etcdserverpb as pb;
use crate::proto::etcd::mvccpb;
use crate::proto::etcd::v3electionpb as election;
use crate::proto::etcd::v3lockpb as lock;
use leasehold_core::etcd::{
    self as core, Compare, CompareResult, CompareTarget, EtcdAnswer, EtcdOp, EtcdRefusal, KeyValue,
    OpAnswer, RequestOp,
};
use leasehold_core::InvalidInput;

/// The key a waiter under lease `lease` writes for `name`.
fn waiter_key(name: &[u8], lease: i64) -> Vec<u8> {
    let mut key = name.to_vec();
    key.extend_from_slice(format!("/{lease:x}").as_bytes());
    key
}

/// `name/`, and the end of the keys under it.
fn under(name: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    let mut end = prefix.clone();
    // `/` + 1 is `0`: the end of every key under `name/`.
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    (prefix, end)
}

fn name_field(name: &[u8], lease: i64) -> Result<(), NodeError> {
    if name.is_empty() {
        return Err(NodeError::Invalid(InvalidInput::new(
            "name",
            "names the lock or election: it may not be empty",
        )));
    }
    core::key_field(name, &[])?;
    core::lease_id(lease)?;
    Ok(())
}

/// The compare that `key` was created at `rev` (0: that it does not exist).
fn created_at_revision(key: &[u8], rev: i64) -> Compare {
    Compare {
        result: CompareResult::Equal,
        target: CompareTarget::Create(rev),
        key: key.to_vec(),
        range_end: Vec::new(),
    }
}

fn created_at(kv: &KeyValue, key: &[u8], rev: i64) -> bool {
    &*kv.key == key && kv.create_revision == rev
}

impl EtcdApi {
    /// Writes the waiter's key under its lease unless it is there already: its create revision.
    async fn enqueue(
        &self,
        caller: &Caller,
        key: &[u8],
        lease: i64,
        value: &[u8],
    ) -> Result<i64, NodeError> {
        let absent = created_at_revision(key, 0);
        let put = RequestOp::Put(core::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            ..core::PutRequest::default()
        });
        let get = RequestOp::Range(core::RangeRequest {
            key: key.to_vec(),
            ..core::RangeRequest::default()
        });
        let txn = EtcdOp::Txn(core::Txn {
            compare: vec![absent],
            success: vec![put],
            failure: vec![get],
        });
        let outcome = self.write(caller.clone(), txn).await?;
        match outcome.answer {
            EtcdAnswer::Txn(t) if t.succeeded => Ok(outcome.revision),
            EtcdAnswer::Txn(t) => match t.responses.first() {
                Some(OpAnswer::Range(r)) => r
                    .kvs
                    .first()
                    .map(|kv| kv.create_revision)
                    .ok_or(NodeError::Etcd(EtcdRefusal::LeaseNotFound)),
                _ => Err(super::answered_otherwise("a waiter's transaction")),
            },
            _ => Err(super::answered_otherwise("a waiter's transaction")),
        }
    }

    /// Waits until the waiter's key, created at `rev`, is the oldest under `name/`: the
    /// keyspace's revision then. Refused if the key goes first (its lease ran out).
    async fn wait_first(&self, name: &[u8], key: &[u8], rev: i64) -> Result<i64, NodeError> {
        let (prefix, end) = under(name);
        let mut applied: watch::Receiver<u64> = self.node.state().applied_index();
        loop {
            {
                let state = self.node.state().read();
                let etcd = state.table.etcd();
                if etcd.revision() >= rev {
                    let oldest = etcd.first_created(&prefix, &end);
                    match oldest {
                        Some(kv) if created_at(&kv, key, rev) => return Ok(etcd.revision()),
                        Some(kv) if kv.create_revision < rev => {}
                        // Its own key is gone, or another with its name took its place.
                        _ => return Err(NodeError::Etcd(EtcdRefusal::LeaseNotFound)),
                    }
                }
            }
            applied
                .changed()
                .await
                .map_err(|_| NodeError::ShuttingDown)?;
        }
    }

    /// Deletes `key`, if it was created at `rev` when one is named.
    async fn delete_if(
        &self,
        caller: Caller,
        key: &[u8],
        rev: Option<i64>,
    ) -> Result<(bool, i64), NodeError> {
        let delete = RequestOp::DeleteRange(core::DeleteRangeRequest {
            key: key.to_vec(),
            ..core::DeleteRangeRequest::default()
        });
        let op = match rev {
            None => one(delete),
            Some(rev) => EtcdOp::Txn(core::Txn {
                compare: vec![created_at_revision(key, rev)],
                success: vec![delete],
                failure: Vec::new(),
            }),
        };
        let outcome = self.write(caller, op).await?;
        match outcome.answer {
            EtcdAnswer::Txn(t) => Ok((t.succeeded, outcome.revision)),
            _ => Err(super::answered_otherwise("a waiter's delete")),
        }
    }

    /// Waits at the lock or election `name` with the key `key` it wrote at `rev`, until it is
    /// first; a waiter that fails or is given up (its call cancelled, its deadline passed)
    /// takes its key out of the line, as etcd's server does, so that nobody holds the lock
    /// unknowingly once the waiters before it go.
    async fn wait_in_line(
        &self,
        caller: &Caller,
        name: &[u8],
        key: &[u8],
        rev: i64,
    ) -> Result<i64, NodeError> {
        let mut in_line = InLine(Some((self.clone(), caller.clone(), key.to_vec(), rev)));
        let first = self.wait_first(name, key, rev).await;
        if first.is_ok() {
            in_line.0 = None;
        }
        first
    }
}

/// A waiter's key, deleted when dropped unless it was taken out.
struct InLine(Option<(EtcdApi, Caller, Vec<u8>, i64)>);

impl Drop for InLine {
    fn drop(&mut self) {
        if let Some((api, caller, key, rev)) = self.0.take() {
            tokio::spawn(async move {
                if let Err(e) = api.delete_if(caller, &key, Some(rev)).await {
                    tracing::debug!(error = %e, "a given-up waiter's key stays until its lease ends");
                }
            });
        }
    }
}

/// `v3lock.Lock`.
impl EtcdApi {
    /// Holds the lock `name` under `lease` once every waiter before it has gone: answered with
    /// the key that holds it, which `Unlock` deletes.
    pub async fn lock(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: lock::LockRequest,
    ) -> Result<lock::LockResponse, NodeError> {
        self.counted(
            "etcd.Lock",
            credentials,
            deadline,
            true,
            |caller| async move {
                name_field(&m.name, m.lease)?;
                let key = waiter_key(&m.name, m.lease);
                let rev = self.enqueue(&caller, &key, m.lease, &[]).await?;
                let revision = self.wait_in_line(&caller, &m.name, &key, rev).await?;
                Ok(lock::LockResponse {
                    header: Some(self.header(revision)),
                    key,
                })
            },
        )
        .await
    }

    pub async fn unlock(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: lock::UnlockRequest,
    ) -> Result<lock::UnlockResponse, NodeError> {
        self.counted(
            "etcd.Unlock",
            credentials,
            deadline,
            true,
            |caller| async move {
                core::key_field(&m.key, &[])?;
                let (_, revision) = self.delete_if(caller, &m.key, None).await?;
                Ok(lock::UnlockResponse {
                    header: Some(self.header(revision)),
                })
            },
        )
        .await
    }
}

/// `v3election.Election`.
impl EtcdApi {
    pub async fn campaign(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: election::CampaignRequest,
    ) -> Result<election::CampaignResponse, NodeError> {
        self.counted(
            "etcd.Campaign",
            credentials,
            deadline,
            true,
            |caller| async move {
                name_field(&m.name, m.lease)?;
                let key = waiter_key(&m.name, m.lease);
                let rev = self.enqueue(&caller, &key, m.lease, &m.value).await?;
                let revision = self.wait_in_line(&caller, &m.name, &key, rev).await?;
                // A campaign again under the same lease keeps its place and proclaims its value.
                self.proclaim_at(caller, &key, rev, &m.value).await?;
                Ok(election::CampaignResponse {
                    header: Some(self.header(revision)),
                    leader: Some(election::LeaderKey {
                        name: m.name,
                        key,
                        rev,
                        lease: m.lease,
                    }),
                })
            },
        )
        .await
    }

    /// Writes `value` to the leader's key if it is still the key created at `rev`.
    async fn proclaim_at(
        &self,
        caller: Caller,
        key: &[u8],
        rev: i64,
        value: &[u8],
    ) -> Result<i64, NodeError> {
        let still = created_at_revision(key, rev);
        let put = RequestOp::Put(core::PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            ignore_lease: true,
            ..core::PutRequest::default()
        });
        let op = EtcdOp::Txn(core::Txn {
            compare: vec![still],
            success: vec![put],
            failure: Vec::new(),
        });
        let outcome = self.write(caller, op).await?;
        match outcome.answer {
            EtcdAnswer::Txn(t) if t.succeeded => Ok(outcome.revision),
            _ => Err(not_leader()),
        }
    }

    pub async fn proclaim(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: election::ProclaimRequest,
    ) -> Result<election::ProclaimResponse, NodeError> {
        self.counted(
            "etcd.Proclaim",
            credentials,
            deadline,
            true,
            |caller| async move {
                let leader = leader_field(m.leader)?;
                let revision = self
                    .proclaim_at(caller, &leader.key, leader.rev, &m.value)
                    .await?;
                Ok(election::ProclaimResponse {
                    header: Some(self.header(revision)),
                })
            },
        )
        .await
    }

    pub async fn resign(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: election::ResignRequest,
    ) -> Result<election::ResignResponse, NodeError> {
        self.counted(
            "etcd.Resign",
            credentials,
            deadline,
            true,
            |caller| async move {
                let leader = leader_field(m.leader)?;
                let (_, revision) = self
                    .delete_if(caller, &leader.key, Some(leader.rev))
                    .await?;
                Ok(election::ResignResponse {
                    header: Some(self.header(revision)),
                })
            },
        )
        .await
    }

    /// The election's leader now: its key and value, linearizable as a range is.
    pub async fn leader(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: election::LeaderRequest,
    ) -> Result<election::LeaderResponse, NodeError> {
        name_field(&m.name, 1)?;
        let (prefix, end) = under(&m.name);
        let first = pb::RangeRequest {
            key: prefix,
            range_end: end,
            limit: 1,
            sort_order: pb::range_request::SortOrder::Ascend as i32,
            sort_target: pb::range_request::SortTarget::Create as i32,
            ..pb::RangeRequest::default()
        };
        let found = self.range(credentials, deadline, first).await?;
        match found.kvs.into_iter().next() {
            Some(kv) => Ok(election::LeaderResponse {
                header: found.header,
                kv: Some(kv),
            }),
            None => Err(no_leader()),
        }
    }

    /// The election's leader each time it changes (or proclaims), from its current one on: a
    /// task that sends until the client goes.
    pub fn observe(
        &self,
        credentials: &Credentials,
        m: election::LeaderRequest,
    ) -> Result<ObservedLeaders, NodeError> {
        name_field(&m.name, 1)?;
        let caller = Caller::of(&self.node, credentials)?;
        let (prefix, end) = under(&m.name);
        {
            let state = self.node.state().read();
            let action = leasehold_core::auth::Action::ReadKey(&core::span_prefix(&prefix, &end));
            caller.may(state.table.policy(), &action)?;
        }
        Ok(ObservedLeaders {
            api: self.node.clone(),
            prefix,
            end,
            last: None,
            applied: self.node.state().applied_index(),
        })
    }
}

/// An `Observe` stream's state: the leader last sent.
pub(crate) struct ObservedLeaders {
    api: crate::node::Node,
    prefix: Vec<u8>,
    end: Vec<u8>,
    last: Option<mvccpb::KeyValue>,
    applied: watch::Receiver<u64>,
}

impl ObservedLeaders {
    /// The leader, once it differs from the one sent last.
    pub async fn next(&mut self) -> Result<election::LeaderResponse, NodeError> {
        loop {
            {
                let state = self.api.state().read();
                let etcd = state.table.etcd();
                let now = etcd
                    .first_created(&self.prefix, &self.end)
                    .map(|kv| convert::key_value(&kv));
                if now.is_some() && now != self.last {
                    self.last = now.clone();
                    return Ok(election::LeaderResponse {
                        header: Some(pb::ResponseHeader {
                            member_id: self.api.id(),
                            revision: etcd.revision(),
                            ..pb::ResponseHeader::default()
                        }),
                        kv: now,
                    });
                }
            }
            self.applied
                .changed()
                .await
                .map_err(|_| NodeError::ShuttingDown)?;
        }
    }
}

fn leader_field(leader: Option<election::LeaderKey>) -> Result<election::LeaderKey, NodeError> {
    let leader = leader.ok_or_else(|| {
        NodeError::Invalid(InvalidInput::new(
            "leader",
            "names the leader's key from Campaign",
        ))
    })?;
    core::key_field(&leader.key, &[])?;
    Ok(leader)
}

/// etcd's words for a proclaim by a campaigner that no longer leads.
fn not_leader() -> NodeError {
    NodeError::Refused("etcdserver: election: not leader".into())
}

/// etcd's words for an election nobody campaigns in.
fn no_leader() -> NodeError {
    NodeError::Refused("etcdserver: election: no leader".into())
}
