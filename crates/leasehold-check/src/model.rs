//! The reference model: the README's semantics written out as plainly as possible, sharing no
//! code with [`LeaseTable`](leasehold_core::LeaseTable). The checkers replay the cluster's log
//! through this model, so a bug in the product's table (a dedupe that forgets, a fence check gone
//! missing) shows up as a difference instead of being replayed along; a property test compares
//! the two command by command.
//!
//! Deliberately plain: every lease is the list of its grants and every session the map of its
//! applied requests, kept whole; each question is answered from them directly. Easy to check by
//! eye, and no step costs more than a lookup, so a ten-minute fault run's million operations
//! replay in seconds.

use std::collections::BTreeMap;

use crate::etcd_model::EtcdModel;
use crate::limits::KEPT_ANSWERS;
use leasehold_core::auth::{Denied, Policy};
use leasehold_core::{
    Command, Fence, Op, Outcome, ReleaseRefusal, Renewed, RequestId, FORGET_BATCH, SESSION_IDLE_MS,
};

#[derive(Clone, Debug)]
struct Grant {
    holder: String,
    token: u64,
    expires_at_ms: u64,
    /// When its holder released it, if it did.
    released_at_ms: Option<u64>,
}

impl Grant {
    /// When this grant stopped holding its lease, if it has by `now_ms`.
    fn free_since(&self, now_ms: u64) -> Option<u64> {
        match self.released_at_ms {
            Some(at) => Some(at),
            None => (self.expires_at_ms <= now_ms).then_some(self.expires_at_ms),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct ClientSession {
    /// When the store last heard from the client: its registration, or the latest request
    /// naming it while it was open (store time never goes back, so the latest is the largest).
    last_heard_ms: u64,
    /// Once expired, a session never comes back.
    expired: bool,
    /// Every request applied under this session, by sequence: its operation and answer.
    applied: BTreeMap<u64, (Op, Outcome)>,
    /// The identity that opened it, if one did: requests of any other are refused.
    owner: Option<String>,
}

/// The reference model of a Leasehold table, written from the README.
#[derive(Clone, Debug, Default)]
pub struct Model {
    now_ms: u64,
    grants: BTreeMap<String, Vec<Grant>>,
    /// Per lease, the largest token a fenced put was accepted with.
    fenced_max: BTreeMap<String, u64>,
    rows: BTreeMap<String, Vec<u8>>,
    /// Sessions by client id; ids are handed out 1, 2, 3, ... in registration order.
    sessions: Vec<ClientSession>,
    /// The largest token of a forgotten lease: a lease with no grants starts above it.
    floor: u64,
    /// Who may do what. The policy's own decisions are core's ([`Policy`], unit-tested there);
    /// the model judges what the table does with them: a denied operation changes nothing, and
    /// its retry gets the same denial.
    policy: Policy,
    /// etcd's keyspace, modelled apart (`etcd_model`).
    etcd: EtcdModel,
}

impl Model {
    /// The store's time.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// A row's value.
    pub fn row(&self, key: &str) -> Option<&[u8]> {
        self.rows.get(key).map(Vec::as_slice)
    }

    /// The holder of `lease` now (none when free, released or expired) and its latest token.
    pub fn lease(&self, lease: &str) -> (Option<&str>, u64) {
        let holder = self.current(lease).map(|g| g.holder.as_str());
        (holder, self.latest_token(lease))
    }

    /// etcd's keyspace as modelled.
    pub fn etcd(&self) -> &EtcdModel {
        &self.etcd
    }

    /// How many sessions are open now.
    pub fn open_sessions(&self) -> usize {
        self.sessions.iter().filter(|s| !s.expired).count()
    }

    fn current(&self, lease: &str) -> Option<&Grant> {
        self.grants
            .get(lease)?
            .last()
            .filter(|g| g.released_at_ms.is_none() && self.now_ms < g.expires_at_ms)
    }

    /// The token of `lease`'s latest grant; 0 for a lease with none (never granted, or
    /// forgotten).
    fn latest_token(&self, lease: &str) -> u64 {
        self.grants
            .get(lease)
            .and_then(|g| g.last())
            .map_or(0, |g| g.token)
    }

    /// The largest token the store has seen for `lease`: granted (1, 2, ... so the latest) or
    /// fenced with.
    fn seen(&self, lease: &str) -> u64 {
        let fenced = self.fenced_max.get(lease).copied().unwrap_or(0);
        self.latest_token(lease).max(fenced)
    }

    /// Applies one logged command and answers as the README says the store answers.
    pub fn apply(&mut self, command: &Command) -> Outcome {
        if let Some(at_ms) = command.at_ms {
            self.now_ms = self.now_ms.max(at_ms);
        }
        // A session expires once an hour of store time has passed since the store last heard
        // from its client, whatever the command that brings that time.
        let now_ms = self.now_ms;
        for session in &mut self.sessions {
            if now_ms >= session.last_heard_ms.saturating_add(SESSION_IDLE_MS) {
                session.expired = true;
            }
        }
        self.etcd.expire(self.now_ms);
        let Some(request) = command.request else {
            return self.apply_op(&command.op);
        };
        if let Some(refused) = self.foreign(request, command.op.identity()) {
            return refused;
        }
        if *command.op.bare() == Op::Close {
            // Closed as if expired, whatever its state; answered Closed every time.
            if let Some(session) = self
                .sessions
                .get_mut(request.client.wrapping_sub(1) as usize)
            {
                session.expired = true;
            }
            return Outcome::Closed;
        }
        match self.admit(request, &command.op) {
            Some(answer) => answer,
            None => {
                let outcome = self.apply_op(&command.op);
                self.session_mut(request)
                    .applied
                    .insert(request.sequence, (command.op.clone(), outcome.clone()));
                outcome
            }
        }
    }

    /// A request under an open session another identity opened: denied, not admitted.
    fn foreign(&self, request: RequestId, asker: Option<&str>) -> Option<Outcome> {
        let session = self.sessions.get(request.client.checked_sub(1)? as usize)?;
        let owner = session.owner.as_deref().filter(|_| !session.expired)?;
        (Some(owner) != asker)
            .then(|| Outcome::Denied(Box::new(Denied::foreign_session(asker, request.client))))
    }

    fn session_mut(&mut self, request: RequestId) -> &mut ClientSession {
        &mut self.sessions[(request.client - 1) as usize]
    }

    /// The answer for a request that is not applied now (a retry, or a refusal); `None` to apply.
    fn admit(&mut self, request: RequestId, op: &Op) -> Option<Outcome> {
        let now_ms = self.now_ms;
        let open = request.client >= 1
            && self
                .sessions
                .get((request.client - 1) as usize)
                .is_some_and(|s| !s.expired);
        if !open {
            return Some(Outcome::UnknownSession);
        }
        let session = self.session_mut(request);
        session.last_heard_ms = now_ms;
        // The answers kept are those of the KEPT_ANSWERS highest sequences applied; the rest
        // were forgotten.
        let lowest_kept = session
            .applied
            .keys()
            .rev()
            .nth(KEPT_ANSWERS - 1)
            .copied()
            .unwrap_or(0);
        let forgotten_through = session
            .applied
            .range(..lowest_kept)
            .next_back()
            .map_or(0, |(sequence, _)| *sequence);
        if request.sequence >= lowest_kept {
            if let Some((first_op, first_answer)) = session.applied.get(&request.sequence) {
                return Some(if first_op == op {
                    first_answer.clone()
                } else {
                    Outcome::RequestIdReused
                });
            }
        }
        if request.sequence <= forgotten_through {
            return Some(Outcome::Forgotten);
        }
        None
    }

    fn apply_op(&mut self, op: &Op) -> Outcome {
        let (identity, bearer, op) = (op.identity(), op.bearer(), op.bare());
        let check = |a| self.policy.check_caller(identity, bearer, &a).err();
        if let Some(denied) = op.actions().find_map(check) {
            return Outcome::Denied(Box::new(denied));
        }
        match op {
            Op::As { .. } => self.apply_op(op),
            Op::Auth(change) => {
                if let Err(denied) = self.policy.check_change(identity, bearer, change) {
                    return Outcome::Denied(Box::new(denied));
                }
                match self.policy.apply(change) {
                    Ok(()) => Outcome::PolicyChanged,
                    Err(refusal) => Outcome::PolicyRefused {
                        reason: refusal.to_string(),
                    },
                }
            }
            Op::Acquire {
                lease,
                holder,
                ttl_ms,
            } => self.acquire(lease, holder, *ttl_ms),
            Op::Release {
                lease,
                holder,
                token,
            } => self.release(lease, holder, *token),
            Op::Renew { leases } => Outcome::Renewed(
                leases
                    .iter()
                    .map(|r| self.renew(&r.lease, &r.holder, r.token, r.ttl_ms))
                    .collect(),
            ),
            Op::Put { key, value, fence } => self.put(key, value, fence.as_ref()),
            Op::Advance { by_ms } => {
                self.now_ms = self.now_ms.saturating_add(*by_ms);
                self.etcd.expire(self.now_ms);
                Outcome::Advanced
            }
            Op::Tick => Outcome::Ticked,
            Op::Delete { key, fence } => self.delete(key, fence.as_ref()),
            Op::Forget { retention_ms } => self.forget(*retention_ms),
            Op::Close => Outcome::Closed,
            Op::Etcd(etcd) => self.apply_etcd(etcd, identity, bearer),
            Op::Register => {
                self.sessions.push(ClientSession {
                    last_heard_ms: self.now_ms,
                    owner: identity.map(str::to_owned),
                    ..ClientSession::default()
                });
                Outcome::Registered {
                    client: self.sessions.len() as u64,
                }
            }
        }
    }

    /// An etcd write: what the policy must allow is the core's to name (`EtcdOp::needs`,
    /// `lease_allowed`), as its decisions are; the model judges what the keyspace does.
    fn apply_etcd(
        &mut self,
        etcd: &leasehold_core::etcd::EtcdOp,
        identity: Option<&str>,
        bearer: Option<&str>,
    ) -> Outcome {
        for need in etcd.needs() {
            let allowed = self.policy.check_caller(identity, bearer, &need.action());
            if let Err(denied) = allowed {
                return Outcome::Denied(Box::new(denied));
            }
        }
        let keys = |id| self.etcd.lease_keys(id);
        let allowed =
            leasehold_core::etcd::lease_allowed(etcd, &self.policy, identity, bearer, keys);
        if let Err(denied) = allowed {
            return Outcome::Denied(Box::new(denied));
        }
        let (now, on) = (self.now_ms, self.policy.enabled());
        Outcome::Etcd(Box::new(self.etcd.apply(etcd, now, identity, on)))
    }

    fn acquire(&mut self, lease: &str, holder: &str, ttl_ms: u64) -> Outcome {
        let expires_at_ms = self.now_ms.saturating_add(ttl_ms);
        if let Some(current) = self.current(lease).cloned() {
            if current.holder != holder {
                return Outcome::HeldBy {
                    holder: current.holder.into(),
                    token: current.token,
                    expires_at_ms: current.expires_at_ms,
                };
            }
            if let Some(last) = self.grants.get_mut(lease).and_then(|g| g.last_mut()) {
                last.expires_at_ms = expires_at_ms;
            }
            return Outcome::Granted {
                token: current.token,
                expires_at_ms,
                renewed: true,
            };
        }
        // Each grant of a lease one above the last; the first of a lease with none, one above
        // every token a forgotten lease handed out.
        let token = match self.grants.get(lease).and_then(|g| g.last()) {
            Some(last) => last.token + 1,
            None => self.floor + 1,
        };
        self.grants
            .entry(lease.to_owned())
            .or_default()
            .push(Grant {
                holder: holder.to_owned(),
                token,
                expires_at_ms,
                released_at_ms: None,
            });
        Outcome::Granted {
            token,
            expires_at_ms,
            renewed: false,
        }
    }

    fn release(&mut self, lease: &str, holder: &str, token: u64) -> Outcome {
        if let Err(refusal) = self.holds(lease, holder, token) {
            return Outcome::ReleaseRefused(refusal);
        }
        let now_ms = self.now_ms;
        if let Some(last) = self.grants.get_mut(lease).and_then(|g| g.last_mut()) {
            last.released_at_ms = Some(now_ms);
        }
        Outcome::Released { token }
    }

    /// One lease of a renewal: its current grant runs on to `ttl_ms` from now, if it is
    /// `holder`'s under `token`.
    fn renew(&mut self, lease: &str, holder: &str, token: u64, ttl_ms: u64) -> Renewed {
        if let Err(refusal) = self.holds(lease, holder, token) {
            return Renewed::Refused(refusal);
        }
        let expires_at_ms = self.now_ms.saturating_add(ttl_ms);
        if let Some(last) = self.grants.get_mut(lease).and_then(|g| g.last_mut()) {
            last.expires_at_ms = expires_at_ms;
        }
        Renewed::Until { expires_at_ms }
    }

    /// Whether `holder` holds `lease` now under `token`, and why not.
    fn holds(&self, lease: &str, holder: &str, token: u64) -> Result<(), ReleaseRefusal> {
        let current = self.current(lease).ok_or(ReleaseRefusal::NotHeld)?;
        if current.holder != holder {
            return Err(ReleaseRefusal::HeldByOther {
                holder: current.holder.as_str().into(),
                token: current.token,
                expires_at_ms: current.expires_at_ms,
            });
        }
        if current.token != token {
            return Err(ReleaseRefusal::WrongToken {
                current_token: current.token,
            });
        }
        Ok(())
    }

    fn put(&mut self, key: &str, value: &[u8], fence: Option<&Fence>) -> Outcome {
        if let Some(refused) = self.fence_refuses(fence) {
            return refused;
        }
        self.rows.insert(key.to_owned(), value.to_vec());
        Outcome::Written
    }

    /// Forgets the leases free for `retention_ms` or longer: longest free first (by name among
    /// equals), at most `FORGET_BATCH` of them.
    fn forget(&mut self, retention_ms: u64) -> Outcome {
        let now_ms = self.now_ms;
        let mut due: Vec<(u64, String)> = self
            .grants
            .iter()
            .filter_map(|(lease, grants)| {
                let since = grants.last()?.free_since(now_ms)?;
                (since.saturating_add(retention_ms) <= now_ms).then(|| (since, lease.clone()))
            })
            .collect();
        due.sort();
        due.truncate(FORGET_BATCH);
        for (_, lease) in &due {
            let seen = self.seen(lease);
            self.floor = self.floor.max(seen);
            self.grants.remove(lease);
            self.fenced_max.remove(lease);
        }
        Outcome::Forgot { leases: due.len() }
    }

    fn delete(&mut self, key: &str, fence: Option<&Fence>) -> Outcome {
        if let Some(refused) = self.fence_refuses(fence) {
            return refused;
        }
        Outcome::Deleted {
            existed: self.rows.remove(key).is_some(),
        }
    }

    /// The refusal of a fenced write, if its token is unknown or stale; otherwise the token is
    /// recorded as accepted for its lease.
    fn fence_refuses(&mut self, fence: Option<&Fence>) -> Option<Outcome> {
        let Fence { lease, token } = fence?;
        if !self.grants.contains_key(lease) {
            // No grants: never granted, or forgotten. Tokens 1 to the floor may have been a
            // forgotten lease's, so they are stale; none above was handed out.
            return Some(if *token >= 1 && *token <= self.floor {
                Outcome::StaleToken { fence: self.floor }
            } else {
                Outcome::UnknownToken {
                    lease: lease.as_str().into(),
                    latest_token: self.floor,
                }
            });
        }
        let latest = self.latest_token(lease);
        if *token > latest {
            return Some(Outcome::UnknownToken {
                lease: lease.as_str().into(),
                latest_token: latest,
            });
        }
        let seen = self.seen(lease);
        if *token < seen {
            return Some(Outcome::StaleToken { fence: seen });
        }
        let fenced = self.fenced_max.entry(lease.clone()).or_default();
        *fenced = (*fenced).max(*token);
        None
    }
}

#[cfg(test)]
mod tests {
    //! The product's table against the model, command by command, on random logs.
    use super::*;
    use leasehold_core::auth::{AuthChange, Grant, Permission};
    use leasehold_core::etcd::{
        Compare, CompareResult, CompareTarget, DeleteRangeRequest, EtcdOp, PutRequest,
        RangeRequest, RequestOp, SortOrder, SortTarget, Txn,
    };
    use leasehold_core::{LeaseTable, Renewal};
    use proptest::prelude::*;

    fn op() -> impl Strategy<Value = Op> {
        let lease = prop::sample::select(vec!["l1", "l2"]);
        let who = prop::sample::select(vec!["a", "b", "c"]);
        let key = prop::sample::select(vec!["k1", "k2"]);
        prop_oneof![
            (lease.clone(), who.clone(), 100u64..3_000).prop_map(|(l, h, ttl_ms)| Op::Acquire {
                lease: l.into(),
                holder: h.into(),
                ttl_ms
            }),
            (lease.clone(), who.clone(), 1u64..5).prop_map(|(l, h, token)| Op::Release {
                lease: l.into(),
                holder: h.into(),
                token
            }),
            // Duplicates and all: apply must be total on what edge validation refuses.
            prop::collection::vec((lease.clone(), who, 1u64..5, 100u64..3_000), 1..4).prop_map(
                |leases| Op::Renew {
                    leases: leases
                        .into_iter()
                        .map(|(l, h, token, ttl_ms)| Renewal {
                            lease: l.into(),
                            holder: h.into(),
                            token,
                            ttl_ms,
                        })
                        .collect(),
                }
            ),
            // From 0: apply must be total even on tokens edge validation refuses.
            (key.clone(), lease, 0u64..5).prop_map(|(k, l, token)| Op::Put {
                key: k.into(),
                value: b"v".to_vec(),
                fence: Some(Fence {
                    lease: l.into(),
                    token
                }),
            }),
            key.clone().prop_map(|k| Op::Put {
                key: k.into(),
                value: b"p".to_vec(),
                fence: None,
            }),
            (
                key,
                prop::option::of((prop::sample::select(vec!["l1", "l2"]), 0u64..5))
            )
                .prop_map(|(k, fence)| Op::Delete {
                    key: k.into(),
                    fence: fence.map(|(l, token)| Fence {
                        lease: l.into(),
                        token
                    }),
                }),
            (1u64..2_000).prop_map(|by_ms| Op::Advance { by_ms }),
            Just(Op::Tick),
            Just(Op::Register),
            Just(Op::Close),
            (0u64..3_000).prop_map(|retention_ms| Op::Forget { retention_ms }),
            // The policy: `a` an admin, `b` holding l1 and writing k1 once bound.
            Just(Op::Auth(AuthChange::Enable { admin: "a".into() })),
            Just(Op::Auth(AuthChange::Disable)),
            Just(Op::Auth(AuthChange::PutRole {
                name: "r".into(),
                grants: vec![
                    Grant {
                        permission: Permission::Hold,
                        prefix: "l1".into()
                    },
                    Grant {
                        permission: Permission::Write,
                        prefix: "k1".into()
                    },
                ],
            })),
            Just(Op::Auth(AuthChange::Bind {
                identity: "b".into(),
                role: "r".into()
            })),
            etcd_op().prop_map(Op::Etcd),
            etcd_op().prop_map(Op::Etcd),
            etcd_op().prop_map(Op::Etcd),
        ]
    }

    /// etcd's writes on a few keys (`k1` among them, which the role lets `b` write) and three
    /// lease ids, nested transactions and all, as the edge would let through and not.
    fn etcd_op() -> impl Strategy<Value = EtcdOp> {
        let lease = prop::sample::select(vec![0i64, 1, 2, 3]);
        let nested = (etcd_txn(), etcd_request()).prop_map(|(mut outer, inner)| {
            outer.success.push(RequestOp::Txn(Txn {
                compare: vec![],
                success: vec![inner],
                failure: vec![],
            }));
            outer
        });
        prop_oneof![
            3 => etcd_txn().prop_map(EtcdOp::Txn),
            1 => nested.prop_map(EtcdOp::Txn),
            1 => (lease.clone(), 1i64..4).prop_map(|(id, ttl_s)| EtcdOp::LeaseGrant { id, ttl_s }),
            1 => lease.clone().prop_map(|id| EtcdOp::LeaseKeepAlive { id }),
            1 => lease.prop_map(|id| EtcdOp::LeaseRevoke { id }),
            1 => (1i64..12).prop_map(|revision| EtcdOp::Compact { revision }),
        ]
    }

    fn etcd_txn() -> impl Strategy<Value = Txn> {
        (
            prop::collection::vec(etcd_compare(), 0..3),
            prop::collection::vec(etcd_request(), 0..4),
            prop::collection::vec(etcd_request(), 0..3),
        )
            .prop_map(|(compare, success, failure)| Txn {
                compare,
                success,
                failure,
            })
    }

    fn etcd_key() -> impl Strategy<Value = Vec<u8>> {
        prop::sample::select(vec!["k1", "k2", "e/a", "e/b"]).prop_map(|k| k.as_bytes().to_vec())
    }

    fn etcd_end() -> impl Strategy<Value = Vec<u8>> {
        prop::sample::select(vec!["", "\0", "e0", "k3"]).prop_map(|k| k.as_bytes().to_vec())
    }

    fn etcd_compare() -> impl Strategy<Value = Compare> {
        let result = prop::sample::select(vec![
            CompareResult::Equal,
            CompareResult::Greater,
            CompareResult::Less,
            CompareResult::NotEqual,
        ]);
        let target = prop_oneof![
            (0i64..3).prop_map(CompareTarget::Version),
            (0i64..6).prop_map(CompareTarget::Create),
            (0i64..6).prop_map(CompareTarget::Mod),
            prop::sample::select(vec!["", "v", "w"])
                .prop_map(|v| CompareTarget::Value(v.as_bytes().to_vec())),
            (0i64..3).prop_map(CompareTarget::Lease),
        ];
        (result, target, etcd_key(), etcd_end()).prop_map(|(result, target, key, range_end)| {
            Compare {
                result,
                target,
                key,
                range_end,
            }
        })
    }

    fn etcd_range() -> impl Strategy<Value = RangeRequest> {
        let order =
            prop::sample::select(vec![SortOrder::None, SortOrder::Ascend, SortOrder::Descend]);
        let target = prop::sample::select(vec![
            SortTarget::Key,
            SortTarget::Version,
            SortTarget::Create,
            SortTarget::Mod,
            SortTarget::Value,
        ]);
        (
            etcd_key(),
            etcd_end(),
            0i64..3,
            order,
            target,
            any::<bool>(),
            0i64..4,
        )
            .prop_map(
                |(key, range_end, limit, sort_order, sort_target, keys_only, min_mod_revision)| {
                    RangeRequest {
                        key,
                        range_end,
                        limit,
                        sort_order,
                        sort_target,
                        keys_only,
                        min_mod_revision,
                        ..RangeRequest::default()
                    }
                },
            )
    }

    fn etcd_request() -> impl Strategy<Value = RequestOp> {
        let put = (
            etcd_key(),
            prop::sample::select(vec!["v", "w"]),
            prop::sample::select(vec![0i64, 1, 2, 3]),
            any::<bool>(),
            prop::sample::select(vec![(false, false), (true, false), (false, true)]),
        )
            .prop_map(
                |(key, value, lease, prev_kv, (ignore_value, ignore_lease))| {
                    RequestOp::Put(PutRequest {
                        key,
                        value: if ignore_value {
                            vec![]
                        } else {
                            value.as_bytes().to_vec()
                        },
                        lease: if ignore_lease { 0 } else { lease },
                        prev_kv,
                        ignore_value,
                        ignore_lease,
                    })
                },
            );
        let delete =
            (etcd_key(), etcd_end(), any::<bool>()).prop_map(|(key, range_end, prev_kv)| {
                RequestOp::DeleteRange(DeleteRangeRequest {
                    key,
                    range_end,
                    prev_kv,
                })
            });
        prop_oneof![
            2 => put,
            1 => delete,
            1 => etcd_range().prop_map(RequestOp::Range),
        ]
    }

    /// An op as a client logs it: bare (no certificate), or with identity `a` or `b`.
    fn logged_op() -> impl Strategy<Value = Op> {
        (prop::option::of(prop::sample::select(vec!["a", "b"])), op()).prop_map(|(who, op)| {
            match who {
                Some(identity) => Op::As {
                    identity: identity.into(),
                    bearer: None,
                    op: Box::new(op),
                },
                None => op,
            }
        })
    }

    /// Commands with or without a request id: clients 0 to 3 (0 never registered), sequences
    /// drawn small so that retries, reuse with another op and answers out of order all happen;
    /// time jumps past the session idle limit now and then.
    fn command() -> impl Strategy<Value = Command> {
        let request = prop::option::of((0u64..4, 1u64..6))
            .prop_map(|r| r.map(|(client, sequence)| RequestId { client, sequence }));
        let at_ms = prop_oneof![
            8 => prop::option::of(0u64..20_000),
            1 => Just(Some(SESSION_IDLE_MS)),
            1 => Just(Some(2 * SESSION_IDLE_MS + 7)),
        ];
        (at_ms, request, logged_op()).prop_map(|(at_ms, request, op)| Command {
            at_ms,
            request,
            op,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]
        #[test]
        fn the_table_answers_every_command_as_the_model_does(
            commands in prop::collection::vec(command(), 1..120),
            read in etcd_range(),
        ) {
            let mut table = LeaseTable::default();
            let mut model = Model::default();
            // The largest token each lease name ever had, through forgetting too.
            let mut highest: BTreeMap<&str, u64> = BTreeMap::new();
            for c in &commands {
                let before = table.clone();
                let outcome = table.apply(c);
                prop_assert_eq!(&outcome, &model.apply(c), "command {:?}", c);
                prop_assert_eq!(table.now_ms(), model.now_ms());
                prop_assert!(table.now_ms() >= before.now_ms(), "store time went backwards");
                prop_assert_eq!(table.session_count(), model.open_sessions());
                if !outcome.accepted() {
                    for key in ["k1", "k2"] {
                        prop_assert_eq!(table.row(key), before.row(key), "refusal changed a row");
                    }
                    for lease in ["l1", "l2"] {
                        prop_assert_eq!(table.lease(lease), before.lease(lease),
                            "refusal changed a lease");
                    }
                }
                for lease in ["l1", "l2"] {
                    let found = table.lease(lease);
                    let (holder, token) = model.lease(lease);
                    prop_assert_eq!(found.and_then(|l| l.holder_at(table.now_ms())).map(|h| h.as_str()), holder);
                    prop_assert_eq!(found.map_or(0, |l| l.token), token);
                    let was = highest.get(lease).copied().unwrap_or(0);
                    if let Some(found) = found {
                        prop_assert!(found.token >= was, "token of {} went backwards", lease);
                        highest.insert(lease, found.token);
                    }
                    if let Outcome::Granted { token, renewed: false, .. } = &outcome {
                        if matches!(c.op.bare(), Op::Acquire { lease: l, .. } if l == lease) {
                            prop_assert!(*token > was, "{} handed out token {} twice", lease, token);
                        }
                    }
                }
                for key in ["k1", "k2"] {
                    prop_assert_eq!(table.row(key), model.row(key));
                }
                // The expiry index answers what a scan of every lease would.
                let scanned = ["l1", "l2"]
                    .iter()
                    .filter_map(|l| table.lease(l))
                    .filter(|lease| lease.holder_at(table.now_ms()).is_some())
                    .map(|lease| lease.expires_at_ms)
                    .min();
                // A tick is due then, or when an etcd lease runs out.
                let due = scanned.into_iter().chain(model.etcd().next_expiry_ms()).min();
                prop_assert_eq!(table.next_expiry_ms(), due);
                // And when the longest-free lease falls due to be forgotten.
                let free_since = ["l1", "l2"]
                    .iter()
                    .filter_map(|l| table.lease(l))
                    .filter(|lease| lease.holder_at(table.now_ms()).is_none())
                    .map(|lease| lease.expires_at_ms)
                    .min();
                prop_assert_eq!(table.next_forget_ms(500), free_since.map(|at| at + 500));
                // etcd's keyspace: its revision, every key, every lease, and a range read.
                let etcd = table.etcd();
                prop_assert_eq!(etcd.revision(), model.etcd().revision());
                let every = RangeRequest {
                    key: vec![0],
                    range_end: vec![0],
                    ..RangeRequest::default()
                };
                prop_assert_eq!(etcd.range(&every, 0).unwrap().kvs, model.etcd().keys());
                prop_assert_eq!(etcd.lease_ids().collect::<Vec<_>>(), model.etcd().lease_ids());
                prop_assert_eq!(etcd.range(&read, 0), model.etcd().range(&read));
            }
            // A table loaded from its encoding (a snapshot) is the same table.
            let bytes = postcard::to_allocvec(&table).unwrap();
            let loaded = LeaseTable::from_bytes(&bytes).unwrap();
            prop_assert_eq!(&loaded, &table);
        }
    }
}
