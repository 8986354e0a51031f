//! `Watch`: a stream of lease events that outlives the node serving it. When a stream breaks
//! (the node died, lost its leader, or stopped answering pings) the watch resumes on another
//! node from the log index after the last one it was sent, so no event is lost or repeated.

use std::collections::VecDeque;
use std::time::Duration;

use leasehold_proto::v1 as pb;
use leasehold_proto::v1::lease_store_client::LeaseStoreClient;
use tonic::{Code, Status, Streaming};

use crate::attempts::{pause_within, round_pauses};
use crate::channel::NodeChannel;
use crate::error::ClientError;
use crate::limits::OPEN_TIMEOUT;

/// Which leases a watch follows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchSelect {
    /// One lease.
    Lease(String),
    /// Every lease whose name starts with this; `""` for every lease.
    Prefix(String),
}

/// Where a watch starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WatchFrom {
    /// With the next log entry the serving node applies.
    Now,
    /// With this log index: events of the past too, as long as the node still keeps them.
    Index(u64),
}

/// What happened to a lease.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A new holder, with a new token.
    Granted,
    /// The holder extended its grant: same token, later expiry.
    Renewed,
    /// The holder gave the lease up.
    Released,
    /// Store time passed the lease's expiry while it was held.
    Expired,
}

impl EventKind {
    /// The name `leasehold watch` prints: `granted`, `renewed`, `released`, `expired`.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Granted => "granted",
            EventKind::Renewed => "renewed",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
        }
    }

    /// The lease is free after this event.
    pub fn frees(self) -> bool {
        matches!(self, EventKind::Released | EventKind::Expired)
    }
}

/// Serialized by its name as [`EventKind::as_str`] spells it, the one spelling.
#[cfg(feature = "serde")]
impl serde::Serialize for EventKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// One lease event, at the log index whose entry caused it.
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseEvent {
    /// What happened.
    pub kind: EventKind,
    /// To which lease.
    pub lease: String,
    /// Who was granted, renewed, released or lost the lease.
    pub holder: String,
    /// The grant's token.
    pub token: u64,
    /// The grant's expiry; for a release, the store time of the release.
    pub expires_at_ms: u64,
    /// The log entry whose apply caused it: the same on every node.
    pub log_index: u64,
    /// The store time there.
    pub store_time_ms: u64,
}

impl TryFrom<pb::LeaseEvent> for LeaseEvent {
    type Error = ClientError;
    fn try_from(e: pb::LeaseEvent) -> Result<Self, ClientError> {
        let kind = match pb::EventKind::try_from(e.kind) {
            Ok(pb::EventKind::Granted) => EventKind::Granted,
            Ok(pb::EventKind::Renewed) => EventKind::Renewed,
            Ok(pb::EventKind::Released) => EventKind::Released,
            Ok(pb::EventKind::Expired) => EventKind::Expired,
            Ok(pb::EventKind::Unspecified) | Err(_) => {
                return Err(ClientError::Malformed(
                    "an event of a kind this client does not know",
                ))
            }
        };
        Ok(LeaseEvent {
            kind,
            lease: e.lease,
            holder: e.holder,
            token: e.token,
            expires_at_ms: e.expires_at_ms,
            log_index: e.log_index,
            store_time_ms: e.store_time_ms,
        })
    }
}

/// A stream of lease events, made by [`crate::LeaseClient::watch`].
///
/// ```no_run
/// # async fn example(client: leasehold_client::LeaseClient) -> Result<(), leasehold_client::ClientError> {
/// use leasehold_client::{WatchFrom, WatchSelect};
///
/// let mut watch = client.watch(WatchSelect::Prefix("jobs/".into()), WatchFrom::Now);
/// loop {
///     let event = watch.next().await?;
///     println!("{} {} by {} (token {})", event.kind.as_str(), event.lease, event.holder, event.token);
/// }
/// # }
/// ```
pub struct Watch {
    channels: Vec<NodeChannel>,
    endpoints: String,
    /// The node asked first when a stream must be opened.
    next_node: usize,
    /// How long the watch keeps trying to open a stream before it gives up.
    deadline: Duration,
    select: WatchSelect,
    /// The first log index not yet covered; `None` until a node said where the watch starts.
    next_index: Option<u64>,
    stream: Option<Streaming<pb::WatchResponse>>,
    pending: VecDeque<LeaseEvent>,
}

impl Watch {
    pub(crate) fn new(
        channels: Vec<NodeChannel>,
        endpoints: String,
        first_node: usize,
        deadline: Duration,
        select: WatchSelect,
        from: WatchFrom,
    ) -> Watch {
        Watch {
            channels,
            endpoints,
            next_node: first_node,
            deadline,
            select,
            next_index: match from {
                WatchFrom::Now => None,
                WatchFrom::Index(index) => Some(index.max(1)),
            },
            stream: None,
            pending: VecDeque::new(),
        }
    }

