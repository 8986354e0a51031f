//! The `LeaseStore` service's calls: validate, propose or read, and forward to the leader when
//! this node does not lead, so clients never need to know who leads. Writes go there in batches
//! (the forwarder); a read is forwarded as its own call.

use std::future::Future;
use std::sync::Arc;

use super::caller::{Caller, Credentials, DenialLog};
use super::{convert, watch, Deadline, Plane};
use crate::limits::MAX_BATCH_CALLS_PER_MESSAGE;
use crate::metrics::Metrics;
use crate::node::{Node, NodeError, Reading};
use crate::proto::v1 as pb;
use crate::raft::Applied;
use leasehold_core::auth::{Action, Denied};
use leasehold_core::limits::{name, token_field};
use leasehold_core::{Fence, InvalidInput, Limits, Op, Renewal, RequestId};

/// One unary call of the service: the `Batch` stream's oneof, and so the one table of them.
pub(crate) type Call = pb::batch_call::Request;
/// What a unary call answers (never `Error`: a refusal is the `NodeError`).
pub(crate) type Answer = pb::batch_answer::Answer;

pub(crate) struct LeaseApi {
    node: Node,
    plane: Plane,
    denials: DenialLog,
    /// Ends long-lived watch streams when the node stops, so they do not hold its shutdown.
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where requests are counted: the client plane's API only, so that a read a follower
    /// forwards is counted once, where the client sent it.
    metrics: Option<Arc<Metrics>>,
}

/// A typed refusal by the store in an answer, for `leasehold_refusals_total{reason}`.
pub(super) trait Refusal {
    fn refusal(&self) -> Option<&'static str> {
        None
    }
}

impl Refusal for pb::AcquireResponse {
    fn refusal(&self) -> Option<&'static str> {
        use pb::acquire_response::Outcome;
        matches!(self.outcome, Some(Outcome::HeldBy(_))).then_some("held_by")
    }
}

impl Refusal for pb::ReleaseResponse {
    fn refusal(&self) -> Option<&'static str> {
        use pb::release_response::Outcome;
        match self.outcome {
            Some(Outcome::NotHeld(_)) => Some("not_held"),
            Some(Outcome::HeldBy(_)) => Some("held_by"),
            Some(Outcome::WrongToken(_)) => Some("wrong_token"),
            _ => None,
        }
    }
}

impl Refusal for pb::RenewResponse {
    /// A renewal with any lease refused is counted once, as lost: its holder lost a lease.
    fn refusal(&self) -> Option<&'static str> {
        use pb::lease_renewal::Outcome;
        let renewed = |l: &pb::LeaseRenewal| matches!(l.outcome, Some(Outcome::Renewed(_)));
        (!self.leases.iter().all(renewed)).then_some("not_renewed")
    }
}

impl Refusal for pb::PutResponse {
    fn refusal(&self) -> Option<&'static str> {
        use pb::put_response::Outcome;
        matches!(self.outcome, Some(Outcome::StaleToken(_))).then_some("stale_token")
    }
}

impl Refusal for pb::DeleteResponse {
    fn refusal(&self) -> Option<&'static str> {
        use pb::delete_response::Outcome;
        matches!(self.outcome, Some(Outcome::StaleToken(_))).then_some("stale_token")
    }
}

// Reads and the rest answer without refusing: a stale token checked is an answer.
impl Refusal for pb::GetResponse {}
impl Refusal for pb::GetLeaseResponse {}
impl Refusal for pb::CheckTokenResponse {}
impl Refusal for pb::RegisterResponse {}
impl Refusal for pb::CloseSessionResponse {}
impl Refusal for pb::AdvanceResponse {}
impl Refusal for pb::ListLeasesResponse {}
impl Refusal for pb::ListKeysResponse {}

/// A unary call's request, as the proto's table (`lease_calls!`) describes it.
pub(super) trait Method: Sized {
    type Response: Refusal;
    /// The `rpc` label it is counted under.
    const RPC: &'static str;
    /// Whether the call changes the store: a read given up at its deadline changed nothing.
    const WRITES: bool;
    fn call(self) -> Call;
    /// The response, if `answer` is this call's.
    fn answered(answer: Answer) -> Option<Self::Response>;
}

/// `true` for a row the proto marks as a write.
macro_rules! writes {
    (write) => {
        true
    };
    (read) => {
        false
    };
}

