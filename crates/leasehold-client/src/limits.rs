//! Every timeout and pause of the client, in one place, with the relations between them
//! checked when the crate compiles. A node's own bounds are the node crate's
//! (`leasehold_node::limits`); the `leasehold` package checks that an attempt here outlasts a
//! node's worst case for a write, where it sees both crates.

use std::time::Duration;

/// How long a call keeps trying other nodes while none answers.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(10);

/// One attempt's limit: above a node's own worst case for a write (an election wait plus
/// quorum waits, about 8 s), so that an attempt is not cut while the node still works on it.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(9);

/// No attempt gets less, whatever the deadline.
pub(crate) const MIN_ATTEMPT: Duration = Duration::from_millis(200);

/// How long opening a connection to a node may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);

/// Lanes one client keeps open to each node, idle or in a call: one per call in flight, and a
/// call made while this many are busy goes on the `Batch` stream (one connection for any number
/// of calls), so a client shared by many tasks holds a bounded number of sockets.
pub(crate) const MAX_LANES: usize = 64;

/// How long a node that answered a lane's greeting otherwise (one of an earlier version, or
/// one that speaks only gRPC) is called over gRPC before the client offers it a lane again.
pub(crate) const LANE_UNSUPPORTED_RETRY: Duration = Duration::from_secs(30);

/// The calls one `Batch` message carries at most: the node's own limit (the `leasehold`
/// package checks that they agree).
pub const MAX_BATCH_CALLS: usize = 256;

/// The bytes one `Batch` message carries at most: the node's limit on a client's message. A
/// call that does not fit one alone goes as a unary call, which the node refuses naming its
/// limit.
pub const MAX_BATCH_MESSAGE_BYTES: usize = leasehold_proto::lane::MAX_REQUEST_BYTES;

/// How far apart the sequences of one client's writes under way may be (see `sequences`): fewer
/// than the answers a session keeps (the `leasehold` package checks it), with room to spare.
pub const SEQUENCE_SPAN: u64 = 100;

/// How long a node that does not serve `Batch` (an earlier version) is called with unary calls
/// before the client opens a stream to it again.
pub(crate) const BATCH_UNSUPPORTED_RETRY: Duration = Duration::from_secs(30);

/// The pause after the first round of attempts (every node tried once), so that a cluster in
/// an election is not hammered. Each later round's pause doubles, up to [`MAX_ROUND_PAUSE`],
/// and each is stretched at random by up to as much again (jitter), so that the clients one
/// failure struck together do not all retry together (`attempts::round_pauses`).
pub(crate) const ROUND_PAUSE: Duration = Duration::from_millis(25);

/// The longest pause between rounds, before its jitter: short beside an election (a few
/// hundred milliseconds), so that a client is back soon after a new leader is.
pub(crate) const MAX_ROUND_PAUSE: Duration = Duration::from_millis(200);

/// How long one attempt to add a member may take: the new node catches up with the whole log
/// first (a node gives it a minute).
pub(crate) const MEMBERSHIP_TIMEOUT: Duration = Duration::from_secs(90);

/// How long one attempt to copy a snapshot may take: it carries the whole state.
pub(crate) const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(300);

/// The most leases one renewal request names: the store's own limit (the `leasehold`
/// package checks that they agree).
pub const MAX_RENEWALS: usize = 512;

/// The longest holder name the store takes, in bytes: its own limit on names (the
/// `leasehold` package checks that they agree).
pub const MAX_HOLDER_BYTES: usize = 128;

/// The most a [`Holder`](crate::Holder) adds to its name to set it apart from every other
/// holder of the same name: `~`, a process tag of 8 hex digits, `.` and a counter of up to 20.
pub const HOLDER_SUFFIX_BYTES: usize = 30;

/// How long opening a stream on one node may take before the next node is tried: a node sends
/// its first response at once.
pub(crate) const OPEN_TIMEOUT: Duration = Duration::from_secs(2);

const _: () = {
    assert!(
        MIN_ATTEMPT.as_millis() < ATTEMPT_TIMEOUT.as_millis(),
        "an attempt's floor is below its ceiling"
    );
    assert!(
        ATTEMPT_TIMEOUT.as_millis() < DEFAULT_DEADLINE.as_millis(),
        "the default deadline lets one whole attempt run"
    );
    assert!(
        ROUND_PAUSE.as_millis() < MAX_ROUND_PAUSE.as_millis()
            && 2 * MAX_ROUND_PAUSE.as_millis() <= DEFAULT_DEADLINE.as_millis() / 20,
        "the pauses between rounds grow, and even the longest with its jitter is a small part \
         of a call's deadline"
    );
    assert!(
        ATTEMPT_TIMEOUT.as_millis() <= MEMBERSHIP_TIMEOUT.as_millis()
            && ATTEMPT_TIMEOUT.as_millis() <= SNAPSHOT_TIMEOUT.as_millis(),
        "the long calls get at least an ordinary attempt"
    );
};
