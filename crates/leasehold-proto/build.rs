//! Compiles the public API with protox, a protobuf compiler in pure Rust, so no system `protoc` is
//! needed. The file lives in the repository's top-level `proto/`, beside the peer plane's, and
//! beside `proto/etcd/`: etcd v3's API, compiled here too (messages, clients and servers).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new("proto");
    let file = root.join("leasehold/v1/leasehold.proto");
    let descriptors = protox::compile([&file], [root])?;
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("rpcs.rs"), rpc_tables(&descriptors)?)?;
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
    etcd(root)
}

/// etcd v3's API (`proto/etcd/`), for the etcd edge: a file descriptor set of its own, so that
/// neither the RPC tables nor the reflection descriptor above see it, and no serde impls.
fn etcd(root: &std::path::Path) -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "etcd/mvccpb/kv.proto",
        "etcd/authpb/auth.proto",
        "etcd/etcdserverpb/rpc.proto",
        "etcd/v3lockpb/v3lock.proto",
        "etcd/v3electionpb/v3election.proto",
    ]
    .map(|f| root.join(f));
    let descriptors = protox::compile(&files, [root])?;
    let encoded = prost::Message::encode_to_vec(&descriptors);
    tonic_prost_build::configure()
        .build_transport(false)
        .compile_fds(descriptors)?;
    // Serde impls for etcd's JSON gateway, with the proto's own field names (`range_end`, `ID`,
    // `TTL`), as etcd's grpc-gateway writes them.
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        .preserve_proto_field_names()
        .out_dir(&out_dir)
        .build(&[
            ".etcdserverpb",
            ".mvccpb",
            ".authpb",
            ".v3lockpb",
            ".v3electionpb",
        ])?;
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    Ok(())
}

/// The RPC tables of `src/rpcs.rs`, read from the proto's services: the one list of the RPCs
/// that every table in Rust is written from.
fn rpc_tables(descriptors: &prost_types::FileDescriptorSet) -> Result<String, String> {
    use prost_types::method_options::IdempotencyLevel;
    let services: Vec<_> = descriptors
        .file
        .iter()
        .filter(|f| f.package() == "leasehold.v1")
        .flat_map(|f| &f.service)
        .collect();
    let mut names = Vec::new();
    let mut out = String::new();
    for service in &services {
        let mut rows = String::new();
        for m in &service.method {
            names.push(format!("{:?}", m.name()));
            if m.client_streaming() || m.server_streaming() {
                continue;
            }
            let reads = m
                .options
                .as_ref()
                .is_some_and(|o| o.idempotency_level() == IdempotencyLevel::NoSideEffects);
            rows.push_str(&format!(
                "            {} {} {} {} {};\n",
                m.name(),
                snake(m.name()),
                message(m.input_type()),
                message(m.output_type()),
                if reads { "read" } else { "write" },
            ));
        }
        out.push_str(&format!(
            "/// Calls `$callback!` with a row per unary RPC of the `{service}` service, in the\n\
             /// proto's order: `Name method Request Response read|write` (`read` for an RPC\n\
             /// marked `idempotency_level = NO_SIDE_EFFECTS`), each row ending in `;`. Any tokens\n\
             /// after the callback's name come first, before a `;`.\n\
             #[macro_export]\n\
             macro_rules! {snake}_calls {{\n    \
                 ($callback:ident $(, $($args:tt)*)?) => {{\n        \
                     $callback! {{\n            $($($args)*)? ;\n{rows}        }}\n    \
                 }};\n\
             }}\n\n",
            service = service.name(),
            snake = snake(&service.name().replace("Store", "")),
        ));
    }
    let batch = descriptors
        .file
        .iter()
        .flat_map(|f| &f.message_type)
        .find(|m| m.name() == "BatchCall")
        .ok_or("no BatchCall message")?;
    let lease = services
        .iter()
        .find(|s| s.name() == "LeaseStore")
        .ok_or("no LeaseStore service")?;
    // The BatchCall's oneof is the proto's second list of the lease calls: it must be the first.
    let unary: Vec<String> = lease
        .method
        .iter()
        .filter(|m| !m.client_streaming() && !m.server_streaming())
        .map(|m| snake(m.name()))
        .collect();
    let carried: Vec<String> = batch
        .field
        .iter()
        .filter(|f| f.oneof_index.is_some())
        .map(|f| f.name().to_owned())
        .collect();
    if unary != carried {
        return Err(format!(
            "BatchCall's oneof {carried:?} must carry LeaseStore's unary calls {unary:?}, in order"
        ));
    }
    out.push_str(&format!(
        "/// Every RPC of both services, by its proto name.\npub const RPC_NAMES: &[&str] = &[{}];\n",
        names.join(", ")
    ));
    Ok(out)
}

/// `CheckToken` -> `check_token`.
fn snake(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// `.leasehold.v1.GetRequest` -> `GetRequest`.
fn message(name: &str) -> &str {
    name.rsplit('.').next().unwrap_or(name)
}
