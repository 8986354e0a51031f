//! `Watch`: streams the lease events of the entries this node applies, from a log index on.
//!
//! Each watcher is a task reading the node's event window (`raft::events`) from its own cursor,
//! woken when the applied index moves. A slow watcher holds no memory of its own: it falls
//! behind in the window, and once its cursor is dropped from it the stream ends with
//! OUT_OF_RANGE, saying from where it can resume. Every response carries whole entries, so a
//! client resumes exactly after `watched_to`.

use tokio::sync::mpsc;

use super::Caller;
use crate::limits::{WATCH_EVENTS_PER_RESPONSE, WATCH_IDLE_CHECK, WATCH_QUEUED_RESPONSES};
use crate::node::{Node, NodeError};
use crate::proto::v1 as pb;
use crate::raft::events::{Compacted, NotedEvent};
use leasehold_core::auth::Action;
use leasehold_core::{limits, Event, EventKind, Limits};

/// A watch's responses, each of which a transport sends as it comes; an error ends them.
pub type Events = mpsc::Receiver<Result<pb::WatchResponse, NodeError>>;

/// Which leases a watch follows.
#[derive(Clone, Debug)]
enum Select {
    Lease(String),
    Prefix(String),
}

impl Select {
    fn keeps(&self, event: &Event) -> bool {
        match self {
            Select::Lease(lease) => event.lease == *lease,
            Select::Prefix(prefix) => event.lease.starts_with(prefix.as_str()),
        }
    }
}

/// What a watch follows, and for whom.
struct Watcher {
    select: Select,
    caller: Caller,
}

impl Watcher {
    /// Whether this node's policy lets the identity read every lease the watch follows: the
    /// lease, or every name under the prefix (a grant whose prefix the watch's starts with).
    fn allowed(&self, node: &Node) -> Result<(), NodeError> {
        let name = match &self.select {
            Select::Lease(name) | Select::Prefix(name) => name,
        };
        let state = node.state().read();
        let policy = state.table.policy();
        self.caller.may(policy, &Action::ReadLease(name))
    }
}

/// Checks the request and starts the watcher's task; its responses are the returned stream.
/// `working` is the stream's place among the requests the node works on at once (`serve
/// --max-requests`): held for as long as the stream runs, so watches are bounded too.
pub fn start(
    node: Node,
    caller: Caller,
    request: pb::WatchRequest,
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
    working: tokio::sync::OwnedSemaphorePermit,
) -> Result<Events, NodeError> {
    let invalid = NodeError::Invalid;
    let select = match request.select {
        Some(pb::watch_request::Select::Lease(lease)) => {
            limits::name("lease", &lease, Limits::MAX_NAME_BYTES).map_err(invalid)?;
            Select::Lease(lease)
        }
        Some(pb::watch_request::Select::Prefix(prefix)) => {
            if prefix.len() > Limits::MAX_NAME_BYTES {
                return Err(invalid(limits::InvalidInput::new(
                    "prefix",
                    format!(
                        "must be at most {} bytes, got {}",
                        Limits::MAX_NAME_BYTES,
                        prefix.len()
                    ),
                )));
            }
            Select::Prefix(prefix)
        }
        None => {
            return Err(invalid(limits::InvalidInput::new(
                "select",
                "set either lease or prefix",
            )))
        }
    };
    let watcher = Watcher { select, caller };
    node.denied_here(watcher.allowed(&node))?;
    let applied = node.state().applied_index();
    let from = match request.from_index {
        0 => *applied.borrow() + 1,
        index => index,
    };
    let first_kept = node.state().events().first_kept();
    if from < first_kept {
        return Err(compacted(node.id(), from, Compacted { first_kept }));
    }
    let (responses, stream) = mpsc::channel(WATCH_QUEUED_RESPONSES);
    tokio::spawn(async move {
        serve(node, watcher, from, applied, responses, stopping).await;
        drop(working);
    });
    Ok(stream)
}

fn compacted(node: u64, from: u64, c: Compacted) -> NodeError {
    NodeError::Compacted {
        node,
        from,
        first_kept: c.first_kept,
    }
}

