//! `LeaseClient`: talks to any node of a cluster. Every node forwards to the leader, so the
//! client only has to find a live node: it tries the endpoints in turn, sticks with one that
//! answers, and retries while the cluster is electing, up to a deadline.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::cluster_client::ClusterClient;
use tonic::metadata::MetadataValue;
use tonic::transport::{ClientTlsConfig, Endpoint};
use tonic::{Request, Response, Status};

use crate::answers::{
    Acquired, Answer, Applied, Deleted, LeaseState, Listing, Members, Page, Released, Renewal,
    Renewed, TokenStatus, Written,
};
use crate::attempts::{pause_within, round_pauses, Attempts, Effect, Next};
use crate::batch::{answered_as, BatchMethod, Batches};
use crate::channel::{Bearer, NodeChannel, TOKEN_WITHOUT_TLS};
use crate::dead_end::{no_way, DeadEnd};
use crate::error::ClientError;
use crate::failure::removed;
use crate::lane::Lanes;
use crate::limits::{
    ATTEMPT_TIMEOUT, CONNECT_TIMEOUT, DEFAULT_DEADLINE, MEMBERSHIP_TIMEOUT, MIN_ATTEMPT,
    SEQUENCE_SPAN, SNAPSHOT_TIMEOUT,
};
use crate::sequences::{Sequences, Taken};
use crate::watch::{Watch, WatchFrom, WatchSelect};

/// A copy of the applied state, from [`LeaseClient::save_snapshot`].
#[derive(Clone, Debug)]
pub struct SavedSnapshot {
    /// Where it was taken, and its length, CRC-32 and digest.
    pub header: pb::SnapshotHeader,
    /// The state, in the nodes' own encoding.
    pub data: Vec<u8>,
}

/// A client of a Leasehold cluster: give it some or all of the nodes' client addresses.
///
/// Every write carries a request id under a session the client opens through the log on its
/// first write, so a retry after a lost answer is answered, never applied twice. When a call
/// gives up, [`ClientError::is_indeterminate`] says whether the write may have been applied.
///
/// ```no_run
/// # async fn example() -> Result<(), leasehold_client::ClientError> {
/// use leasehold_client::{Acquired, LeaseClient, Written};
///
/// let client = LeaseClient::new(&["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])?;
/// let answer = client.acquire("jobs/nightly", "worker-1", 5_000).await?;
/// if let Acquired::Granted { token, .. } = answer.outcome {
///     // Fenced: refused once the store has seen a bigger token for the lease.
///     let put = client.put("report", b"done", Some(("jobs/nightly", token))).await?;
///     assert_eq!(put.outcome, Written::Written);
/// }
/// # Ok(())
/// # }
/// ```
pub struct LeaseClient {
    /// This client's session, opened through the log on its first write: its requests name
    /// it, so the store answers a retry instead of applying it twice.
    session: std::sync::Mutex<Option<u64>>,
    /// Held while a session is being opened, so concurrent first writes open one.
    opening: tokio::sync::Mutex<()>,
    sequences: Sequences,
    endpoints: Vec<String>,
    targets: Vec<Endpoint>,
    channels: Vec<NodeChannel>,
    /// Each endpoint's `Batch` stream, for the lease calls.
    batches: Vec<Arc<Batches>>,
    /// Each endpoint's client lanes (none over TLS, nor with a bearer token), for the lease
    /// calls before the stream.
    pub(crate) lanes: Vec<Arc<Lanes>>,
    /// Sent with every request, for a client without a certificate.
    bearer: Bearer,
    /// The address connections are made from, when one is set.
    local_ip: Option<std::net::IpAddr>,
    /// The endpoint that answered last: tried first next time.
    preferred: AtomicUsize,
    deadline: Duration,
    /// Give up before the deadline once no node can serve a call (see `with_quick_give_up`).
    quick_give_up: bool,
    /// The renewals of this client's holders waiting for their request.
    pub(crate) renewals: crate::renewals::Renewals,
}

impl crate::renewals::Gathered for LeaseClient {
    fn renewals(&self) -> &crate::renewals::Renewals {
        &self.renewals
    }

