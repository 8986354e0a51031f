//! The client lane (see `BatchRequest` in the public proto): the `LeaseStore` service's unary
//! calls as frames on the client port, beside gRPC, for a node without TLS. Each frame is a
//! `BatchCall`, answered with its `BatchAnswer` by the typed API, as a call on a `Batch` stream
//! is: the same checks, admission, metrics and deadline (its `timeout_ms`).
//!
//! Why: with clients spread over three nodes on two cores, HTTP/2's tasks on both ends (a
//! connection's, and a stream's on the node) cost more of the machine than the write a call
//! carried; `leasehold-client` speaks the lane where a node does (the `Batch` stream measured
//! 0.82-0.95x of the lane at 64 clients, and one client's put 20-50 µs slower at p50; see the
//! README). A lane carries no credentials: without TLS no caller has an identity, and a client
//! with a bearer token (refused without TLS) speaks gRPC.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use leasehold_core::InvalidInput;
use leasehold_proto::lane::{read_frame, write_frame, CLIENT_GREETING, MAX_CALL_BYTES};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;

use super::api::{Credentials, LeaseApi};
use super::lanes::{serve_lane, split_plain, LaneFrames};
use super::NodeError;
use crate::connections::KeepAlive;
use crate::connections::{Connections, Counted};
use crate::limits::MAX_CLIENT_LANES;
use crate::proto::v1 as pb;

/// What serves client lanes: the client plane's lease API, until the node stops.
#[derive(Clone)]
pub(super) struct ClientLaneServer {
    pub lease: Arc<LeaseApi>,
    /// Turns true once the node stops.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// The client lane's frames: a frame that is no `BatchCall` is answered with its refusal.
struct ClientFrames;

impl LaneFrames for ClientFrames {
    type Request = Result<pb::BatchCall, NodeError>;
    type Answer = pb::BatchAnswer;
    const GREETING: &'static [u8; 8] = CLIENT_GREETING;

    async fn read(
        io: &mut (impl AsyncRead + Unpin + Send),
    ) -> std::io::Result<Option<Result<pb::BatchCall, NodeError>>> {
        let Some(body) = read_frame(io, MAX_CALL_BYTES).await? else {
            return Ok(None);
        };
        Ok(Some(pb::BatchCall::decode(body.as_slice()).map_err(|e| {
            let problem = format!("the frame is not a BatchCall: {e}");
            NodeError::Invalid(InvalidInput::new("lane call", problem))
        })))
    }

    async fn write(
        io: &mut (impl AsyncWrite + Unpin + Send),
        answer: &pb::BatchAnswer,
    ) -> std::io::Result<()> {
        write_frame(io, &answer.encode_to_vec(), usize::MAX).await
    }
}

impl ClientLaneServer {
    /// The connections on `listener` that are not client lanes, for tonic; lanes are served
    /// here.
    pub fn split_plain(
        self,
        listener: TcpListener,
        connections: Connections,
        keepalive: KeepAlive,
    ) -> ReceiverStream<std::io::Result<Counted<TcpStream>>> {
        let serve = move |tcp, fd, from| self.clone().serve(tcp, fd, from);
        let bounds = (connections, MAX_CLIENT_LANES);
        split_plain::<ClientFrames, _, _>(listener, bounds, keepalive, serve)
    }

    async fn serve(self, tcp: TcpStream, fd: OwnedFd, from: SocketAddr) {
        // Without TLS: no certificate, and no bearer token (refused without TLS anyway).
        let credentials = Credentials::Client {
            certificate: None,
            authorization: None,
        };
        let (lease, credentials) = (&self.lease, &credentials);
        let answer = |call: Result<pb::BatchCall, NodeError>| async move {
            match call {
                Ok(call) => lease.batch_call(credentials, call).await,
                Err(refused) => pb::BatchAnswer {
                    id: 0,
                    answer: Some(pb::batch_answer::Answer::Error(refused.into())),
                },
            }
        };
        serve_lane::<ClientFrames, _>(tcp, &fd, self.stopping.clone(), answer, from).await;
    }
}
