//! Caps on what one client keeps in the replicated state (issue 41, item 3; safety review
//! 161302a, finding 2): open sessions, in all and per identity; the leases an identity holds;
//! the rows it created. Each is state every replica keeps, snapshots and digests (a session until
//! closed or idle for an hour, a lease until released or expired, a row until deleted), so one
//! client acquiring or writing in a loop would grow every replica's memory without bound and
//! take what the other clients need. The leader, which proposes every write, refuses one past a
//! cap: a registration past [`Caps::sessions`] open in all or [`Caps::sessions_per_identity`]
//! opened by the caller's identity (a session opened without an identity counts toward the
//! first only); an acquire that would give the caller's identity more than
//! [`Caps::leases_per_identity`] leases (through the holders it owns: itself and the names under
//! `identity/`); a put that would make it the creator of more than [`Caps::rows_per_identity`]
//! rows. A write without an identity (authorization off, no client certificate) is capped by
//! the session caps alone.
//!
//! The leader counts what its table has applied and what it has proposed but not yet applied,
//! so writes that arrive together cannot pass a cap together. The decision is the leader's,
//! made before anything is logged, so it is a determinate refusal and replicas apply the log as
//! before: a rule in the state machine would have to wait for a log format that every member
//! reads. A new leader counts from its own table: what its predecessor had in flight may pass a
//! cap by as many.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Node, NodeError};
use leasehold_core::{LeaseTable, Op};

/// The caps, as a node is started with them (`serve --max-sessions` and the rest).
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Sessions open in the whole cluster.
    pub sessions: usize,
    /// Sessions one identity holds open.
    pub sessions_per_identity: usize,
    /// Leases one identity holds through the holders it owns.
    pub leases_per_identity: usize,
    /// Rows one identity created that are not deleted.
    pub rows_per_identity: usize,
}

impl Default for Caps {
    fn default() -> Self {
        use crate::limits::*;
        Caps {
            sessions: MAX_SESSIONS,
            sessions_per_identity: MAX_SESSIONS_PER_IDENTITY,
            leases_per_identity: MAX_LEASES_PER_IDENTITY,
            rows_per_identity: MAX_ROWS_PER_IDENTITY,
        }
    }
}

/// What a cap bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Capped {
    /// Open sessions.
    Sessions,
    /// Held leases.
    Leases,
    /// Rows created and not deleted.
    Rows,
}

impl Capped {
    /// What the holder of the cap holds, as the refusal says it.
    pub fn what(self) -> &'static str {
        match self {
            Capped::Sessions => "open sessions",
            Capped::Leases => "leases",
            Capped::Rows => "rows it created",
        }
    }

    /// How to get under the cap again.
    pub fn remedy(self) -> &'static str {
        match self {
            Capped::Sessions => {
                "close the sessions no longer used (the clients' close_session; a session left \
                 idle expires after an hour)"
            }
            Capped::Leases => "release the leases no longer used (or let them expire)",
            Capped::Rows => "delete the rows no longer used",
        }
    }
}

/// One count this leader keeps of writes it proposed and has not seen answered: what they may
/// add to, for whom (`None`: without an identity).
type Pending = (Capped, Option<String>);

/// The writes this leader proposed under a cap and has not seen answered.
#[derive(Default)]
pub(super) struct Opening {
    pending: Mutex<BTreeMap<Pending, usize>>,
}

/// One proposed write under a cap, counted until dropped (once it is answered, what it added is
/// in the table's count).
pub(super) struct Seat<'a> {
    opening: &'a Opening,
    counted: Pending,
}

impl Drop for Seat<'_> {
    fn drop(&mut self) {
        let mut pending = self.opening.lock();
        if let Some(count) = pending.get_mut(&self.counted) {
            *count -= 1;
            if *count == 0 {
                pending.remove(&self.counted);
            }
        }
    }
}

impl Opening {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Pending, usize>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Pending writes that may add to `capped`: `identity`'s, or everyone's for `None`.
    fn of(
        &self,
        pending: &BTreeMap<Pending, usize>,
        capped: Capped,
        identity: Option<&str>,
    ) -> usize {
        pending
            .iter()
            .filter(|((c, id), _)| {
                *c == capped && (identity.is_none() || id.as_deref() == identity)
            })
            .map(|(_, count)| count)
            .sum()
    }
}

/// One cap a write must stay under: how many the table counts, the cap, and how the refusal
/// names it.
struct Bound {
    identity: Option<String>,
    counted: usize,
    limit: usize,
    per: &'static str,
    flag: &'static str,
}

/// What `op` may add to, and the caps it must stay under, judged on `table`; `None` for a
/// write that adds to nothing capped (a renewal, an overwrite, a write without an identity).
fn bounds(op: &Op, table: &LeaseTable, caps: &Caps) -> Option<(Capped, Vec<Bound>)> {
    let identity = op.identity();
    let per_identity = |id: &str, counted, limit, flag| Bound {
        identity: Some(id.to_owned()),
        counted,
        limit,
        per: "per identity",
        flag,
    };
    match (op.bare(), identity) {
        (Op::Register, _) => {
            let mut bounds = vec![Bound {
                identity: None,
                counted: table.session_count(),
                limit: caps.sessions,
                per: "in all",
                flag: "--max-sessions",
            }];
            bounds.extend(identity.map(|id| {
                let counted = table.sessions_of(id);
                per_identity(
                    id,
                    counted,
                    caps.sessions_per_identity,
                    "--max-sessions-per-identity",
                )
            }));
            Some((Capped::Sessions, bounds))
        }
        // Acquired again by the holder that holds it: a renewal, which adds nothing.
        (Op::Acquire { lease, holder, .. }, Some(id))
            if table
                .lease(lease)
                .and_then(|l| l.holder_at(table.now_ms()))
                .is_none_or(|current| current != holder) =>
        {
            let counted = table.leases_held_by(id);
            let bound = per_identity(
                id,
                counted,
                caps.leases_per_identity,
                "--max-leases-per-identity",
            );
            Some((Capped::Leases, vec![bound]))
        }
        (Op::Put { key, .. }, Some(id)) if table.row(key).is_none() => {
            let counted = table.rows_created_by(id);
            let bound = per_identity(
                id,
                counted,
                caps.rows_per_identity,
                "--max-rows-per-identity",
            );
            Some((Capped::Rows, vec![bound]))
        }
        _ => None,
    }
}

impl Node {
    /// A seat for `op` if it adds to something capped and the caps leave room for it; `None`
    /// for any other op. Asked by the leader as it proposes.
    pub(super) fn take_seat(&self, op: &Op) -> Result<Option<Seat<'_>>, NodeError> {
        let opening = &self.inner.opening;
        let mut pending = opening.lock();
        let Some((capped, bounds)) = bounds(op, &self.inner.state.read().table, &self.inner.caps)
        else {
            return Ok(None);
        };
        for bound in &bounds {
            let proposed = opening.of(&pending, capped, bound.identity.as_deref());
            if bound.counted + proposed >= bound.limit {
                return Err(NodeError::AtCap {
                    capped,
                    holder: match &bound.identity {
                        Some(id) => format!("identity {id:?}"),
                        None => "the cluster".into(),
                    },
                    limit: bound.limit,
                    per: bound.per,
                    flag: bound.flag,
                });
            }
        }
        let counted = (capped, op.identity().map(str::to_owned));
        *pending.entry(counted.clone()).or_default() += 1;
        Ok(Some(Seat { opening, counted }))
    }
}
