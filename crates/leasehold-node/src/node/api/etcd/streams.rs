//! etcd's streams on the typed API: each a task that reads the client's messages from
//! `inbound`, asks the API, and sends its answers into a bounded queue (a slow reader holds the
//! task, not the node's memory); each ends when the client goes (`inbound` ends, or the
//! queue's reader is dropped) or the node stops. gRPC's streams and the JSON gateway's both
//! run them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::{Stream, StreamExt};

use super::concurrency::ObservedLeaders;
use super::watch::{Watched, Watcher};
use super::EtcdApi;
use crate::limits::{ETCD_PROGRESS_NOTIFY, ETCD_STREAM_QUEUE, ETCD_WATCHERS_PER_STREAM};
use crate::node::api::{until_stopped, Credentials};
use crate::node::NodeError;
use crate::proto::etcd::etcdserverpb as pb;
use crate::proto::etcd::v3electionpb as election;

/// What a stream answers: its messages, and a refusal that ends it.
pub(crate) type Answers<T> = mpsc::Receiver<Result<T, NodeError>>;

type Sender<T> = mpsc::Sender<Result<T, NodeError>>;

impl EtcdApi {
    /// `LeaseKeepAlive`: each request kept alive through the log, answered in order.
    pub fn keep_alive_stream(
        self: &Arc<Self>,
        credentials: Credentials,
        inbound: impl Stream<Item = pb::LeaseKeepAliveRequest> + Send + 'static,
    ) -> Result<Answers<pb::LeaseKeepAliveResponse>, NodeError> {
        // Held for as long as it runs, of the watches' budget: a stream, not a call.
        let working = self.admit_watch()?;
        let (send, answers) = mpsc::channel(ETCD_STREAM_QUEUE);
        let (api, stopping) = (self.clone(), self.stopping());
        tokio::spawn(async move {
            let _working = working;
            tokio::pin!(inbound);
            loop {
                let request = tokio::select! {
                    request = inbound.next() => request,
                    () = until_stopped(stopping.clone()) => return,
                    () = send.closed() => return,
                };
                let Some(request) = request else { return };
                let answer = api.lease_keep_alive(&credentials, request).await;
                let ended = answer.is_err();
                if send.send(answer).await.is_err() || ended {
                    return;
                }
            }
        });
        Ok(answers)
    }

    /// `Watch`: watchers created and cancelled by the client's messages, each a task sending
    /// its events; the stream counts as one watch of the node's budget for as long as it runs.
    pub fn watch_stream(
        self: &Arc<Self>,
        credentials: Credentials,
        inbound: impl Stream<Item = pb::WatchRequest> + Send + 'static,
    ) -> Result<Answers<pb::WatchResponse>, NodeError> {
        let working = self.admit_watch()?;
        let (send, answers) = mpsc::channel(ETCD_STREAM_QUEUE);
        let stream = WatchStream {
            api: self.clone(),
            credentials,
            send,
            watchers: HashMap::new(),
            tasks: JoinSet::new(),
            next_id: 0,
        };
        tokio::spawn(async move {
            let _working = working;
            stream.run(inbound).await;
        });
        Ok(answers)
    }

    /// `Observe`: the election's leader each time it changes.
    pub fn observe_stream(
        &self,
        credentials: &Credentials,
        m: election::LeaderRequest,
    ) -> Result<Answers<election::LeaderResponse>, NodeError> {
        let mut observed: ObservedLeaders = self.observe(credentials, m)?;
        let working = self.admit_watch()?;
        let (send, answers) = mpsc::channel(ETCD_STREAM_QUEUE);
        let stopping = self.stopping();
        tokio::spawn(async move {
            let _working = working;
            loop {
                let answer = tokio::select! {
                    answer = observed.next() => answer,
                    () = send.closed() => return,
                    () = until_stopped(stopping.clone()) => return,
                };
                let ended = answer.is_err();
                if send.send(answer).await.is_err() || ended {
                    return;
                }
            }
        });
        Ok(answers)
    }
}

struct WatchStream {
    api: Arc<EtcdApi>,
    credentials: Credentials,
    send: Sender<pb::WatchResponse>,
    /// Each running watcher's task, by watch id, and where it keeps the revision through which
    /// it has sent every event.
    watchers: HashMap<i64, (tokio::task::AbortHandle, Arc<AtomicI64>)>,
    tasks: JoinSet<i64>,
    /// The id given to the next watcher created without one.
    next_id: i64,
}

