//! A scripted node for the crate's tests: answers from a script, and remembers what it was sent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::lease_store_server::{LeaseStore, LeaseStoreServer};
use leasehold_proto::{INDETERMINATE_KEY, SESSION_KEY};
use tonic::{Request, Response, Status, Streaming};

use crate::client::LeaseClient;

/// How the fake node answers one call.
#[derive(Clone)]
pub(crate) enum Reply {
    /// Never answers: the client's attempt timeout fires with the request in flight.
    Hang,
    Fail(Status),
    /// A well-formed answer: granted, written, ...
    Answer,
    /// For an acquire: this outcome (any other call answers as `Answer`).
    Acquire(pb::acquire_response::Outcome),
    /// For an acquire: this outcome, after this long.
    SlowAcquire(Duration, pb::acquire_response::Outcome),
    /// For a renewal: this outcome for each of its leases (`Answer`: each renewed).
    Renew(pb::lease_renewal::Outcome),
    /// For a renewal: this outcome for each of its leases, after this long.
    SlowRenew(Duration, pb::lease_renewal::Outcome),
}

/// A node that answers from a script, and remembers the request ids it was sent.
pub(crate) struct FakeNode {
    /// The replies in order; the last one answers every call after it.
    script: Mutex<Vec<Reply>>,
    pub(crate) request_ids: Mutex<Vec<Option<pb::RequestId>>>,
    /// Sessions opened so far; each registration gets the next id.
    pub(crate) sessions: Mutex<u64>,
    /// The tokens of the releases it was sent.
    pub(crate) releases: Mutex<Vec<u64>>,
    /// The leases of each renewal it was sent.
    pub(crate) renewals: Mutex<Vec<Vec<String>>>,
    /// A lease whose renewals are denied, the whole request with it, as a revoked permission
    /// does.
    pub(crate) denied_lease: Mutex<Option<String>>,
    /// What happened when, for tests of ordering.
    pub(crate) timeline: Mutex<Vec<(&'static str, std::time::Instant)>>,
    /// How it answers a `Batch` stream.
    pub(crate) batch: Mutex<BatchMode>,
    /// How many calls each `Batch` message it read carried.
    pub(crate) batch_messages: Mutex<Vec<usize>>,
}

/// How the fake node answers a `Batch` stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BatchMode {
    /// Each call by its unary handler.
    Serve,
    /// UNIMPLEMENTED, as a node of an earlier version.
    Unimplemented,
    /// The stream ends, reset, once its first message is read: its calls' answers are lost.
    EndAtFirstMessage,
}

impl FakeNode {
    /// The next reply of the script, noting the request id it answers.
    fn next(&self, request_id: Option<pb::RequestId>) -> Reply {
        self.request_ids.lock().unwrap().push(request_id);
        let mut script = self.script.lock().unwrap();
        if script.len() > 1 {
            script.remove(0)
        } else {
            script[0].clone()
        }
    }

    async fn reply<T: Canned>(&self, reply: Reply) -> Result<Response<T>, Status> {
        match reply {
            Reply::Hang => std::future::pending().await,
            Reply::Fail(status) => Err(status),
            Reply::Answer
            | Reply::Acquire(_)
            | Reply::SlowAcquire(..)
            | Reply::Renew(_)
            | Reply::SlowRenew(..) => Ok(Response::new(T::canned())),
        }
    }

    /// Waits `after`, then notes `what` in the timeline: a slow answer about to go out.
    async fn late(&self, after: Duration, what: &'static str) {
        tokio::time::sleep(after).await;
        self.timeline
            .lock()
            .unwrap()
            .push((what, std::time::Instant::now()));
    }

    async fn answer<T: Canned>(
        &self,
        request_id: Option<pb::RequestId>,
    ) -> Result<Response<T>, Status> {
        let reply = self.next(request_id);
        self.reply(reply).await
    }
}

/// A well-formed answer of each kind.
trait Canned {
    fn canned() -> Self;
}

macro_rules! canned {
    ($($response:ty => $outcome:expr),* $(,)?) => {$(
        impl Canned for $response {
            fn canned() -> Self {
                Self { outcome: Some($outcome), ..Default::default() }
            }
        }
    )*};
}

canned! {
    pb::AcquireResponse => pb::acquire_response::Outcome::Granted(pb::Granted::default()),
    pb::ReleaseResponse => pb::release_response::Outcome::NotHeld(pb::NotHeld {}),
    pb::PutResponse => pb::put_response::Outcome::Written(pb::Written {}),
    pb::DeleteResponse => pb::delete_response::Outcome::Deleted(pb::Deleted::default()),
    pb::CheckTokenResponse =>
        pb::check_token_response::Outcome::Stale(pb::TokenStale::default()),
}

