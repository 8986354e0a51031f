//! The lease table: what the replicated state is and how one logged command changes it.
//!
//! Everything here is pure. No async, no I/O, no clock: time arrives inside the command,
//! so every replica that applies the same log reaches the same state.

mod command;
pub mod limits;
mod table;

pub use command::{Batch, Command, Fence, Op, Outcome, ReleaseRefusal, RequestId};
pub use limits::{validate, InvalidInput, Limits};
pub use table::{Lease, LeaseTable};
