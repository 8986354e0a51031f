//! Gathers concurrent writes into one log entry (with [`crate::gather`]).
//!
//! Every entry costs a round trip to a quorum and an fsync on each of its nodes: proposing
//! every request as its own entry would cap a leader at a few entries in flight, however many
//! clients wait. The proposer keeps one entry on its way to a quorum (more only while it is
//! stuck; see `ENTRY_BATCHES`) and puts every request that arrives meanwhile into the next
//! entry. Under load an entry carries many commands and every node fsyncs once for all of them;
//! a lone request still goes out at once, since nothing is ever held back waiting for company.

use openraft::error::{ClientWriteError, Fatal, RaftError};
use openraft::BasicNode;
use tokio::sync::oneshot;

use super::{Applied, Raft};
use crate::gather::Gatherer;
use crate::limits::ENTRY_BATCHES;
use crate::NodeId;
use leasehold_core::auth::AuthChange;
use leasehold_core::{Batch, Command, Op};

/// What openraft answers a refused or failed write.
pub type WriteError = RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>;

/// A handle to one node's proposer: cheap to clone; it stops with the last handle.
#[derive(Clone)]
pub struct Proposer {
    gatherer: Gatherer<Command, Result<Applied, WriteError>>,
}

impl Proposer {
    /// Starts gathering proposals for `raft`. Must be called inside a tokio runtime.
    pub fn start(raft: Raft) -> Self {
        let gatherer = Gatherer::start(
            ENTRY_BATCHES,
            |command: &Command| weight(&command.op),
            move |commands| write_entry(raft.clone(), commands),
        );
        Proposer { gatherer }
    }

    /// Queues `command` for the next entry. The receiver answers once that entry is applied;
    /// dropping it before the entry is formed withdraws the command: it is never proposed.
    pub fn submit(&self, command: Command) -> oneshot::Receiver<Result<Applied, WriteError>> {
        self.gatherer.submit(command).unwrap_or_else(|| {
            // Stopped: answer at once, as openraft does once it has shut down.
            let (reply, answer) = oneshot::channel();
            let _ = reply.send(Err(RaftError::Fatal(Fatal::Stopped)));
            answer
        })
    }
}

/// The size an op adds to an entry or a message, near enough to bound them by bytes.
pub fn weight(op: &Op) -> usize {
    const FIXED: usize = 64;
    FIXED
        + match op {
            Op::Acquire { lease, holder, .. } | Op::Release { lease, holder, .. } => {
                lease.len() + holder.len()
            }
            Op::Put { key, value, fence } => {
                key.len() + value.len() + fence.as_ref().map_or(0, |f| f.lease.len())
            }
            Op::Delete { key, fence } => key.len() + fence.as_ref().map_or(0, |f| f.lease.len()),
            Op::Advance { .. } | Op::Tick | Op::Register | Op::Forget { .. } | Op::Close => 0,
            Op::Renew { leases } => leases
                .iter()
                .map(|r| 16 + r.lease.len() + r.holder.len())
                .sum(),
            Op::As {
                identity,
                bearer,
                op,
            } => identity.len() + bearer.as_ref().map_or(0, String::len) + weight(op),
            Op::Auth(change) => auth_weight(change),
            Op::Etcd(etcd) => etcd.bytes(),
        }
}

fn auth_weight(change: &AuthChange) -> usize {
    match change {
        AuthChange::Enable { admin } => admin.len(),
        AuthChange::Disable => 0,
        AuthChange::PutRole { name, grants } => {
            name.len() + grants.iter().map(|g| 8 + g.prefix.len()).sum::<usize>()
        }
        AuthChange::DeleteRole { name } => name.len(),
        AuthChange::Bind { identity, role } | AuthChange::Unbind { identity, role } => {
            identity.len() + role.len()
        }
        AuthChange::AddToken { identity, sha256 } => identity.len() + sha256.len(),
        AuthChange::RevokeTokens { identity } => identity.len(),
    }
}

/// One entry through Raft: one answer per command, or the same refusal for each.
async fn write_entry(raft: Raft, commands: Vec<Command>) -> Vec<Result<Applied, WriteError>> {
    let count = commands.len();
    match raft.client_write(Batch(commands)).await {
        Ok(response) => response.data.into_iter().map(Ok).collect(),
        Err(e) => vec![Err(e); count],
    }
}
