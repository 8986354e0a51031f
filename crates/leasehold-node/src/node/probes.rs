//! The HTTP endpoint of `serve --metrics-listen`: Prometheus's `/metrics`, and the probes
//! orchestrators ask: `/healthz` (the process and its Raft run: restart it if not) and
//! `/readyz` (it serves: send it traffic), each 200 or 503 with the reason in the body.

use crate::connections;
use openraft::ServerState;
use std::sync::Arc;

use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::Node;
use crate::limits::QUORUM_SILENCE;
use crate::metrics::Metrics;
use crate::raft::BootLog;

#[derive(Clone)]
struct Probes {
    node: Node,
    metrics: Arc<Metrics>,
    boot: BootLog,
}

/// Serves the endpoint on `listener` until `stop` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    node: Node,
    metrics: Arc<Metrics>,
    boot: BootLog,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let probes = Probes {
        node,
        metrics,
        boot,
    };
    let router = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(probes);
    let bound = connections::listener_bound();
    let listener = connections::Bounded {
        listener,
        connections: connections::Connections::new("metrics", bound),
        keepalive: crate::connections::KEEPALIVE,
    };
    crate::http1::serve(listener, router, stop).await
}

async fn metrics_text(axum::extract::State(p): axum::extract::State<Probes>) -> impl IntoResponse {
    let held = p.node.state().read().table.held_count();
    p.metrics.leases_held.set(held as i64);
    let ready = health(&p.node.raft().metrics().borrow(), p.boot).is_ok();
    p.metrics.ready.set(i64::from(ready));
    if let Some(disk) = p.node.disk_space() {
        let bytes = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        p.metrics.disk_free_bytes.set(bytes(disk.free));
        p.metrics.disk_size_bytes.set(bytes(disk.size));
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        p.metrics.encode(),
    )
}

async fn healthz(axum::extract::State(p): axum::extract::State<Probes>) -> impl IntoResponse {
    match &p.node.raft().metrics().borrow().running_state {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(fatal) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("raft stopped: {fatal}\n"),
        ),
    }
}

async fn readyz(axum::extract::State(p): axum::extract::State<Probes>) -> impl IntoResponse {
    match health(&p.node.raft().metrics().borrow(), p.boot) {
        Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
        Err(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {why}\n"),
        ),
    }
}

/// Keeps the Raft gauges in step with Raft's own metrics, counts leader changes, and logs
/// leader and membership changes as structured events.
pub async fn follow_raft(raft: crate::raft::Raft, metrics: Arc<Metrics>) {
    let mut watch = raft.metrics();
    // The leader and the term it leads in: the same node elected again is a change too.
    let mut leader: Option<(u64, u64)> = None;
    let mut membership = None;
    loop {
        {
            let m = watch.borrow_and_update();
            let now_leading = m.current_leader.map(|id| (id, m.current_term));
            if now_leading.is_some() && now_leading != leader {
                tracing::info!(
                    term = m.current_term,
                    leader = m.current_leader.unwrap_or(0),
                    this_node_leads = m.current_leader == Some(m.id),
                    "leader changed"
                );
            }
            let config = m.membership_config.membership();
            let now = (
                config.voter_ids().collect::<Vec<_>>(),
                config.learner_ids().collect::<Vec<_>>(),
            );
            if membership.as_ref() != Some(&now) {
                tracing::info!(
                    log_index = m.membership_config.log_id().map_or(0, |id| id.index),
                    voters = ?now.0,
                    learners = ?now.1,
                    "membership"
                );
                membership = Some(now);
            }
            metrics.raft_term.set(m.current_term as i64);
            metrics.raft_is_leader.set(i64::from(
                m.state == ServerState::Leader && m.current_leader == Some(m.id),
            ));
            metrics
                .raft_last_log_index
                .set(m.last_log_index.unwrap_or(0) as i64);
            metrics
                .raft_applied_index
                .set(m.last_applied.map_or(0, |id| id.index) as i64);
            if now_leading.is_some() && now_leading != leader {
                metrics.raft_leader_changes.inc();
            }
            if now_leading.is_some() {
                leader = now_leading;
            }
        }
        if watch.changed().await.is_err() {
            return;
        }
    }
}

/// Whether the node can serve now: it knows a leader (itself with a quorum that answered within
/// [`QUORUM_SILENCE`](QUORUM_SILENCE), or another node), and has applied what it found on its disk at
/// start-up. The reason when it cannot.
pub(super) fn health(
    metrics: &openraft::RaftMetrics<u64, openraft::BasicNode>,
    boot: BootLog,
) -> Result<(), String> {
    if let Err(fatal) = &metrics.running_state {
        return Err(format!("raft stopped: {fatal}"));
    }
    let applied = metrics.last_applied.map_or(0, |id| id.index);
    if applied < boot.last_index {
        return Err(format!(
            "applying what it found at start-up: {applied} of {}",
            boot.last_index
        ));
    }
    match metrics.current_leader {
        None => Err("no leader known".into()),
        Some(leader) if leader == metrics.id => match metrics.millis_since_quorum_ack {
            Some(ms) if u128::from(ms) <= QUORUM_SILENCE.as_millis() => Ok(()),
            _ => Err("leading, but no quorum answered lately".into()),
        },
        Some(_) => Ok(()),
    }
}
