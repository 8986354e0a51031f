//! `LeaseClient`: talks to any node of a cluster. Every node forwards to the leader, so the
//! client only has to find a live node: it tries the endpoints in turn, sticks with one that
//! answers, and retries while the cluster is electing, up to a deadline.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::node::INDETERMINATE_KEY;
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_client::ClusterClient;
use crate::proto::v1::lease_store_client::LeaseStoreClient;

/// One attempt's limit: above a node's own worst case (election wait plus quorum waits).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(9);
/// No attempt gets less, whatever the deadline.
const MIN_ATTEMPT: Duration = Duration::from_millis(200);
/// How long a call keeps trying other nodes while none answers.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);
/// Pause after every node was tried once, so a cluster in an election is not hammered.
const ROUND_PAUSE: Duration = Duration::from_millis(50);

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid endpoint {endpoint:?}: {reason}")]
    Endpoint { endpoint: String, reason: String },
    #[error("{}", describe(.0))]
    Status(Status),
}

impl ClientError {
    pub fn code(&self) -> Code {
        match self {
            ClientError::Endpoint { .. } => Code::InvalidArgument,
            ClientError::Status(status) => status.code(),
        }
    }

    /// The call was a write that may or may not have been applied: some attempt of it reached
    /// the store, or may have, and no answer came back. Never true of a read.
    pub fn is_indeterminate(&self) -> bool {
        match self {
            ClientError::Endpoint { .. } => false,
            ClientError::Status(status) => status.metadata().get(INDETERMINATE_KEY).is_some(),
        }
    }
}

fn describe(status: &Status) -> String {
    let kind = match status.code() {
        Code::InvalidArgument => "invalid argument",
        Code::Unavailable => "unavailable",
        Code::FailedPrecondition => "failed precondition",
        Code::DeadlineExceeded => "deadline exceeded",
        Code::Internal => "internal error",
        other => return format!("{other:?}: {}", status.message()),
    };
    format!("{kind}: {}", status.message())
}

/// Worth trying elsewhere: the node asked did not answer in time, had no leader or quorum,
/// or its connection failed. Safe for writes too: every request carries a request id, and the
/// store answers a retry of an applied request with its first answer instead of applying it
/// again. Bad input, a wrong clock and broken invariants are final.
fn retryable(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::Unavailable
            | Code::DeadlineExceeded
            | Code::Cancelled
            | Code::Unknown
            | Code::ResourceExhausted
    )
}

/// Whether a call changes the store: only a write can be left indeterminate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Effect {
    Read,
    Write,
}

/// What the call does after a failed attempt.
#[derive(Debug)]
enum Next {
    Retry,
    Stop(ClientError),
}

/// A call's failed attempts so far, and what they add up to.
#[derive(Debug)]
struct Attempts {
    effect: Effect,
}

impl Attempts {
    fn new(effect: Effect) -> Self {
        Attempts { effect }
    }

    /// Takes one attempt's failure. `gave_up` is why the call stops even if this failure is
    /// worth retrying (its deadline passed); `None` while there is time left.
    fn failed(&mut self, status: Status, gave_up: Option<String>) -> Next {
        match gave_up {
            _ if !retryable(&status) => Next::Stop(ClientError::Status(status)),
            None => Next::Retry,
            Some(why) if status.metadata().get(INDETERMINATE_KEY).is_none() => {
                Next::Stop(ClientError::Status(Status::unavailable(format!(
                    "{why}; last: {}",
                    status.message()
                ))))
            }
            Some(_) => Next::Stop(ClientError::Status(status)),
        }
    }
}

pub struct LeaseClient {
    /// Names this client's requests, so the store answers a retry instead of applying it twice.
    client_id: u64,
    next_sequence: std::sync::atomic::AtomicU64,
    endpoints: Vec<String>,
    targets: Vec<Endpoint>,
    channels: Vec<Channel>,
    /// The endpoint that answered last: tried first next time.
    preferred: AtomicUsize,
    deadline: Duration,
}

