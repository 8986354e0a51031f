//! `LeaseClient`: talks to any node of a cluster. Every node forwards to the leader, so the
//! client only has to find a live node: it tries the endpoints in turn, sticks with one that
//! answers, and retries while the cluster is electing, up to a deadline.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Request, Response, Status};

use crate::node::{INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_client::ClusterClient;
use crate::proto::v1::lease_store_client::LeaseStoreClient;

/// One attempt's limit: above a node's own worst case (election wait plus quorum waits).
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(9);
const _: () = assert!(
    ATTEMPT_TIMEOUT.as_millis() > crate::node::NODE_WRITE_WORST.as_millis(),
    "an attempt may last as long as a node's own worst case for a write"
);
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

    /// The store refused the request because its session is not open (expired, say).
    fn is_unknown_session(&self) -> bool {
        match self {
            ClientError::Endpoint { .. } => false,
            ClientError::Status(status) => status.metadata().get(SESSION_KEY).is_some(),
        }
    }
}

/// One line: the code, then whether the write may have been applied, then the message.
fn describe(status: &Status) -> String {
    let kind = match status.code() {
        Code::InvalidArgument => "invalid argument".to_owned(),
        Code::Unavailable => "unavailable".to_owned(),
        Code::FailedPrecondition => "failed precondition".to_owned(),
        Code::DeadlineExceeded => "deadline exceeded".to_owned(),
        Code::Internal => "internal error".to_owned(),
        other => format!("{other:?}"),
    };
    let indeterminate = if status.metadata().get(INDETERMINATE_KEY).is_some() {
        " (indeterminate)"
    } else {
        ""
    };
    format!("{kind}{indeterminate}: {}", message_with_cause(status))
}

/// The status's message and, when the transport failed, what failed underneath (a refused
/// connection, a TLS handshake alert): tonic's own message then says only "transport error".
fn message_with_cause(status: &Status) -> String {
    let mut text = status.message().to_owned();
    let mut source = std::error::Error::source(status);
    let mut deepest = None;
    while let Some(error) = source {
        deepest = Some(error.to_string());
        source = error.source();
    }
    if let Some(cause) = deepest.filter(|cause| !text.contains(cause.as_str())) {
        text = format!("{text}: {cause}");
    }
    if status.code() == Code::Internal && text.contains("h2 protocol error") {
        text += " (is the node serving TLS? then pass --tls-ca)";
    }
    text
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
///
/// A write is retried, under its one request id, whatever happened to the attempt before:
/// the store answers a retry of a request it already applied with its first answer instead of
/// applying it again. So an indeterminate attempt is retried too, and a later answer settles
/// it. Only when the call ends without an answer does it matter that an attempt may have
/// applied the write: then the error says so, whichever attempt it was.
#[derive(Debug)]
struct Attempts {
    effect: Effect,
    /// Why an attempt of this write may have applied it; `None` while none may have.
    applied_maybe: Option<String>,
}

impl Attempts {
    fn new(effect: Effect) -> Self {
        Attempts {
            effect,
            applied_maybe: None,
        }
    }

    /// Takes one attempt's failure. `gave_up` is why the call stops even if this failure is
    /// worth retrying (its deadline passed); `None` while there is time left.
    fn failed(&mut self, mut status: Status, gave_up: Option<String>) -> Next {
        if status.metadata().get(SESSION_KEY).is_some() {
            // "Not applied now, and maybe earlier": the node cannot know about earlier attempts,
            // but this call does. Only they can make the write indeterminate.
            status.metadata_mut().remove(INDETERMINATE_KEY);
        }
        let earlier = self.applied_maybe.take();
        let this = match self.effect {
            Effect::Write => applied_maybe(&status),
            Effect::Read => None,
        };
        let retry = retryable(&status);
        if retry && gave_up.is_none() {
            self.applied_maybe = earlier.or(this);
            return Next::Retry;
        }
        let last = match gave_up {
            Some(why) if retry => {
                let mut summary =
                    Status::unavailable(format!("{why}; last: {}", message_with_cause(&status)));
                if status.metadata().get(INDETERMINATE_KEY).is_some() {
                    mark_indeterminate(&mut summary);
                }
                summary
            }
            _ => status,
        };
        Next::Stop(ClientError::Status(match (self.effect, earlier, this) {
            (Effect::Read, ..) => {
                let mut last = last;
                last.metadata_mut().remove(INDETERMINATE_KEY);
                last
            }
            (Effect::Write, None, None) => last,
            // The node's own message already says the write may have been applied.
            (Effect::Write, _, _) if last.metadata().get(INDETERMINATE_KEY).is_some() => last,
            (Effect::Write, Some(earlier), _) => indeterminate(
                &last,
                &format!("the write may have been applied by an earlier attempt: {earlier}"),
            ),
            (Effect::Write, None, Some(_)) => indeterminate(
                &last,
                "the last attempt's answer was lost, so the write may have been applied",
            ),
        }))
    }
}

/// Why the attempt that failed with `status` may have applied its write; `None` if it
/// certainly did not.
fn applied_maybe(status: &Status) -> Option<String> {
    if status.metadata().get(INDETERMINATE_KEY).is_some() {
        // The node says why: a lost quorum, a lost forward, a stop mid-write.
        return Some(status.message().to_owned());
    }
    if status.metadata().get(ORIGIN_KEY).is_some() || never_sent(status) {
        // A node's own determinate answer (no leader, bad input), or no connection at all.
        return None;
    }
    if matches!(status.code(), Code::OutOfRange | Code::Unimplemented) {
        // Refused by the server before any handler ran: a message over its size limit, or a
        // method it does not serve. No node produces these codes itself.
        return None;
    }
    // Anything else failed after the request may have left: the attempt's timeout fired, the
    // call was cancelled or reset, or the answer did not arrive or decode.
    Some(format!("its answer was lost ({})", describe(status)))
}

/// Only a connection that was never made proves the request was not sent: tonic reports a
/// failed connect (refused, timed out) as a `ConnectError` in the status's source chain.
fn never_sent(status: &Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error.is::<tonic::ConnectError>() {
            return true;
        }
        source = error.source();
    }
    false
}

