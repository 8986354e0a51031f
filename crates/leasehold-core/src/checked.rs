//! What an operation must be before it is logged: Leasehold's own fields, bounded by `limits`,
//! and an etcd write's, by the `etcd` module's rules. One entry point for both, so that neither
//! module reaches into the other.

use crate::{InvalidInput, Op};

/// Checks an operation (and one inside an `As`) before it is proposed or forwarded: every node
/// checks what it proposes, and a leader what a member forwards, so nothing reaches the log
/// unchecked.
pub fn validate(op: &Op) -> Result<(), InvalidInput> {
    crate::limits::validate_fields(op)?;
    match op.bare() {
        Op::Etcd(etcd) => crate::etcd::validate(etcd),
        _ => Ok(()),
    }
}
