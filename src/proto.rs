//! Code generated from `proto/` by `build.rs`.

/// The public API.
pub mod v1 {
    tonic::include_proto!("leasehold.v1");
}

/// Node-to-node Raft traffic.
pub mod raft_v1 {
    tonic::include_proto!("leasehold.raft.v1");
}

/// The part of etcd's v3 API the benchmark speaks (`--features etcd`).
#[cfg(feature = "etcd")]
pub mod etcd {
    tonic::include_proto!("etcdserverpb");
}

/// The public API's messages and services, for gRPC reflection on the client port (the peer
/// plane's `leasehold.raft.v1` is left out).
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/leasehold_descriptor.bin"));
