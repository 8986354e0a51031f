//! The lease calls multiplexed on one `Batch` stream per node (see `Batch` in the public proto):
//! each call is written to the stream with an id and the attempt's timeout, and its answer is
//! matched back by that id. Calls made while others are on their way go in one message, so many
//! tasks sharing a client pay HTTP/2's per-call cost once per message, not once per call.
//!
//! It is gRPC all the same: over TLS, with the client's certificate or bearer token (on the
//! stream's request), on the channel the other calls use. A node that does not serve `Batch`
//! (an earlier version) is called with unary calls, as is a request too big for a message.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::lease_store_client::LeaseStoreClient;
use leasehold_proto::wire::{DENIED_KEY, ERROR_DOMAIN, INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};
use prost::Message;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_stream::Stream;
use tonic::metadata::MetadataValue;
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_types::{ErrorDetails, StatusExt};

use crate::channel::NodeChannel;
use crate::limits::{BATCH_UNSUPPORTED_RETRY, MAX_BATCH_CALLS, MAX_BATCH_MESSAGE_BYTES};

/// A `LeaseStore` request a `Batch` stream carries: its place in a `BatchCall`, its reply's in a
/// `BatchAnswer`, and its unary call for a node that takes no stream.
pub(crate) trait BatchMethod: Message + Default + Clone + Sized + Send + 'static {
    type Reply: Send + 'static;
    fn call(self) -> pb::batch_call::Request;
    fn reply(answer: pb::batch_answer::Answer) -> Option<Self::Reply>;
    fn unary(channel: NodeChannel, request: Request<Self>) -> Answered<Self::Reply>;
}

/// What a unary call answers, boxed.
pub(crate) type Answered<R> =
    Pin<Box<dyn std::future::Future<Output = Result<Response<R>, Status>> + Send>>;

macro_rules! batch_methods {
    (; $($variant:ident $call:ident $request:ident $reply:ident $kind:ident;)*) => {$(
        impl BatchMethod for pb::$request {
            type Reply = pb::$reply;
            fn call(self) -> pb::batch_call::Request {
                pb::batch_call::Request::$variant(self)
            }
            fn reply(answer: pb::batch_answer::Answer) -> Option<pb::$reply> {
                match answer {
                    pb::batch_answer::Answer::$variant(reply) => Some(reply),
                    _ => None,
                }
            }
            fn unary(channel: NodeChannel, request: Request<Self>) -> Answered<pb::$reply> {
                Box::pin(async move { LeaseStoreClient::new(channel).$call(request).await })
            }
        }
    )*};
}

leasehold_proto::lease_calls!(batch_methods);

/// A call's tag and length in its message, at most.
const CALL_OVERHEAD_BYTES: usize = 16;

/// Where a call's answer goes.
type Waiting = oneshot::Sender<Result<pb::batch_answer::Answer, Status>>;

/// The calls on a stream waiting for their answers, and whether it ended (then no call waits).
#[derive(Default)]
struct Waiters {
    ended: bool,
    calls: HashMap<u64, Waiting>,
}

/// One open stream: the calls written to it, those waiting for their answers, and its answers,
/// read by whichever waiting call holds them (see [`Batches::call`]).
struct Open {
    calls: mpsc::UnboundedSender<pb::BatchCall>,
    waiting: Mutex<Waiters>,
    answers: tokio::sync::Mutex<Streaming<pb::BatchResponse>>,
}

impl Open {
    fn waiting(&self) -> std::sync::MutexGuard<'_, Waiters> {
        self.waiting.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_closed(&self) -> bool {
        self.calls.is_closed() || self.waiting().ended
    }
}

#[derive(Default)]
enum State {
    #[default]
    Closed,
    Open(Arc<Open>),
    /// The node serves no `Batch`: unary calls until then.
    Unsupported(Instant),
}

