//! gRPC, a thin edge: the `LeaseStore` and `Cluster` services answered by the typed API
//! (`node::api`). Each call finds its caller's credentials (the client certificate and the
//! `authorization` header on the client plane; what a member forwarding it says on the peer
//! plane), calls the API, and maps a `NodeError` to a status once (`Status::from`, in
//! `node::error`). A unary call's deadline is tonic's (`grpc-timeout`); a `Batch` call carries
//! its own (`batch`).

mod batch;

use std::pin::Pin;
use std::sync::Arc;

use leasehold_proto::wire::{AUTHORIZATION_KEY, BEARER_KEY, IDENTITY_KEY};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

use super::api::{certificate_name, ClusterApi, Credentials, Deadline, LeaseApi, Plane};
use super::peer::gate::PeerMember;
use super::NodeError;
use crate::limits::MAX_CLIENT_MESSAGE_BYTES;
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::cluster_server::ClusterServer;
use crate::proto::v1::lease_store_server::LeaseStore;
use crate::proto::v1::lease_store_server::LeaseStoreServer;

/// The credentials `request` carries on `plane`.
pub(super) fn credentials<T>(request: &Request<T>, plane: Plane) -> Credentials {
    let metadata = |key| Some(request.metadata().get(key)?.to_str().ok()?.to_owned());
    match plane {
        Plane::Client => {
            let certs = request.peer_certs();
            let first = certs.as_deref().and_then(|c| c.first());
            Credentials::Client {
                certificate: first.and_then(certificate_name),
                // A header that is not ASCII is still a header sent: refused as no `Bearer
                // TOKEN`, where a member's unreadable one names no identity.
                authorization: request
                    .metadata()
                    .get(AUTHORIZATION_KEY)
                    .map(|v| v.to_str().unwrap_or_default().to_owned()),
            }
        }
        // Believed only from a member the gate let through (with TLS): without TLS, anyone
        // reaches the peer plane, and no caller has an identity anyway.
        Plane::Peer if request.extensions().get::<PeerMember>().is_some() => Credentials::Member {
            identity: metadata(IDENTITY_KEY),
            bearer: metadata(BEARER_KEY),
        },
        Plane::Peer => Credentials::Anonymous,
    }
}

/// A typed answer as gRPC sends it.
pub(super) fn answer<T>(answered: Result<T, NodeError>) -> Result<Response<T>, Status> {
    answered.map(Response::new).map_err(Status::from)
}

/// A stream of typed answers as gRPC sends it: each refusal as the status that ends it.
pub(super) type Answers<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

pub(super) fn stream<T: Send + 'static>(
    answers: mpsc::Receiver<Result<T, NodeError>>,
) -> Answers<T> {
    Box::pin(ReceiverStream::new(answers).map(|item| item.map_err(Status::from)))
}

/// The `LeaseStore` service on one plane.
pub(crate) struct LeaseService {
    api: Arc<LeaseApi>,
    plane: Plane,
}

impl LeaseService {
    pub(crate) fn new(api: Arc<LeaseApi>, plane: Plane) -> Self {
        LeaseService { api, plane }
    }

    /// The service's server, its messages bounded by the client plane's limit.
    pub(crate) fn server(service: Arc<LeaseService>) -> LeaseStoreServer<LeaseService> {
        LeaseStoreServer::from_arc(service).max_decoding_message_size(MAX_CLIENT_MESSAGE_BYTES)
    }
}

/// The `Cluster` service on one plane.
pub(crate) struct ClusterService {
    api: Arc<ClusterApi>,
    plane: Plane,
}

impl ClusterService {
    pub(crate) fn server(api: Arc<ClusterApi>, plane: Plane) -> ClusterServer<ClusterService> {
        ClusterServer::new(ClusterService { api, plane })
    }
}

/// A service's impl, called by `lease_calls!` or `cluster_calls!` with the service's unary
/// RPCs: each finds its credentials, calls the API's method of the same name (with the `args`
/// before the request: a lease call's deadline), and answers; the streaming calls follow as
/// written.
macro_rules! service {
    (
        impl $service:ident for $type:ty, $args:tt, { $($streams:tt)* };
        $($name:ident $method:ident $request:ident $response:ident $kind:ident;)*
    ) => {
        #[tonic::async_trait]
        impl $service for $type {
            $(
                async fn $method(
                    &self,
                    request: Request<pb::$request>,
                ) -> Result<Response<pb::$response>, Status> {
                    let credentials = credentials(&request, self.plane);
                    let request = request.into_inner();
                    answer(call!(self.api, $method, &credentials, $args, request).await)
                }
            )*
            $($streams)*
        }
    };
}

/// `api.method(credentials, args.., request)`.
macro_rules! call {
    ($api:expr, $method:ident, $credentials:expr, ($($arg:expr,)*), $request:expr) => {
        $api.$method($credentials, $($arg,)* $request)
    };
}

// tonic applies the caller's `grpc-timeout` around each lease call: no deadline of the API's.
leasehold_proto::lease_calls! {
    service, impl LeaseStore for LeaseService, (Deadline::NONE,), {
        type WatchStream = Answers<pb::WatchResponse>;

        async fn watch(
            &self,
            request: Request<pb::WatchRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            let credentials = credentials(&request, self.plane);
            let events = self.api.watch(&credentials, request.into_inner()).await;
            answer(events.map(stream))
        }

        type BatchStream = batch::Answers;

        async fn batch(
            &self,
            request: Request<Streaming<pb::BatchRequest>>,
        ) -> Result<Response<Self::BatchStream>, Status> {
            let credentials = credentials(&request, self.plane);
            let calls = request.into_inner();
            Ok(Response::new(batch::serve(self.api.clone(), credentials, calls)))
        }
    }
}

leasehold_proto::cluster_calls! {
    service, impl Cluster for ClusterService, (), {
        type SaveSnapshotStream = Answers<pb::SnapshotChunk>;

        async fn save_snapshot(
            &self,
            request: Request<pb::SaveSnapshotRequest>,
        ) -> Result<Response<Self::SaveSnapshotStream>, Status> {
            let credentials = credentials(&request, self.plane);
            let chunks = self.api.save_snapshot(&credentials, request.into_inner()).await;
            answer(chunks.map(stream))
        }
    }
}
