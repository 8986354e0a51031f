//! The public `LeaseStore` service: validate, propose or read, and forward to the leader when
//! this node does not lead, so clients never need to know who leads. Writes go there in batches
//! (the forwarder); a read is forwarded as its own call.

use std::future::Future;
use std::sync::Arc;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::authz::{Caller, DenialLog, Plane};
use super::error::{DENIED_KEY, ORIGIN_KEY};
use super::{convert, Node, NodeError};
use crate::limits::FORWARD_TIMEOUT;
use crate::metrics::Metrics;
use crate::proto::v1 as pb;
use crate::proto::v1::lease_store_client::LeaseStoreClient;
use crate::raft::Applied;
use leasehold_core::auth::Action;
use leasehold_core::{Fence, Op, Renewal, RequestId};

/// Set on a forwarded read, so a node that is not the leader either answers instead of
/// forwarding again: leadership moved, and the client retries.
const FORWARDED_KEY: &str = "leasehold-forwarded";

pub struct LeaseService {
    node: Node,
    /// Where the requests' identities come from.
    plane: Plane,
    denials: DenialLog,
    /// Ends long-lived watch streams when the node stops, so they do not hold its shutdown.
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
    /// Where requests are counted: the client plane's service only, so that a read a follower
    /// forwards is counted once, where the client sent it.
    metrics: Option<Arc<Metrics>>,
}

/// A typed refusal by the store in an answer, for `leasehold_refusals_total{reason}`.
trait Refusal {
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
impl Refusal for pb::AdvanceResponse {}

impl LeaseService {
    pub fn new(node: Node, plane: Plane) -> Self {
        LeaseService {
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

    /// Runs `answer` and counts it: its outcome, its duration, its refusal if any.
    async fn counted<T: Refusal>(
        &self,
        rpc: &'static str,
        answer: impl Future<Output = Result<Response<T>, Status>>,
    ) -> Result<Response<T>, Status> {
        let started = std::time::Instant::now();
        let result = answer.await;
        if let Err(status) = &result {
            if status.metadata().get(DENIED_KEY).is_some() && self.plane == Plane::Client {
                self.denials.denied(rpc, status.message());
            }
        }
        if let Some(metrics) = &self.metrics {
            let outcome = match &result {
                Ok(response) => Ok(response.get_ref().refusal()),
                Err(status) => Err(status.code()),
            };
            metrics.request(rpc, started.elapsed(), outcome);
        }
        result
    }

    /// Watch streams end when `stopping` turns true.
    pub fn stopping_on(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    /// Proposes `op` for `identity` (decided where it applies), or forwards it to the leader.
    async fn write(
        &self,
        caller: Caller,
        op: Op,
        request: Option<RequestId>,
    ) -> Result<Applied, Status> {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let op = caller.log(op);
        self.node.write_or_forward(op, request).await
    }

    /// Reads with `read` in a linearizable read on the leader, once the policy there lets
    /// `identity` do `action`; a follower forwards `message` with the identity.
    async fn read<Req, Resp, T, F, Fut>(
        &self,
        request: Request<Req>,
        action: impl for<'a> Fn(&'a Req) -> Action<'a>,
        read: impl FnOnce(&crate::raft::state_machine::Applying, &Req) -> T,
        answer: impl FnOnce(T, Applied) -> Result<Resp, NodeError>,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(LeaseStoreClient<Channel>, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let _working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let forwarded = is_forwarded(&request);
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let checked = self
            .node
            .read(|s| {
                caller
                    .may(s.table.policy(), &action(&m))
                    .map(|()| read(s, &m))
            })
            .await;
        match checked {
            Ok((Ok(found), at)) => Ok(Response::new(answer(found, at)?)),
            Ok((Err(denied), _)) => Err(denied.into()),
            Err(e) => self.forward(e, forwarded, &caller, m, call).await,
        }
    }

    /// Handles `error` from a local read: forwards `message` to the leader when the error
    /// names one and the request was not forwarded already; otherwise reports the error.
    async fn forward<Req, Resp, F, Fut>(
        &self,
        error: NodeError,
        forwarded: bool,
        caller: &Caller,
        message: Req,
        call: F,
    ) -> Result<Response<Resp>, Status>
    where
        F: FnOnce(LeaseStoreClient<Channel>, Request<Req>) -> Fut,
        Fut: Future<Output = Result<Response<Resp>, Status>>,
    {
        let NodeError::NotLeader {
            leader: Some((leader, addr)),
            ..
        } = &error
        else {
            return Err(error.into());
        };
        if forwarded {
            return Err(error.into());
        }
        let unreachable = |reason: String| NodeError::LeaderUnreachable {
            leader: *leader,
            addr: addr.clone(),
            reason,
        };
        let channel = self
            .node
            .channels()
            .get(*leader, addr)
            .map_err(|e| Status::from(unreachable(e.to_string())))?;
        let mut request = Request::new(message);
        request.set_timeout(FORWARD_TIMEOUT);
        request.metadata_mut().insert(
            FORWARDED_KEY,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        caller.carry(&mut request);
        let client = LeaseStoreClient::new(channel).max_decoding_message_size(usize::MAX);
        call(client, request).await.map_err(|status| {
            // The leader's own answers pass through, its policy's refusals among them; anything
            // else failed on the way there. So did a refusal by the leader's peer gate
            // (PERMISSION_DENIED without the policy's mark): it refused this node, not the
            // client's request.
            let gate_refused = status.code() == tonic::Code::PermissionDenied
                && status.metadata().get(DENIED_KEY).is_none();
            if status.metadata().get(ORIGIN_KEY).is_some() && !gate_refused {
                status
            } else {
                unreachable(status.message().to_owned()).into()
            }
        })
    }
}

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

fn is_forwarded<T>(request: &Request<T>) -> bool {
    request.metadata().get(FORWARDED_KEY).is_some()
}

/// The answers: each RPC below is counted (`counted`) around one of these.
impl LeaseService {
    async fn answer_acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Acquire {
            lease: m.lease,
            holder: m.holder,
            ttl_ms: m.ttl_ms,
        };
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::acquire(applied)?))
    }

    async fn answer_release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Release {
            lease: m.lease,
            holder: m.holder,
            token: m.token,
        };
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::release(applied)?))
    }

    async fn answer_renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
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
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::renew(applied)?))
    }

    async fn answer_put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Put {
            key: m.key,
            value: m.value,
            fence: m.fence.map(fence),
        };
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::put(applied)?))
    }

    async fn answer_delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Delete {
            key: m.key,
            fence: m.fence.map(fence),
        };
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::delete(applied)?))
    }

    async fn answer_get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let key = &request.get_ref().key;
        leasehold_core::limits::name("key", key, leasehold_core::Limits::MAX_KEY_BYTES)
            .map_err(NodeError::from)?;
        self.read(
            request,
            |m| Action::ReadKey(&m.key),
            |s, m| s.table.row(&m.key).map(<[u8]>::to_vec),
            |value, at| Ok(convert::get(value, &at)),
            |mut c, r| async move { c.get(r).await },
        )
        .await
    }

    async fn answer_get_lease(
        &self,
        request: Request<pb::GetLeaseRequest>,
    ) -> Result<Response<pb::GetLeaseResponse>, Status> {
        let lease = &request.get_ref().lease;
        leasehold_core::limits::name("lease", lease, leasehold_core::Limits::MAX_NAME_BYTES)
            .map_err(NodeError::from)?;
        self.read(
            request,
            |m| Action::ReadLease(&m.lease),
            |s, m| s.table.lease(&m.lease).cloned(),
            |lease, at| Ok(convert::get_lease(lease, &at)),
            |mut c, r| async move { c.get_lease(r).await },
        )
        .await
    }

    async fn answer_check_token(
        &self,
        request: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        let m = request.get_ref();
        leasehold_core::limits::name("lease", &m.lease, leasehold_core::Limits::MAX_NAME_BYTES)
            .map_err(NodeError::from)?;
        leasehold_core::limits::token_field(m.token).map_err(NodeError::from)?;
        let lease = m.lease.clone();
        self.read(
            request,
            |m| Action::Check(&m.lease),
            |s, m| s.table.check_token(&m.lease, m.token),
            |check, at| convert::check_token(&lease, check, &at),
            |mut c, r| async move { c.check_token(r).await },
        )
        .await
    }

    async fn answer_register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        // Any identity may open a session, which is then its own: what it asks under it is
        // what the policy decides.
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let applied = self.write(caller, Op::Register, None).await?;
        Ok(Response::new(convert::register(applied)?))
    }

    async fn answer_advance(
        &self,
        request: Request<pb::AdvanceRequest>,
    ) -> Result<Response<pb::AdvanceResponse>, Status> {
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let m = request.into_inner();
        let op = Op::Advance { by_ms: m.ms };
        let id = request_id(m.request_id.as_ref());
        let applied = self.write(caller, op, id).await?;
        Ok(Response::new(convert::advance(applied)?))
    }
}

