//! Compiles `proto/` with protox, a protobuf compiler in pure Rust, so no system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/leasehold/v1/leasehold.proto",
        "proto/leasehold/v1/raft.proto",
    ];
    let descriptors = protox::compile(files, ["proto"])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    // Reflection on the client port serves the public API only, so generic gRPC tools work
    // without the proto files and nobody is shown the peer plane's service.
    let public = protox::compile(["proto/leasehold/v1/leasehold.proto"], ["proto"])?;
    std::fs::write(
        out_dir.join("leasehold_descriptor.bin"),
        prost::Message::encode_to_vec(&public),
    )?;
    tonic_prost_build::configure().compile_fds(descriptors)?;
    for file in files {
        println!("cargo:rerun-if-changed={file}");
    }
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
