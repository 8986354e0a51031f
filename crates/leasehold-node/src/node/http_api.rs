//! `serve --http-listen`: the client API over HTTP/1.1 and JSON, for programs without gRPC.
//!
//! `POST /v1/<Rpc>` (`/v1/Acquire`, `/v1/Status`...) takes the request message in proto3 JSON
//! and answers the response message in proto3 JSON: field names in lowerCamelCase, 64-bit
//! integers as strings (numbers are taken too), bytes in base64. A streaming RPC (`Watch`,
//! `SaveSnapshot`) answers one JSON message a line. An error is an HTTP status with a JSON body:
//! the gRPC code and its name, the message, the ErrorInfo reason and facts, and whether a write
//! may have been applied.
//!
//! Every call goes to the very services the gRPC client plane serves, with the caller's TLS
//! certificate and `authorization` header: the same limits, admission, policy and answers.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::serve::{IncomingStream, Listener};
use leasehold_core::InvalidInput;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::server::TlsStream;
use tonic::codegen::tokio_stream::wrappers::ReceiverStream;
use tonic::codegen::tokio_stream::{Stream, StreamExt};
use tonic::transport::server::{Connected, TcpConnectInfo, TlsConnectInfo};
use tonic::{Code, Status};
use tonic_types::StatusExt;

use super::authz::Plane;
use super::cluster_service::ClusterService;
use super::error::NodeError;
use super::lease_service::LeaseService;
use super::Node;
use crate::limits::MAX_HTTP_BODY_BYTES as MAX_BODY_BYTES;
use crate::metrics::Metrics;
use crate::proto::v1::cluster_server::Cluster;
use crate::proto::v1::lease_store_server::LeaseStore;

/// The RPCs served, for the error that names them (tests/http_api.rs checks each against the
/// proto's).
const RPCS: &[&str] = &[
    "Acquire",
    "Release",
    "Renew",
    "Put",
    "Delete",
    "CheckToken",
    "Get",
    "GetLease",
    "Advance",
    "Register",
    "Watch",
    "Status",
    "NodeStatus",
    "SaveSnapshot",
    "AddMember",
    "RemoveMember",
    "ListMembers",
    "ChangePolicy",
    "GetPolicy",
    "WhoAmI",
];

/// The client plane's services, one of each, served over gRPC and over HTTP alike (so the
/// admission limit, the metrics and the denial log are the same).
#[derive(Clone)]
pub(super) struct Api {
    pub lease: Arc<LeaseService>,
    pub cluster: Arc<ClusterService>,
}

impl Api {
    pub(super) fn new(
        node: &Node,
        metrics: &Arc<Metrics>,
        stopping: watch::Receiver<bool>,
    ) -> Self {
        Api {
            lease: Arc::new(
                LeaseService::new(node.clone(), Plane::Client)
                    .stopping_on(stopping)
                    .counting_in(metrics.clone()),
            ),
            cluster: Arc::new(ClusterService::new(node.clone(), Plane::Client)),
        }
    }
}

/// What a call knows of its connection: the TCP peer, and the TLS session with the client's
/// certificate, which gives the caller its identity as it does over gRPC.
#[derive(Clone)]
pub(super) struct Peer {
    tcp: TcpConnectInfo,
    tls: Option<TlsConnectInfo<TcpConnectInfo>>,
}

impl std::fmt::Debug for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peer")
            .field("remote", &self.tcp.remote_addr())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// Plain connections on the HTTP listener, with TCP keepalive.
pub(super) struct Plain {
    pub listener: TcpListener,
    pub keepalive: crate::tls::KeepAlive,
}

/// TLS connections, handshaken by the node's own accept loop (`tls::incoming`).
pub(super) struct Tls(pub ReceiverStream<std::io::Result<TlsStream<TcpStream>>>);

impl Listener for Plain {
    type Io = TcpStream;
    type Addr = Peer;