fn mark_indeterminate(status: &mut Status) {
    status.metadata_mut().insert(
        INDETERMINATE_KEY,
        tonic::metadata::MetadataValue::from_static("true"),
    );
}

/// `status` with the mark, and `why` after its message.
fn indeterminate(status: &Status, why: &str) -> Status {
    let mut marked = Status::with_metadata(
        status.code(),
        format!("{}; {why}", status.message()),
        status.metadata().clone(),
    );
    mark_indeterminate(&mut marked);
    marked
}

pub struct LeaseClient {
    /// This client's session, opened through the log on its first write: its requests name
    /// it, so the store answers a retry instead of applying it twice.
    session: std::sync::Mutex<Option<u64>>,
    /// Held while a session is being opened, so concurrent first writes open one.
    opening: tokio::sync::Mutex<()>,
    next_sequence: std::sync::atomic::AtomicU64,
    endpoints: Vec<String>,
    targets: Vec<Endpoint>,
    channels: Vec<Channel>,
    /// The endpoint that answered last: tried first next time.
    preferred: AtomicUsize,
    deadline: Duration,
}

/// A fenced write's `(lease, token)` as the API carries it.
fn wire_fence(fence: Option<(&str, u64)>) -> Option<pb::Fence> {
    fence.map(|(lease, token)| pb::Fence {
        lease: lease.into(),
        token,
    })
}

