//! Compiles the peer plane's `proto/leasehold/v1/raft.proto` with protox, a protobuf compiler in
//! pure Rust, so no system `protoc` is needed. The public API is the `leasehold-proto` crate's.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let raft = "proto/leasehold/v1/raft.proto";
    tonic_prost_build::configure().compile_fds(protox::compile([raft], ["proto"])?)?;
    println!("cargo:rerun-if-changed={raft}");
    // etcd's client API, for `leasehold bench --target etcd`: only with the `etcd` feature.
    if std::env::var_os("CARGO_FEATURE_ETCD").is_some() {
        let etcd = protox::compile(["proto/etcd/etcd.proto"], ["proto"])?;
        tonic_prost_build::configure()
            .build_server(false)
            .compile_fds(etcd)?;
    }
    println!("cargo:rerun-if-changed=proto/etcd/etcd.proto");
    Ok(())
}
