//! Caps on open sessions (issue 41, item 3; safety review 161302a, finding 2). A session is
//! replicated state, kept until closed or idle for an hour, so a client that registers in a
//! loop would grow every replica's memory, snapshots and digest without bound, and take the
//! sessions other clients need. The leader, which proposes every registration, refuses one past
//! [`NodeConfig::max_sessions`] open in all or [`NodeConfig::max_sessions_per_identity`] opened
//! by the caller's identity (sessions opened without an identity count toward the first only).
//!
//! It counts what its table has applied and what it has proposed but not yet applied, so
//! registrations that arrive together cannot pass a cap together. The decision is the
//! leader's, made before anything is logged, so it is a determinate refusal and replicas apply
//! the log as before: a rule in the state machine would have to wait for a log format that
//! every member reads. A new leader counts from its own table: the registrations its
//! predecessor had in flight may pass the cap by as many.
//!
//! [`NodeConfig::max_sessions`]: super::NodeConfig::max_sessions
//! [`NodeConfig::max_sessions_per_identity`]: super::NodeConfig::max_sessions_per_identity

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Node, NodeError};
use leasehold_core::Op;

/// Registrations this leader proposed and has not seen answered, by identity (`None`: without
/// one).
#[derive(Default)]
pub(super) struct Opening {
    pending: Mutex<BTreeMap<Option<String>, usize>>,
}

/// One proposed registration, counted until dropped (once it is answered, its session is in
/// the table's count).
pub(super) struct Seat<'a> {
    opening: &'a Opening,
    identity: Option<String>,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut pending = self.opening.lock();
        if let Some(count) = pending.get_mut(&self.identity) {
            *count -= 1;
            if *count == 0 {
                pending.remove(&self.identity);
            }
        }
    }
}

impl Opening {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Option<String>, usize>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The caps, as a node is started with them.
#[derive(Clone, Copy, Debug)]
pub(super) struct Caps {
    pub total: usize,
    pub per_identity: usize,
}

impl Node {
    /// A seat for `op` if it opens a session and the caps leave room for it; `None` for any
    /// other op. Asked by the leader as it proposes.
    pub(super) fn open_session(&self, op: &Op) -> Result<Option<Seat<'_>>, NodeError> {
        if *op.bare() != Op::Register {
            return Ok(None);
        }
        let identity = op.identity();
        let caps = self.inner.session_caps;
        let opening = &self.inner.opening;
        let mut pending = opening.lock();
        let (open, of_identity) = {
            let state = self.inner.state.read();
            let of = identity.map_or(0, |id| state.table.sessions_of(id));
            (state.table.session_count(), of)
        };
        let pending_total: usize = pending.values().sum();
        if open + pending_total >= caps.total {
            return Err(NodeError::TooManySessions {
                holder: "the cluster".into(),
                limit: caps.total,
                per: "in all",
                flag: "--max-sessions",
            });
        }
        if let Some(id) = identity {
            let pending_of = pending.get(&Some(id.to_owned())).copied().unwrap_or(0);
            if of_identity + pending_of >= caps.per_identity {
                return Err(NodeError::TooManySessions {
                    holder: format!("identity {id:?}"),
                    limit: caps.per_identity,
                    per: "per identity",
                    flag: "--max-sessions-per-identity",
                });
            }
        }
        let identity = identity.map(str::to_owned);
        *pending.entry(identity.clone()).or_default() += 1;
        Ok(Some(Seat { opening, identity }))
    }
}