    async fn accept(&mut self) -> (TcpStream, Peer) {
        let (stream, _) = Listener::accept(&mut self.listener).await;
        let _ = stream.set_nodelay(true);
        // As on the gRPC planes: a client that vanished mid-watch is noticed.
        let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&self.keepalive.to_socket2());
        let tcp = stream.connect_info();
        (stream, Peer { tcp, tls: None })
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Err(std::io::Error::other(
            "an HTTP listener's own address is no peer",
        ))
    }
}

impl Listener for Tls {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (TlsStream<TcpStream>, Peer) {
        loop {
            match self.0.next().await {
                Some(Ok(stream)) => {
                    let tls = stream.connect_info();
                    let tcp = tls.get_ref().clone();
                    return (
                        stream,
                        Peer {
                            tcp,
                            tls: Some(tls),
                        },
                    );
                }
                Some(Err(_)) => continue,
                // The accept loop ended with the node: nothing more comes.
                None => std::future::pending::<()>().await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Err(std::io::Error::other(
            "an HTTP listener's own address is no peer",
        ))
    }
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, Plain>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Plain>) -> Self {
        stream.remote_addr().clone()
    }
}

impl axum::extract::connect_info::Connected<IncomingStream<'_, Tls>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Tls>) -> Self {
        stream.remote_addr().clone()
    }
}

type App = axum::extract::connect_info::IntoMakeServiceWithConnectInfo<axum::Router, Peer>;

/// The routes, each call told its connection.
fn app(api: Api) -> App {
    axum::Router::new()
        .route("/v1/{rpc}", post(rpc))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(api)
        .into_make_service_with_connect_info::<Peer>()
}