#[tonic::async_trait]
impl pb::lease_store_server::LeaseStore for LeaseService {
    type WatchStream = super::watch::WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let working = self.node.admit(1)?;
        self.node.auth_set_up()?;
        let caller = Caller::of(&self.node, &request, self.plane)?;
        let stream = super::watch::start(
            self.node.clone(),
            caller,
            request.into_inner(),
            self.stopping.clone(),
            working,
        )?;
        Ok(Response::new(stream))
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        self.counted("acquire", self.answer_acquire(request)).await
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        self.counted("release", self.answer_release(request)).await
    }

    async fn renew(
        &self,
        request: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        self.counted("renew", self.answer_renew(request)).await
    }

    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        self.counted("put", self.answer_put(request)).await
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        self.counted("delete", self.answer_delete(request)).await
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        self.counted("get", self.answer_get(request)).await
    }

    async fn get_lease(
        &self,
        request: Request<pb::GetLeaseRequest>,
    ) -> Result<Response<pb::GetLeaseResponse>, Status> {
        self.counted("get_lease", self.answer_get_lease(request))
            .await
    }

    async fn check_token(
        &self,
        request: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        self.counted("check_token", self.answer_check_token(request))
            .await
    }

    async fn register(
        &self,
        request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        self.counted("register", self.answer_register(request))
            .await
    }

    async fn advance(
        &self,
        request: Request<pb::AdvanceRequest>,
    ) -> Result<Response<pb::AdvanceResponse>, Status> {
        self.counted("advance", self.answer_advance(request)).await
    }
}