    async fn send(&self, leases: Vec<Renewal>) -> Result<Vec<Renewed>, ClientError> {
        Ok(self.renew(&leases).await?.outcome)
    }
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
    let target = Endpoint::from_shared(format!("{scheme}://{address}")).map_err(invalid)?;
    // A URI without a port means its scheme's; `host` alone would mean port 80, which no node
    // listens on by default: the port left out by mistake.
    if !endpoint.contains("://") && target.uri().port_u16().is_none() {
        return Err(ClientError::Endpoint {
            endpoint: endpoint.to_owned(),
            reason: "no port: give host:port, a node's client port (`serve --listen`; \
                     `leasehold cluster` starts the first at 127.0.0.1:7001)"
                .into(),
        });
    }
    let target = target
        .connect_timeout(CONNECT_TIMEOUT)
        .tcp_nodelay(true)
        // A node that stops answering (paused, cut off) is noticed on an idle watch stream too.
        .http2_keep_alive_interval(Duration::from_secs(1))
        .keep_alive_timeout(Duration::from_secs(2));
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
            sequences: Sequences::default(),
            endpoints: endpoints
                .iter()
                .map(|e| e.as_ref().trim().to_owned())
                .collect(),
            channels: Vec::new(),
            batches: Vec::new(),
            lanes: Vec::new(),
            targets,
            bearer: Bearer::default(),
            local_ip: None,
            preferred: AtomicUsize::new(0),
            deadline: DEFAULT_DEADLINE,
            quick_give_up: false,
            renewals: Default::default(),
        }
        .connected())
    }

    /// Channels to every endpoint as this client now reaches it (from its local address, with
    /// its token), their `Batch` streams, opened on the first call, and their lanes: only where
    /// the endpoint is not TLS's (`https`) and the client sends no token (a lane carries none).
    fn connected(mut self) -> Self {
        self.channels = self.bearer.channels(&self.targets, self.local_ip);
        self.batches = self.targets.iter().map(|_| Arc::default()).collect();
        let lanes = |target: &Endpoint| {
            // `host:port`, the port gRPC's channel would take too (80 without one).
            let uri = target.uri();
            let plain = uri.scheme_str() == Some("http") && self.bearer.token.is_none();
            let address = uri
                .host()
                .map(|host| format!("{host}:{}", uri.port_u16().unwrap_or(80)));
            Lanes::new(address.filter(|_| plain).as_deref(), self.local_ip)
        };
        self.lanes = self.targets.iter().map(lanes).collect();
        self
    }

    /// The refusal of every call while this client has a bearer token and a plain endpoint:
    /// the token would go out in clear (safety review 161302a, finding 8).
    fn token_without_tls(&self) -> Option<ClientError> {
        self.bearer.token.as_ref()?;
        let plain = self
            .targets
            .iter()
            .position(|t| t.uri().scheme_str() != Some("https"))?;
        Some(ClientError::Endpoint {
            endpoint: self.endpoints[plain].clone(),
            reason: TOKEN_WITHOUT_TLS.into(),
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
        Ok(self.connected())
    }

    /// Sends `token` as `authorization: Bearer TOKEN` with every request: the identity of a
    /// client that shows no certificate (`leasehold auth token add`). Over TLS only: a node
    /// without TLS refuses it, and the token may have been seen on the way.
    pub fn with_bearer_token(mut self, token: &str) -> Result<Self, ClientError> {
        let mut value = MetadataValue::try_from(format!("Bearer {token}")).map_err(|_| {
            ClientError::Endpoint {
                endpoint: "bearer token".into(),
                reason: "a token is printable ASCII".into(),
            }
        })?;
        // Never shown by Debug, nor kept in HTTP/2's shared header table.
        value.set_sensitive(true);
        self.bearer = Bearer::new(value);
        Ok(self.connected())
    }

    /// Connects from `ip` (the fault suite's clients use an address its partitions leave alone).
    pub fn with_local_address(mut self, ip: std::net::IpAddr) -> Self {
        self.local_ip = Some(ip);
        self.connected()
    }

    /// How long a call keeps trying before it reports the last failure.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// Gives up at once, not at the deadline, when every node is known unable to serve the
    /// call: nothing listens at any endpoint (each refused the connection twice in a row); no
    /// majority is up (a node waited out an election, and the others refuse connections); or
    /// the TLS handshake fails over a certificate. For one-shot callers such as the CLI, whose
    /// user learns at once what to mend; not for a program that must ride out a restart of the
    /// whole cluster.
    pub fn with_quick_give_up(mut self) -> Self {
        self.quick_give_up = true;
        self
    }

    /// Why a call stops trying after a failed attempt, if it does, by what each node's attempts
    /// said (`ends`): every node was removed from its cluster, none can serve the call (with
    /// `with_quick_give_up`), or the deadline passed since `started`.
    fn gave_up(&self, started: tokio::time::Instant, ends: &[DeadEnd]) -> Option<String> {
        if ends.iter().all(|end| *end == DeadEnd::Removed) {
            let endpoints = self.endpoints.join(",");
            return Some(format!(
                "every node of {endpoints} was removed from its cluster"
            ));
        }
        if let Some(why) = self
            .quick_give_up
            .then(|| no_way(ends, &self.endpoints))
            .flatten()
        {
            return Some(why);
        }
        (started.elapsed() >= self.deadline).then(|| {
            let ms = self.deadline.as_millis();
            let endpoints = self.endpoints.join(",");
            format!("no node of {endpoints} answered within {ms} ms")
        })
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
        let registered = self.unary(Effect::Read, pb::RegisterRequest {}).await?;
        *self.session.lock().unwrap_or_else(|p| p.into_inner()) = Some(registered.client_id);
        Ok(registered.client_id)
    }

    /// The next sequence of a request id, waited for (see `sequences`) within the client's
    /// deadline: past it the write fails unsent, never indeterminate.
    async fn sequence(&self) -> Result<Taken<'_>, ClientError> {
        tokio::time::timeout(self.deadline, self.sequences.take())
            .await
            .map_err(|_| {
                ClientError::Status(Status::deadline_exceeded(format!(
                    "the write was not sent within {} ms: this client's oldest write under way \
                     was still unanswered, {SEQUENCE_SPAN} requests back",
                    self.deadline.as_millis()
                )))
            })
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
            let taken = self.sequence().await?;
            let request_id = pb::RequestId {
                client_id,
                sequence: taken.sequence,
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

    /// Closes this client's session, if it opened one, so that the store does not keep it for
    /// its idle hour: call it when the client is done (the CLI and `bench` do). The next write
    /// opens a new one. Closing is a write of log format 2: while some node of the cluster runs
    /// 0.2.0 the leader refuses it (FAILED_PRECONDITION, `FORMAT_NOT_AGREED`) and the session
    /// expires as before; that refusal, like any failure, is the caller's to ignore or report.
    pub async fn close_session(&self) -> Result<(), ClientError> {
        let Some(client_id) = self.open_session() else {
            return Ok(());
        };
        let taken = self.sequence().await?;
        let request_id = pb::RequestId {
            client_id,
            sequence: taken.sequence,
        };
        let close = pb::CloseSessionRequest {
            request_id: Some(request_id),
        };
        self.unary(Effect::Write, close).await?;
        drop(taken);
        let mut session = self.session.lock().unwrap_or_else(|p| p.into_inner());
        if *session == Some(client_id) {
            *session = None;
        }
        Ok(())
    }

    /// The endpoints this client was given.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Runs `call` against one node's channel after another until one answers or the deadline
    /// passes.
    async fn call<T, F, Fut>(&self, effect: Effect, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(NodeChannel, Duration) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        self.attempts(effect, |node, timeout| {
            call(self.channels[node].clone(), timeout)
        })
        .await
    }

    /// Sends `message` to one node after another, until one answers or the deadline passes: on
    /// a lane where the node takes one, on its `Batch` stream where it serves one, and as a
    /// unary call where not.
    async fn unary<M: BatchMethod>(
        &self,
        effect: Effect,
        message: M,
    ) -> Result<M::Reply, ClientError> {
        self.attempts(effect, |node, timeout| {
            let (lanes, batches) = (self.lanes[node].clone(), self.batches[node].clone());
            let channel = self.channels[node].clone();
            let message = message.clone();
            // Taken before the attempt's own timer starts, so that a dial cut short by it is
            // known unsent rather than taken for a lost answer.
            let deadline = tokio::time::Instant::now() + timeout;
            async move {
                let call = batches.call_of(message.clone(), timeout);
                let call = match lanes.call(call, deadline).await {
                    Ok(answer) => return answered_as::<M>(answer),
                    Err(call) => call,
                };
                match batches.call(&channel, call).await {
                    Ok(answer) => answered_as::<M>(answer),
                    Err(_) => M::unary(channel, attempt(message, timeout)).await,
                }
            }
        })
        .await
    }

    /// Runs `call` against one node (by its index) after another until one answers or the
    /// deadline passes.
    async fn attempts<T, F, Fut>(&self, effect: Effect, mut call: F) -> Result<T, ClientError>
    where
        F: FnMut(usize, Duration) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        if let Some(refused) = self.token_without_tls() {
            return Err(refused);
        }
        let started = tokio::time::Instant::now();
        let count = self.channels.len();
        let first = self.preferred.load(Ordering::Relaxed);
        let mut attempts = Attempts::new(effect);
        let mut pauses = round_pauses();
        // What each node's failed attempts say of it. Nodes that said the cluster removed them
        // are not asked again by this call.
        let mut ends = vec![DeadEnd::Open; count];
        let mut attempt = 0;
        loop {
            let index = (first + attempt) % count;
            // Half the deadline at most, so a node that hangs (stopped, cut off) leaves time to
            // ask another; never past the deadline itself.
            let left = self.deadline.saturating_sub(started.elapsed());
            let timeout = (self.deadline / 2)
                .clamp(self.deadline.min(MIN_ATTEMPT), ATTEMPT_TIMEOUT)
                .min(left.max(MIN_ATTEMPT));
            // Bounded here too: tonic's timeout starts once the request is sent, and a TLS
            // handshake with a stopped node (its kernel still accepts) would never end.
            let answer = tokio::time::timeout(timeout, call(index, timeout))
                .await
                .unwrap_or_else(|_| Err(Status::cancelled("Timeout expired")));
            match answer {
                Ok(response) => {
                    self.preferred.store(index, Ordering::Relaxed);
                    return Ok(response.into_inner());
                }
                Err(status) => {
                    ends[index] = match removed(&status) {
                        true => DeadEnd::Removed,
                        false => ends[index].after(&status, tokio::time::Instant::now()),
                    };
                    let gave_up = self.gave_up(started, &ends);
                    match attempts.failed(status, gave_up) {
                        Next::Stop(error) => return Err(error),
                        Next::Retry => loop {
                            attempt += 1;
                            if attempt % count == 0 {
                                let left = self.deadline.saturating_sub(started.elapsed());
                                pause_within(&mut pauses, left).await;
                            }
                            if ends[(first + attempt) % count] != DeadEnd::Removed {
                                break;
                            }
                        },
                    }
                }
            }
        }
    }

    /// Takes `lease` for `holder` for `ttl_ms` of store time, or renews it if `holder` holds it
    /// already (same token, expiry moved to now + `ttl_ms`).
    pub async fn acquire(
        &self,
        lease: &str,
        holder: &str,
        ttl_ms: u64,
    ) -> Result<Answer<Acquired>, ClientError> {
        let answer = self
            .write(|request_id| {
                let message = pb::AcquireRequest {
                    lease: lease.into(),
                    holder: holder.into(),
                    ttl_ms,
                    request_id,
                };
                self.unary(Effect::Write, message)
            })
            .await?;
        Answer::try_from(answer)
    }

    /// Renews many leases in one request and one log entry: each only if its holder holds it
    /// under its token, to its own TTL from the renewal's store time. Answered lease by lease,
    /// in the order given; a lease that ran out is answered [`Renewed::NotHeld`], never granted
    /// again. At most 512 leases, each named once.
    pub async fn renew(&self, leases: &[Renewal]) -> Result<Answer<Vec<Renewed>>, ClientError> {
        let leases: Vec<pb::Renewal> = leases
            .iter()
            .map(|r| pb::Renewal {
                lease: r.lease.clone(),
                holder: r.holder.clone(),
                token: r.token,
                ttl_ms: r.ttl_ms,
            })
            .collect();
        let answer = self
            .write(|request_id| {
                let message = pb::RenewRequest {
                    leases: leases.clone(),
                    request_id,
                };
                self.unary(Effect::Write, message)
            })
            .await?;
        let answer = Answer::try_from(answer)?;
        if answer.outcome.len() != leases.len() {
            return Err(ClientError::Malformed(
                "a renewal was answered for another number of leases than it named",
            ));
        }
        Ok(answer)
    }

    /// Frees `lease` at once, if `holder` holds it under `token`.
    pub async fn release(
        &self,
        lease: &str,
        holder: &str,
        token: u64,
    ) -> Result<Answer<Released>, ClientError> {
        let answer = self
            .write(|request_id| {
                let message = pb::ReleaseRequest {
                    lease: lease.into(),
                    holder: holder.into(),
                    token,
                    request_id,
                };
                self.unary(Effect::Write, message)
            })
            .await?;
        Answer::try_from(answer)
    }

    /// Writes a row: plain with `fence: None`, fenced with `Some((lease, token))`, which the
    /// store refuses once it has seen a bigger token for that lease.
    pub async fn put(
        &self,
        key: &str,
        value: &[u8],
        fence: Option<(&str, u64)>,
    ) -> Result<Answer<Written>, ClientError> {
        let answer = self
            .write(|request_id| {
                let message = pb::PutRequest {
                    key: key.into(),
                    value: value.to_vec(),
                    fence: wire_fence(fence),
                    request_id,
                };
                self.unary(Effect::Write, message)
            })
            .await?;
        Answer::try_from(answer)
    }

    /// Removes a row: plain with `fence: None`, fenced with `Some((lease, token))` as
    /// [`put`](Self::put) is.
    pub async fn delete(
        &self,
        key: &str,
        fence: Option<(&str, u64)>,
    ) -> Result<Answer<Deleted>, ClientError> {
        let answer = self
            .write(|request_id| {
                let message = pb::DeleteRequest {
                    key: key.into(),
                    fence: wire_fence(fence),
                    request_id,
                };
                self.unary(Effect::Write, message)
            })
            .await?;
        Answer::try_from(answer)
    }

    /// Whether `token` is `lease`'s current grant, linearizably: what a downstream service
    /// asks before it acts for a holder. A token the store never handed out for the lease is
    /// an `InvalidArgument` error.
    pub async fn check_token(
        &self,
        lease: &str,
        token: u64,
    ) -> Result<Answer<TokenStatus>, ClientError> {
        let message = pb::CheckTokenRequest {
            lease: lease.into(),
            token,
        };
        let answer = self.unary(Effect::Read, message).await?;
        Answer::try_from(answer)
    }

    /// Reads a row, linearizably; `None` when it was never written (or was deleted).
    pub async fn get(&self, key: &str) -> Result<Answer<Option<Vec<u8>>>, ClientError> {
        let message = pb::GetRequest { key: key.into() };
        self.unary(Effect::Read, message).await.map(Answer::from)
    }

    /// Reads a lease, linearizably: holder, token, expiry and fence.
    pub async fn get_lease(&self, lease: &str) -> Result<Answer<LeaseState>, ClientError> {
        let message = pb::GetLeaseRequest {
            lease: lease.into(),
        };
        self.unary(Effect::Read, message).await.map(Answer::from)
    }

    /// One page of the leases under `listing.prefix`, held or free, in name order: linearizably
    /// unless `listing.serializable`. Those the caller may not read are left out.
    pub async fn list_leases(
        &self,
        listing: &Listing,
    ) -> Result<Answer<Page<LeaseState>>, ClientError> {
        let message = pb::ListLeasesRequest {
            page: listing.message(),
        };
        self.unary(Effect::Read, message).await.map(Answer::from)
    }

    /// One page of the rows under `listing.prefix`, as [`list_leases`](Self::list_leases).
    pub async fn list_keys(&self, listing: &Listing) -> Result<Answer<Page<Vec<u8>>>, ClientError> {
        let message = pb::ListKeysRequest {
            page: listing.message(),
        };
        self.unary(Effect::Read, message).await.map(Answer::from)
    }

    /// Moves store time forward by `ms`: only on a cluster started with `--manual-clock`.
    pub async fn advance(&self, ms: u64) -> Result<Applied, ClientError> {
        self.write(|request_id| {
            let message = pb::AdvanceRequest { ms, request_id };
            self.unary(Effect::Write, message)
        })
        .await
        .map(Applied::from)
    }

    /// Lease events, from `from` on, for the leases `select` names; see [`Watch`].
    pub fn watch(&self, select: WatchSelect, from: WatchFrom) -> Watch {
        Watch::new(
            self.channels.clone(),
            self.endpoints.join(","),
            self.preferred.load(Ordering::Relaxed),
            self.deadline,
            select,
            from,
        )
    }

    /// A consistent copy of the cluster's applied state, taken by the leader at a committed
    /// index, checked whole (its length and CRC-32) on arrival: a backup, for
    /// `leasehold snapshot restore`.
    pub async fn save_snapshot(&self) -> Result<SavedSnapshot, ClientError> {
        self.call(Effect::Read, |ch, _| async move {
            let mut request = Request::new(pb::SaveSnapshotRequest {});
            request.set_timeout(SNAPSHOT_TIMEOUT);
            let mut stream = ClusterClient::new(ch)
                .save_snapshot(request)
                .await?
                .into_inner();
            let mut header = None;
            let mut data = Vec::new();
            while let Some(chunk) = stream.message().await? {
                header = header.or(chunk.header);
                data.extend_from_slice(&chunk.data);
            }
            let header = header.ok_or_else(|| Status::data_loss("the snapshot had no header"))?;
            if data.len() as u64 != header.bytes || crc32fast::hash(&data) != header.crc32 {
                return Err(Status::data_loss(format!(
                    "the snapshot arrived damaged: {} bytes with CRC-32 {:08x}, expected {} \
                     bytes with {:08x}",
                    data.len(),
                    crc32fast::hash(&data),
                    header.bytes,
                    header.crc32
                )));
            }
            Ok(Response::new(SavedSnapshot { header, data }))
        })
        .await
    }

    /// Adds node `id` (started with `serve --join`, reachable by the other nodes at
    /// `peer_address`, giving out `client_address`) to the cluster: as a learner until it has
    /// caught up, then as a voter.
    pub async fn add_member(
        &self,
        id: u64,
        peer_address: &str,
        client_address: &str,
    ) -> Result<Members, ClientError> {
        let message = pb::AddMemberRequest {
            id,
            peer_address: peer_address.into(),
            client_address: client_address.into(),
        };
        self.call(Effect::Write, |ch, _| {
            let request = attempt(message.clone(), MEMBERSHIP_TIMEOUT);
            async move { ClusterClient::new(ch).add_member(request).await }
        })
        .await
        .and_then(Members::try_from)
    }

    /// Removes member `id`, voter or learner.
    pub async fn remove_member(&self, id: u64) -> Result<Members, ClientError> {
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(pb::RemoveMemberRequest { id }, timeout);
            async move { ClusterClient::new(ch).remove_member(request).await }
        })
        .await
        .and_then(Members::try_from)
    }

    /// The members, as the leader knows them.
    pub async fn members(&self) -> Result<Members, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::ListMembersRequest {}, timeout);
            async move { ClusterClient::new(ch).list_members(request).await }
        })
        .await
        .and_then(Members::try_from)
    }

    /// Changes who may do what (admin only once authorization is on), through the log: in
    /// force on every node from the answer's log index on. Every change is idempotent, so a
    /// retry of one whose answer was lost does no harm.
    pub async fn change_policy(
        &self,
        change: pb::change_policy_request::Change,
    ) -> Result<Applied, ClientError> {
        let message = pb::ChangePolicyRequest {
            change: Some(change),
        };
        self.call(Effect::Write, |ch, timeout| {
            let request = attempt(message.clone(), timeout);
            async move { ClusterClient::new(ch).change_policy(request).await }
        })
        .await
        .map(Applied::from)
    }

    /// The policy, read on the leader (admin only once authorization is on).
    pub async fn policy(&self) -> Result<pb::PolicyResponse, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::GetPolicyRequest {}, timeout);
            async move { ClusterClient::new(ch).get_policy(request).await }
        })
        .await
    }

    /// The identity this client's certificate gives it, its roles, and whether authorization
    /// is on, as the first node that answers knows them.
    pub async fn who_am_i(&self) -> Result<pb::WhoAmIResponse, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::WhoAmIRequest {}, timeout);
            async move { ClusterClient::new(ch).who_am_i(request).await }
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
    pub async fn status(&self) -> Result<Vec<pb::NodeStatus>, ClientError> {
        self.call(Effect::Read, |ch, timeout| {
            let request = attempt(pb::StatusRequest {}, timeout);
            async move { ClusterClient::new(ch).status(request).await }
        })
        .await
        .map(|status| status.nodes)
    }
}