/// Serves `api` on `listener`'s connections until `stop` resolves.
pub(super) async fn serve<L>(
    listener: L,
    api: Api,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener<Addr = Peer>,
    for<'a> Peer: axum::extract::connect_info::Connected<IncomingStream<'a, L>>,
{
    axum::serve(listener, app(api))
        .with_graceful_shutdown(stop)
        .await
}

/// One call: its body and what the request carries besides.
struct Call {
    peer: Peer,
    authorization: Option<HeaderValue>,
    body: Bytes,
}

async fn rpc(
    State(api): State<Api>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if headers.contains_key(header::ORIGIN) {
        // A browser sends Origin; a page must not make a visitor's browser write, with its
        // client certificate, to a node it can reach (no CORS, and "simple" POSTs skip the
        // preflight). Programs send none.
        let invalid = InvalidInput::new(
            "origin",
            "requests from browsers (with an Origin header) are refused: call from a program",
        );
        return error(&NodeError::Invalid(invalid).into());
    }
    let body = match body {
        Ok(body) => body,
        Err(e) => {
            let problem = format!("must be at most {MAX_BODY_BYTES} bytes of JSON ({e})");
            let status = Status::from(NodeError::Invalid(InvalidInput::new("body", problem)));
            return json(e.status(), &ErrorBody::of(&status));
        }
    };
    let call = Call {
        peer,
        authorization: headers.get(header::AUTHORIZATION).cloned(),
        body,
    };
    match lease_rpc(call, &name, api.lease).await {
        Ok(answered) => answered,
        Err(call) => cluster_rpc(call, &name, api.cluster).await,
    }
}

/// A `LeaseStore` call's answer; the call back if `name` is none of its RPCs.
async fn lease_rpc(call: Call, name: &str, lease: Arc<LeaseService>) -> Result<Response, Call> {
    Ok(match name {
        "Acquire" => call.unary(|r| async move { lease.acquire(r).await }).await,
        "Release" => call.unary(|r| async move { lease.release(r).await }).await,
        "Renew" => call.unary(|r| async move { lease.renew(r).await }).await,
        "Put" => call.unary(|r| async move { lease.put(r).await }).await,
        "Delete" => call.unary(|r| async move { lease.delete(r).await }).await,
        "CheckToken" => {
            call.unary(|r| async move { lease.check_token(r).await })
                .await
        }
        "Get" => call.unary(|r| async move { lease.get(r).await }).await,
        "GetLease" => {
            call.unary(|r| async move { lease.get_lease(r).await })
                .await
        }
        "Advance" => call.unary(|r| async move { lease.advance(r).await }).await,
        "Register" => call.unary(|r| async move { lease.register(r).await }).await,
        "Watch" => call.stream(|r| async move { lease.watch(r).await }).await,
        _ => return Err(call),
    })
}

async fn cluster_rpc(call: Call, name: &str, cluster: Arc<ClusterService>) -> Response {
    match name {
        "Status" => call.unary(|r| async move { cluster.status(r).await }).await,
        "NodeStatus" => {
            call.unary(|r| async move { cluster.node_status(r).await })
                .await
        }
        "SaveSnapshot" => {
            call.stream(|r| async move { cluster.save_snapshot(r).await })
                .await
        }
        "AddMember" => {
            call.unary(|r| async move { cluster.add_member(r).await })
                .await
        }
        "RemoveMember" => {
            call.unary(|r| async move { cluster.remove_member(r).await })
                .await
        }
        "ListMembers" => {
            call.unary(|r| async move { cluster.list_members(r).await })
                .await
        }
        "ChangePolicy" => {
            call.unary(|r| async move { cluster.change_policy(r).await })
                .await
        }
        "GetPolicy" => {
            call.unary(|r| async move { cluster.get_policy(r).await })
                .await
        }
        "WhoAmI" => {
            call.unary(|r| async move { cluster.who_am_i(r).await })
                .await
        }
        _ => unknown(name),
    }
}

impl Call {
    /// The gRPC request a service takes: the message, the caller's credentials, its peer.
    fn request<T: DeserializeOwned + Default>(self) -> Result<tonic::Request<T>, Status> {
        let message = match self.body.iter().all(u8::is_ascii_whitespace) {
            // An empty body is the empty message, as `{}` is.
            true => T::default(),
            false => serde_json::from_slice(&self.body).map_err(|e| {
                let problem = format!(
                    "not the request message in proto3 JSON: {e} (names are lowerCamelCase, \
                     64-bit integers strings or numbers, bytes base64)"
                );
                Status::from(NodeError::Invalid(InvalidInput::new("body", problem)))
            })?,
        };
        let mut request = tonic::Request::new(message);
        if let Some(value) = self.authorization {
            match tonic::metadata::MetadataValue::try_from(value.as_bytes()) {
                Ok(value) => {
                    request.metadata_mut().insert("authorization", value);
                }
                Err(_) => {
                    let problem = "the Authorization header is `Bearer TOKEN`, printable ASCII";
                    let invalid = InvalidInput::new("authorization", problem);
                    return Err(NodeError::Invalid(invalid).into());
                }
            }
        }
        request.extensions_mut().insert(self.peer.tcp);
        if let Some(tls) = self.peer.tls {
            request.extensions_mut().insert(tls);
        }
        Ok(request)
    }

    async fn unary<T, R, F, Fut>(self, call: F) -> Response
    where
        T: DeserializeOwned + Default,
        R: Serialize,
        F: FnOnce(tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, Status>>,
    {
        let request = match self.request() {
            Ok(request) => request,
            Err(status) => return error(&status),
        };
        match call(request).await {
            Ok(answer) => json(StatusCode::OK, &answer.into_inner()),
            Err(status) => error(&status),
        }
    }

    /// A streaming RPC: one JSON message a line; an error after the first line ends the stream
    /// with a line `{"error": ...}` (its HTTP status is already sent).
    async fn stream<T, R, S, F, Fut>(self, call: F) -> Response
    where
        T: DeserializeOwned + Default,
        R: Serialize + Send + 'static,
        S: Stream<Item = Result<R, Status>> + Send + 'static,
        F: FnOnce(tonic::Request<T>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<S>, Status>>,
    {
        let request = match self.request() {
            Ok(request) => request,
            Err(status) => return error(&status),
        };
        let messages = match call(request).await {
            Ok(answer) => answer.into_inner(),
            Err(status) => return error(&status),
        };
        let mut failed = false;
        let lines = messages
            .take_while(move |item| {
                // Up to and including the first error.
                let go_on = !failed;
                failed |= item.is_err();
                go_on
            })
            .map(|item| {
                let mut line = match item {
                    Ok(message) => to_json(&message),
                    Err(status) => to_json(&serde_json::json!({ "error": ErrorBody::of(&status) })),
                };
                line.push(b'\n');
                Ok::<_, Infallible>(Bytes::from(line))
            });
        let mut response = Body::from_stream(lines).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/x-ndjson"),
        );
        response
    }
}

fn to_json<T: Serialize>(message: &T) -> Vec<u8> {
    // The generated impls and plain maps cannot fail to serialize.
    serde_json::to_vec(message).unwrap_or_else(|e| format!("{{\"encoding\":\"{e}\"}}").into_bytes())
}

fn json<T: Serialize>(status: StatusCode, message: &T) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        to_json(message),
    )
        .into_response()
}