/// Answers whose default is a well-formed one (no outcome to choose).
macro_rules! defaulted {
    ($($response:ty),* $(,)?) => {$(
        impl Canned for $response {
            fn canned() -> Self {
                Self::default()
            }
        }
    )*};
}

defaulted! {
    pb::RenewResponse,
    pb::GetResponse,
    pb::GetLeaseResponse,
    pb::AdvanceResponse,
    pb::CloseSessionResponse,
    pb::ListLeasesResponse,
    pb::ListKeysResponse,
}

/// The fake node as the server holds it (the trait is another crate's, so is `Arc`).
struct Handle(Arc<FakeNode>);

impl std::ops::Deref for Handle {
    type Target = FakeNode;
    fn deref(&self) -> &FakeNode {
        &self.0
    }
}

#[tonic::async_trait]
impl LeaseStore for Handle {
    type WatchStream = tonic::codegen::BoxStream<pb::WatchResponse>;

    async fn watch(
        &self,
        _: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented("the fake node does not watch"))
    }
    type BatchStream = tonic::codegen::BoxStream<pb::BatchResponse>;

    /// Each call answered by the unary handler below, on a task of its own, as a node answers
    /// them: a call that hangs holds no other.
    async fn batch(
        &self,
        calls: Request<Streaming<pb::BatchRequest>>,
    ) -> Result<Response<Self::BatchStream>, Status> {
        if *self.batch.lock().unwrap() == BatchMode::Unimplemented {
            return Err(Status::unimplemented("this node serves no Batch"));
        }
        let mut calls = calls.into_inner();
        let (answers, answered) = tokio::sync::mpsc::channel(64);
        let node = self.0.clone();
        tokio::spawn(async move {
            while let Ok(Some(request)) = calls.message().await {
                node.batch_messages
                    .lock()
                    .unwrap()
                    .push(request.calls.len());
                if *node.batch.lock().unwrap() == BatchMode::EndAtFirstMessage {
                    let _ = answers.send(Err(Status::unavailable("reset"))).await;
                    return;
                }
                for call in request.calls {
                    let (node, answers) = (Handle(node.clone()), answers.clone());
                    tokio::spawn(async move {
                        let answer = node.answer_call(call.request).await;
                        let answer = pb::BatchAnswer {
                            id: call.id,
                            answer: Some(answer),
                        };
                        let response = pb::BatchResponse {
                            answers: vec![answer],
                        };
                        let _ = answers.send(Ok(response)).await;
                    });
                }
            }
        });
        let stream = tokio_stream::wrappers::ReceiverStream::new(answered);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn acquire(
        &self,
        r: Request<pb::AcquireRequest>,
    ) -> Result<Response<pb::AcquireResponse>, Status> {
        let outcome = match self.next(r.into_inner().request_id) {
            Reply::Acquire(outcome) => outcome,
            Reply::SlowAcquire(after, outcome) => {
                self.late(after, "slow acquire answered").await;
                outcome
            }
            other => return self.reply(other).await,
        };
        Ok(Response::new(pb::AcquireResponse {
            applied: None,
            outcome: Some(outcome),
        }))
    }
    async fn renew(
        &self,
        r: Request<pb::RenewRequest>,
    ) -> Result<Response<pb::RenewResponse>, Status> {
        let r = r.into_inner();
        let leases: Vec<String> = r.leases.iter().map(|l| l.lease.clone()).collect();
        self.renewals.lock().unwrap().push(leases.clone());
        if let Some(denied) = &*self.denied_lease.lock().unwrap() {
            if leases.contains(denied) {
                return Err(Status::permission_denied(format!("may not hold {denied}")));
            }
        }
        let outcome = match self.next(r.request_id) {
            Reply::Renew(outcome) => outcome,
            Reply::SlowRenew(after, outcome) => {
                self.late(after, "slow renewal answered").await;
                outcome
            }
            Reply::Answer => pb::lease_renewal::Outcome::Renewed(pb::Renewed::default()),
            other => return self.reply(other).await,
        };
        let lease = pb::LeaseRenewal {
            outcome: Some(outcome),
        };
        Ok(Response::new(pb::RenewResponse {
            applied: None,
            leases: vec![lease; leases.len()],
        }))
    }
    async fn release(
        &self,
        r: Request<pb::ReleaseRequest>,
    ) -> Result<Response<pb::ReleaseResponse>, Status> {
        let r = r.into_inner();
        self.releases.lock().unwrap().push(r.token);
        self.timeline
            .lock()
            .unwrap()
            .push(("release", std::time::Instant::now()));
        self.answer(r.request_id).await
    }
    async fn put(&self, r: Request<pb::PutRequest>) -> Result<Response<pb::PutResponse>, Status> {
        self.answer(r.into_inner().request_id).await
    }
    async fn delete(
        &self,
        r: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        self.answer(r.into_inner().request_id).await
    }
    async fn get(&self, _: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
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
    async fn list_leases(
        &self,
        _: Request<pb::ListLeasesRequest>,
    ) -> Result<Response<pb::ListLeasesResponse>, Status> {
        self.answer(None).await
    }
    async fn list_keys(
        &self,
        _: Request<pb::ListKeysRequest>,
    ) -> Result<Response<pb::ListKeysResponse>, Status> {
        self.answer(None).await
    }
    async fn advance(
        &self,
        r: Request<pb::AdvanceRequest>,
    ) -> Result<Response<pb::AdvanceResponse>, Status> {
        self.answer(r.into_inner().request_id).await
    }
    async fn close_session(
        &self,
        r: Request<pb::CloseSessionRequest>,
    ) -> Result<Response<pb::CloseSessionResponse>, Status> {
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

impl Handle {
    /// A call on the `Batch` stream, answered by its unary handler.
    async fn answer_call(&self, call: Option<pb::batch_call::Request>) -> pb::batch_answer::Answer {
        use pb::batch_answer::Answer as A;
        use pb::batch_call::Request as C;
        let answered = match call {
            Some(C::Acquire(m)) => self
                .acquire(Request::new(m))
                .await
                .map(|r| A::Acquire(r.into_inner())),
            Some(C::Release(m)) => self
                .release(Request::new(m))
                .await
                .map(|r| A::Release(r.into_inner())),
            Some(C::Renew(m)) => self
                .renew(Request::new(m))
                .await
                .map(|r| A::Renew(r.into_inner())),
            Some(C::Put(m)) => self
                .put(Request::new(m))
                .await
                .map(|r| A::Put(r.into_inner())),
            Some(C::Delete(m)) => self
                .delete(Request::new(m))
                .await
                .map(|r| A::Delete(r.into_inner())),
            Some(C::CheckToken(m)) => self
                .check_token(Request::new(m))
                .await
                .map(|r| A::CheckToken(r.into_inner())),
            Some(C::Get(m)) => self
                .get(Request::new(m))
                .await
                .map(|r| A::Get(r.into_inner())),
            Some(C::GetLease(m)) => self
                .get_lease(Request::new(m))
                .await
                .map(|r| A::GetLease(r.into_inner())),
            Some(C::Advance(m)) => self
                .advance(Request::new(m))
                .await
                .map(|r| A::Advance(r.into_inner())),
            Some(C::Register(m)) => self
                .register(Request::new(m))
                .await
                .map(|r| A::Register(r.into_inner())),
            Some(C::CloseSession(m)) => self
                .close_session(Request::new(m))
                .await
                .map(|r| A::CloseSession(r.into_inner())),
            Some(C::ListLeases(m)) => self
                .list_leases(Request::new(m))
                .await
                .map(|r| A::ListLeases(r.into_inner())),
            Some(C::ListKeys(m)) => self
                .list_keys(Request::new(m))
                .await
                .map(|r| A::ListKeys(r.into_inner())),
            None => Err(Status::invalid_argument("no call")),
        };
        answered.unwrap_or_else(|status| {
            A::Error(pb::BatchError {
                code: status.code() as i32,
                message: status.message().to_owned(),
                reason: match status.metadata().get(SESSION_KEY) {
                    Some(_) => "SESSION_UNKNOWN".into(),
                    None => String::new(),
                },
                indeterminate: status.metadata().get(INDETERMINATE_KEY).is_some(),
                facts: Default::default(),
            })
        })
    }
}

/// Serves `script` on 127.0.0.1, on a port of the system's choosing; a client with a short
/// deadline talks to it. The server stops with the test's runtime.
pub(crate) async fn fake_node(script: Vec<Reply>) -> (Arc<FakeNode>, LeaseClient) {
    let node = Arc::new(FakeNode {
        script: Mutex::new(script),
        request_ids: Mutex::default(),
        sessions: Mutex::default(),
        releases: Mutex::default(),
        renewals: Mutex::default(),
        denied_lease: Mutex::default(),
        batch: Mutex::new(BatchMode::Serve),
        batch_messages: Mutex::default(),
        timeline: Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tonic::transport::Server::builder()
        .add_service(LeaseStoreServer::new(Handle(node.clone())))
        .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
    tokio::spawn(server);
    let client = LeaseClient::new(&[addr.to_string()])
        .unwrap()
        .with_deadline(Duration::from_millis(800));
    (node, client)
}