/// The `Batch` stream to one node, opened on its first call and again after it ends.
#[derive(Default)]
pub(crate) struct Batches {
    state: Mutex<State>,
    /// Held while the stream is being opened, so that concurrent first calls open one.
    opening: tokio::sync::Mutex<()>,
    next_id: AtomicU64,
}

impl Batches {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The open stream, if there is one; `Err` while the node takes none.
    fn open_now(&self) -> Result<Option<Arc<Open>>, ()> {
        match &*self.state() {
            State::Open(open) if !open.is_closed() => Ok(Some(open.clone())),
            State::Unsupported(until) if *until > Instant::now() => Err(()),
            _ => Ok(None),
        }
    }

    /// The stream, opened on `channel` if none is open; `Ok(None)` where the node takes none.
    async fn stream(&self, channel: &NodeChannel) -> Result<Option<Arc<Open>>, Status> {
        match self.open_now() {
            Ok(Some(open)) => return Ok(Some(open)),
            Err(()) => return Ok(None),
            Ok(None) => {}
        }
        let _opening = self.opening.lock().await;
        match self.open_now() {
            Ok(Some(open)) => return Ok(Some(open)),
            Err(()) => return Ok(None),
            Ok(None) => {}
        }
        let (calls, outgoing) = mpsc::unbounded_channel();
        // The channel adds the client's bearer token, if any, to the stream's request.
        let request = Request::new(Gathered {
            calls: outgoing,
            held: None,
        });
        let answers = match LeaseStoreClient::new(channel.clone())
            .max_decoding_message_size(usize::MAX)
            .batch(request)
            .await
        {
            Ok(answers) => answers.into_inner(),
            Err(status) if status.code() == Code::Unimplemented => {
                *self.state() = State::Unsupported(Instant::now() + BATCH_UNSUPPORTED_RETRY);
                return Ok(None);
            }
            // Nothing was sent on it: the caller's call goes as its attempt's failure.
            Err(status) => return Err(status),
        };
        let open = Arc::new(Open {
            calls,
            waiting: Mutex::default(),
            answers: tokio::sync::Mutex::new(answers),
        });
        *self.state() = State::Open(open.clone());
        Ok(Some(open))
    }

    /// `message` as a call of this node's, with an id none of its unanswered calls has.
    pub(crate) fn call_of<M: BatchMethod>(&self, message: M, timeout: Duration) -> pb::BatchCall {
        pb::BatchCall {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            // At least 1: 0 would be no deadline at all.
            timeout_ms: u32::try_from(timeout.as_millis())
                .unwrap_or(u32::MAX)
                .max(1),
            request: Some(message.call()),
        }
    }

    /// `call` on the node's stream, answered as its unary call would be (by its `timeout_ms`;
    /// the caller bounds the call's time too); `Err(call)` where it goes as a unary call
    /// instead: a node that takes no stream, or a call too big for a message.
    pub(crate) async fn call(
        &self,
        channel: &NodeChannel,
        call: pb::BatchCall,
    ) -> Result<Result<pb::batch_answer::Answer, Status>, pb::BatchCall> {
        // Room for the message's own fields beside the call.
        if call.encoded_len() + CALL_OVERHEAD_BYTES > MAX_BATCH_MESSAGE_BYTES {
            return Err(call);
        }
        let (answer, answered) = oneshot::channel();
        let id = call.id;
        let mut call = Some(call);
        let mut answer = Some(answer);
        let mut on = None;
        // A stream found ended before the call was handed to it took nothing: once more on a
        // new one.
        for _ in 0..2 {
            let open = match self.stream(channel).await {
                Ok(Some(open)) => open,
                // The node takes no stream: the call, still unsent, goes as a unary call.
                Ok(None) => match call.take() {
                    Some(call) => return Err(call),
                    None => break,
                },
                Err(status) => return Ok(Err(status)),
            };
            let mut waiting = open.waiting();
            if waiting.ended {
                continue;
            }
            let (Some(next), Some(to)) = (call.take(), answer.take()) else {
                break;
            };
            match open.calls.send(next) {
                Ok(()) => {
                    waiting.calls.insert(id, to);
                    drop(waiting);
                    on = Some(open);
                    break;
                }
                Err(unsent) => {
                    (call, answer) = (Some(unsent.0), Some(to));
                    waiting.ended = true;
                }
            }
        }
        let Some(open) = on else {
            // Never sent: reported as a failed connect is, so that a write is not left in doubt.
            let unsent = std::io::Error::other(
                "the node's batch stream ended twice before the call was sent",
            );
            let mut status = Status::unavailable(unsent.to_string());
            status.set_source(Arc::new(tonic::ConnectError(Box::new(unsent))));
            return Ok(Err(status));
        };
        let answered = wait(&open, answered).await;
        Ok(match answered {
            Ok(answer) => answer,
            // The stream ended with the call on it: its answer was lost, as a reset unary
            // call's is (a write may have been applied).
            Err(_) => Err(Status::unavailable(
                "the batch stream to the node ended before the call was answered",
            )),
        })
    }
}

