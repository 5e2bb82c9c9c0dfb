//! Generates tonic clients (no servers) for the peer systems' gRPC APIs the
//! bench talks to: each .proto under `peers/proto` is a minimal subset of the
//! system's own schema, field numbers unchanged. protoc comes from
//! `protoc-bin-vendored`, so building needs no system protoc.

use std::error::Error;

/// The peer protos, relative to this crate.
const PROTOS: &[&str] = &["peers/proto/filer.proto"];

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed=build.rs");
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_protos_with_config(config, PROTOS, &["peers/proto"])?;
    Ok(())
}
