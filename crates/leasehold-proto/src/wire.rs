//! The wire contract, written once: every metadata key a node or a client sets or reads, every
//! greeting and ALPN name a connection opens with, and the domain of every `ErrorInfo` a node
//! sends. Each is named here and nowhere else; the code that sets or reads it says why.
//!
//! Keys a client reads are on every status a node makes (and in a `Batch` answer's
//! `BatchError`, as fields); keys between members travel on the peer plane only, where a node
//! believes them from a member its peer gate let through.

// What a client reads on a node's refusal.

/// Set when a write may or may not have been applied: its quorum was lost, its forward to the
/// leader was cut, or the node stopped mid-write. A client that retries the write under the
/// same request id learns which.
pub const INDETERMINATE_KEY: &str = "leasehold-indeterminate";

/// Set when a node refuses a request whose client session is not open (never registered, or
/// expired): the client should register again.
pub const SESSION_KEY: &str = "leasehold-session";

/// Set on every status a node produced itself, as opposed to a transport failure between client
/// and node. A node's own refusal proves the request was not applied unless it also carries
/// [`INDETERMINATE_KEY`].
pub const ORIGIN_KEY: &str = "leasehold-origin";

/// Set on a refusal by the authorization policy, so that a node forwarding a read passes it on
/// as the client's answer (a refusal by the leader's peer gate, without it, refused the node).
pub const DENIED_KEY: &str = "leasehold-denied";

/// The `google.rpc.ErrorInfo.domain` of every refusal a node makes.
pub const ERROR_DOMAIN: &str = "leasehold";

/// The `ErrorInfo.reason` of a node that the cluster removed: it never serves again, so a
/// client stops asking it.
pub const REMOVED_REASON: &str = "REMOVED";

/// The `ErrorInfo.reason` of a node that waited for an election and saw none end.
pub const NO_LEADER_REASON: &str = "NO_LEADER";

/// The `ErrorInfo.reason` of a leader whose write no quorum acknowledged in time.
pub const NO_QUORUM_REASON: &str = "NO_QUORUM";

/// The `ErrorInfo.reason` of a leader that could not confirm its leadership for a read.
pub const READ_UNCONFIRMED_REASON: &str = "READ_UNCONFIRMED";

/// The `ErrorInfo.reason` of a leader whose quorum has been silent, refusing a request before
/// proposing it.
pub const QUORUM_SILENT_REASON: &str = "QUORUM_SILENT";

/// The `ErrorInfo.reason` of a leader whose quorum went silent while it held the write.
pub const QUORUM_WENT_SILENT_REASON: &str = "QUORUM_WENT_SILENT";

/// Every reason by which a node says that it hears from no majority, after waiting for one:
/// with the other nodes refusing connections, no majority is up, and a one-shot caller (the
/// CLI) says so rather than waiting out its deadline.
pub const NO_MAJORITY: [&str; 5] = [
    NO_LEADER_REASON,
    NO_QUORUM_REASON,
    READ_UNCONFIRMED_REASON,
    QUORUM_SILENT_REASON,
    QUORUM_WENT_SILENT_REASON,
];

/// The `ErrorInfo.reason` of a registration past a cap on open sessions: retrying at once
/// opens none, so a client gives the error back (RESOURCE_EXHAUSTED is otherwise worth a
/// retry: a node's requests at their limit).
pub const SESSIONS_EXHAUSTED: &str = "SESSIONS_EXHAUSTED";

/// The `ErrorInfo.reason` of an acquire past the cap on the leases one identity created: not
/// retried either, as nothing makes room but a lease of its forgotten.
pub const LEASES_EXHAUSTED: &str = "LEASES_EXHAUSTED";

/// The `ErrorInfo.reason` of a put past the cap on the rows one identity created: not retried,
/// as nothing frees one but a delete.
pub const ROWS_EXHAUSTED: &str = "ROWS_EXHAUSTED";

/// Every reason a client gives back at once, never retrying: a cap the caller is at.
pub const CAPS_REACHED: [&str; 3] = [SESSIONS_EXHAUSTED, LEASES_EXHAUSTED, ROWS_EXHAUSTED];

