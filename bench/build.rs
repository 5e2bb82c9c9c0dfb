//! Generates a tonic client for the part of etcd's v3 API the benchmark
//! talks (`peers/proto/etcd.proto`). protoc comes from `protoc-bin-vendored`,
//! as in the proto crate, so building needs no system protoc.

use std::error::Error;

const PROTO: &str = "peers/proto/etcd.proto";

fn main() -> Result<(), Box<dyn Error>> {
    println!("cargo:rerun-if-changed={PROTO}");
    println!("cargo:rerun-if-changed=build.rs");
    let mut config = prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_protos_with_config(config, &[PROTO], &["peers/proto"])?;
    Ok(())
}
