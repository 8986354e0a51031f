//! The client lane (see `LaneCall` in the public proto): the `LeaseStore` service's unary calls
//! as frames on the client port, beside gRPC, for a node without TLS.
//!
//! Why: with clients spread over three nodes on two cores, a gRPC call's transport (tonic's
//! buffer task, hyper's connection task, h2's framing, a task per call) cost more of the
//! machine than the write it carried; `leasehold-client` speaks the lane where a node does.
//! Each call is handed to the same handler a gRPC call reaches, with the same metadata
//! (`authorization`), the same limits and the same deadline (`grpc-timeout`), so the lane
//! changes how bytes move and nothing else.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use leasehold_core::InvalidInput;
use leasehold_proto::lane::{read_frame, write_frame, CLIENT_GREETING, MAX_CALL_BYTES};
use leasehold_proto::v1::lease_store_server::LeaseStore;
use leasehold_proto::v1::{LaneAnswer, LaneCall};
use prost::Message;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::{Connected, TcpConnectInfo};
use tonic::{Request, Response, Status};

use super::grpc::LeaseService;
use super::peer::lanes::{serve_lane, split_plain, LaneFrames};
use super::NodeError;
use crate::limits::{MAX_CLIENT_LANES, MAX_CLIENT_MESSAGE_BYTES};
use crate::tls::KeepAlive;

/// What serves client lanes: the client plane's lease service, until the node stops.
#[derive(Clone)]
pub(super) struct ClientLaneServer {
    pub lease: Arc<LeaseService>,
    /// Turns true once the node stops.
    pub stopping: tokio::sync::watch::Receiver<bool>,
}

/// The client lane's frames: a call that does not decode is answered with its refusal.
struct ClientFrames;

impl LaneFrames for ClientFrames {
    type Request = Result<LaneCall, Status>;
    type Answer = LaneAnswer;
    const GREETING: &'static [u8; 8] = CLIENT_GREETING;

    async fn read(
        io: &mut (impl AsyncRead + Unpin + Send),
    ) -> std::io::Result<Option<Result<LaneCall, Status>>> {
        let Some(body) = read_frame(io, MAX_CALL_BYTES).await? else {
            return Ok(None);
        };
        Ok(Some(LaneCall::decode(body.as_slice()).map_err(|e| {
            refused(format!("the frame is not a LaneCall: {e}"))
        })))
    }

    async fn write(
        io: &mut (impl AsyncWrite + Unpin + Send),
        answer: &LaneAnswer,
    ) -> std::io::Result<()> {
        write_frame(io, &answer.encode_to_vec(), usize::MAX).await
    }
}

/// The node's own refusal of a call it could not read: determinate, nothing was done.
fn refused(why: String) -> Status {
    NodeError::Invalid(InvalidInput::new("lane call", why)).into()
}

impl ClientLaneServer {
    /// The connections on `listener` that are not client lanes, for tonic; lanes are served
    /// here.
    pub fn split_plain(
        self,
        listener: TcpListener,
        keepalive: KeepAlive,
    ) -> ReceiverStream<std::io::Result<TcpStream>> {
        let serve = move |tcp, fd, from| self.clone().serve(tcp, fd, from);
        split_plain::<ClientFrames, _, _>(listener, "client", keepalive, MAX_CLIENT_LANES, serve)
    }

    async fn serve(self, tcp: TcpStream, fd: OwnedFd, from: SocketAddr) {
        // What a gRPC call's handler finds in its request's extensions: the caller's address.
        let info = tcp.connect_info();
        let lease = &self.lease;
        let answer = |call: Result<LaneCall, Status>| {
            let info = info.clone();
            async move {
                match call {
                    Ok(call) => dispatch(lease, call, info).await,
                    Err(refusal) => LaneAnswer::of::<()>(Err(refusal)),
                }
            }
        };
        serve_lane::<ClientFrames, _>(tcp, &fd, self.stopping.clone(), answer, from).await;
    }
}

/// `call` answered by the lease service's handler for its method, as gRPC would answer it.
async fn dispatch(lease: &LeaseService, call: LaneCall, info: TcpConnectInfo) -> LaneAnswer {
    match call.method.as_str() {
        "Acquire" => unary(call, info, |r| lease.acquire(r)).await,
        "Release" => unary(call, info, |r| lease.release(r)).await,
        "Renew" => unary(call, info, |r| lease.renew(r)).await,
        "Put" => unary(call, info, |r| lease.put(r)).await,
        "Delete" => unary(call, info, |r| lease.delete(r)).await,
        "CheckToken" => unary(call, info, |r| lease.check_token(r)).await,
        "Get" => unary(call, info, |r| lease.get(r)).await,
        "GetLease" => unary(call, info, |r| lease.get_lease(r)).await,
        "Advance" => unary(call, info, |r| lease.advance(r)).await,
        "Register" => unary(call, info, |r| lease.register(r)).await,
        other => LaneAnswer::of::<()>(Err(Status::unimplemented(format!(
            "the client lane carries no method {other:?} (Watch and the Cluster service are \
             gRPC's)"
        )))),
    }
}

/// One unary call: its message at most the client plane's limit, as tonic refuses a bigger
/// one, and its handler given up at the caller's `grpc-timeout`, as tonic gives it up.
async fn unary<Req, Resp, F, Fut>(call: LaneCall, info: TcpConnectInfo, handler: F) -> LaneAnswer
where
    Req: Message + Default,
    Resp: Message,
    F: FnOnce(Request<Req>) -> Fut,
    Fut: Future<Output = Result<Response<Resp>, Status>>,
{
    if call.request.len() > MAX_CLIENT_MESSAGE_BYTES {
        return LaneAnswer::of::<Resp>(Err(Status::out_of_range(format!(
            "a {}-byte {} request is over the client plane's limit of {MAX_CLIENT_MESSAGE_BYTES} \
             bytes",
            call.request.len(),
            call.method
        ))));
    }
    let mut request = match call.into_request::<Req>() {
        Ok(request) => request,
        Err(status) => return LaneAnswer::of::<Resp>(Err(refused(status.message().to_owned()))),
    };
    request.extensions_mut().insert(info);
    let deadline = request
        .metadata()
        .get("grpc-timeout")
        .and_then(|v| grpc_timeout(v.to_str().ok()?));
    let answer = handler(request);
    LaneAnswer::of(match deadline {
        Some(deadline) => tokio::time::timeout(deadline, answer)
            .await
            .unwrap_or_else(|_| Err(Status::cancelled("Timeout expired"))),
        None => answer.await,
    })
}

/// A `grpc-timeout` value (at most 8 digits and a unit: `H`, `M`, `S`, `m`, `u` or `n`), as
/// gRPC's wire spec has it; `None` for anything else, which gRPC servers ignore too.
fn grpc_timeout(value: &str) -> Option<Duration> {
    if !value.is_ascii() {
        return None;
    }
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n * 3600),
        "M" => Duration::from_secs(n * 60),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_are_read_as_the_wire_spec_writes_them() {
        assert_eq!(grpc_timeout("500m"), Some(Duration::from_millis(500)));
        assert_eq!(grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(
            grpc_timeout("99999999n"),
            Some(Duration::from_nanos(99_999_999))
        );
        for bad in ["", "m", "123456789m", "5x", "-5m", "5 m", "é"] {
            assert_eq!(grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