fn attempt<T>(message: T, timeout: Duration) -> Request<T> {
    let mut request = Request::new(message);
    request.set_timeout(timeout);
    request
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tonic::Code;

    use super::*;
    use crate::attempts::statuses::*;
    use crate::fake::{fake_node, Reply};

    /// An endpoint without a port is refused, naming the port left out: before, `127.0.0.1`
    /// went to port 80 (found in a walkthrough). A URI keeps its scheme's port.
    #[tokio::test]
    async fn an_endpoint_without_a_port_is_refused_naming_it() {
        let refused = LeaseClient::new(&["127.0.0.1"])
            .err()
            .map(|e| e.to_string());
        assert!(
            refused.as_deref().is_some_and(|e| e.contains("no port")),
            "{refused:?}"
        );
        assert!(LeaseClient::new(&["127.0.0.1:7001"]).is_ok());
        assert!(LeaseClient::new(&["http://lease.example"]).is_ok());
    }

    /// Safety review 161302a, finding 8: a bearer token never travels without TLS. A client
    /// given one but no TLS (in either order of the builder) refuses every call at once,
    /// naming the fix, and sends nothing: before, its token went out in clear and only then
    /// was refused by the node.
    #[tokio::test]
    async fn a_bearer_token_is_never_sent_without_tls() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let heard = tokio::spawn(async move {
            let mut bytes = Vec::new();
            while let Ok(Ok((mut tcp, _))) =
                tokio::time::timeout(Duration::from_millis(500), listener.accept()).await
            {
                use tokio::io::AsyncReadExt;
                let mut buf = vec![0; 4096];
                while let Ok(Ok(n @ 1..)) =
                    tokio::time::timeout(Duration::from_millis(200), tcp.read(&mut buf)).await
                {
                    bytes.extend_from_slice(&buf[..n]);
                }
            }
            bytes
        });
        let client = LeaseClient::new(&[addr.as_str()])
            .unwrap()
            .with_bearer_token("s3cret-token")
            .unwrap()
            .with_deadline(Duration::from_secs(1));
        let started = std::time::Instant::now();
        let refused = client.put("k", b"v", None).await.unwrap_err();
        assert!(started.elapsed() < Duration::from_millis(500), "{refused}");
        assert!(refused.to_string().contains("with_tls"), "{refused}");
        let bytes = heard.await.unwrap();
        let sent = String::from_utf8_lossy(&bytes);
        assert!(
            !sent.contains("s3cret-token"),
            "the token went out in clear"
        );
    }

    #[tokio::test]
    async fn a_write_refused_for_an_expired_session_opens_a_new_one_and_is_sent_again() {
        let gone = unknown_session();
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
        let gone = unknown_session();
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

    /// Addresses where nothing listens: ports just bound and let go.
    fn closed_ports(count: usize) -> Vec<String> {
        let bound: Vec<std::net::TcpListener> = (0..count)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        bound
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect()
    }

    /// With `with_quick_give_up`, a call to nodes of which none listens ends at once, saying
    /// so; without, it tries until its deadline, as a program riding out a restart needs.
    #[tokio::test]
    async fn a_quick_give_up_says_at_once_that_nothing_listens_and_the_default_waits() {
        let closed = closed_ports(2);
        let deadline = Duration::from_millis(1_500);
        let quick = LeaseClient::new(&closed).unwrap().with_deadline(deadline);
        let started = tokio::time::Instant::now();
        let e = quick.with_quick_give_up().get("k").await.unwrap_err();
        assert!(
            started.elapsed() < deadline / 3,
            "took {:?}",
            started.elapsed()
        );
        assert_eq!(e.code(), Code::Unavailable, "{e}");
        assert!(e.to_string().contains("nothing listens at"), "{e}");
        let patient = LeaseClient::new(&closed).unwrap().with_deadline(deadline);
        let started = tokio::time::Instant::now();
        let e = patient.get("k").await.unwrap_err();
        assert!(
            started.elapsed() >= deadline,
            "gave up after {:?}",
            started.elapsed()
        );
        assert!(e.to_string().contains("answered within"), "{e}");
    }

    /// A stopped node's kernel still takes the connection, and the TLS handshake then waits
    /// for ever: tonic bounds neither it (its connect timeout covers TCP only) nor, before the
    /// request is sent, the request's timeout. The call must still end at its deadline; the
    /// fault suite's lease probe saw a rival's call wait until a paused node resumed.
    #[tokio::test]
    async fn a_node_that_never_finishes_the_tls_handshake_fails_the_call_at_its_deadline() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        let client = LeaseClient::new(&[addr])
            .unwrap()
            .with_tls(ClientTlsConfig::new())
            .unwrap()
            .with_deadline(Duration::from_millis(600));
        let started = tokio::time::Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(5), client.get("k")).await;
        let e = answer.expect("the call ends, at its deadline").unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "ended after {:?}",
            started.elapsed()
        );
        assert_eq!(e.code(), Code::Unavailable, "{e}");
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
