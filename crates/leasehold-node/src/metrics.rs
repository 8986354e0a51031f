//! What a node counts for Prometheus, and the HTTP endpoint (`serve --metrics-listen`) that
//! serves it with the orchestrators' probes: `/metrics`, `/healthz` (the process and its Raft
//! run) and `/readyz` (it serves: a leader with a quorum is known and the boot log is applied).
//!
//! One [`Metrics`] per node, shared by the parts that count: the log store (append durations),
//! the state machine (commands per entry, expiries), the client plane's services (requests,
//! refusals) and a task that follows Raft's own metrics (term, role, indexes, leader changes).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// `rpc` and `outcome` of a client request: `ok` for an answer (a typed refusal included), or
/// the gRPC code of the error in snake case.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RequestLabels {
    pub rpc: &'static str,
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RpcLabel {
    pub rpc: &'static str,
}

/// Why a request was refused: by the store (`held_by`, `not_held`, `wrong_token`,
/// `stale_token`, `not_renewed` for a renewal refused any of its leases), or at the edge (`invalid_argument`, `overloaded`, `unknown_session`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ReasonLabel {
    pub reason: &'static str,
}

/// Everything a node counts, registered once and served as Prometheus text.
pub struct Metrics {
    registry: Registry,
    pub(crate) raft_term: Gauge,
    pub(crate) raft_is_leader: Gauge,
    pub(crate) raft_last_log_index: Gauge,
    pub(crate) raft_applied_index: Gauge,
    pub(crate) raft_leader_changes: Counter,
    pub(crate) leases_held: Gauge,
    pub(crate) requests: Family<RequestLabels, Counter>,
    pub(crate) request_duration: Family<RpcLabel, Histogram>,
    pub(crate) log_fsync_duration: Histogram,
    pub(crate) batch_commands: Histogram,
    pub(crate) expiries: Counter,
    pub(crate) refusals: Family<ReasonLabel, Counter>,
    pub(crate) clock_rate_ratio: Gauge<f64, std::sync::atomic::AtomicU64>,
    pub(crate) clock_odd: Gauge,
    pub(crate) ready: Gauge,
    pub(crate) disk_free_bytes: Gauge,
    pub(crate) disk_size_bytes: Gauge,
}

/// Seconds from 100 µs to about 6.5 s: a read served locally to a write that waited out an
/// election.
fn duration_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(0.000_1, 2.0, 17)
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("leasehold");
        let metrics = Metrics {
            raft_term: Gauge::default(),
            raft_is_leader: Gauge::default(),
            raft_last_log_index: Gauge::default(),
            raft_applied_index: Gauge::default(),
            raft_leader_changes: Counter::default(),
            leases_held: Gauge::default(),
            requests: Family::default(),
            request_duration: Family::new_with_constructor(|| Histogram::new(duration_buckets())),
            log_fsync_duration: Histogram::new(duration_buckets()),
            // 1 to 4,096 commands: a lone write to a full batch.
            batch_commands: Histogram::new(exponential_buckets(1.0, 2.0, 13)),
            expiries: Counter::default(),
            refusals: Family::default(),
            clock_rate_ratio: Gauge::default(),
            clock_odd: Gauge::default(),
            ready: Gauge::default(),
            disk_free_bytes: Gauge::default(),
            disk_size_bytes: Gauge::default(),
            registry: Registry::default(),
        };
        metrics.register(&mut registry);
        metrics.zero_every_series();
        Metrics {
            registry,
            ..metrics
        }
    }
}

impl Metrics {
    /// Every metric into `registry`, with its name and help.
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "raft_term",
            "The Raft term this node is in",
            self.raft_term.clone(),
        );
        registry.register(
            "raft_is_leader",
            "1 while this node leads, 0 otherwise",
            self.raft_is_leader.clone(),
        );
        registry.register(
            "raft_last_log_index",
            "The index of the last entry in this node's log",
            self.raft_last_log_index.clone(),
        );
        registry.register(
            "raft_applied_index",
            "The index of the last entry this node applied",
            self.raft_applied_index.clone(),
        );
        registry.register(
            "raft_leader_changes",
            "Times this node saw a new leader (counted from its start)",
            self.raft_leader_changes.clone(),
        );
        registry.register(
            "leases_held",
            "Leases held (granted and not expired) in this node's applied state",
            self.leases_held.clone(),
        );
        registry.register(
            "requests",
            "Client requests this node answered, by RPC and outcome",
            self.requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from a client request's arrival at this node to its answer, by RPC",
            self.request_duration.clone(),
        );
        registry.register(
            "log_fsync_duration_seconds",
            "Time to write and fdatasync one append to the Raft log (not the room written ahead)",
            self.log_fsync_duration.clone(),
        );
        registry.register(
            "batch_commands",
            "Commands per applied log entry",
            self.batch_commands.clone(),
        );
        registry.register(
            "expiries",
            "Leases that expired in this node's applied state",
            self.expiries.clone(),
        );
        registry.register(
            "refusals",
            "Requests refused, by reason",
            self.refusals.clone(),
        );
        self.register_clock(registry);
        self.register_health(registry);
    }

    /// What the dashboards' and alerts' health rows read (`deploy/`).
    fn register_health(&self, registry: &mut Registry) {
        registry.register(
            "ready",
            "1 while this node serves (what /readyz says: it knows a leader with a quorum and \
             applied its boot log), 0 otherwise",
            self.ready.clone(),
        );
        registry.register(
            "disk_free_bytes",
            "Bytes free for this node on its data dir's filesystem",
            self.disk_free_bytes.clone(),
        );
        registry.register(
            "disk_size_bytes",
            "The size of its data dir's filesystem, in bytes",
            self.disk_size_bytes.clone(),
        );
    }

    /// The clock's gauges (issue 42).
    fn register_clock(&self, registry: &mut Registry) {
        registry.register(
            "clock_rate_ratio",
            "This node's clock's rate over the majority's (1 for a right clock; 0 until known)",
            self.clock_rate_ratio.clone(),
        );
        registry.register(
            "clock_odd",
            "1 while this node's clock is odd (more than a tenth off the majority's, or it \
             jumped, within the last 3 s): while it is off (and 0.75 s after) it does not \
             campaign, and steps down if it leads",
            self.clock_odd.clone(),
        );
    }

    /// Every RPC's and every reason's series, created at 0.
    fn zero_every_series(&self) {
        // Every RPC and reason from the start, at 0: a series that appears only once it is
        // non-zero breaks rates and alerts.
        for rpc in RPCS {
            let _ = self
                .requests
                .get_or_create(&RequestLabels { rpc, outcome: "ok" });
            let _ = self.request_duration.get_or_create(&RpcLabel { rpc });
        }
        for reason in REASONS {
            let _ = self.refusals.get_or_create(&ReasonLabel { reason });
        }
    }
}

