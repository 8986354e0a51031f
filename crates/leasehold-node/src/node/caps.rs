//! Caps on what one client keeps in the replicated state (issue 41, item 3; safety review
//! 161302a, finding 2): open sessions, in all and per identity; the leases and the rows an
//! identity created. Each is state every replica keeps, snapshots and digests (a session until
//! closed or idle for an hour, a lease until forgotten after `--lease-retention` free, a row
//! until deleted), so one client registering, acquiring new names or writing new keys in a loop
//! would grow every replica's memory without bound and take what the other clients need. The
//! leader, which proposes every write, refuses one past a cap: a registration past
//! [`Caps::sessions`] open in all or [`Caps::sessions_per_identity`] opened by the caller's
//! identity (a session opened without an identity counts toward the first only); an acquire
//! of a name the table does not keep that would make the caller's identity the creator of more
//! than [`Caps::leases_per_identity`] leases; a put of a new key past
//! [`Caps::rows_per_identity`] rows. The creators are the table's (`LeaseTable::
//! leases_created_by`, `rows_created_by`): the identity a lease or row was first written by,
//! until it is forgotten or deleted, whoever holds or overwrites it between. Only a caller with
//! an identity (a client certificate or a bearer token) is capped on leases and rows: without
//! one, the session caps alone apply.
//!
//! The leader counts what its table has applied and what it has proposed but not yet seen
//! answered, so writes that arrive together cannot pass a cap together. The decision is the
//! leader's, made before anything is logged, so it is a determinate refusal and replicas apply
//! the log as before: a rule in the state machine would have to wait for a log format that
//! every member reads. What it cannot see may pass a cap by as many writes: those a
//! predecessor had in flight, for a new leader; those given up on (a deadline, a silent quorum)
//! that are applied after all; and a name forgotten or a key deleted between the judgement and
//! the write, which then creates it anew. The judgement comes before a retry is matched to
//! its first attempt: a retry while that attempt is still pending counts twice, and may be
//! refused at the cap (the clients then report the call as one that may have been applied).

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::error::Capped;
use super::{Node, NodeError};
use leasehold_core::{LeaseTable, Op};

/// The caps, as a node is started with them (`serve --max-sessions` and the rest).
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// Sessions open in the whole cluster.
    pub sessions: usize,
    /// Sessions one identity holds open.
    pub sessions_per_identity: usize,
    /// Leases one identity created that are not forgotten.
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
        match identity {
            Some(id) => pending
                .get(&(capped, Some(id.to_owned())))
                .copied()
                .unwrap_or(0),
            None => pending
                .range((capped, None)..)
                .take_while(|((c, _), _)| *c == capped)
                .map(|(_, count)| count)
                .sum(),
        }
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

/// What a write may add to: the count, for whom it counts (`None`: no identity), and the caps
/// it must stay under.
struct Adds {
    capped: Capped,
    toward: Option<String>,
    bounds: Vec<Bound>,
}

impl Bound {
    /// The cap of one identity, `id`, which the table counts `counted` toward.
    fn per_identity(id: &str, counted: usize, limit: usize, flag: &'static str) -> Bound {
        Bound {
            identity: Some(id.to_owned()),
            counted,
            limit,
            per: "per identity",
            flag,
        }
    }
}

/// What `op` may add to, judged on `table`; `None` for a write that adds to nothing capped (an
/// acquire of a lease the table keeps, an overwrite, an acquire or a put without an identity).
fn adds(op: &Op, table: &LeaseTable, caps: &Caps) -> Option<Adds> {
    if *op.bare() == Op::Register {
        return Some(opens_a_session(op.identity(), table, caps));
    }
    let id = op.identity()?;
    let (capped, counted, limit, flag) = match op.bare() {
        // A lease the table keeps (held or free) adds nothing: only a new name is created.
        Op::Acquire { lease, .. } if table.lease(lease).is_none() => (
            Capped::Leases,
            table.leases_created_by(id),
            caps.leases_per_identity,
            "--max-leases-per-identity",
        ),
        Op::Put { key, .. } if table.row(key).is_none() => (
            Capped::Rows,
            table.rows_created_by(id),
            caps.rows_per_identity,
            "--max-rows-per-identity",
        ),
        _ => return None,
    };
    Some(Adds {
        capped,
        toward: Some(id.to_owned()),
        bounds: vec![Bound::per_identity(id, counted, limit, flag)],
    })
}

/// What a registration adds to: the sessions open in all, and its identity's if it has one.
fn opens_a_session(identity: Option<&str>, table: &LeaseTable, caps: &Caps) -> Adds {
    let mut bounds = vec![Bound {
        identity: None,
        counted: table.session_count(),
        limit: caps.sessions,
        per: "in all",
        flag: "--max-sessions",
    }];
    bounds.extend(identity.map(|id| {
        let flag = "--max-sessions-per-identity";
        Bound::per_identity(id, table.sessions_of(id), caps.sessions_per_identity, flag)
    }));
    Adds {
        capped: Capped::Sessions,
        toward: identity.map(str::to_owned),
        bounds,
    }
}

impl Node {
    /// A seat for `op` if it adds to something capped and the caps leave room for it; `None`
    /// for any other op. Asked by the leader as it proposes.
    pub(super) fn take_seat(&self, op: &Op) -> Result<Option<Seat<'_>>, NodeError> {
        // Most writes add to nothing capped: they take neither lock.
        let may_add = match op.bare() {
            Op::Register => true,
            Op::Acquire { .. } | Op::Put { .. } => op.identity().is_some(),
            _ => false,
        };
        if !may_add {
            return Ok(None);
        }
        let opening = &self.inner.opening;
        let mut pending = opening.lock();
        let judged = {
            let table = &self.inner.state.read().table;
            adds(op, table, &self.inner.caps)
        };
        let Some(Adds {
            capped,
            toward,
            bounds,
        }) = judged
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
        let counted = (capped, toward);
        *pending.entry(counted.clone()).or_default() += 1;
        Ok(Some(Seat { opening, counted }))
    }
}