/// How to reach `endpoint` (`host:port`, or a URI): over TLS when `tls` is given.
fn target(endpoint: &str, tls: Option<&ClientTlsConfig>) -> Result<Endpoint, ClientError> {
    let invalid = |e: tonic::transport::Error| ClientError::Endpoint {
        endpoint: endpoint.to_owned(),
        reason: e.to_string(),
    };
    let address = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let target = Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(invalid)?
        .connect_timeout(Duration::from_millis(500))
        .tcp_nodelay(true);
    match tls {
        Some(tls) => target.tls_config(tls.clone()).map_err(invalid),
        None => Ok(target),
    }
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
        let targets = endpoints
            .iter()
            .map(|endpoint| target(endpoint.as_ref().trim(), None))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(LeaseClient {
            session: std::sync::Mutex::new(None),
            opening: tokio::sync::Mutex::new(()),
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

    /// Talks TLS to every endpoint, checking the nodes' certificates (and showing this client's,
    /// if `tls` has one) as `tls` says.
    pub fn with_tls(mut self, tls: ClientTlsConfig) -> Result<Self, ClientError> {
        self.targets = self
            .endpoints
            .iter()
            .map(|endpoint| target(endpoint, Some(&tls)))
            .collect::<Result<Vec<_>, _>>()?;
        self.channels = self.targets.iter().map(Endpoint::connect_lazy).collect();
        Ok(self)
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

    fn open_session(&self) -> Option<u64> {
        *self.session.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// This client's session id, opening one through the log if it has none.
    async fn session_id(&self) -> Result<u64, ClientError> {
        if let Some(id) = self.open_session() {
            return Ok(id);
        }
        let _opening = self.opening.lock().await;
        if let Some(id) = self.open_session() {
            return Ok(id);
        }
        // Counted as a read: a registration whose answer is lost leaves an unused session that
        // expires by itself, so retrying it is always safe and it is never indeterminate.
        let registered = self
            .call(Effect::Read, |ch, timeout| {
                let request = attempt(pb::RegisterRequest {}, timeout);
                async move { LeaseStoreClient::new(ch).register(request).await }
            })
            .await?;
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(registered.client_id);
        Ok(registered.client_id)
    }

    /// Runs a write under this client's session: `send` gets the request id, the same on every
    /// retry of the request. If the store no longer knows the session (an hour without requests
    /// expires it) and no attempt of the request may have been applied, a new session is opened
    /// and the request sent once more as a new one.
    async fn write<T, F, Fut>(&self, send: F) -> Result<T, ClientError>
    where
        F: Fn(Option<pb::RequestId>) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let mut reopened = false;
        loop {
            let client_id = self.session_id().await?;
            let request_id = pb::RequestId {
                client_id,
                sequence: self.next_sequence.fetch_add(1, Ordering::Relaxed),
            };
            match send(Some(request_id)).await {
                Err(e) if e.is_unknown_session() && !e.is_indeterminate() && !reopened => {
                    reopened = true;
                    let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
                    if *session == Some(client_id) {
                        *session = None;
                    }
                }
                answer => return answer,
            }
        }
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
        self.write(|request_id| {
            let message = pb::AcquireRequest {
                lease: lease.into(),
                holder: holder.into(),
                ttl_ms,
                request_id,
            };
            self.call(Effect::Write, move |ch, timeout| {
                let request = attempt(message.clone(), timeout);
                async move { LeaseStoreClient::new(ch).acquire(request).await }
            })
        })
        .await
    }

    pub async fn release(
        &self,
        lease: &str,
        holder: &str,
        token: u64,
    ) -> Result<pb::ReleaseResponse, ClientError> {
        self.write(|request_id| {
            let message = pb::ReleaseRequest {
                lease: lease.into(),
                holder: holder.into(),
                token,
                request_id,
            };
            self.call(Effect::Write, move |ch, timeout| {
                let request = attempt(message.clone(), timeout);
                async move { LeaseStoreClient::new(ch).release(request).await }
            })
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
        self.write(|request_id| {
            let message = pb::PutRequest {
                key: key.into(),
                value: value.to_vec(),
                fence: wire_fence(fence),
                request_id,
            };
            self.call(Effect::Write, move |ch, timeout| {
                let request = attempt(message.clone(), timeout);
                async move { LeaseStoreClient::new(ch).put(request).await }
            })
        })
        .await
    }

    /// A plain delete with `fence: None`; a fenced one with `Some((lease, token))`.
    pub async fn delete(
        &self,
        key: &str,
        fence: Option<(&str, u64)>,
    ) -> Result<pb::DeleteResponse, ClientError> {
        self.write(|request_id| {
            let message = pb::DeleteRequest {
                key: key.into(),
                fence: wire_fence(fence),
                request_id,
            };
            self.call(Effect::Write, move |ch, timeout| {
                let request = attempt(message.clone(), timeout);
                async move { LeaseStoreClient::new(ch).delete(request).await }
            })
        })
        .await
    }

    /// Whether `token` is `lease`'s current grant, linearizably.
    pub async fn check_token(
        &self,
        lease: &str,
        token: u64,
    ) -> Result<pb::CheckTokenResponse, ClientError> {
        let message = pb::CheckTokenRequest {
            lease: lease.into(),
            token,
        };
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { LeaseStoreClient::new(ch).check_token(request).await }
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
        self.write(|request_id| {
            let message = pb::AdvanceRequest { ms, request_id };
            self.call(Effect::Write, move |ch, timeout| {
                let request = attempt(message, timeout);
                async move { LeaseStoreClient::new(ch).advance(request).await }
            })
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

fn attempt<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::node::NodeError;
    use crate::proto::v1::lease_store_server::{LeaseStore, LeaseStoreServer};

    /// A node's own plain UNAVAILABLE: this attempt was not applied.
    fn no_leader() -> Status {
        Status::from(NodeError::NoLeader(Duration::from_millis(2_000)))
    }

    /// A node's own UNAVAILABLE for a write that may still be applied.
    fn no_quorum() -> Status {
        Status::from(NodeError::NoQuorum(Duration::from_millis(3_000)))
    }

    /// What tonic reports when the connection could not be made: the request was never sent.
    fn refused() -> Status {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        Status::from_error(Box::new(tonic::ConnectError(Box::new(io))))
    }

    /// What the client's own per-attempt timeout reports, with the request in flight.
    fn timed_out() -> Status {
        Status::from_error(Box::new(tonic::TimeoutExpired(())))
    }

    /// Feeds `failures` to a fresh call's attempts, the last one at its deadline.
    fn outcome(effect: Effect, failures: Vec<Status>) -> ClientError {
        let mut attempts = Attempts::new(effect);
        let last = failures.len() - 1;
        for (i, status) in failures.into_iter().enumerate() {
            let gave_up = (i == last).then(|| "deadline passed".to_owned());
            match attempts.failed(status, gave_up) {
                Next::Stop(error) => return error,
                Next::Retry => assert!(i < last, "the call retried past its deadline"),
            }
        }
        panic!("the call neither answered nor stopped")
    }

    #[test]
    fn a_write_marked_indeterminate_once_stays_so_when_later_attempts_fail_plainly() {
        let e = outcome(Effect::Write, vec![no_quorum(), no_leader(), no_leader()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.is_indeterminate(), "{e}");
        assert!(e.to_string().contains("may have been applied"), "{e}");
    }

    #[test]
    fn a_write_whose_attempt_timed_out_in_flight_is_indeterminate_at_the_deadline() {
        for lost in [
            timed_out(),
            Status::deadline_exceeded("deadline"),
            Status::cancelled("cancelled"),
            Status::unknown("transport error"),
            Status::unavailable("connection reset"),
        ] {
            let e = outcome(Effect::Write, vec![lost.clone(), no_leader()]);
            assert!(e.is_indeterminate(), "after {lost:?}: {e}");
            assert!(e.to_string().contains("may have been applied"), "{e}");
        }
    }

    #[test]
    fn a_write_whose_last_attempt_timed_out_at_the_deadline_is_indeterminate() {
        let e = outcome(Effect::Write, vec![no_leader(), timed_out()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_write_that_failed_for_good_after_a_lost_attempt_is_indeterminate() {
        let broken = Status::from(NodeError::Invariant("broken".into()));
        let e = outcome(Effect::Write, vec![timed_out(), broken]);
        assert_eq!(e.code(), Code::Internal, "{e}");
        assert!(e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_write_never_sent_or_refused_by_a_node_is_determinate() {
        let e = outcome(Effect::Write, vec![refused(), no_leader(), refused()]);
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(!e.is_indeterminate(), "{e}");
        assert!(!e.to_string().contains("may have been applied"), "{e}");

        let invalid = Status::from(NodeError::WrongClock("advance is refused"));
        let e = outcome(Effect::Write, vec![invalid]);
        assert_eq!(e.code(), Code::FailedPrecondition);
        assert!(!e.is_indeterminate(), "{e}");
    }

    #[test]
    fn a_final_error_the_node_marked_is_reported_as_it_came() {
        let forgotten = Status::from(NodeError::Forgotten);
        let e = outcome(Effect::Write, vec![no_leader(), forgotten.clone()]);
        assert_eq!(e.code(), Code::Aborted);
        assert!(e.is_indeterminate(), "{e}");
        assert!(e.to_string().contains(forgotten.message()), "{e}");
    }

    #[test]
    fn a_read_is_never_indeterminate() {
        for failures in [
            vec![timed_out(), no_leader()],
            vec![no_quorum(), timed_out()],
            vec![Status::unknown("transport error")],
        ] {
            let e = outcome(Effect::Read, failures);
            assert!(!e.is_indeterminate(), "{e}");
        }
    }

    /// How the fake node answers one call.
    #[derive(Clone)]
    enum Reply {
        /// Never answers: the client's attempt timeout fires with the request in flight.
        Hang,
        Fail(Status),
        /// An answer with every field at its default.
        Answer,
    }

    /// A node that answers from a script, and remembers the request ids it was sent.
    struct FakeNode {
        /// The replies in order; the last one answers every call after it.
        script: Mutex<Vec<Reply>>,
        request_ids: Mutex<Vec<Option<pb::RequestId>>>,
        /// Sessions opened so far; each registration gets the next id.
        sessions: Mutex<u64>,
    }

    impl FakeNode {
        async fn answer<T: Default>(
            &self,
            request_id: Option<pb::RequestId>,
        ) -> Result<Response<T>, Status> {
            let reply = {
                self.request_ids.lock().unwrap().push(request_id);
                let mut script = self.script.lock().unwrap();
                if script.len() > 1 {
                    script.remove(0)
                } else {
                    script[0].clone()
                }
            };
            match reply {
                Reply::Hang => std::future::pending().await,
                Reply::Fail(status) => Err(status),
                Reply::Answer => Ok(Response::new(T::default())),
            }
        }
    }

    #[tonic::async_trait]
    impl LeaseStore for Arc<FakeNode> {
        async fn acquire(
            &self,
            r: Request<pb::AcquireRequest>,
        ) -> Result<Response<pb::AcquireResponse>, Status> {
            self.answer(r.into_inner().request_id).await
        }
        async fn release(
            &self,
            r: Request<pb::ReleaseRequest>,
        ) -> Result<Response<pb::ReleaseResponse>, Status> {
            self.answer(r.into_inner().request_id).await
        }
        async fn put(
            &self,
            r: Request<pb::PutRequest>,
        ) -> Result<Response<pb::PutResponse>, Status> {
            self.answer(r.into_inner().request_id).await
        }
        async fn delete(
            &self,
            r: Request<pb::DeleteRequest>,
        ) -> Result<Response<pb::DeleteResponse>, Status> {
            self.answer(r.into_inner().request_id).await
        }
        async fn get(
            &self,
            _: Request<pb::GetRequest>,
        ) -> Result<Response<pb::GetResponse>, Status> {
            self.answer(None).await
        }
        async fn check_token(
            &self,
            _: Request<pb::CheckTokenRequest>,
        ) -> Result<Response<pb::CheckTokenResponse>, Status> {
            self.answer(None).await
        }
        async fn get_lease(
            &self,
            _: Request<pb::GetLeaseRequest>,
        ) -> Result<Response<pb::GetLeaseResponse>, Status> {
            self.answer(None).await
        }
        async fn advance(
            &self,
            r: Request<pb::AdvanceRequest>,
        ) -> Result<Response<pb::AdvanceResponse>, Status> {
            self.answer(r.into_inner().request_id).await
        }
        async fn register(
            &self,
            _: Request<pb::RegisterRequest>,
        ) -> Result<Response<pb::RegisterResponse>, Status> {
            let mut sessions = self.sessions.lock().unwrap();
            *sessions += 1;
            Ok(Response::new(pb::RegisterResponse {
                applied: None,
                client_id: *sessions,
            }))
        }
    }

    /// Serves `script` on 127.0.0.1, on a port of the system's choosing; a client with a short
    /// deadline talks to it. The server stops with the test's runtime.
    async fn fake_node(script: Vec<Reply>) -> (Arc<FakeNode>, LeaseClient) {
        let node = Arc::new(FakeNode {
            script: Mutex::new(script),
            request_ids: Mutex::default(),
            sessions: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tonic::transport::Server::builder()
            .add_service(LeaseStoreServer::new(node.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        tokio::spawn(server);
        let client = LeaseClient::new(&[addr.to_string()])
            .unwrap()
            .with_deadline(Duration::from_millis(800));
        (node, client)
    }

    #[tokio::test]
    async fn a_write_refused_for_an_expired_session_opens_a_new_one_and_is_sent_again() {
        let gone = Status::from(NodeError::UnknownSession);
        let (node, client) = fake_node(vec![Reply::Fail(gone), Reply::Answer]).await;
        client.put("k", b"v", None).await.unwrap();
        assert_eq!(
            *node.sessions.lock().unwrap(),
            2,
            "a second session was opened"
        );
        let ids = node.request_ids.lock().unwrap().clone();
        let clients: Vec<u64> = ids.iter().flatten().map(|id| id.client_id).collect();
        assert_eq!(clients, vec![1, 2], "sent once per session: {ids:?}");
        // The next write uses the new session at once.
        client.put("k", b"w", None).await.unwrap();
        assert_eq!(*node.sessions.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn a_write_that_may_have_applied_before_its_session_expired_is_not_sent_again() {
        let gone = Status::from(NodeError::UnknownSession);
        let (node, client) = fake_node(vec![Reply::Hang, Reply::Fail(gone)]).await;
        let e = client.put("k", b"v", None).await.unwrap_err();
        assert_eq!(e.code(), Code::Aborted, "{e}");
        assert!(e.is_indeterminate(), "{e}");
        assert_eq!(*node.sessions.lock().unwrap(), 1, "no new session: {e}");
        let ids = node.request_ids.lock().unwrap().clone();
        assert!(ids.iter().all(|id| *id == ids[0]), "one request: {ids:?}");
    }

    #[tokio::test]
    async fn concurrent_first_writes_open_one_session() {
        let (node, client) = fake_node(vec![Reply::Answer]).await;
        let client = Arc::new(client);
        let writes: Vec<_> = (0..8)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move { client.put(&format!("k{i}"), b"v", None).await })
            })
            .collect();
        for write in writes {
            write.await.unwrap().unwrap();
        }
        assert_eq!(*node.sessions.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_write_left_hanging_past_its_attempt_timeout_is_indeterminate_at_the_deadline() {
        let (node, client) = fake_node(vec![Reply::Hang, Reply::Fail(no_leader())]).await;
        let e = client.acquire("l", "a", 1_000).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.is_indeterminate(), "{e}");
        // The one line the CLI prints says so.
        assert!(
            e.to_string().starts_with("unavailable (indeterminate): "),
            "{e}"
        );
        assert!(e.to_string().contains("may have been applied"), "{e}");

        let ids = node.request_ids.lock().unwrap().clone();
        assert!(ids.len() >= 2, "the write was retried: {ids:?}");
        assert!(ids[0].is_some(), "a write carries a request id");
        assert!(
            ids.iter().all(|id| *id == ids[0]),
            "every retry carries the first attempt's request id: {ids:?}"
        );
    }

    #[tokio::test]
    async fn a_write_marked_indeterminate_then_refused_plainly_is_indeterminate() {
        let (_node, client) =
            fake_node(vec![Reply::Fail(no_quorum()), Reply::Fail(no_leader())]).await;
        let e = client.put("k", b"v", None).await.unwrap_err();
        assert!(e.is_indeterminate(), "{e}");
    }

    #[tokio::test]
    async fn a_read_left_hanging_is_determinate() {
        let (_node, client) = fake_node(vec![Reply::Hang, Reply::Fail(no_leader())]).await;
        let e = client.get("k").await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(!e.is_indeterminate(), "{e}");
    }

    #[tokio::test]
    async fn a_write_to_a_port_nobody_listens_on_is_determinate() {
        // Bound and closed again: connecting to it is refused.
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let client = LeaseClient::new(&[addr.to_string()])
            .unwrap()
            .with_deadline(Duration::from_millis(300));
        let e = client.acquire("l", "a", 1_000).await.unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(!e.is_indeterminate(), "{e}");
    }
}