/// An error's JSON: what a gRPC client reads in the status and its ErrorInfo.
#[derive(Serialize)]
struct ErrorBody {
    code: i32,
    status: String,
    message: String,
    reason: String,
    indeterminate: bool,
    metadata: std::collections::BTreeMap<String, String>,
}

impl ErrorBody {
    fn of(status: &Status) -> ErrorBody {
        let info = status.get_details_error_info();
        let mut metadata: std::collections::BTreeMap<_, _> = info
            .as_ref()
            .map(|i| i.metadata.clone().into_iter().collect())
            .unwrap_or_default();
        let indeterminate = metadata
            .remove("indeterminate")
            .is_some_and(|v| v == "true");
        ErrorBody {
            code: status.code() as i32,
            status: code_name(status.code()),
            message: status.message().to_owned(),
            reason: info.map(|i| i.reason).unwrap_or_default(),
            indeterminate,
            metadata,
        }
    }
}

fn error(status: &Status) -> Response {
    json(http_status(status.code()), &ErrorBody::of(status))
}

fn unknown(name: &str) -> Response {
    let body = ErrorBody {
        code: Code::Unimplemented as i32,
        status: code_name(Code::Unimplemented),
        message: format!(
            "no RPC named {name:?}; POST to /v1/ one of {}",
            RPCS.join(", ")
        ),
        reason: "UNKNOWN_RPC".into(),
        indeterminate: false,
        metadata: Default::default(),
    };
    json(StatusCode::NOT_FOUND, &body)
}

/// `INVALID_ARGUMENT` for `Code::InvalidArgument`: the name gRPC's own documents use.
fn code_name(code: Code) -> String {
    let words = format!("{code:?}");
    let mut name = String::with_capacity(words.len() + 4);
    for (i, c) in words.chars().enumerate() {
        if c.is_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// The HTTP status of a gRPC code, as Google's API gateways map them.
fn http_status(code: Code) -> StatusCode {
    match code {
        Code::Ok => StatusCode::OK,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
            StatusCode::BAD_REQUEST
        }
        Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        Code::PermissionDenied => StatusCode::FORBIDDEN,
        Code::NotFound => StatusCode::NOT_FOUND,
        Code::Aborted | Code::AlreadyExists => StatusCode::CONFLICT,
        Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        Code::Cancelled => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
        Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::Unavailable), "UNAVAILABLE");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(code_name(Code::Ok), "OK");
    }

    #[test]
    fn an_error_body_carries_the_error_info_and_the_indeterminate_mark() {
        let lost = Status::from(NodeError::NoQuorum(std::time::Duration::from_secs(3)));
        let body = serde_json::to_value(ErrorBody::of(&lost)).unwrap();
        assert_eq!(body["code"], 14);
        assert_eq!(body["status"], "UNAVAILABLE");
        assert_eq!(body["reason"], "NO_QUORUM");
        assert_eq!(body["indeterminate"], true);
        assert_eq!(http_status(lost.code()), StatusCode::SERVICE_UNAVAILABLE);
        let invalid = Status::from(NodeError::Invalid(InvalidInput::new("ttl_ms", "too long")));
        let body = serde_json::to_value(ErrorBody::of(&invalid)).unwrap();
        assert_eq!(body["metadata"]["field"], "ttl_ms");
        assert_eq!(body["indeterminate"], false);
    }
}
