//! The wire types: the public API from the `leasehold-proto` crate, the peer plane's generated
//! by this crate's `build.rs`.

/// etcd's v3 API, which the client plane serves beside it.
pub use leasehold_proto::etcd;
/// The public API.
pub use leasehold_proto::v1;
/// The public API's messages and services, for gRPC reflection on the client port (the peer
/// plane's `leasehold.raft.v1` is left out, so nobody is shown it).
pub use leasehold_proto::FILE_DESCRIPTOR_SET;

/// Node-to-node Raft traffic.
pub mod raft_v1 {
    // Generated; the messages are documented in proto/leasehold/v1/raft.proto.
    #![allow(missing_docs)]
    tonic::include_proto!("leasehold.raft.v1");
}
