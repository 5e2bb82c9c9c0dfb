//! Generates the bench's gRPC bindings: the `ceiling` scenario's bare stream
//! (client and server), and a tonic client for the part of etcd's API
//! `compare` talks (`peers/proto/`, a minimal schema with the real package,
//! service and field numbers; SeaweedFS's filer API comes whole from the
//! proto crate). protoc comes from
//! `protoc-bin-vendored`, as in the proto crate, so building needs no system
//! protoc.

use std::error::Error;

const CEILING: &str = "proto/ceiling.proto";
const PEERS: &[&str] = &["peers/proto/etcd.proto"];

fn config() -> Result<prost_build::Config, Box<dyn Error>> {
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    Ok(config)
}

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    for proto in PEERS.iter().chain([&CEILING]) {
        println!("cargo:rerun-if-changed={proto}");
    }
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos_with_config(config()?, &[CEILING], &["proto"])?;
    // The peers' clients only with the `peers` feature: `cargo test
    // --workspace` does not build them (.ci/run builds and runs them).
    if std::env::var_os("CARGO_FEATURE_PEERS").is_some() {
        tonic_build::configure()
            .build_client(true)
            .build_server(false)
            .compile_protos_with_config(config()?, PEERS, &["peers/proto"])?;
    }
    Ok(())
}
