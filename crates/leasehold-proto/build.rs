//! Compiles the public API with protox, a protobuf compiler in pure Rust, so no system `protoc` is
//! needed. The file lives in the repository's top-level `proto/`, beside the peer plane's.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new("../../proto");
    let file = root.join("leasehold/v1/leasehold.proto");
    let descriptors = protox::compile([&file], [root])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // For gRPC reflection on the client port: generic tools work without the proto file.
    std::fs::write(
        out_dir.join("leasehold_descriptor.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    println!("cargo:rerun-if-changed={}", file.display());
    Ok(())
}