/// The answer `answered` waits for, on `open`'s stream. No task reads the stream: a call waiting
/// for its answer reads it while no other does, and hands every answer it reads to its call,
/// its own among them. So a lone call is woken by the connection itself, not by a reader task
/// between them.
async fn wait(
    open: &Open,
    mut answered: oneshot::Receiver<Result<pb::batch_answer::Answer, Status>>,
) -> Result<Result<pb::batch_answer::Answer, Status>, oneshot::error::RecvError> {
    loop {
        tokio::select! {
            biased;
            answer = &mut answered => return answer,
            mut answers = open.answers.lock() => {
                // Another call may have handed this one its answer just before: raced, so
                // that it is not held until the next message.
                let read = tokio::select! {
                    biased;
                    answer = &mut answered => return answer,
                    read = answers.message() => read,
                };
                if let Ok(Some(response)) = read {
                    deliver(open, response);
                } else {
                    // The stream ended: every call on it lost its answer.
                    let mut waiting = open.waiting();
                    waiting.ended = true;
                    waiting.calls.clear();
                }
            }
        }
    }
}

/// A call's answer (on the stream or a lane) as its unary call's.
pub(crate) fn answered_as<M: BatchMethod>(
    answer: Result<pb::batch_answer::Answer, Status>,
) -> Result<Response<M::Reply>, Status> {
    let answer = answer?;
    M::reply(answer)
        .map(Response::new)
        .ok_or_else(|| Status::internal("the node answered the call with another call's answer"))
}

/// Hands each answer of `response` to the call waiting for it.
fn deliver(open: &Open, response: pb::BatchResponse) {
    let mut waiting = open.waiting();
    for answer in response.answers {
        if let (Some(caller), Some(answer)) = (waiting.calls.remove(&answer.id), answer.answer) {
            let _ = caller.send(match answer {
                pb::batch_answer::Answer::Error(e) => Err(refusal(e)),
                answer => Ok(answer),
            });
        }
    }
}

/// A refusal on the stream (or a lane) as the unary call's status: the node's own, with the
/// marks and the `ErrorInfo` (reason and facts) a node puts on its statuses.
pub(crate) fn refusal(e: pb::BatchError) -> Status {
    let mut facts: std::collections::HashMap<_, _> = e.facts.into_iter().collect();
    facts.insert("indeterminate".into(), e.indeterminate.to_string());
    let details = ErrorDetails::with_error_info(e.reason.clone(), ERROR_DOMAIN, facts);
    let mut status = Status::with_error_details(Code::from_i32(e.code), e.message, details);
    let metadata = status.metadata_mut();
    metadata.insert(ORIGIN_KEY, MetadataValue::from_static("node"));
    if e.indeterminate {
        metadata.insert(INDETERMINATE_KEY, MetadataValue::from_static("true"));
    }
    match e.reason.as_str() {
        "SESSION_UNKNOWN" => {
            metadata.insert(SESSION_KEY, MetadataValue::from_static("unknown"));
        }
        "DENIED" => {
            metadata.insert(DENIED_KEY, MetadataValue::from_static("policy"));
        }
        _ => {}
    }
    status
}