impl LeaseClient {
    /// A client for `endpoints` (`host:port`). Connections are made lazily, on first use.
    pub fn new<S: AsRef<str>>(endpoints: &[S]) -> Result<Self, ClientError> {
        if endpoints.is_empty() {
            return Err(ClientError::Endpoint {
                endpoint: String::new(),
                reason: "no endpoints given".into(),
            });
        }
        let mut targets = Vec::new();
        for endpoint in endpoints {
            let endpoint = endpoint.as_ref().trim();
            let uri = if endpoint.contains("://") {
                endpoint.to_owned()
            } else {
                format!("http://{endpoint}")
            };
            let target = Endpoint::from_shared(uri)
                .map_err(|e| ClientError::Endpoint {
                    endpoint: endpoint.to_owned(),
                    reason: e.to_string(),
                })?
                .connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true);
            targets.push(target);
        }
        Ok(LeaseClient {
            client_id: random_client_id(),
            next_sequence: std::sync::atomic::AtomicU64::new(1),
            endpoints: endpoints
                .iter()
                .map(|e| e.as_ref().trim().to_owned())
                .collect(),
            channels: targets.iter().map(Endpoint::connect_lazy).collect(),
            targets,
            preferred: AtomicUsize::new(0),
            deadline: DEFAULT_DEADLINE,
        })
    }

    /// Connects from `ip` (the fault suite's clients use an address its partitions leave alone).
    pub fn with_local_address(mut self, ip: std::net::IpAddr) -> Self {
        self.channels = self
            .targets
            .iter()
            .map(|target| target.clone().local_address(Some(ip)).connect_lazy())
            .collect();
        self
    }

    /// How long a call keeps trying before it reports the last failure.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// A fresh request id; every retry of the request carries the same one.
    fn request_id(&self) -> Option<pb::RequestId> {
        Some(pb::RequestId {
            client_id: self.client_id,
            sequence: self.next_sequence.fetch_add(1, Ordering::Relaxed),
        })
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Runs `call` against one node after another until one answers or the deadline passes.
    async fn call<T, F, Fut>(&self, effect: Effect, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(Channel, Duration) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let started = tokio::time::Instant::now();
        let count = self.channels.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut attempts = Attempts::new(effect);
        let mut attempt = 0;
        loop {
            let index = (first + attempt) % count;
            // Half the deadline at most, so a node that hangs (stopped, cut off) leaves time to
            // ask another; never past the deadline itself.
            let left = self.deadline.saturating_sub(started.elapsed());
            let timeout = (self.deadline / 2)
                .clamp(self.deadline.min(MIN_ATTEMPT), ATTEMPT_TIMEOUT)
                .min(left.max(MIN_ATTEMPT));
            match call(self.channels[index].clone(), timeout).await {
                Ok(response) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(response.into_inner());
                }
                Err(status) => {
                    let gave_up = (started.elapsed() >= self.deadline).then(|| {
                        format!(
                            "no node of {} answered within {} ms",
                            self.endpoints.join(","),
                            self.deadline.as_millis()
                        )
                    });
                    match attempts.failed(status, gave_up) {
                        Next::Stop(error) => return Err(error),
                        Next::Retry => {
                            attempt += 1;
                            if attempt % count == 0 {
                                tokio::time::sleep(ROUND_PAUSE).await;
                            }
                        }
                    }
                }
            }
        }
    }

    pub async fn acquire(
        &self,
        lease: &str,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<pb::AcquireResponse, ClientError> {
        let message = pb::AcquireRequest {
            lease: lease.into(),
            holder: holder.into(),
            ttl_ms,
            request_id: self.request_id(),
        };
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).acquire(request).await }
        })
        .await
    }

    pub async fn release(
        &self,
        lease: &str,
        holder: &str,
        token: u64,
    ) -> Result<pb::ReleaseResponse, ClientError> {
        let message = pb::ReleaseRequest {
            lease: lease.into(),
            holder: holder.into(),
            token,
            request_id: self.request_id(),
        };
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).release(request).await }
        })
        .await
    }

    /// A plain put with `fence: None`; a fenced one with `Some((lease, token))`.
    pub async fn put(
        &self,
        key: &str,
        value: &[u8],
        fence: Option<(&str, u64)>,
    ) -> Result<pb::PutResponse, ClientError> {
        let message = pb::PutRequest {
            key: key.into(),
            value: value.to_vec(),
            fence: fence.map(|(lease, token)| pb::Fence {
                lease: lease.into(),
                token,
            }),
            request_id: self.request_id(),
        };
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).put(request).await }
        })
        .await
    }

    pub async fn get(&self, key: &str) -> Result<pb::GetResponse, ClientError> {
        let message = pb::GetRequest { key: key.into() };
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).get(request).await }
        })
        .await
    }

    pub async fn get_lease(&self, lease: &str) -> Result<pb::GetLeaseResponse, ClientError> {
        let message = pb::GetLeaseRequest {
            lease: lease.into(),
        };
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).get_lease(request).await }
        })
        .await
    }

    pub async fn advance(&self, ms: u64) -> Result<pb::AdvanceResponse, ClientError> {
        let message = pb::AdvanceRequest {
            ms,
            request_id: self.request_id(),
        };
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(message, timeout);
            async move { LeaseStoreClient::new(ch).advance(request).await }
        })
        .await
    }

    /// The first node that answers, about itself only.
    pub async fn node_status(&self) -> Result<pb::NodeStatus, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::NodeStatusRequest {}, timeout);
            async move { ClusterClient::new(ch).node_status(request).await }
        })
        .await
    }

    /// Every member's status, as seen by the first node that answers.
    pub async fn status(&self) -> Result<pb::StatusResponse, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::StatusRequest {}, timeout);
            async move { ClusterClient::new(ch).status(request).await }
        })
        .await
    }
}

/// 64 random bits from the standard library's randomly keyed hasher: no RNG crate for one
/// number per client.
fn random_client_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish().max(1) // 0 means "no request id"
}

fn attempt<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

