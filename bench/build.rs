//! Generates the bench's gRPC bindings: the `ceiling` scenario's bare stream
//! (client and server), and minimal client-side schemas of the systems
//! `compare` measures against. protoc comes from `protoc-bin-vendored`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?);
    println!("cargo:rerun-if-changed=proto");
    tonic_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/ceiling.proto"], &["proto"])?;
    Ok(())
}
