//! Compiles the public API with protox, a protobuf compiler in pure Rust, so no system `protoc` is
//! needed. The file lives in the repository's top-level `proto/`, beside the peer plane's.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new("proto");
    let file = root.join("leasehold/v1/leasehold.proto");
    let descriptors = protox::compile([&file], [root])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // For gRPC reflection on the client port: generic tools work without the proto file.
    let encoded = prost::Message::encode_to_vec(&descriptors);
    std::fs::write(out_dir.join("leasehold_descriptor.bin"), &encoded)?;
    // No `connect` helpers: they need tonic's transport, which this crate leaves to its users.
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)?;
    // Serde impls in proto3's JSON mapping, beside prost's messages (`leasehold.v1.serde.rs`).
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .out_dir(&out_dir)
        .build(&[".leasehold.v1"])?;
    println!("cargo:rerun-if-changed={}", file.display());
    Ok(())
}
