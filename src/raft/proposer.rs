//! Gathers concurrent writes into one log entry.
//!
//! openraft 0.9 writes each proposal to the log, and waits for that write's fsync, before it
//! looks at the next one: proposing every request as its own entry caps a leader at one request
//! per fsync, however many clients wait. The proposer keeps at most [`IN_FLIGHT`] entries on
//! their way to a quorum and puts every request that arrives meanwhile into the next entry. Under
//! load an entry carries many commands and every node fsyncs once for all of them; a lone request
//! still goes out at once, since nothing is ever held back waiting for company.

use std::sync::Arc;
use std::time::Duration;

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::BasicNode;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};

use super::{Applied, NodeId, Raft};
use crate::lease::{Batch, Command, Op};

/// Entries proposed and not yet answered. Two let the leader fsync the next entry while the
/// previous one is being replicated; more would only make each entry smaller.
const IN_FLIGHT: usize = 2;
/// Commands per entry, at most.
const MAX_COMMANDS: usize = 1024;
/// Payload bytes per entry, at most (by [`weight`]), so that an entry, and a replication message
/// of `max_payload_entries` of them, stays bounded even when every request carries the largest
/// value.
pub const MAX_ENTRY_BYTES: usize = 256 * 1024;
/// How long an unanswered entry keeps its place in flight. A quorum answers in milliseconds; an
/// entry still waiting after this is stuck behind a partition or an election, and the next one
/// goes out regardless. The stuck one still answers its requests if it ever commits.
const HOLD: Duration = Duration::from_millis(500);

/// What openraft answers a refused or failed write.
pub type WriteError = RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>;

struct Pending {
    command: Command,
    reply: oneshot::Sender<Result<Applied, WriteError>>,
}

/// A handle to one node's proposer: cheap to clone; the gathering stops when the last handle
/// is dropped.
#[derive(Clone)]
pub struct Proposer {
    queue: mpsc::UnboundedSender<Pending>,
}

impl Proposer {
    /// Starts gathering proposals for `raft`. Must be called inside a tokio runtime.
    pub fn start(raft: Raft) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(gather(raft, waiting));
        Proposer { queue }
    }

    /// Proposes `command` in the next entry and waits until that entry is applied. A caller who
    /// stops waiting before the entry is formed withdraws the command: it was never proposed.
    pub async fn propose(&self, command: Command) -> Result<Applied, WriteError> {
        let stopped = || RaftError::Fatal(Fatal::Stopped);
        let (reply, answer) = oneshot::channel();
        self.queue
            .send(Pending { command, reply })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

/// The size a command adds to an entry, near enough to bound entries by bytes.
fn weight(op: &Op) -> usize {
    const FIXED: usize = 64;
    FIXED
        + match op {
            Op::Acquire { lease, holder, .. } | Op::Release { lease, holder, .. } => {
                lease.len() + holder.len()
            }
            Op::Put { key, value, fence } => {
                key.len() + value.len() + fence.as_ref().map_or(0, |f| f.lease.len())
            }
            Op::Advance { .. } | Op::Tick => 0,
        }
}

async fn gather(raft: Raft, mut waiting: mpsc::UnboundedReceiver<Pending>) {
    let slots = Arc::new(Semaphore::new(IN_FLIGHT));
    // The request that did not fit in the last entry: it opens the next one.
    let mut carried: Option<Pending> = None;
    loop {
        let first = match carried.take() {
            Some(pending) => pending,
            None => match waiting.recv().await {
                Some(pending) => pending,
                None => return,
            },
        };
        // Everything that arrives while every slot is taken joins the next entry.
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let mut entry = Vec::new();
        let mut bytes = 0;
        let mut next = Some(first);
        while let Some(pending) = next.take().or_else(|| waiting.try_recv().ok()) {
            if pending.reply.is_closed() {
                continue; // Its caller gave up (and was told the outcome is unknown).
            }
            let w = weight(&pending.command.op);
            if !entry.is_empty() && (entry.len() == MAX_COMMANDS || bytes + w > MAX_ENTRY_BYTES) {
                carried = Some(pending);
                break;
            }
            bytes += w;
            entry.push(pending);
        }
        if !entry.is_empty() {
            tokio::spawn(write_entry(raft.clone(), entry, slot));
        }
    }
}

async fn write_entry(raft: Raft, entry: Vec<Pending>, slot: OwnedSemaphorePermit) {
    let (commands, replies): (Vec<_>, Vec<_>) =
        entry.into_iter().map(|p| (p.command, p.reply)).unzip();
    let write = raft.client_write(Batch(commands));
    tokio::pin!(write);
    let result = tokio::select! {
        result = &mut write => result,
        () = tokio::time::sleep(HOLD) => {
            drop(slot);
            write.await
        }
    };
    match result {
        Ok(response) => {
            debug_assert_eq!(response.data.len(), replies.len(), "one answer per command");
            for (reply, applied) in replies.into_iter().zip(response.data) {
                let _ = reply.send(Ok(applied));
            }
        }
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
        }
    }
}
