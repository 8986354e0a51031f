//! Leasehold's public gRPC API, generated from `proto/leasehold/v1/leasehold.proto`, and the
//! metadata keys nodes and clients agree on.
//!
//! Most programs want the `leasehold-client` crate, which speaks this API with retries, typed
//! answers and a lease keeper. This crate is for those that speak gRPC themselves, and for the
//! server.
//!
//! ```
//! use leasehold_proto::v1::{AcquireRequest, RequestId};
//!
//! let request = AcquireRequest {
//!     lease: "jobs/nightly".into(),
//!     holder: "worker-1".into(),
//!     ttl_ms: 5_000,
//!     request_id: Some(RequestId { client_id: 7, sequence: 1 }),
//! };
//! assert_eq!(request.ttl_ms, 5_000);
//! ```

#![warn(missing_docs)]

/// The public API's messages, and its `LeaseStore` and `Cluster` services (clients and servers).
#[allow(missing_docs)]
pub mod v1 {
    tonic::include_proto!("leasehold.v1");
    // serde's Serialize and Deserialize of every message above, in proto3's JSON mapping.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/leasehold.v1.serde.rs"));
}

pub mod lane;

/// The public API's file descriptor set, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/leasehold_descriptor.bin"));

/// Status metadata key a node sets when a write may or may not have been applied: its quorum
/// was lost, its forward to the leader was cut, or it stopped mid-write. A client that retries
/// the write under the same request id learns which.
pub const INDETERMINATE_KEY: &str = "leasehold-indeterminate";

/// Status metadata key a node sets when it refuses a request whose client session is not open
/// (never registered, or expired): the client should register again.
pub const SESSION_KEY: &str = "leasehold-session";

/// Status metadata key set on every status a node produced itself, as opposed to a transport
/// failure between client and node. A node's own refusal proves the request was not applied
/// unless it also carries [`INDETERMINATE_KEY`].
pub const ORIGIN_KEY: &str = "leasehold-origin";