/// Each call's [`Method`], and [`LeaseApi::call`], the dispatch of the `Batch` stream's oneof
/// to the methods below.
macro_rules! methods {
    (; $($name:ident $method:ident $request:ident $response:ident $kind:ident;)*) => {
        $(
            impl Method for pb::$request {
                type Response = pb::$response;
                const RPC: &'static str = stringify!($method);
                const WRITES: bool = writes!($kind);
                fn call(self) -> Call {
                    Call::$name(self)
                }
                fn answered(answer: Answer) -> Option<pb::$response> {
                    match answer {
                        Answer::$name(response) => Some(response),
                        _ => None,
                    }
                }
            }
        )*

        impl LeaseApi {
            /// Any unary call, answered by its method below.
            pub async fn call(
                &self,
                credentials: &Credentials,
                deadline: Deadline,
                call: Call,
            ) -> Result<Answer, NodeError> {
                match call {
                    $(Call::$name(m) => self.$method(credentials, deadline, m).await.map(Answer::$name),)*
                }
            }
        }
    };
}

leasehold_proto::lease_calls!(methods);

/// A fence as the API carries it, as the log does.
fn fence(f: pb::Fence) -> Fence {
    Fence {
        lease: f.lease,
        token: f.token,
    }
}

fn request_id(id: Option<&pb::RequestId>) -> Option<RequestId> {
    id.filter(|id| id.client_id != 0).map(|id| RequestId {
        client: id.client_id,
        sequence: id.sequence,
    })
}

impl LeaseApi {
    pub fn new(node: Node, plane: Plane) -> Self {
        LeaseApi {
            node,
            plane,
            denials: DenialLog::default(),
            stopping: None,
            metrics: None,
        }
    }

    /// Counts every request in `metrics`.
    pub fn counting_in(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Watch streams end when `stopping` turns true.
    pub fn stopping_on(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// Where watches and `Batch` streams learn that the node stops.
    pub fn stopping(&self) -> Option<tokio::sync::watch::Receiver<bool>> {
        self.stopping.clone()
    }

    /// Refuses a `Batch` message of more calls than [`MAX_BATCH_CALLS_PER_MESSAGE`]: none of them
    /// is made.
    pub fn check_batch(calls: usize) -> Result<(), NodeError> {
        if calls <= MAX_BATCH_CALLS_PER_MESSAGE {
            return Ok(());
        }
        let problem = format!(
            "a BatchRequest carries at most {MAX_BATCH_CALLS_PER_MESSAGE} calls, not {calls}; none \
             of its calls was made"
        );
        Err(NodeError::Invalid(InvalidInput::new("calls", problem)))
    }

    /// One call of a `Batch` (gRPC's stream, HTTP's request), answered as its unary call, by
    /// its own timeout: its answer, or its refusal as the unary call's status would say it.
    pub async fn batch_call(
        &self,
        credentials: &Credentials,
        call: pb::BatchCall,
    ) -> pb::BatchAnswer {
        let answered = match call.request {
            Some(request) => {
                let deadline = match call.timeout_ms {
                    0 => Deadline::NONE,
                    ms => Deadline::after(std::time::Duration::from_millis(ms.into())),
                };
                self.call(credentials, deadline, request).await
            }
            None => Err(NodeError::Invalid(InvalidInput::new(
                "request",
                "a BatchCall names one LeaseStore call (acquire, put, ...): this one names none",
            ))),
        };
        pb::BatchAnswer {
            id: call.id,
            answer: Some(answered.unwrap_or_else(|e| Answer::Error(e.into()))),
        }
    }

    /// Answers `m` with `answer` for the caller `credentials` name, until `deadline`, and counts
    /// it: its outcome, its duration, its refusal if any.
    pub(super) async fn counted<M: Method, Fut>(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: M,
        answer: impl FnOnce(Caller, M) -> Fut,
    ) -> Result<M::Response, NodeError>
    where
        Fut: Future<Output = Result<M::Response, NodeError>>,
    {
        let rpc = M::RPC;
        let started = std::time::Instant::now();
        let result = match Caller::of(&self.node, credentials) {
            Ok(caller) => deadline.bound(M::WRITES, answer(caller, m)).await,
            Err(refused) => Err(refused),
        };
        if let Err(e) = &result {
            if e.reason() == "DENIED" && self.plane == Plane::Client {
                self.denials.denied(rpc, &e.to_string());
            }
        }
        if let Some(metrics) = &self.metrics {
            let outcome = match &result {
                Ok(answer) => Ok(answer.refusal()),
                Err(e) => Err(e.code()),
            };
            metrics.request(rpc, started.elapsed(), outcome);
        }
        result
    }

    /// Proposes `op` for `caller` (decided where it applies), or forwards it to the leader.
    async fn write(
        &self,
        caller: Caller,
        op: Op,
        request: Option<RequestId>,
    ) -> Result<Applied, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let op = caller.log(op);
        self.node.write_or_forward(op, request).await
    }

    /// A fence names a lease, so a fenced write needs `check` on it besides the write's own
    /// permission (safety review 161302a, finding 7): judged here, by the policy this node
    /// applied, and by the leader's where this node's denies. The log's check stays the key's
    /// alone, so that entries logged before this rule replay as they were acknowledged.
    fn may_fence(&self, caller: &Caller, fence: Option<&pb::Fence>) -> Result<(), NodeError> {
        // A caller without an identity is refused every write by the log's own check while
        // the policy is on, and may do anything while it is off: nothing to judge here, and no
        // lock of the applied state taken on the hot path of a fenced write.
        let (Some(fence), Some(_)) = (fence, caller.identity()) else {
            return Ok(());
        };
        let state = self.node.state().read();
        let judged = caller.may(state.table.policy(), &Action::Check(&fence.lease));
        self.node.denied_here(judged)
    }

    /// Reads with `read` in a linearizable read on the leader, once the policy there lets the
    /// caller do `action`; a follower forwards the call to the leader with the caller, unless
    /// it was forwarded here (leadership moved: the client retries).
    async fn read<Req: Method, T>(
        &self,
        caller: Caller,
        m: Req,
        action: impl for<'a> Fn(&'a Req) -> Action<'a>,
        read: impl FnOnce(&Reading, &Req) -> T,
        answer: impl FnOnce(T, Applied) -> Result<Req::Response, NodeError>,
    ) -> Result<Req::Response, NodeError> {
        let checked = |s: &Reading, m: &Req, caller: &Caller| {
            (caller.may(s.table.policy(), &action(m))).map(|()| read(s, m))
        };
        self.read_as(caller, m, false, checked, answer).await
    }

