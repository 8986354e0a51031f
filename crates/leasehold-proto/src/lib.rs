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

pub mod etcd;
pub mod lane;

/// The RPCs as the proto lists them, for the tables written from that one list: the
/// `lease_calls!` and `cluster_calls!` macros (a row per unary RPC, at the crate's root) and
/// every RPC's name. `build.rs` writes them from the compiled proto and refuses a `BatchCall`
/// whose oneof is not `LeaseStore`'s unary calls.
pub mod rpcs {
    include!(concat!(env!("OUT_DIR"), "/rpcs.rs"));
}

/// The public API's file descriptor set, for gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/leasehold_descriptor.bin"));

pub mod wire;

// The keys a client reads, where programs of earlier versions found them.
pub use wire::{INDETERMINATE_KEY, ORIGIN_KEY, SESSION_KEY};
