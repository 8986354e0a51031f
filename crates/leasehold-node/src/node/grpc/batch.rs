//! The `Batch` stream: many unary calls on one gRPC stream, each named by the caller's id and
//! answered as soon as it is answered (TiKV's `BatchCommands` shape).
//!
//! Why: a unary gRPC call costs a new HTTP/2 stream, its headers both ways and a task on each
//! side; with many clients on two cores that cost more of the machine than the write it
//! carried. On a stream, calls that are sent together travel in one message, and answers too.
//! It is still gRPC: TLS, the caller's certificate, and every language's stubs keep working.
//!
//! Each call goes to the typed API as a unary call does: the same checks, admission
//! (`--max-requests`), authorization (as the stream's caller), metrics, and its own deadline.
//! The stream's answers are one `Stream` that reads the calls and runs them as it is polled, on
//! the task that sends its answers: no task or channel per call between the two.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::stream::FuturesUnordered;
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::limits::{MAX_BATCH_CALLS_PER_MESSAGE, MAX_BATCH_UNANSWERED};
use crate::node::api::{Credentials, LeaseApi};
use crate::node::NodeError;
use crate::proto::v1 as pb;

/// One call being answered.
type Answering = Pin<Box<dyn Future<Output = pb::BatchAnswer> + Send>>;

/// A stream's calls and their answers: each poll reads the calls that arrived (while fewer than
/// [`MAX_BATCH_UNANSWERED`] are unanswered; past that the node reads no more of the stream, and
/// HTTP/2's flow control holds its caller back), runs them, and sends every answer ready in one
/// message.
pub(crate) struct Answers {
    api: Arc<LeaseApi>,
    credentials: Arc<Credentials>,
    /// The caller's side; `None` once it ended (its calls still get their answers).
    calls: Option<Streaming<pb::BatchRequest>>,
    /// Calls read but not started: a message's past the bound.
    waiting: VecDeque<pb::BatchCall>,
    answering: FuturesUnordered<Answering>,
    /// Resolves once the node stops: it reads no more calls, answers those it has, and ends
    /// the stream, so that an open stream does not hold the node's shutdown. `None` once it
    /// has (or where the API has no stop to wait on).
    stopped: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// Why the stream ends, once its calls are answered: the node stops, or the caller's side
    /// failed (a message over the limit, say).
    ending: Option<Status>,
    /// Set once the stream ended: nothing more comes.
    ended: bool,
}

/// Serves `calls` from a caller with `credentials`.
pub(crate) fn serve(
    api: Arc<LeaseApi>,
    credentials: Credentials,
    calls: Streaming<pb::BatchRequest>,
) -> Answers {
    let stopped = api.stopping().map(|mut stopping| {
        let stopped = async move {
            let _ = stopping.wait_for(|stop| *stop).await;
        };
        Box::pin(stopped) as Pin<Box<dyn Future<Output = ()> + Send>>
    });
    Answers {
        api,
        credentials: Arc::new(credentials),
        calls: Some(calls),
        waiting: VecDeque::new(),
        answering: FuturesUnordered::new(),
        stopped,
        ending: None,
        ended: false,
    }
}

impl Answers {
    /// Starts waiting calls while there is room, and reads more of the stream while there still
    /// is. `Err`: a message the node refuses, which ends the stream.
    fn take_calls(&mut self, cx: &mut Context<'_>) -> Result<(), NodeError> {
        loop {
            while self.answering.len() < MAX_BATCH_UNANSWERED {
                let Some(call) = self.waiting.pop_front() else {
                    break;
                };
                let (api, credentials) = (self.api.clone(), self.credentials.clone());
                self.answering.push(Box::pin(
                    async move { api.batch_call(&credentials, call).await },
                ));
            }
            if self.answering.len() >= MAX_BATCH_UNANSWERED {
                return Ok(());
            }
            let Some(calls) = self.calls.as_mut() else {
                return Ok(());
            };
            match Pin::new(calls).poll_next(cx) {
                Poll::Ready(Some(Ok(request))) => {
                    LeaseApi::check_batch(request.calls.len())?;
                    self.waiting.extend(request.calls);
                }
                // The caller closed its side: the calls read so far are still answered (a
                // write among them may be applied).
                Poll::Ready(None) => self.calls = None,
                // A message the node could not take (over the limit, or not a BatchRequest):
                // its calls were never made; the stream ends with why, once the calls read
                // before it are answered.
                Poll::Ready(Some(Err(refused))) => {
                    self.calls = None;
                    self.ending = Some(refused);
                }
                Poll::Pending => return Ok(()),
            }
        }
    }
}

impl Stream for Answers {
    type Item = Result<pb::BatchResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        // Polled until it fires, then dropped: a finished future is not polled again.
        let stopping = self
            .stopped
            .as_mut()
            .is_some_and(|s| s.as_mut().poll(cx).is_ready());
        if stopping {
            self.stopped = None;
        }
        if stopping && self.calls.is_some() {
            // Calls read but not started are refused, never made; those under way are answered.
            self.calls = None;
            for call in std::mem::take(&mut self.waiting) {
                let refused = pb::BatchAnswer {
                    id: call.id,
                    answer: Some(pb::batch_answer::Answer::Error(
                        NodeError::ShuttingDown.into(),
                    )),
                };
                self.answering.push(Box::pin(std::future::ready(refused)));
            }
            self.ending = Some(Status::from(NodeError::ShuttingDown));
        }
        if let Err(refused) = self.take_calls(cx) {
            self.ended = true;
            return Poll::Ready(Some(Err(Status::from(refused))));
        }
        let mut answers = Vec::new();
        while answers.len() < MAX_BATCH_CALLS_PER_MESSAGE {
            match Pin::new(&mut self.answering).poll_next(cx) {
                Poll::Ready(Some(answer)) => answers.push(answer),
                Poll::Ready(None) | Poll::Pending => break,
            }
        }
        if !answers.is_empty() {
            return Poll::Ready(Some(Ok(pb::BatchResponse { answers })));
        }
        if self.calls.is_none() && self.waiting.is_empty() && self.answering.is_empty() {
            self.ended = true;
            return Poll::Ready(self.ending.take().map(Err));
        }
        Poll::Pending
    }
}