    /// Reads with `read`, which judges for itself what the caller may see: linearizable on the
    /// leader (forwarded there as [`read`](Self::read) is), or, `serializable`, this node's
    /// applied state as it stands.
    pub(super) async fn read_as<Req: Method, T>(
        &self,
        caller: Caller,
        m: Req,
        serializable: bool,
        read: impl FnOnce(&Reading, &Req, &Caller) -> Result<T, NodeError>,
        answer: impl FnOnce(T, Applied) -> Result<Req::Response, NodeError>,
    ) -> Result<Req::Response, NodeError> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let checked = |s: &Reading| read(s, &m, &caller);
        let result = match serializable {
            true => self.node.read_applied(checked),
            false => self.node.read(checked).await,
        };
        let error = match result {
            Ok((Ok(found), at)) => return answer(found, at),
            Ok((Err(denied), _)) => return Err(denied),
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
        let forwarded = self
            .node
            .link()
            .read(*leader, addr.clone(), caller.on_behalf(), m.call());
        let answer = forwarded.await?;
        Req::answered(answer).ok_or_else(|| {
            NodeError::Invariant("the leader answered a forwarded read with another call's".into())
        })
    }
}

/// The calls, each counted (`counted`) around its answer.
impl LeaseApi {
    pub async fn acquire(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::AcquireRequest,
    ) -> Result<pb::AcquireResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let id = request_id(m.request_id.as_ref());
            let op = Op::Acquire {
                lease: m.lease,
                holder: m.holder,
                ttl_ms: m.ttl_ms,
            };
            convert::acquire(self.write(caller, op, id).await?)
        })
        .await
    }

    pub async fn release(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::ReleaseRequest,
    ) -> Result<pb::ReleaseResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let id = request_id(m.request_id.as_ref());
            let op = Op::Release {
                lease: m.lease,
                holder: m.holder,
                token: m.token,
            };
            convert::release(self.write(caller, op, id).await?)
        })
        .await
    }

    pub async fn renew(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::RenewRequest,
    ) -> Result<pb::RenewResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let id = request_id(m.request_id.as_ref());
            let leases = m.leases.into_iter().map(|r| Renewal {
                lease: r.lease,
                holder: r.holder,
                token: r.token,
                ttl_ms: r.ttl_ms,
            });
            let op = Op::Renew {
                leases: leases.collect(),
            };
            convert::renew(self.write(caller, op, id).await?)
        })
        .await
    }

    pub async fn put(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::PutRequest,
    ) -> Result<pb::PutResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            self.may_fence(&caller, m.fence.as_ref())?;
            let id = request_id(m.request_id.as_ref());
            let op = Op::Put {
                key: m.key,
                value: m.value,
                fence: m.fence.map(fence),
            };
            convert::put(self.write(caller, op, id).await?)
        })
        .await
    }

    pub async fn delete(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::DeleteRequest,
    ) -> Result<pb::DeleteResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            self.may_fence(&caller, m.fence.as_ref())?;
            let id = request_id(m.request_id.as_ref());
            let op = Op::Delete {
                key: m.key,
                fence: m.fence.map(fence),
            };
            convert::delete(self.write(caller, op, id).await?)
        })
        .await
    }

    pub async fn get(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::GetRequest,
    ) -> Result<pb::GetResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            name("key", &m.key, Limits::MAX_KEY_BYTES)?;
            self.read(
                caller,
                m,
                |m| Action::ReadKey(&m.key),
                |s, m| s.table.row(&m.key).map(<[u8]>::to_vec),
                |value, at| Ok(convert::get(value, &at)),
            )
            .await
        })
        .await
    }

    pub async fn get_lease(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::GetLeaseRequest,
    ) -> Result<pb::GetLeaseResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            name("lease", &m.lease, Limits::MAX_NAME_BYTES)?;
            self.read(
                caller,
                m,
                |m| Action::ReadLease(&m.lease),
                |s, m| (s.table.lease(&m.lease).cloned(), s.table.now_ms()),
                |(lease, applied_ms), at| Ok(convert::get_lease(lease, applied_ms, &at)),
            )
            .await
        })
        .await
    }

    pub async fn check_token(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::CheckTokenRequest,
    ) -> Result<pb::CheckTokenResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            name("lease", &m.lease, Limits::MAX_NAME_BYTES)?;
            token_field(m.token)?;
            let lease = m.lease.clone();
            self.read(
                caller,
                m,
                |m| Action::Check(&m.lease),
                |s, m| s.table.check_token(&m.lease, m.token),
                |check, at| convert::check_token(&lease, check, &at),
            )
            .await
        })
        .await
    }

    pub async fn register(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::RegisterRequest,
    ) -> Result<pb::RegisterResponse, NodeError> {
        // Any identity may open a session, which is then its own: what it asks under it is
        // what the policy decides. A caller with no identity opens none while the policy is
        // on: a session is replicated state, kept an hour (safety review 161302a, finding 2).
        self.counted(credentials, deadline, m, |caller, _| async move {
            let on = self.node.state().read().table.policy().enabled();
            if on && caller.identity().is_none() {
                return Err(NodeError::Denied(Denied {
                    identity: "anonymous".into(),
                    action: "open a session".into(),
                    resource: String::new(),
                    reason: Some(
                        "authorization is on, and a caller with neither a client certificate \
                         nor a bearer token has no identity to open it under"
                            .into(),
                    ),
                }));
            }
            convert::register(self.write(caller, Op::Register, None).await?)
        })
        .await
    }

    /// Closes the session the request names (log format 2: refused while a member does not
    /// read it). Under the caller's identity, so that only the session's owner closes it.
    pub async fn close_session(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::CloseSessionRequest,
    ) -> Result<pb::CloseSessionResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let Some(id) = request_id(m.request_id.as_ref()) else {
                return Err(NodeError::Invalid(InvalidInput::new(
                    "request_id",
                    "names the session to close: the client id Register gave, and a sequence",
                )));
            };
            convert::close_session(self.write(caller, Op::Close, Some(id)).await?)
        })
        .await
    }

    pub async fn advance(
        &self,
        credentials: &Credentials,
        deadline: Deadline,
        m: pb::AdvanceRequest,
    ) -> Result<pb::AdvanceResponse, NodeError> {
        self.counted(credentials, deadline, m, |caller, m| async move {
            let op = Op::Advance { by_ms: m.ms };
            let id = request_id(m.request_id.as_ref());
            convert::advance(self.write(caller, op, id).await?)
        })
        .await
    }

    /// Starts a watch; its events come until the client goes or the node stops. Admitted as
    /// one watch, of the watches' own budget, for as long as it runs.
    pub async fn watch(
        &self,
        credentials: &Credentials,
        m: pb::WatchRequest,
    ) -> Result<watch::Events, NodeError> {
        let working = self.node.admit_watch()?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, credentials)?;
        watch::start(self.node.clone(), caller, m, self.stopping.clone(), working)
    }
}
