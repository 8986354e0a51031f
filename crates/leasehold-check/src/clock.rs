//! Store time against the clients' own clock: judged from what the clients saw alone, sharing
//! nothing with the node's stamping (`node/clock.rs` in the server).

use crate::history::{Anomaly, Completion, Operation};
use crate::limits::ROUNDING_NS;

/// Store time never runs ahead of real time: for any two acknowledged writes `r1` before `r2` in
/// log order, `r2.store_time - r1.store_time <= r2.completed - r1.invoked` (plus
/// [`ROUNDING_NS`]), on the clients' clock, which is one machine's monotonic clock. If store
/// time ran ahead, a lease granted at `r1` would expire before its TTL had passed since its
/// acquire was sent, and its holder and the next could both believe they hold it.
///
/// For the default clock only: under the manual clock `Advance` moves store time by whatever
/// the client says.
pub fn store_time_follows_real_time(history: &[Operation]) -> Vec<Anomaly> {
    store_time_gains_at_most(history, 0)
}

/// [`store_time_follows_real_time`], allowing store time to gain up to `gain_ns` on the
/// clients' clock (beyond [`ROUNDING_NS`]): what the server promises while a clock lies at its
/// leader (`node/clock.rs`, issue 42), where store time follows the majority's clocks as read
/// across round trips, not a clock it can trust outright.
pub fn store_time_gains_at_most(history: &[Operation], gain_ns: u64) -> Vec<Anomaly> {
    let allowed_ns = i128::from(ROUNDING_NS) + i128::from(gain_ns);
    let mut anomalies = Vec::new();
    each_gain(history, |gain| {
        if gain.gained_ns > allowed_ns && anomalies.len() < 10 {
            anomalies.push(Anomaly::new(
                "store time",
                format!(
                    "store time moved {} ms from the write at index {} (sent at {} ms) to the \
                     write at index {} (answered at {} ms), {} ms more than the clients' clock \
                     measured between them",
                    gain.moved_ns / 1_000_000,
                    gain.earlier_index,
                    gain.earlier.invoked_ns / 1_000_000,
                    gain.index,
                    gain.later.completed_ns / 1_000_000,
                    gain.gained_ns / 1_000_000,
                ),
            ));
        }
    });
    anomalies
}

/// The most store time gained on the clients' clock between two acknowledged writes (as
/// [`store_time_gains_at_most`] measures it), in nanoseconds: how much of the server's grant
/// margin a run used. `None` with fewer than two.
pub fn most_store_time_gained(history: &[Operation]) -> Option<i128> {
    let mut most = None;
    each_gain(history, |gain| {
        most = Some(most.map_or(gain.gained_ns, |m: i128| m.max(gain.gained_ns)));
    });
    most
}

/// How far store time moved past the clients' clock from the earlier write that leaves a later
/// one the least room to the later one.
struct Gain<'a> {
    gained_ns: i128,
    moved_ns: i128,
    earlier_index: u64,
    earlier: &'a Operation,
    index: u64,
    later: &'a Operation,
}

/// Calls `each` for every acknowledged write after the first, in log order, with its gain
/// against the earlier write that leaves it the least room: the smallest
/// `store_time - invoked`.
fn each_gain<'a>(history: &'a [Operation], mut each: impl FnMut(Gain<'a>)) {
    let mut acknowledged: Vec<(u64, u32, i128, &Operation)> = history
        .iter()
        .filter(|op| op.is_write())
        .filter_map(|op| match op.completion {
            Completion::Ok {
                log_index,
                position,
                store_time_ms,
                ..
            } => Some((
                log_index,
                position,
                i128::from(store_time_ms) * 1_000_000,
                op,
            )),
            _ => None,
        })
        .collect();
    acknowledged.sort_by_key(|(index, position, ..)| (*index, *position));
    let mut tightest: Option<(i128, u64, &Operation)> = None;
    for &(index, _, store_ns, op) in &acknowledged {
        if let Some((lead_ns, earlier_index, earlier)) = tightest {
            each(Gain {
                gained_ns: store_ns - lead_ns - i128::from(op.completed_ns),
                moved_ns: store_ns - lead_ns - i128::from(earlier.invoked_ns),
                earlier_index,
                earlier,
                index,
                later: op,
            });
        }
        let lead_ns = store_ns - i128::from(op.invoked_ns);
        if tightest.is_none_or(|(least, ..)| lead_ns < least) {
            tightest = Some((lead_ns, index, op));
        }
    }
}