// What a client sends.

/// Where a client without a certificate sends its bearer token: `authorization: Bearer TOKEN`.
pub const AUTHORIZATION_KEY: &str = "authorization";

// Between members, on the peer plane.

/// On a read a follower forwards to the leader: a node that no longer leads answers it instead
/// of forwarding it again (leadership moved, and the client retries). The peer plane's lease
/// and etcd services take only calls that carry it, so that a client that dialed a peer port by
/// mistake is told to dial the client port (a guard against mistakes, not against anyone: any
/// caller can set it, and the peer plane is for members alone).
pub const FORWARDED_KEY: &str = "leasehold-forwarded";

/// On a request a member forwards: the identity it found for the client (its certificate's
/// name, or its bearer token's identity).
pub const IDENTITY_KEY: &str = "leasehold-identity";

/// Beside [`IDENTITY_KEY`]: the SHA-256 of the bearer token that gave it, checked again where
/// the request is decided, so a revoked token is refused from its revocation on.
pub const BEARER_KEY: &str = "leasehold-bearer-sha256";

/// On every peer message: the sender's clock. The clock is cluster state (the two clocks' logs
/// do not mix), so a node refuses every message from a peer that runs the other one.
pub const CLOCK_KEY: &str = "leasehold-clock";

/// On every Raft message and reply: the sender's incarnation (its data dir's id).
pub const INCARNATION_KEY: &str = "leasehold-incarnation";

/// On a Raft message: the incarnation the sender knows for the receiver, when it knows one.
pub const TO_INCARNATION_KEY: &str = "leasehold-to-incarnation";

/// On every peer message and reply since 0.2.0: what its sender speaks (protocol version, the
/// newest log format it reads, its features, its build's version), so that a leader sends only
/// what every voter reads (leasehold-node's `raft::protocol`).
pub const PROTOCOL_KEY: &str = "leasehold-protocol";

/// On a peer message or reply that carries log data (entries, forwarded operations) of a
/// format newer than 1, since 0.2.0: that format (leasehold-core's `format`). A node refuses
/// one it does not read, saying so, instead of guessing at its bytes.
pub const FORMAT_KEY: &str = "leasehold-format";

// Features a node announces under `PROTOCOL_KEY`: each adds a peer message, sent to a peer only
// once every voter announces it (so a cluster mid-upgrade keeps to what all of it reads).

/// A leader that stops (or whose clock is odd) hands leadership to a caught-up voter first
/// (leasehold-node's `node::hand_over`).
pub const HAND_OVER_FEATURE: &str = "hand-over";

/// A node answers for its clock's reading, which bounds the leader's stamps (leasehold-node's
/// `node::clock_probe`).
pub const CLOCK_READING_FEATURE: &str = "clock-reading";

// Greetings and ALPN names: how a connection says what it speaks.

/// What a client lane's caller sends first, and a node that speaks lanes answers back. Any other
/// first bytes on the client port are gRPC's (HTTP/2's preface). Version 2 frames `BatchCall`s
/// and `BatchAnswer`s; version 1's (`LHCALL1`, gRPC's metadata and a method name) is no longer
/// answered, and its callers speak gRPC.
pub const CLIENT_LANE_GREETING: &[u8; 8] = b"LHCALL2\n";

/// What a peer lane's caller sends first, and the server answers back, in TLS or not. Without
/// TLS it also tells the peer port's accept loop a lane from gRPC.
pub const PEER_LANE_GREETING: &[u8; 8] = b"LHLANE1\n";

/// The ALPN protocol a peer lane asks for under TLS, where the accept loop tells it from `h2`.
pub const PEER_LANE_ALPN: &[u8] = b"leasehold-lane/1";

/// The ALPN protocol of HTTP/2, which gRPC speaks on both planes under TLS.
pub const GRPC_ALPN: &[u8] = b"h2";

/// The ALPN protocol the HTTP/JSON API speaks under TLS.
pub const HTTP_ALPN: &[u8] = b"http/1.1";
