//! The checkers' bounds, in one place: the slack they allow for rounding, and what the
//! reference model keeps. Written from the README, not taken from the product's crates.

/// The slack for whole-millisecond stamps, cut down at both ends: what store time may gain on
/// the clients' clock between two answers (once by the stamp, once by a new leader's carried
/// base), and how much earlier than its TTL a lease may end in real time.
pub const ROUNDING_NS: u64 = 2_000_000;

/// Answers a session keeps for retries (the README: the last 128 per client).
pub(crate) const KEPT_ANSWERS: usize = 128;
