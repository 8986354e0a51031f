//! Compiles the peer plane's `raft.proto` (in the repository's top-level `proto/`) with protox,
//! a protobuf compiler in pure Rust, so no system `protoc` is needed. The public API is the
//! `leasehold-proto` crate's.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new("proto");
    let raft = root.join("leasehold/v1/raft.proto");
    tonic_prost_build::configure().compile_fds(protox::compile([&raft], [root])?)?;
    println!("cargo:rerun-if-changed={}", raft.display());
    Ok(())
}
