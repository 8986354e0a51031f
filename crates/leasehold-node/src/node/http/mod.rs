//! `serve --http-listen`: the client API over HTTP/1.1 and JSON, for programs without gRPC.
//!
//! `POST /v1/<Rpc>` (`/v1/Acquire`, `/v1/Status`...) takes the request message in proto3 JSON
//! and answers the response message in proto3 JSON: field names in lowerCamelCase, 64-bit
//! integers as strings (numbers are taken too), bytes in base64. A streaming RPC (`Watch`,
//! `SaveSnapshot`) answers one JSON message a line. An error is an HTTP status with a JSON body:
//! the gRPC code and its name, the message, the ErrorInfo reason and facts, and whether a write
//! may have been applied.
//!
//! Every call goes to the typed API the gRPC client plane calls (`node::api`), with the caller's
//! TLS certificate and `authorization` header: the same limits, admission, policy and answers.
//! A `LeaseStore` unary call is read as the `Batch` stream's call in JSON, so the list of those
//! calls is the proto's alone.
//!
//! `POST /v3/...` is etcd's JSON gateway (`etcd`), on the same connections, limits and callers.

use std::convert::Infallible;

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, DefaultBodyLimit, Path, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::serve::Listener;
use leasehold_core::InvalidInput;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::server::TlsStream;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};

mod console;
mod etcd;

pub use console::CONTROL_ENV as CONSOLE_CONTROL_ENV;

use super::api::{certificate_name, Api, Call, Credentials, Deadline, LeaseApi};
use super::error::{Code, NodeError};
use crate::connections::{Connections, Counted};
use crate::limits::MAX_HTTP_BODY_BYTES as MAX_BODY_BYTES;
use crate::proto::v1 as pb;

/// The RPCs served, for the error that names them: every RPC of both services.
use leasehold_proto::rpcs::RPC_NAMES as RPCS;

/// What a call knows of its connection: the TCP peer, and the TLS session with the client's
/// certificate, which gives the caller its identity as it does over gRPC.
#[derive(Clone, Debug)]
pub(super) struct Peer {
    /// The first DNS name of the client's certificate, over TLS, if it showed one.
    certificate: Option<String>,
    /// Whether the connection is TLS.
    tls: bool,
}

/// Plain connections on the HTTP listener, with TCP keepalive (a client that vanished
/// mid-watch is noticed), under the listener's bound.
pub(super) struct Plain {
    pub listener: TcpListener,
    pub connections: Connections,
    pub keepalive: crate::connections::KeepAlive,
}

/// TLS connections, handshaken by the node's own accept loop (`tls::incoming`).
pub(super) struct Tls(pub ReceiverStream<std::io::Result<TlsStream<Counted<TcpStream>>>>);

impl Listener for Plain {
    type Io = Counted<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Counted<TcpStream>, Peer) {
        let (stream, _) = self
            .connections
            .accept(&self.listener, self.keepalive)
            .await;
        let peer = Peer {
            certificate: None,
            tls: false,
        };
        (stream, peer)
    }

    fn local_addr(&self) -> std::io::Result<Peer> {
        Err(std::io::Error::other(
            "an HTTP listener's own address is no peer",
        ))
    }
}

impl Listener for Tls {
    type Io = TlsStream<Counted<TcpStream>>;
    type Addr = Peer;

