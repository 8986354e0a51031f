//! The expiry ticker: while this node leads, it logs the expiries and forgets that fall due, so
//! that they are in the replicated state. The one assembly runs it under the default clock.

use std::time::Duration;

use super::{Node, NodeError};
use crate::limits::{TICK_CHECK, TICK_MIN_GAP};
use leasehold_core::Op;

/// Default clock only. When the leader's clock passes the earliest expiry of a held lease, it
/// logs a `Tick`, so that expiry is in the replicated state (at most [`TICK_MIN_GAP`] late); when
/// a lease has been free for the node's lease retention, it logs a `Forget` instead (at most
/// `FORGET_BATCH` leases each, at most one per [`TICK_MIN_GAP`]). An idle cluster with nothing
/// due logs nothing. Runs until aborted.
pub async fn tick_expiring_leases(node: Node) {
    let retention_ms = node.lease_retention_ms();
    loop {
        let (next_expiry, next_forget) = {
            let state = node.state().read();
            (
                state.table.next_expiry_ms(),
                state.table.next_forget_ms(retention_ms),
            )
        };
        let due = next_expiry.into_iter().chain(next_forget).min();
        let now = node.peek_stamp();
        let due_in = match (due, now) {
            (Some(due_ms), Some(now_ms)) if now_ms >= due_ms => Duration::ZERO,
            (Some(due_ms), Some(now_ms)) => Duration::from_millis(due_ms - now_ms).min(TICK_CHECK),
            // A new leader's clock starts with its first proposal: this tick, if anything is due
            // some time.
            (Some(_), None) if node.is_leader() => Duration::ZERO,
            _ => TICK_CHECK,
        };
        if !due_in.is_zero() {
            tokio::time::sleep(due_in).await;
            continue;
        }
        // A forget is stamped as a tick is, so it brings expiries too.
        let op = match (next_forget, now) {
            (Some(forget_ms), Some(now_ms)) if now_ms >= forget_ms => Op::Forget { retention_ms },
            _ => Op::Tick,
        };
        match node.write(op, None).await {
            Ok(_) => tokio::time::sleep(TICK_MIN_GAP).await,
            Err(NodeError::NotLeader { .. }) => {}
            Err(e) => {
                tracing::debug!(error = %e, "expiry tick not applied");
                tokio::time::sleep(TICK_CHECK).await;
            }
        }
    }
}