/// The calls written to the stream, gathered: each message carries every call waiting when it
/// is sent, up to [`MAX_BATCH_CALLS`] and [`MAX_BATCH_MESSAGE_BYTES`].
struct Gathered {
    calls: mpsc::UnboundedReceiver<pb::BatchCall>,
    /// A call that did not fit the last message: the first of the next.
    held: Option<pb::BatchCall>,
}

impl Stream for Gathered {
    type Item = pb::BatchRequest;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let first = match self.held.take() {
            Some(call) => call,
            None => match self.calls.poll_recv(cx) {
                Poll::Ready(Some(call)) => call,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        let mut bytes = first.encoded_len() + CALL_OVERHEAD_BYTES;
        let mut calls = vec![first];
        while calls.len() < MAX_BATCH_CALLS {
            let Ok(call) = self.calls.try_recv() else {
                break;
            };
            bytes += call.encoded_len() + CALL_OVERHEAD_BYTES;
            if bytes > MAX_BATCH_MESSAGE_BYTES {
                self.held = Some(call);
                break;
            }
            calls.push(call);
        }
        Poll::Ready(Some(pb::BatchRequest { calls }))
    }
}

#[cfg(test)]
mod tests {
    use crate::fake::{fake_node, BatchMode, Reply};

    #[tokio::test]
    async fn calls_made_together_travel_in_one_message() {
        let (node, client) = fake_node(vec![Reply::Answer]).await;
        let client = std::sync::Arc::new(client);
        let puts: Vec<_> = (0..32)
            .map(|i| {
                let client = client.clone();
                tokio::spawn(async move { client.put(&format!("k{i}"), b"v", None).await })
            })
            .collect();
        for put in puts {
            put.await.unwrap().unwrap();
        }
        let messages = node.batch_messages.lock().unwrap().clone();
        assert_eq!(
            messages.iter().sum::<usize>(),
            33,
            "the session's and 32 puts: {messages:?}"
        );
        assert!(
            messages.len() < 33,
            "some calls shared a message: {messages:?}"
        );
    }

    #[tokio::test]
    async fn a_node_that_serves_no_batch_is_called_with_unary_calls() {
        let (node, client) = fake_node(vec![Reply::Answer]).await;
        *node.batch.lock().unwrap() = BatchMode::Unimplemented;
        client.put("k", b"v", None).await.unwrap();
        client.put("k", b"w", None).await.unwrap();
        assert!(node.batch_messages.lock().unwrap().is_empty());
        assert_eq!(
            node.request_ids.lock().unwrap().len(),
            2,
            "both puts arrived"
        );
    }

    #[tokio::test]
    async fn a_request_too_big_for_a_message_goes_as_a_unary_call() {
        let (node, client) = fake_node(vec![Reply::Answer]).await;
        let value = vec![7; crate::limits::MAX_BATCH_MESSAGE_BYTES];
        client.put("k", &value, None).await.unwrap();
        // The session's registration went on the stream; the put alone could not.
        assert_eq!(*node.batch_messages.lock().unwrap(), [1]);
        assert_eq!(node.request_ids.lock().unwrap().len(), 1, "the put arrived");
    }

    #[tokio::test]
    async fn a_write_on_a_stream_that_ends_before_its_answer_is_indeterminate() {
        let (node, client) = fake_node(vec![Reply::Answer]).await;
        // Opened on a stream that serves, so the session is open.
        client.put("k", b"v", None).await.unwrap();
        *node.batch.lock().unwrap() = BatchMode::EndAtFirstMessage;
        // Its stream is reset under it: a new one for the retries, reset too.
        let e = client.put("k", b"w", None).await.unwrap_err();
        assert!(e.is_indeterminate(), "{e}");
        assert!(e.to_string().contains("may have been applied"), "{e}");
    }
}