fn wire(noted: NotedEvent) -> pb::LeaseEvent {
    let kind = match noted.event.kind {
        EventKind::Granted => pb::EventKind::Granted,
        EventKind::Renewed => pb::EventKind::Renewed,
        EventKind::Released => pb::EventKind::Released,
        EventKind::Expired => pb::EventKind::Expired,
    };
    pb::LeaseEvent {
        kind: kind.into(),
        lease: noted.event.lease.to_string(),
        holder: noted.event.holder.to_string(),
        token: noted.event.token,
        expires_at_ms: noted.event.expires_at_ms,
        log_index: noted.log_index,
        store_time_ms: noted.store_time_ms,
    }
}

/// The watcher's task: sends the events from `next` on as the node applies them, until the
/// client goes, the node stops or loses its leader, or the watcher falls out of the window.
async fn serve(
    node: Node,
    watcher: Watcher,
    mut next: u64,
    mut applied: tokio::sync::watch::Receiver<u64>,
    responses: mpsc::Sender<Result<pb::WatchResponse, NodeError>>,
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
) {
    let out = Out {
        responses,
        stopping,
    };
    let mut said_to = next - 1;
    if !out.send(Ok(progress(said_to))).await {
        return;
    }
    let mut idle = tokio::time::interval(WATCH_IDLE_CHECK);
    idle.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let upto = *applied.borrow_and_update();
        if !send_upto(&node, &watcher, &out, upto, &mut next, &mut said_to).await {
            return;
        }
        tokio::select! {
            changed = applied.changed() => if changed.is_err() { return },
            () = out.responses.closed() => return,
            () = out.stopped() => return,
            _ = idle.tick() => {
                if node.raft().metrics().borrow().current_leader.is_none() {
                    // Its events may be far behind the cluster's: the client resumes on a node
                    // that follows a leader.
                    let lost = NodeError::WatchLeaderless {
                        node: node.id(),
                        next,
                    };
                    out.send(Err(lost)).await;
                    return;
                }
                // How far it looked, so a resumed watch need not look again.
                if next - 1 > said_to {
                    said_to = next - 1;
                    if !out.send(Ok(progress(said_to))).await {
                        return;
                    }
                }
            }
        }
    }
}

/// Sends the events of entries `next..=upto` that `select` keeps, a response per scan, moving
/// `next` past what was scanned and `said_to` to the last entry a response covered. False once
/// the watch is over (the client went, or its start was compacted).
async fn send_upto(
    node: &Node,
    watcher: &Watcher,
    out: &Out,
    upto: u64,
    next: &mut u64,
    said_to: &mut u64,
) -> bool {
    while *next <= upto {
        // Asked again before every scan: a watch ends once the policy no longer lets it read.
        if let Err(denied) = watcher.allowed(node) {
            out.send(Err(denied)).await;
            return false;
        }
        let scanned = node.state().events().since(
            *next,
            upto,
            |e| watcher.select.keeps(e),
            WATCH_EVENTS_PER_RESPONSE,
        );
        let (found, covered) = match scanned {
            Ok(scanned) => scanned,
            Err(c) => {
                out.send(Err(compacted(node.id(), *next, c))).await;
                return false;
            }
        };
        *next = covered + 1;
        if !found.is_empty() {
            let response = pb::WatchResponse {
                events: found.into_iter().map(wire).collect(),
                watched_to: covered,
            };
            if !out.send(Ok(response)).await {
                return false;
            }
            *said_to = covered;
        }
    }
    true
}

/// A response with no events: every event up to `watched_to` was sent.
fn progress(watched_to: u64) -> pb::WatchResponse {
    pb::WatchResponse {
        events: Vec::new(),
        watched_to,
    }
}

/// Where a watcher's responses go, and the node's stop, which ends the watch even while a
/// slow client leaves it waiting to send.
struct Out {
    responses: mpsc::Sender<Result<pb::WatchResponse, NodeError>>,
    stopping: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Out {
    async fn stopped(&self) {
        super::until_stopped(self.stopping.clone()).await
    }

    /// Whether the response went out (false: the client or the node is gone).
    async fn send(&self, response: Result<pb::WatchResponse, NodeError>) -> bool {
        tokio::select! {
            sent = self.responses.send(response) => sent.is_ok(),
            () = self.stopped() => false,
        }
    }
}