    /// Every event up to this log index was returned by [`next`](Self::next) or queued for it;
    /// `None` before a node was reached.
    pub fn watched_to(&self) -> Option<u64> {
        self.next_index.map(|next| next - 1)
    }

    /// Waits until a node serves the watch, so that every event from the start on will be
    /// seen. [`next`](Self::next) does this by itself; call it to know that the watch is in
    /// place before acting on its leases.
    pub async fn started(&mut self) -> Result<u64, ClientError> {
        if self.stream.is_none() {
            self.open().await?;
        }
        Ok(self.watched_to().unwrap_or(0))
    }

    /// The next event. Errors only when no node serves the watch for the whole deadline, or
    /// the watch asks for something no node can give: a start no node keeps any more
    /// (`OutOfRange`), or bad input (`InvalidArgument`).
    pub async fn next(&mut self) -> Result<LeaseEvent, ClientError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            let Some(stream) = self.stream.as_mut() else {
                self.open().await?;
                continue;
            };
            match stream.message().await {
                Ok(Some(response)) => self.take(response)?,
                // The node ended the stream (stopping, or without a leader) or it broke: go
                // on elsewhere from where it stopped.
                Ok(None) => self.stream = None,
                Err(status) if final_status(&status) => return Err(ClientError::Status(status)),
                Err(_) => {
                    self.stream = None;
                    self.next_node += 1;
                }
            }
        }
    }

    /// Queues a response's events, all or none: an event this client cannot read leaves the
    /// watch where it was (and the stream is dropped), so no event after it is skipped.
    fn take(&mut self, response: pb::WatchResponse) -> Result<(), ClientError> {
        let events = response
            .events
            .into_iter()
            .map(LeaseEvent::try_from)
            .collect::<Result<Vec<_>, _>>()
            .inspect_err(|_| self.stream = None)?;
        self.pending.extend(events);
        let next = response.watched_to + 1;
        self.next_index = Some(self.next_index.map_or(next, |n| n.max(next)));
        Ok(())
    }

    /// Opens a stream on one node after another, from the first index not yet covered.
    async fn open(&mut self) -> Result<(), ClientError> {
        let started = tokio::time::Instant::now();
        let count = self.channels.len();
        let mut tried = 0;
        // A node may have dropped the start from its window (it installed a snapshot, or
        // restarted) while another still keeps it: only all of them saying so is final.
        let mut out_of_range = 0;
        let mut pauses = round_pauses();
        loop {
            let node = self.next_node % count;
            let request = pb::WatchRequest {
                select: Some(match &self.select {
                    WatchSelect::Lease(lease) => pb::watch_request::Select::Lease(lease.clone()),
                    WatchSelect::Prefix(prefix) => {
                        pb::watch_request::Select::Prefix(prefix.clone())
                    }
                }),
                from_index: self.next_index.unwrap_or(0),
            };
            let mut client = LeaseStoreClient::new(self.channels[node].clone());
            let opened = tokio::time::timeout(OPEN_TIMEOUT, async {
                let mut stream = client.watch(request).await?.into_inner();
                let first = stream.message().await?;
                Ok::<_, Status>((stream, first))
            })
            .await
            .unwrap_or_else(|_| {
                Err(Status::deadline_exceeded(
                    "the node did not start the watch",
                ))
            });
            let failure = match opened {
                Ok((stream, Some(first))) => {
                    self.stream = Some(stream);
                    self.next_node = node;
                    return self.take(first);
                }
                Ok((_, None)) => Status::unavailable("the node ended the watch at once"),
                Err(status) if final_status(&status) => return Err(ClientError::Status(status)),
                Err(status) if status.code() == Code::OutOfRange => {
                    out_of_range += 1;
                    if out_of_range >= count {
                        return Err(ClientError::Status(status));
                    }
                    status
                }
                Err(status) => status,
            };
            self.next_node += 1;
            tried += 1;
            if started.elapsed() >= self.deadline {
                return Err(ClientError::Status(Status::unavailable(format!(
                    "no node of {} served the watch within {} ms; last: {}",
                    self.endpoints,
                    self.deadline.as_millis(),
                    failure.message()
                ))));
            }
            if tried % count == 0 {
                let left = self.deadline.saturating_sub(started.elapsed());
                pause_within(&mut pauses, left).await;
            }
        }
    }
}

/// A watch that no node can serve as asked: asking another would get the same answer. (A start
/// a node no longer keeps is final only once every node said so.)
fn final_status(status: &Status) -> bool {
    matches!(
        status.code(),
        Code::InvalidArgument | Code::Unimplemented | Code::PermissionDenied
    )
}
