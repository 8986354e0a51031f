//! The console (`GET /ui`): a live page of the cluster and its leases, served by every node on
//! its HTTP port, its files compiled into the binary (`console/`: no network and no build
//! step at run time). The page calls this node's HTTP API as any client does, from the same
//! origin (see [`from_this_origin`]): the same authorization, the caller being the browser's
//! client certificate.
//!
//! In a local cluster (`leasehold cluster`), the page also kills, pauses, resumes and restarts
//! nodes: `cluster` hands each node the address of its supervisor and a secret in the
//! environment ([`CONTROL_ENV`]), and `POST /ui/control/{id}/{action}` passes the action on, as
//! one line over loopback. Only an admin may, while authorization is on.

use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use leasehold_core::InvalidInput;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{caller, error, json, Peer};
use crate::node::api::Api;
use crate::node::NodeError;

/// Where `cluster` tells its nodes how to reach it: `ADDR SECRET`.
pub const CONTROL_ENV: &str = "LEASEHOLD_CONSOLE_CONTROL";

/// What the console may ask of a local cluster's supervisor.
const ACTIONS: [&str; 4] = ["kill", "pause", "resume", "restart"];

/// How long the console waits for the supervisor.
const CONTROL_WAIT: Duration = Duration::from_secs(5);

/// The page's files: where each is served, its type, and what it is.
const FILES: [(&str, &str, &str); 4] = [
    (
        "/ui",
        "text/html; charset=utf-8",
        include_str!("console/index.html"),
    ),
    (
        "/ui/console.js",
        "text/javascript",
        include_str!("console/console.js"),
    ),
    (
        "/ui/console.css",
        "text/css",
        include_str!("console/console.css"),
    ),
    (
        "/ui/icon.svg",
        "image/svg+xml",
        include_str!("console/icon.svg"),
    ),
];

/// The page's own sources only, and never inside another site's frame (whose page could trick
/// a visitor into pressing its buttons).
const POLICY: &str = "default-src 'self'; frame-ancestors 'none'";

/// The supervisor of a local cluster, as its nodes are told.
#[derive(Clone, Debug)]
pub(super) struct Control {
    addr: SocketAddr,
    secret: String,
}

impl Control {
    /// The supervisor this node was started under, if any.
    pub(super) fn from_env() -> Option<Control> {
        let value = std::env::var(CONTROL_ENV).ok()?;
        let (addr, secret) = value.split_once(' ')?;
        Some(Control {
            addr: addr.parse().ok()?,
            secret: secret.to_owned(),
        })
    }

    /// Sends `request` (a line), and reads the supervisor's answer (one line).
    async fn ask(&self, request: &str) -> Result<String, NodeError> {
        let asked = async {
            let mut stream = tokio::net::TcpStream::connect(self.addr).await?;
            let line = format!("{} {request}\n", self.secret);
            stream.write_all(line.as_bytes()).await?;
            let mut answer = String::new();
            BufReader::new(stream).read_line(&mut answer).await?;
            Ok::<_, std::io::Error>(answer.trim_end().to_owned())
        };
        match tokio::time::timeout(CONTROL_WAIT, asked).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) => Err(NodeError::Refused(format!(
                "the local cluster's supervisor at {} did not answer ({e}): is `leasehold \
                 cluster` still running?",
                self.addr
            ))),
            Err(_) => Err(NodeError::Refused(format!(
                "the local cluster's supervisor at {} did not answer within {CONTROL_WAIT:?}",
                self.addr
            ))),
        }
    }
}

/// The console's state: the node's API, and its local cluster's supervisor if it has one.
#[derive(Clone)]
pub(super) struct Console {
    pub api: Api,
    pub control: Option<Control>,
}

pub(super) fn router(console: Console) -> axum::Router {
    let mut router = axum::Router::new();
    for (path, kind, body) in FILES {
        router = router.route(path, get(move || async move { asset(kind, body) }));
    }
    router
        .route("/ui/control", get(control_state))
        .route("/ui/control/{id}/{action}", post(act))
        .with_state(console)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, kind),
        (header::CONTENT_SECURITY_POLICY, POLICY),
        (header::CACHE_CONTROL, "no-cache"),
    ];
    (headers, body).into_response()
}

/// Whether this node runs under a local cluster's supervisor, whether it serves over TLS (the
/// page warns when it does not), and the supervisor's word on each node (`running`, `paused`,
/// `killed`, `exited`).
async fn control_state(State(console): State<Console>) -> Response {
    let tls = console.api.cluster.serves_tls();
    let nodes = match &console.control {
        Some(control) => control.ask("state").await.ok(),
        None => None,
    };
    let nodes: serde_json::Map<String, serde_json::Value> = (nodes.iter())
        .flat_map(|line| line.split_whitespace())
        .filter_map(|pair| pair.split_once('='))
        .map(|(id, state)| (id.to_owned(), state.into()))
        .collect();
    let body = serde_json::json!({
        "available": console.control.is_some(),
        "tls": tls,
        "nodes": nodes,
    });
    json(StatusCode::OK, &body)
}

/// `POST /ui/control/{id}/{action}`: the action passed on to the supervisor, for an admin (or
/// anyone, while authorization is off), from this page's origin only.
async fn act(
    State(console): State<Console>,
    Path((id, action)): Path<(u64, String)>,
    ConnectInfo(peer): ConnectInfo<Peer>,
    headers: HeaderMap,
) -> Response {
    let acted = async {
        let (credentials, _) = caller(peer, &headers, Ok(Default::default())).map_err(Err)?;
        (console.api.cluster)
            .may_act_on_nodes(&credentials)
            .map_err(Ok)?;
        if !ACTIONS.contains(&action.as_str()) {
            let problem = format!("must be one of {}, not {action:?}", ACTIONS.join(", "));
            return Err(Ok(NodeError::Invalid(InvalidInput::new("action", problem))));
        }
        let Some(control) = &console.control else {
            let problem = "this node runs under no local cluster (`leasehold cluster`): \
                           stop and start its process as you started it";
            return Err(Ok(NodeError::Invalid(InvalidInput::new("node", problem))));
        };
        let answer = control.ask(&format!("{action} {id}")).await.map_err(Ok)?;
        match answer.strip_prefix("error ") {
            Some(problem) => Err(Ok(NodeError::Refused(problem.to_owned()))),
            None => Ok(answer),
        }
    };
    match acted.await {
        Ok(answer) => json(StatusCode::OK, &serde_json::json!({ "done": answer })),
        Err(Ok(e)) => error(&e),
        Err(Err(refused)) => *refused,
    }
}
