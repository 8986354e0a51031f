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

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::{mpsc, Semaphore};
use tokio_stream::Stream;
use tonic::{Status, Streaming};

use crate::limits::{MAX_BATCH_CALLS_PER_MESSAGE, MAX_BATCH_UNANSWERED};
use crate::node::api::{Credentials, LeaseApi};
use crate::node::NodeError;
use crate::proto::v1 as pb;
use leasehold_core::InvalidInput;

/// What one call answered, or why the stream ends (then nothing follows it).
type Answered = Result<pb::BatchAnswer, NodeError>;

/// The answers of a stream, gathered: each message carries every answer ready when it is sent.
pub(crate) struct Answers {
    answers: mpsc::Receiver<Answered>,
    /// Why the stream ends, once it does with an error: sent after the answers before it.
    ending: Option<Status>,
    /// Set once the stream ended: no more messages.
    ended: bool,
}

impl Stream for Answers {
    type Item = Result<pb::BatchResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(ending) = self.ending.take() {
            self.ended = true;
            return Poll::Ready(Some(Err(ending)));
        }
        let first = match self.answers.poll_recv(cx) {
            Poll::Ready(Some(Ok(answer))) => answer,
            Poll::Ready(Some(Err(e))) => {
                self.ended = true;
                return Poll::Ready(Some(Err(Status::from(e))));
            }
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Pending => return Poll::Pending,
        };
        let mut answers = vec![first];
        // What else is answered already goes in the same message; an error waits for the next
        // poll, after these.
        while answers.len() < MAX_BATCH_CALLS_PER_MESSAGE {
            match self.answers.try_recv() {
                Ok(Ok(answer)) => answers.push(answer),
                Ok(Err(e)) => {
                    self.ending = Some(Status::from(e));
                    break;
                }
                Err(_) => break,
            }
        }
        Poll::Ready(Some(Ok(pb::BatchResponse { answers })))
    }
}

/// Serves `calls` from a caller with `credentials`: reads them as they come, at most
/// [`MAX_BATCH_UNANSWERED`] unanswered at once (past that it reads no more until answers go
/// out), and answers each on its own task.
pub(crate) fn serve(
    api: Arc<LeaseApi>,
    credentials: Credentials,
    mut calls: Streaming<pb::BatchRequest>,
) -> Answers {
    let (answered, answers) = mpsc::channel(MAX_BATCH_UNANSWERED + 1);
    let credentials = Arc::new(credentials);
    tokio::spawn(async move {
        let unanswered = Arc::new(Semaphore::new(MAX_BATCH_UNANSWERED));
        loop {
            let request = match calls.message().await {
                Ok(Some(request)) => request,
                // The caller closed its side, or its stream failed: the calls read so far are
                // still answered (a write among them may be applied).
                Ok(None) | Err(_) => return,
            };
            if request.calls.len() > MAX_BATCH_CALLS_PER_MESSAGE {
                let problem = format!(
                    "a BatchRequest carries at most {MAX_BATCH_CALLS_PER_MESSAGE} calls, not {}; \
                     none of its calls was made",
                    request.calls.len()
                );
                let invalid = NodeError::Invalid(InvalidInput::new("calls", problem));
                let _ = answered.send(Err(invalid)).await;
                return;
            }
            for call in request.calls {
                let Ok(slot) = unanswered.clone().acquire_owned().await else {
                    return;
                };
                let (api, credentials, answered) =
                    (api.clone(), credentials.clone(), answered.clone());
                tokio::spawn(async move {
                    let answer = api.batch_call(&credentials, call).await;
                    let _ = answered.send(Ok(answer)).await;
                    drop(slot);
                });
            }
        }
    });
    Answers {
        answers,
        ending: None,
        ended: false,
    }
}
