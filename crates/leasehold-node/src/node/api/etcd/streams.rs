//! etcd's streams: each a task that reads the client's messages, asks the API, and sends its
//! answers into a bounded queue (a slow reader holds the task, not the node's memory); each
//! ends when the client goes or the node stops.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Status, Streaming};

use crate::limits::{ETCD_PROGRESS_NOTIFY, ETCD_STREAM_QUEUE, ETCD_WATCHERS_PER_STREAM};
use crate::node::api::{Credentials, EtcdApi, ObservedLeaders, Watched, Watcher};
use crate::node::grpc::Answers;
use crate::node::NodeError;
use crate::proto::etcd::etcdserverpb as pb;
use crate::proto::etcd::v3electionpb as election;

type Sender<T> = mpsc::Sender<Result<T, Status>>;

fn queue<T: Send + 'static>() -> (Sender<T>, Answers<T>) {
    let (send, receive) = mpsc::channel(ETCD_STREAM_QUEUE);
    (send, Box::pin(ReceiverStream::new(receive)))
}

/// `LeaseKeepAlive`: each request kept alive through the log, answered in order.
pub(super) fn keep_alive(
    api: Arc<EtcdApi>,
    credentials: Credentials,
    mut inbound: Streaming<pb::LeaseKeepAliveRequest>,
) -> Answers<pb::LeaseKeepAliveResponse> {
    let (send, answers) = queue();
    let mut stopping = api.stopping();
    tokio::spawn(async move {
        loop {
            let request = tokio::select! {
                request = inbound.message() => request,
                () = stopped(&mut stopping) => return,
            };
            let Ok(Some(request)) = request else { return };
            let answer = api.lease_keep_alive(&credentials, request).await;
            let ended = answer.is_err();
            if send.send(answer.map_err(Status::from)).await.is_err() || ended {
                return;
            }
        }
    });
    answers
}

/// Until the node stops (never, for a plane that does not say).
async fn stopped(stopping: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match stopping {
        Some(stopping) => {
            let _ = stopping.wait_for(|stopped| *stopped).await;
        }
        None => std::future::pending().await,
    }
}

/// `Watch`: watchers created and cancelled by the client's messages, each a task sending its
/// events; the stream counts as one watch of the node's budget for as long as it runs.
pub(super) fn watch(
    api: Arc<EtcdApi>,
    credentials: Credentials,
    inbound: Streaming<pb::WatchRequest>,
) -> Result<Answers<pb::WatchResponse>, Status> {
    let working = api.admit_watch().map_err(Status::from)?;
    let (send, answers) = queue();
    let stream = WatchStream {
        api,
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

struct WatchStream {
    api: Arc<EtcdApi>,
    credentials: Credentials,
    send: Sender<pb::WatchResponse>,
    /// Each running watcher's task, by watch id.
    watchers: HashMap<i64, tokio::task::AbortHandle>,
    tasks: JoinSet<i64>,
    /// The id given to the next watcher created without one.
    next_id: i64,
}

impl WatchStream {
    async fn run(mut self, mut inbound: Streaming<pb::WatchRequest>) {
        use pb::watch_request::RequestUnion;
        let mut stopping = self.api.stopping();
        loop {
            let request = tokio::select! {
                request = inbound.message() => request,
                Some(Ok(id)) = self.tasks.join_next() => {
                    self.watchers.remove(&id);
                    continue;
                }
                () = stopped(&mut stopping) => break,
            };
            let answer = match request {
                Ok(Some(pb::WatchRequest {
                    request_union: Some(union),
                })) => match union {
                    RequestUnion::CreateRequest(create) => self.create(create),
                    RequestUnion::CancelRequest(cancel) => self.cancel(cancel.watch_id),
                    RequestUnion::ProgressRequest(_) => pb::WatchResponse {
                        header: Some(self.api.header_now()),
                        watch_id: -1,
                        ..pb::WatchResponse::default()
                    },
                },
                Ok(Some(_)) => continue,
                _ => break,
            };
            if self.send.send(Ok(answer)).await.is_err() {
                break;
            }
        }
        self.tasks.abort_all();
    }

    fn create(&mut self, create: pb::WatchCreateRequest) -> pb::WatchResponse {
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
                return refused(id, "etcdserver: duplicate watch ID provided".into())
            }
            id => id,
        };
        if self.watchers.len() >= ETCD_WATCHERS_PER_STREAM {
            let reason = format!(
                "a Watch stream runs at most {ETCD_WATCHERS_PER_STREAM} watchers; cancel one or \
                 open another stream"
            );
            return refused(id, reason);
        }
        let progress = create.progress_notify;
        let watcher = match self.api.watcher(&self.credentials, id, create) {
            Ok(watcher) => watcher,
            Err(e) => return refused(id, e.to_string()),
        };
        let (api, send) = (self.api.clone(), self.send.clone());
        let task = self.tasks.spawn(watching(watcher, api, send, progress));
        self.watchers.insert(id, task);
        pb::WatchResponse {
            header: Some(self.api.header_now()),
            watch_id: id,
            created: true,
            ..pb::WatchResponse::default()
        }
    }

    fn cancel(&mut self, id: i64) -> pb::WatchResponse {
        if let Some(task) = self.watchers.remove(&id) {
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
    loop {
        let next = tokio::select! {
            next = watcher.next() => next,
            () = tokio::time::sleep(ETCD_PROGRESS_NOTIFY), if progress => {
                let notice = pb::WatchResponse {
                    header: Some(api.header_now()),
                    watch_id: id,
                    ..pb::WatchResponse::default()
                };
                match send.send(Ok(notice)).await {
                    Ok(()) => continue,
                    Err(_) => return id,
                }
            }
        };
        let (answer, done) = match next {
            Ok(Watched::Events(answer)) => (Ok(answer), false),
            Ok(Watched::Compacted(answer)) => (Ok(answer), true),
            Err(NodeError::ShuttingDown) => return id,
            Err(e) => (Err(Status::from(e)), true),
        };
        if send.send(answer).await.is_err() || done {
            return id;
        }
    }
}

/// `Observe`: the election's leader each time it changes.
pub(super) fn observe(mut observed: ObservedLeaders) -> Answers<election::LeaderResponse> {
    let (send, answers) = queue();
    tokio::spawn(async move {
        loop {
            let answer = tokio::select! {
                answer = observed.next() => answer.map_err(Status::from),
                () = send.closed() => return,
            };
            let ended = answer.is_err();
            if send.send(answer).await.is_err() || ended {
                return;
            }
        }
    });
    answers
}