/// `RPCS`, the client API's unary RPCs as `rpc` labels, from the proto's table.
macro_rules! rpc_labels {
    (; $($name:ident $method:ident $request:ident $response:ident $kind:ident;)*) => {
        /// The client API's unary RPCs, as `rpc` labels.
        pub(crate) const RPCS: &[&str] = &[$(stringify!($method)),*];
    };
}

leasehold_proto::lease_calls!(rpc_labels);

/// Every `reason` of `leasehold_refusals_total`.
pub(crate) const REASONS: [&str; 8] = [
    "held_by",
    "not_held",
    "wrong_token",
    "not_renewed",
    "stale_token",
    "invalid_argument",
    "overloaded",
    "unknown_session",
];

impl Metrics {
    /// A fresh set, every count at zero.
    pub fn new() -> Arc<Metrics> {
        Arc::new(Metrics::default())
    }

    /// The Prometheus text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }

    /// Counts one client request: its outcome, its duration, and its refusal if it was one.
    pub fn request(
        &self,
        rpc: &'static str,
        took: Duration,
        outcome: Result<Option<&'static str>, tonic::Code>,
    ) {
        let (outcome, refusal) = match outcome {
            Ok(refusal) => ("ok", refusal),
            Err(code) => (code_name(code), edge_refusal(code)),
        };
        self.requests
            .get_or_create(&RequestLabels { rpc, outcome })
            .inc();
        self.request_duration
            .get_or_create(&RpcLabel { rpc })
            .observe(took.as_secs_f64());
        if let Some(reason) = refusal {
            self.refusals.get_or_create(&ReasonLabel { reason }).inc();
        }
    }
}

/// The refusals the edge makes, by the code they carry.
fn edge_refusal(code: tonic::Code) -> Option<&'static str> {
    match code {
        tonic::Code::InvalidArgument => Some("invalid_argument"),
        tonic::Code::ResourceExhausted => Some("overloaded"),
        tonic::Code::Aborted => Some("unknown_session"),
        tonic::Code::PermissionDenied => Some("denied"),
        _ => None,
    }
}

/// A gRPC code as a label value.
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "ok",
        Cancelled => "cancelled",
        Unknown => "unknown",
        InvalidArgument => "invalid_argument",
        DeadlineExceeded => "deadline_exceeded",
        NotFound => "not_found",
        AlreadyExists => "already_exists",
        PermissionDenied => "permission_denied",
        ResourceExhausted => "resource_exhausted",
        FailedPrecondition => "failed_precondition",
        Aborted => "aborted",
        OutOfRange => "out_of_range",
        Unimplemented => "unimplemented",
        Internal => "internal",
        Unavailable => "unavailable",
        DataLoss => "data_loss",
        Unauthenticated => "unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_is_exposed_under_its_name() {
        let m = Metrics::default();
        m.request("acquire", Duration::from_millis(2), Ok(Some("held_by")));
        m.request(
            "put",
            Duration::from_millis(1),
            Err(tonic::Code::Unavailable),
        );
        m.log_fsync_duration.observe(0.001);
        let text = m.encode();
        for name in [
            "leasehold_raft_term",
            "leasehold_raft_is_leader",
            "leasehold_raft_last_log_index",
            "leasehold_raft_applied_index",
            "leasehold_raft_leader_changes_total",
            "leasehold_leases_held",
            "leasehold_requests_total{rpc=\"acquire\",outcome=\"ok\"} 1",
            "leasehold_requests_total{rpc=\"put\",outcome=\"unavailable\"} 1",
            "leasehold_request_duration_seconds_bucket",
            "leasehold_log_fsync_duration_seconds_count 1",
            "leasehold_batch_commands",
            "leasehold_expiries_total",
            "leasehold_refusals_total{reason=\"held_by\"} 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
