//! Compiles the part of etcd's v3 API that `leasehold bench --target etcd` speaks, only with the
//! `etcd` feature, with protox (pure Rust, no system `protoc`). The peer plane's proto is the
//! `leasehold-node` crate's, the public API the `leasehold-proto` crate's.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("CARGO_FEATURE_ETCD").is_some() {
        let etcd = protox::compile(["proto/etcd/etcd.proto"], ["proto"])?;
        tonic_prost_build::configure()
            .build_server(false)
            .compile_fds(etcd)?;
    }
    println!("cargo:rerun-if-changed=proto/etcd/etcd.proto");
    Ok(())
}
