#[cfg(feature = "build-server")]
fn should_build_server() -> bool {
    true
}

#[cfg(not(feature = "build-server"))]
fn should_build_server() -> bool {
    false
}

fn main() {
    // ringfeed patch: the protoc of protoc-bin-vendored, so building needs no
    // system protoc (see ../PATCHES.md). A build script is single-threaded.
    std::env::set_var(
        "PROTOC",
        protoc_bin_vendored::protoc_bin_path().expect("protoc-bin-vendored has a protoc for this machine"),
    );
    let proto_root = "proto";
    println!("cargo:rerun-if-changed={proto_root}");

    tonic_build::configure()
        .build_server(should_build_server())
        .compile_protos(
            &[
                "proto/auth.proto",
                "proto/kv.proto",
                "proto/rpc.proto",
                "proto/v3election.proto",
                "proto/v3lock.proto",
            ],
            &[proto_root],
        )
        .expect("Failed to compile proto files");
}
