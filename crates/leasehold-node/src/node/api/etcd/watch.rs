//! One watcher of etcd's Watch stream: the events of its keys from a revision on, read from the
//! keyspace's recent events as this node applies them. The stream (the gRPC edge) runs one
//! watcher per `create` and multiplexes their answers.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::watch;

use super::{convert, EtcdApi};
use crate::limits::ETCD_WATCH_EVENTS_PER_ANSWER;
use crate::node::api::caller::Credentials;
use crate::node::{Node, NodeError};
use crate::proto::etcd::etcdserverpb as pb;
use leasehold_core::auth::Action;
use leasehold_core::etcd::{self as core, EtcdEventKind, Span};

/// What a watcher answers next.
pub(crate) enum Watched {
    /// Events (never empty).
    Events(pb::WatchResponse),
    /// The watch cannot go on: its start is older than the events kept. The answer says so,
    /// with the oldest revision kept, as etcd's does; the watcher is done.
    Compacted(pb::WatchResponse),
}

/// One watch: its keys, its filters and the next revision it reports.
pub(crate) struct Watcher {
    node: Node,
    id: i64,
    key: Vec<u8>,
    range_end: Vec<u8>,
    /// The next revision whose events it reports.
    next: i64,
    prev_kv: bool,
    no_put: bool,
    no_delete: bool,
    applied: watch::Receiver<u64>,
    /// The revision through which it has looked at every event (`next` - 1), for progress
    /// answers, which the stream reads while the watcher waits.
    synced: Arc<AtomicI64>,
}

impl EtcdApi {
    /// A watcher for `create`, as watch `id`, once the policy lets the caller read its keys.
    pub fn watcher(
        &self,
        credentials: &Credentials,
        id: i64,
        create: pb::WatchCreateRequest,
    ) -> Result<Watcher, NodeError> {
        let caller = super::Caller::of(&self.node, credentials)?;
        core::key_field(&create.key, &create.range_end)?;
        let prefix = core::span_prefix(&create.key, &create.range_end);
        let state = self.node.state().read();
        caller.may(state.table.policy(), &Action::ReadKey(&prefix))?;
        let filter = |f: pb::watch_create_request::FilterType| create.filters.contains(&(f as i32));
        let next = match create.start_revision {
            // From now on: the next revision.
            ..=0 => state.table.etcd().revision() + 1,
            from => from,
        };
        Ok(Watcher {
            node: self.node.clone(),
            id,
            synced: Arc::new(AtomicI64::new(next - 1)),
            next,
            prev_kv: create.prev_kv,
            no_put: filter(pb::watch_create_request::FilterType::Noput),
            no_delete: filter(pb::watch_create_request::FilterType::Nodelete),
            key: create.key,
            range_end: create.range_end,
            applied: self.node.state().applied_index(),
        })
    }
}

impl Watcher {
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Where the revision through which it has looked at every event is kept.
    pub fn synced(&self) -> Arc<AtomicI64> {
        self.synced.clone()
    }

    /// Notes that its last answer was sent: it has sent every event before `next`.
    pub fn sent(&self) {
        self.synced.store(self.next - 1, Ordering::Release);
    }

    /// A progress answer: the watcher has sent every event through `synced`.
    pub fn progress(&self) -> pb::WatchResponse {
        pb::WatchResponse {
            header: Some(pb::ResponseHeader {
                member_id: self.node.id(),
                revision: self.synced.load(Ordering::Acquire),
                ..pb::ResponseHeader::default()
            }),
            watch_id: self.id,
            ..pb::WatchResponse::default()
        }
    }

    /// The next answer: events from the next revision on, once there are any, at most
    /// [`ETCD_WATCH_EVENTS_PER_ANSWER`] of them (never part of a revision).
    pub async fn next(&mut self) -> Result<Watched, NodeError> {
        loop {
            if let Some(watched) = self.look() {
                return Ok(watched);
            }
            self.applied
                .changed()
                .await
                .map_err(|_| NodeError::ShuttingDown)?;
        }
    }

    /// What the applied state holds for the watcher now, if anything.
    fn look(&mut self) -> Option<Watched> {
        let state = self.node.state().read();
        let etcd = state.table.etcd();
        let header = |revision| pb::ResponseHeader {
            member_id: self.node.id(),
            revision,
            ..pb::ResponseHeader::default()
        };
        let span = Span::of(&self.key, &self.range_end);
        let since = match etcd
            .history()
            .since(self.next, span, ETCD_WATCH_EVENTS_PER_ANSWER)
        {
            Ok(since) => since,
            Err(first_kept) => {
                return Some(Watched::Compacted(pb::WatchResponse {
                    header: Some(header(etcd.revision())),
                    watch_id: self.id,
                    canceled: true,
                    compact_revision: first_kept,
                    cancel_reason: format!(
                        "mvcc: required revision has been compacted: this node keeps events \
                         from revision {first_kept} on; read the keys again and watch from \
                         their revision + 1"
                    ),
                    ..pb::WatchResponse::default()
                }))
            }
        };
        let wanted = |kind: EtcdEventKind| match kind {
            EtcdEventKind::Put => !self.no_put,
            EtcdEventKind::Delete => !self.no_delete,
        };
        let events: Vec<_> = (since.events.iter())
            .filter(|e| wanted(e.kind))
            .map(|e| convert::event(e, self.prev_kv))
            .collect();
        self.next = since
            .resume_at
            .unwrap_or(etcd.revision() + 1)
            .max(self.next);
        if events.is_empty() {
            self.sent();
        }
        (!events.is_empty()).then(|| {
            Watched::Events(pb::WatchResponse {
                header: Some(header(etcd.revision())),
                watch_id: self.id,
                events,
                ..pb::WatchResponse::default()
            })
        })
    }
}