impl WatchStream {
    async fn run(mut self, inbound: impl Stream<Item = pb::WatchRequest> + Send) {
        use pb::watch_request::RequestUnion;
        tokio::pin!(inbound);
        let stopping = self.api.stopping();
        let send = self.send.clone();
        loop {
            let request = tokio::select! {
                request = inbound.next() => request,
                Some(Ok((task, id))) = self.tasks.join_next_with_id() => {
                    // Unless the id went to a new watcher since (cancelled, then reused).
                    if self.watchers.get(&id).is_some_and(|(t, _)| t.id() == task) {
                        self.watchers.remove(&id);
                    }
                    continue;
                }
                () = send.closed() => break,
                () = until_stopped(stopping.clone()) => break,
            };
            let Some(pb::WatchRequest { request_union }) = request else {
                break;
            };
            let answer = match request_union {
                Some(RequestUnion::CreateRequest(create)) => match self.create(create) {
                    Some(refused) => refused,
                    // The watcher's task says it was created, before any of its events.
                    None => continue,
                },
                Some(RequestUnion::CancelRequest(cancel)) => self.cancel(cancel.watch_id),
                Some(RequestUnion::ProgressRequest(_)) => self.progress(),
                None => continue,
            };
            if self.send.send(Ok(answer)).await.is_err() {
                break;
            }
        }
        self.tasks.abort_all();
    }

    /// Every watcher has sent every event through the revision this answer names (the
    /// slowest's), as etcd's progress answer promises; with none, the node's.
    fn progress(&self) -> pb::WatchResponse {
        let synced = self.watchers.values();
        let slowest = synced.map(|(_, at)| at.load(Ordering::Acquire)).min();
        let mut header = self.api.header_now();
        header.revision = slowest.unwrap_or(header.revision);
        pb::WatchResponse {
            header: Some(header),
            watch_id: -1,
            ..pb::WatchResponse::default()
        }
    }

    /// Starts the watcher `create` asks for, or answers why not.
    fn create(&mut self, create: pb::WatchCreateRequest) -> Option<pb::WatchResponse> {
        let refused = |id: i64, reason: String| pb::WatchResponse {
            header: Some(self.api.header_now()),
            watch_id: id,
            created: true,
            canceled: true,
            cancel_reason: reason,
            ..pb::WatchResponse::default()
        };
        let id = match create.watch_id {
            0 => {
                while self.watchers.contains_key(&self.next_id) {
                    self.next_id += 1;
                }
                self.next_id
            }
            id if self.watchers.contains_key(&id) => {
                return Some(refused(
                    id,
                    "etcdserver: duplicate watch ID provided".into(),
                ))
            }
            id => id,
        };
        if self.watchers.len() >= ETCD_WATCHERS_PER_STREAM {
            let reason = format!(
                "a Watch stream runs at most {ETCD_WATCHERS_PER_STREAM} watchers; cancel one or \
                 open another stream"
            );
            return Some(refused(id, reason));
        }
        let progress = create.progress_notify;
        let watcher = match self.api.watcher(&self.credentials, id, create) {
            Ok(watcher) => watcher,
            Err(e) => return Some(refused(id, e.to_string())),
        };
        let synced = watcher.synced();
        let (api, send) = (self.api.clone(), self.send.clone());
        let task = self.tasks.spawn(watching(watcher, api, send, progress));
        self.watchers.insert(id, (task, synced));
        None
    }

    fn cancel(&mut self, id: i64) -> pb::WatchResponse {
        if let Some((task, _)) = self.watchers.remove(&id) {
            task.abort();
        }
        pb::WatchResponse {
            header: Some(self.api.header_now()),
            watch_id: id,
            canceled: true,
            ..pb::WatchResponse::default()
        }
    }
}

/// One watcher's task: its answers until the client goes, its start is compacted, or the node
/// stops; with `progress`, an empty answer after [`ETCD_PROGRESS_NOTIFY`] without events.
async fn watching(
    mut watcher: Watcher,
    api: Arc<EtcdApi>,
    send: Sender<pb::WatchResponse>,
    progress: bool,
) -> i64 {
    let id = watcher.id();
    let created = pb::WatchResponse {
        header: Some(api.header_now()),
        watch_id: id,
        created: true,
        ..pb::WatchResponse::default()
    };
    if send.send(Ok(created)).await.is_err() {
        return id;
    }
    loop {
        let next = tokio::select! {
            next = watcher.next() => next,
            () = tokio::time::sleep(ETCD_PROGRESS_NOTIFY), if progress => {
                match send.send(Ok(watcher.progress())).await {
                    Ok(()) => continue,
                    Err(_) => return id,
                }
            }
        };
        let (answer, done) = match next {
            Ok(Watched::Events(answer)) => (Ok(answer), false),
            Ok(Watched::Compacted(answer)) => (Ok(answer), true),
            Err(NodeError::ShuttingDown) => return id,
            Err(e) => (Err(e), true),
        };
        if send.send(answer).await.is_err() || done {
            return id;
        }
        watcher.sent();
    }
}
