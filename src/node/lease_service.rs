//! The public `LeaseStore` service: validate, propose or read, and forward to the leader when
//! this node does not lead, so clients never need to know who leads. Writes go there in batches
//! (the forwarder); a read is forwarded as its own call.

use std::future::Future;

use tonic::transport::Channel;
use tonic::{Request, Response, Status};

use super::error::ORIGIN_KEY;
use super::forwarder::FORWARD_TIMEOUT;
use super::{convert, Node, NodeError};
use crate::lease::{Fence, Op, RequestId};
use crate::proto::v1 as pb;
use crate::proto::v1::lease_store_client::LeaseStoreClient;
use crate::raft::Applied;

/// Set on a forwarded read, so a node that is not the leader either answers instead of
/// forwarding again: leadership moved, and the client retries.
const FORWARDED_KEY: &str = "leasehold-forwarded";

pub struct LeaseService {
    node: Node,
    /// Ends long-lived watch streams when the node stops, so they do not hold its shutdown.
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
}

impl LeaseService {
    pub fn new(node: Node) -> Self {
        LeaseService {
            node,
            stopping: None,
        }
    }

    /// Watch streams end when `stopping` turns true.
    pub fn stopping_on(mut self, stopping: tokio::sync::watch::Receiver<bool>) -> Self {
        self.stopping = Some(stopping);
        self
    }

    async fn write(&self, op: Op, request: Option<RequestId>) -> Result<Applied, Status> {
        let _working = self.node.admit(1)?;
        self.node.write_or_forward(op, request).await
    }

    /// Handles `error` from a local read: forwards `message` to the leader when the error
    /// names one and the request was not forwarded already; otherwise reports the error.
    async fn forward<Req, Resp, F, Fut>(
        &self,
        error: NodeError,
        forwarded: bool,
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
        let client = LeaseStoreClient::new(channel).max_decoding_message_size(usize::MAX);
        call(client, request).await.map_err(|status| {
            // The leader's own answers pass through; anything else failed on the way there.
            if status.metadata().get(ORIGIN_KEY).is_some() {
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

#[tonic::async_trait]
impl pb::lease_store_server::LeaseStore for LeaseService {
    type WatchStream = super::watch::WatchStream;

    async fn watch(
        &self,
        request: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let stream = super::watch::start(
            self.node.clone(),
            request.into_inner(),
            self.stopping.clone(),
        )?;
        Ok(Response::new(stream))
    }

    async fn acquire(
        &self,
        request: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Acquire {
            lease: m.lease,
            holder: m.holder,
            ttl_ms: m.ttl_ms,
        };
        let applied = self.write(op, id).await?;
        Ok(Response::new(convert::acquire(applied)?))
    }

    async fn release(
        &self,
        request: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Release {
            lease: m.lease,
            holder: m.holder,
            token: m.token,
        };
        let applied = self.write(op, id).await?;
        Ok(Response::new(convert::release(applied)?))
    }

    async fn put(
        &self,
        request: Request<pb::PutRequest>,
    ) -> Result<Response<pb::PutResponse>, Status> {
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Put {
            key: m.key,
            value: m.value,
            fence: m.fence.map(fence),
        };
        let applied = self.write(op, id).await?;
        Ok(Response::new(convert::put(applied)?))
    }

    async fn delete(
        &self,
        request: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let m = request.into_inner();
        let id = request_id(m.request_id.as_ref());
        let op = Op::Delete {
            key: m.key,
            fence: m.fence.map(fence),
        };
        let applied = self.write(op, id).await?;
        Ok(Response::new(convert::delete(applied)?))
    }

    async fn get(
        &self,
        request: Request<pb::GetRequest>,
    ) -> Result<Response<pb::GetResponse>, Status> {
        let _working = self.node.admit(1)?;
        let forwarded = is_forwarded(&request);
        let m = request.into_inner();
        crate::lease::limits::name("key", &m.key, crate::lease::Limits::MAX_KEY_BYTES)
            .map_err(NodeError::from)?;
        match self
            .node
            .read(|s| s.table.row(&m.key).map(<[u8]>::to_vec))
            .await
        {
            Ok((value, at)) => Ok(Response::new(convert::get(value, &at))),
            Err(e) => {
                self.forward(e, forwarded, m, |mut c, r| async move { c.get(r).await })
                    .await
            }
        }
    }

    async fn get_lease(
        &self,
        request: Request<pb::GetLeaseRequest>,
    ) -> Result<Response<pb::GetLeaseResponse>, Status> {
        let _working = self.node.admit(1)?;
        let forwarded = is_forwarded(&request);
        let m = request.into_inner();
        crate::lease::limits::name("lease", &m.lease, crate::lease::Limits::MAX_NAME_BYTES)
            .map_err(NodeError::from)?;
        match self.node.read(|s| s.table.lease(&m.lease).cloned()).await {
            Ok((lease, at)) => Ok(Response::new(convert::get_lease(lease, &at))),
            Err(e) => {
                self.forward(
                    e,
                    forwarded,
                    m,
                    |mut c, r| async move { c.get_lease(r).await },
                )
                .await
            }
        }
    }

    async fn check_token(
        &self,
        request: Request<pb::CheckTokenRequest>,
    ) -> Result<Response<pb::CheckTokenResponse>, Status> {
        let _working = self.node.admit(1)?;
        let forwarded = is_forwarded(&request);
        let m = request.into_inner();
        crate::lease::limits::name("lease", &m.lease, crate::lease::Limits::MAX_NAME_BYTES)
            .map_err(NodeError::from)?;
        crate::lease::limits::token_field(m.token).map_err(NodeError::from)?;
        match self
            .node
            .read(|s| s.table.check_token(&m.lease, m.token))
            .await
        {
            Ok((check, at)) => Ok(Response::new(convert::check_token(&m.lease, check, &at)?)),
            Err(e) => {
                self.forward(
                    e,
                    forwarded,
                    m,
                    |mut c, r| async move { c.check_token(r).await },
                )
                .await
            }
        }
    }

    async fn register(
        &self,
        _request: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        let applied = self.write(Op::Register, None).await?;
        Ok(Response::new(convert::register(applied)?))
    }

    async fn advance(
        &self,
        request: Request<pb::AdvanceRequest>,
    ) -> Result<Response<pb::AdvanceResponse>, Status> {
        let m = request.into_inner();
        let op = Op::Advance { by_ms: m.ms };
        let applied = self.write(op, request_id(m.request_id.as_ref())).await?;
        Ok(Response::new(convert::advance(applied)?))
    }
}
