//! etcd's JSON gateway on the HTTP port, as etcd's grpc-gateway serves it, so that programs
//! that speak etcd over HTTP (`etcd3gw`, OpenStack's tooz, Patroni) work unchanged: `POST
//! /v3/<service>/<call>` with the request message in JSON, answered with the response message
//! in JSON. Names as the proto writes them (`range_end`, `ID`, `TTL`), 64-bit integers as
//! strings, keys and values in base64, enums by name, defaults left out. A stream (`/v3/watch`,
//! `/v3/lease/keepalive`, `/v3/election/observe`) answers one `{"result": message}` a line, and
//! a failure after its start with a line `{"error": ...}`; its request body is its one
//! message. Every call goes to the typed API (`node::api::etcd`), as gRPC's do.

use axum::response::Response;
use serde::Serialize;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;

use super::{lines, ok, request, unknown_path, Api};
use crate::node::api::{Credentials, Deadline, EtcdAnswers};
use crate::node::NodeError;
use crate::proto::etcd::etcdserverpb as pb;

/// What Leasehold does not serve of etcd's gateway, as its gRPC edge refuses it.
const AUTH: &str = "Leasehold does not serve etcd's users, roles and passwords: an etcd client \
                    is known by its TLS client certificate's name, or by a Leasehold bearer token \
                    sent as `Authorization: Bearer TOKEN`";

/// The paths served, for the error that names them.
pub(super) const PATHS: &[&str] = &[
    "kv/range",
    "kv/put",
    "kv/deleterange",
    "kv/txn",
    "kv/compaction",
    "lease/grant",
    "lease/revoke",
    "lease/keepalive",
    "lease/timetolive",
    "lease/leases",
    "watch",
    "maintenance/status",
    "maintenance/alarm",
    "cluster/member/list",
    "lock/lock",
    "lock/unlock",
    "election/campaign",
    "election/proclaim",
    "election/leader",
    "election/observe",
    "election/resign",
];

/// The answer to `POST /v3/<path>` with `body`.
pub(super) async fn answer(
    api: &Api,
    path: &str,
    c: &Credentials,
    body: &[u8],
) -> Result<Response, NodeError> {
    let (etcd, d) = (&api.etcd, Deadline::NONE);
    Ok(match path {
        "kv/range" => ok(etcd.range(c, d, request(body)?).await?),
        "kv/put" => ok(etcd.put(c, d, request(body)?).await?),
        "kv/deleterange" => ok(etcd.delete_range(c, d, request(body)?).await?),
        "kv/txn" => ok(etcd.txn(c, d, request(body)?).await?),
        "kv/compaction" => ok(etcd.compact(c, d, request(body)?).await?),
        "lease/grant" => ok(etcd.lease_grant(c, d, request(body)?).await?),
        // etcd 3.3's gateway put the lease calls under `kv/`; 3.4 and later answer both.
        "lease/revoke" | "kv/lease/revoke" => ok(etcd.lease_revoke(c, d, request(body)?).await?),
        "lease/timetolive" | "kv/lease/timetolive" => {
            ok(etcd.lease_time_to_live(c, d, request(body)?).await?)
        }
        "lease/leases" | "kv/lease/leases" => ok(etcd.lease_leases(c, d, request(body)?).await?),
        "lease/keepalive" => {
            let one: pb::LeaseKeepAliveRequest = request(body)?;
            results(etcd.keep_alive_stream(c.clone(), tokio_stream::iter([one]))?)
        }
        "watch" => {
            let one: pb::WatchRequest = request(body)?;
            // The watch goes on after its one message, until the client goes.
            let inbound = tokio_stream::iter([one]).chain(tokio_stream::pending());
            results(etcd.watch_stream(c.clone(), inbound)?)
        }
        "maintenance/status" => ok(etcd.status(c).await?),
        "maintenance/alarm" => ok(etcd.alarm_list()),
        "cluster/member/list" => ok(etcd.member_list(c).await?),
        "lock/lock" => ok(etcd.lock(c, d, request(body)?).await?),
        "lock/unlock" => ok(etcd.unlock(c, d, request(body)?).await?),
        "election/campaign" => ok(etcd.campaign(c, d, request(body)?).await?),
        "election/proclaim" => ok(etcd.proclaim(c, d, request(body)?).await?),
        "election/leader" => ok(etcd.leader(c, d, request(body)?).await?),
        "election/resign" => ok(etcd.resign(c, d, request(body)?).await?),
        "election/observe" => results(etcd.observe_stream(c, request(body)?)?),
        p if p.starts_with("auth/") => return Err(NodeError::NotServed(AUTH)),
        p => unknown_path(
            &format!("/v3/{p}"),
            PATHS.iter().map(|p| format!("/v3/{p}")),
        ),
    })
}

/// A stream's answers, each as grpc-gateway sends it: `{"result": message}` a line.
fn results<T: Serialize + Send + 'static>(answers: EtcdAnswers<T>) -> Response {
    let wrapped =
        ReceiverStream::new(answers).map(|answer| answer.map(|result| Wrapped { result }));
    lines(wrapped)
}

/// One message of a stream, as grpc-gateway wraps it.
#[derive(Serialize)]
struct Wrapped<T> {
    result: T,
}