    async fn accept(&mut self) -> (TlsStream<Counted<TcpStream>>, Peer) {
        loop {
            match self.0.next().await {
                Some(Ok(stream)) => {
                    let (_, session) = stream.get_ref();
                    let first = session.peer_certificates().and_then(|c| c.first());
                    let certificate = first.and_then(certificate_name);
                    let tls = true;
                    return (stream, Peer { certificate, tls });
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

fn app(api: Api) -> axum::Router {
    let console = console::Console {
        api: api.clone(),
        control: console::Control::from_env(),
    };
    axum::Router::new()
        .route("/v1/{rpc}", post(rpc).fallback(post_only))
        .route("/v3/{*path}", post(v3).fallback(post_only))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(declared_length))
        .with_state(api)
        .merge(console::router(console))
        // A browser pointed at the port finds the console.
        .route("/", get(|| async { Redirect::to("/ui") }))
        .fallback(no_such_path)
}

/// Another method than POST at an API path.
async fn post_only() -> Response {
    let message = "the API takes POST: POST /v1/<Rpc> (or etcd's /v3/...) with the request in JSON";
    json(
        StatusCode::METHOD_NOT_ALLOWED,
        &ErrorBody::refusal(Code::Unimplemented, "METHOD_NOT_ALLOWED", message.into()),
    )
}

/// A path nothing is served at.
async fn no_such_path(uri: axum::http::Uri) -> Response {
    not_found(format!(
        "nothing at {:?}: the API is POST /v1/<Rpc> (or etcd's /v3/...), the console /ui",
        uri.path()
    ))
}

/// Serves `api` on `listener`'s connections until `stop` resolves.
pub(super) async fn serve<L>(
    listener: L,
    api: Api,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()>
where
    L: Listener<Addr = Peer>,
{
    crate::http1::serve(listener, app(api), stop).await
}

async fn rpc(
    State(api): State<Api>,
    Path(name): Path<String>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answered =
        |c: Credentials, body: Bytes| async move { answer(&api, &name, &c, &body).await };
    respond(peer, &headers, body, answered).await
}

/// etcd's JSON gateway: `POST /v3/<path>`.
async fn v3(
    State(api): State<Api>,
    Path(path): Path<String>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let answered =
        |c: Credentials, body: Bytes| async move { etcd::answer(&api, &path, &c, &body).await };
    respond(peer, &headers, body, answered).await
}

/// A call's response: `answer`'s for the caller and body it is given, its refusal's once
/// mapped, or the refusal of the request itself (see [`caller`]).
async fn respond<F, Fut>(
    peer: Peer,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
    answer: F,
) -> Response
where
    F: FnOnce(Credentials, Bytes) -> Fut,
    Fut: std::future::Future<Output = Result<Response, NodeError>>,
{
    let (credentials, body) = match caller(peer, headers, body) {
        Ok(called) => called,
        Err(refused) => return *refused,
    };
    answer(credentials, body)
        .await
        .unwrap_or_else(|e| error(&e))
}

/// Refuses a request whose declared body (`Content-Length`) is over the limit before any of it
/// is read. Read first, a large body drew a `100 Continue` from the node (curl asks for one
/// before a large upload), then a refusal at the limit and a closed connection while the
/// client still sent, and the client saw the connection reset, not the 413 (CI, once, in
/// `bad_calls_get_an_http_status_and_the_grpc_error_as_json`). A body with no declared length
/// is still cut at the limit as it is read.
async fn declared_length(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let declared = (request.headers().get(header::CONTENT_LENGTH))
        .and_then(|length| length.to_str().ok()?.parse::<u64>().ok());
    match declared {
        Some(length) if length > MAX_BODY_BYTES as u64 => refused_body(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Content-Length {length}"),
        ),
        _ => next.run(request).await,
    }
}

/// The refusal of a body over the limit (or unreadable), answered `status`; `why` in brackets.
fn refused_body(status: StatusCode, why: impl std::fmt::Display) -> Response {
    let problem = format!("must be at most {MAX_BODY_BYTES} bytes of JSON ({why})");
    let invalid = NodeError::Invalid(InvalidInput::new("body", problem));
    json(status, &ErrorBody::of(&invalid))
}

/// The caller's credentials and the request's body; or the refusal of a request from a
/// browser, of a body over the limit, or of an `Authorization` header that is not text.
fn caller(
    peer: Peer,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(Credentials, Bytes), Box<Response>> {
    if headers.contains_key(header::ORIGIN) && !from_this_origin(headers, peer.tls) {
        // A browser sends Origin; another site's page must not make a visitor's browser write,
        // with its client certificate, to a node it can reach (no CORS, and "simple" POSTs skip
        // the preflight). Programs send none; the console, served here, sends this node's.
        let invalid = InvalidInput::new(
            "origin",
            "requests from other sites' pages (with another Origin) are refused: call from a \
             program, or from this node's console (/ui)",
        );
        return Err(Box::new(error(&NodeError::Invalid(invalid))));
    }
    let body = match body {
        Ok(body) => body,
        Err(e) => return Err(Box::new(refused_body(e.status(), e))),
    };
    let credentials = match headers.get(header::AUTHORIZATION).map(HeaderValue::to_str) {
        None => None,
        Some(Ok(value)) => Some(value.to_owned()),
        Some(Err(_)) => {
            let problem = "the Authorization header is `Bearer TOKEN`, printable ASCII";
            let invalid = InvalidInput::new("authorization", problem);
            return Err(Box::new(error(&NodeError::Invalid(invalid))));
        }
    };
    let credentials = Credentials::Client {
        certificate: peer.certificate,
        authorization: credentials,
    };
    Ok((credentials, body))
}

/// Whether a browser's request comes from a page of this node (the console): its Origin is the
/// scheme and host it was sent to. Without TLS only for a host that is an address or
/// `localhost`: a site that points its own name at this node's address (DNS rebinding) would
/// otherwise be this origin too; over TLS the browser checks the node's certificate against the
/// name, which that site cannot pass.
fn from_this_origin(headers: &HeaderMap, tls: bool) -> bool {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    let (Some(origin), Some(host)) = (text(header::ORIGIN), text(header::HOST)) else {
        return false;
    };
    let scheme = if tls { "https" } else { "http" };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.parse::<u16>().is_ok() => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let local = name == "localhost" || name.parse::<std::net::IpAddr>().is_ok();
    origin == format!("{scheme}://{host}") && (tls || local)
}

/// The answer to the unary `Cluster` call `name` names, if it names one: called by
/// `cluster_calls!` with the service's table.
macro_rules! cluster_call {
    (
        $cluster:ident, $c:ident, $name:ident, $body:ident;
        $($rpc:ident $method:ident $request:ident $response:ident $kind:ident;)*
    ) => {
        match $name {
            $(stringify!($rpc) => Some(ok($cluster.$method($c, request($body)?).await?)),)*
            _ => None,
        }
    };
}

/// The answer to the call `name` names, with `body` its request.
async fn answer(
    api: &Api,
    name: &str,
    credentials: &Credentials,
    body: &[u8],
) -> Result<Response, NodeError> {
    let c = credentials;
    if let Some(call) = lease_call(name, body)? {
        let answer = api.lease.call(c, Deadline::NONE, call).await?;
        return Ok(json(StatusCode::OK, &answer_json(answer)));
    }
    let (lease, cluster) = (&api.lease, &api.cluster);
    if let Some(answered) = leasehold_proto::cluster_calls!(cluster_call, cluster, c, name, body) {
        return Ok(answered);
    }
    Ok(match name {
        "Batch" => ok(batch(api, c, request(body)?).await?),
        "Watch" => lines(ReceiverStream::new(lease.watch(c, request(body)?).await?)),
        "SaveSnapshot" => lines(ReceiverStream::new(
            cluster.save_snapshot(c, request(body)?).await?,
        )),
        _ => unknown(name),
    })
}

/// A `Batch` in one request: its calls answered at once, each as its unary call, in one
/// response (in the order they were answered, as on gRPC's stream).
async fn batch(
    api: &Api,
    credentials: &Credentials,
    request: pb::BatchRequest,
) -> Result<pb::BatchResponse, NodeError> {
    LeaseApi::check_batch(request.calls.len())?;
    let mut calls = tokio::task::JoinSet::new();
    let mut ids = std::collections::HashMap::new();
    for call in request.calls {
        let (lease, credentials, id) = (api.lease.clone(), credentials.clone(), call.id);
        let task = calls.spawn(async move { lease.batch_call(&credentials, call).await });
        ids.insert(task.id(), id);
    }
    let mut answers = Vec::with_capacity(calls.len());
    while let Some(answered) = calls.join_next_with_id().await {
        answers.push(match answered {
            Ok((_, answer)) => answer,
            // That call's task panicked: the node's own fault. Its write may have been
            // proposed; the others are answered as they were.
            Err(e) => pb::BatchAnswer {
                id: ids.get(&e.id()).copied().unwrap_or_default(),
                answer: Some(pb::batch_answer::Answer::Error(
                    NodeError::CallFailed(e.to_string()).into(),
                )),
            },
        });
    }
    Ok(pb::BatchResponse { answers })
}

/// The `LeaseStore` unary call `name` names, with `body` its request: read as the `Batch`
/// stream's call `{"<name in lowerCamelCase>": body}`. `None` if the proto has no such call.
fn lease_call(name: &str, body: &[u8]) -> Result<Option<Call>, NodeError> {
    let mut field = name.to_owned();
    if let Some(first) = field.get_mut(..1) {
        first.make_ascii_lowercase();
    }
    let named = |message| serde_json::json!({ field.as_str(): message });
    // Only a field of the call's oneof takes an object: `{}` is every request's empty message.
    let probe = serde_json::from_value::<pb::BatchCall>(named(serde_json::json!({})));
    if !matches!(
        probe,
        Ok(pb::BatchCall {
            request: Some(_),
            ..
        })
    ) {
        return Ok(None);
    }
    // An empty body is the empty message, as `{}` is (a JSON null would name no call).
    let message = match request::<serde_json::Value>(body)? {
        serde_json::Value::Null => serde_json::json!({}),
        message => message,
    };
    let call: pb::BatchCall = decode(named(message), 1)?;
    Ok(call.request)
}

/// An answer's response message in JSON: the `Batch` stream's answer's one field.
fn answer_json(answer: pb::batch_answer::Answer) -> serde_json::Value {
    let answer = pb::BatchAnswer {
        id: 0,
        answer: Some(answer),
    };
    match serde_json::to_value(answer) {
        // The id 0 is left out, as proto3 JSON leaves out defaults: the one field is the answer.
        Ok(serde_json::Value::Object(fields)) => fields.into_iter().next().map(|(_, v)| v),
        _ => None,
    }
    .unwrap_or_default()
}

/// `value` decoded as `T`, refused naming the field that failed (its proto name, as gRPC's
/// validation names it: `leases[0].ttl_ms`), past the first `skip` segments of its path (the
/// `Batch` call's name around a lease call's message).
fn decode<T: DeserializeOwned>(value: serde_json::Value, skip: usize) -> Result<T, NodeError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = path
            .split('.')
            .skip(skip)
            .map(proto_name)
            .collect::<Vec<_>>();
        let e = e.into_inner();
        // A name the message does not have is no field of it: the body is at fault.
        if field.is_empty() || path == "." || e.to_string().starts_with("unknown field") {
            return not_json(e);
        }
        // pbjson reads an integer from a number or a string, so serde's own words are about
        // the two ("did not match any variant of untagged enum") or the string's digits:
        // say what the field takes.
        const INTEGER: &str = "takes an integer in the field's range, as a JSON number or a string";
        let problem = match e.to_string() {
            m if m.contains("untagged enum") => INTEGER.to_owned(),
            m if ["digit", "number too large", "out of range"]
                .iter()
                .any(|w| m.contains(w)) =>
            {
                format!("{INTEGER} ({m})")
            }
            m => m,
        };
        NodeError::Invalid(InvalidInput::new(field.join("."), problem))
    })
}

/// A JSON name as the proto names it: `ttlMs` -> `ttl_ms`, `leases[0]` kept.
fn proto_name(json: &str) -> String {
    let mut out = String::new();
    for c in json.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn not_json(e: serde_json::Error) -> NodeError {
    let problem = format!(
        "not the request message in proto3 JSON: {e} (names are lowerCamelCase, 64-bit \
         integers strings or numbers, bytes base64)"
    );
    NodeError::Invalid(InvalidInput::new("body", problem))
}

/// The request message `body` holds; an empty body is the empty message, as `{}` is.
fn request<T: DeserializeOwned + Default>(body: &[u8]) -> Result<T, NodeError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    let value: serde_json::Value = serde_json::from_slice(body).map_err(not_json)?;
    decode(value, 0)
}

fn ok<T: Serialize>(message: T) -> Response {
    json(StatusCode::OK, &message)
}

/// A streaming RPC: one JSON message a line; an error after the first line ends the stream
/// with a line `{"error": ...}` (its HTTP status is already sent).
fn lines<T>(messages: impl Stream<Item = Result<T, NodeError>> + Send + 'static) -> Response
where
    T: Serialize + Send + 'static,
{
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
                Err(e) => to_json(&serde_json::json!({ "error": ErrorBody::of(&e) })),
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
    fn of(e: &NodeError) -> ErrorBody {
        ErrorBody {
            code: e.code() as i32,
            status: code_name(e.code()),
            message: e.to_string(),
            reason: e.reason().to_owned(),
            indeterminate: e.indeterminate(),
            metadata: e.facts().into_iter().collect(),
        }
    }

    /// A refusal of the HTTP edge itself (a path or method it does not serve), before any
    /// call: nothing was done.
    fn refusal(code: Code, reason: &str, message: String) -> ErrorBody {
        ErrorBody {
            code: code as i32,
            status: code_name(code),
            message,
            reason: reason.to_owned(),
            indeterminate: false,
            metadata: Default::default(),
        }
    }
}

/// The one map of a `NodeError` to HTTP: the status its gRPC code maps to, and its body.
fn error(e: &NodeError) -> Response {
    json(http_status(e.code()), &ErrorBody::of(e))
}

/// A path the gateway does not serve, answered with the ones it does.
fn unknown_path(path: &str, served: impl Iterator<Item = String>) -> Response {
    let served: Vec<String> = served.collect();
    not_found(format!(
        "no call at {path:?}; POST to one of {}",
        served.join(", ")
    ))
}

fn unknown(name: &str) -> Response {
    not_found(format!(
        "no RPC named {name:?}; POST to /v1/ one of {}",
        RPCS.join(", ")
    ))
}

fn not_found(message: String) -> Response {
    let body = ErrorBody::refusal(Code::Unimplemented, "UNKNOWN_RPC", message);
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
    fn a_lease_call_is_read_from_its_name_and_an_empty_body_is_its_empty_message() {
        use pb::batch_call::Request;
        let register = lease_call("Register", b"").unwrap();
        assert!(
            matches!(register, Some(Request::Register(_))),
            "{register:?}"
        );
        let empty = lease_call("CheckToken", b"  {} ").unwrap();
        assert!(matches!(empty, Some(Request::CheckToken(_))), "{empty:?}");
        let put = lease_call("Put", br#"{"key": "k", "value": "dg=="}"#).unwrap();
        let Some(Request::Put(put)) = put else {
            panic!("{put:?}");
        };
        assert_eq!((put.key.as_str(), put.value.as_slice()), ("k", &b"v"[..]));
        assert!(
            lease_call("Status", b"").unwrap().is_none(),
            "a cluster call"
        );
        assert!(lease_call("Explode", b"").unwrap().is_none());
        let bad = lease_call("Put", br#"{"ttlMs": "#).unwrap_err();
        assert_eq!(bad.reason(), "INVALID_INPUT");
    }

    #[test]
    fn codes_are_named_as_grpc_names_them() {
        assert_eq!(code_name(Code::InvalidArgument), "INVALID_ARGUMENT");
        assert_eq!(code_name(Code::Unavailable), "UNAVAILABLE");
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(code_name(Code::Ok), "OK");
    }

    #[test]
    fn an_error_body_carries_the_error_info_and_the_indeterminate_mark() {
        let lost = NodeError::NoQuorum(std::time::Duration::from_secs(3));
        let body = serde_json::to_value(ErrorBody::of(&lost)).unwrap();
        assert_eq!(body["code"], 14);
        assert_eq!(body["status"], "UNAVAILABLE");
        assert_eq!(body["reason"], "NO_QUORUM");
        assert_eq!(body["indeterminate"], true);
        assert_eq!(http_status(lost.code()), StatusCode::SERVICE_UNAVAILABLE);
        let invalid = NodeError::Invalid(InvalidInput::new("ttl_ms", "too long"));
        let body = serde_json::to_value(ErrorBody::of(&invalid)).unwrap();
        assert_eq!(body["metadata"]["field"], "ttl_ms");
        assert_eq!(body["indeterminate"], false);
    }
}
