//! A client in another language talks to the real `ringfeed serve` binary:
//! `tests/python/ringfeed_client_test.py` generates grpcio stubs from
//! `proto/ringfeed.proto` at test time, appends events and reads them back
//! through Subscribe (one by one, batched, resumed from a cursor). The wire
//! contract holds beyond the Rust bindings.
//!
//! Needs python3 with grpcio and grpcio-tools. Without them the test passes
//! with a skip message, except under CI (env CI set), where `.ci/run`
//! installs them and their absence is a failure.

mod serve_binary;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use serve_binary::{run_bounded, Server};

const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

#[test]
fn python_client_appends_and_subscribes() {
    let _watchdog = ringfeed_watchdog::arm();
    if let Err(missing) = python_grpc_tools() {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            panic!(
                "python3 with grpcio and grpcio-tools is needed ({missing}); .ci/run installs grpcio-tools"
            );
        }
        eprintln!(
            "skipped: python3 with grpcio and grpcio-tools not available ({missing}); \
             pip install grpcio grpcio-tools"
        );
        return;
    }

    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 2);
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut client = Command::new("python3");
    client
        .arg(manifest.join("tests/python/ringfeed_client_test.py"))
        .arg("--server")
        .arg(&server.addr)
        .arg("--proto")
        .arg(manifest.join("../proto/ringfeed.proto"));
    let output = run_bounded(client, None, CLIENT_TIMEOUT);
    eprintln!("{output}");
    assert_eq!(
        output.code(),
        Some(0),
        "the python client failed; its output is above"
    );
    server.stop();
}

/// A client that knows nothing of the schema but what gRPC server
/// reflection tells it (as grpcurl does) appends and reads the status, on an
/// open server and, with its token, on a server with tokens; without a token
/// reflection is refused there (issue 35).
#[test]
fn python_client_calls_through_server_reflection() {
    let _watchdog = ringfeed_watchdog::arm();
    if let Err(missing) =
        python_modules("import grpc, grpc_reflection.v1alpha.proto_reflection_descriptor_database")
    {
        if std::env::var_os("CI").is_some_and(|v| !v.is_empty()) {
            panic!("python3 with grpcio-reflection is needed ({missing}); .ci/run installs it");
        }
        eprintln!("skipped: python3 with grpcio-reflection not available ({missing})");
        return;
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/reflection_client_test.py");
    let data = tempfile::tempdir().expect("temp dir");

    let open = Server::start(&data.path().join("open"), 2);
    let mut client = Command::new("python3");
    client.arg(&script).arg("--server").arg(&open.addr);
    let output = run_bounded(client, None, CLIENT_TIMEOUT);
    eprintln!("{output}");
    assert_eq!(
        output.code(),
        Some(0),
        "reflection on an open server; output above"
    );
    open.stop();

    let (token, table) = serve_binary::new_token(&["--admin", "--append", "/", "--read", "/"]);
    let tokens = data.path().join("tokens.toml");
    std::fs::write(&tokens, table).unwrap();
    let closed = Server::start_with(
        &data.path().join("closed"),
        1,
        &["--token-file", tokens.to_str().unwrap()],
    );
    let mut client = Command::new("python3");
    client.arg(&script).args([
        "--server",
        &closed.addr,
        "--token",
        &token,
        "--token-required",
    ]);
    let output = run_bounded(client, None, CLIENT_TIMEOUT);
    eprintln!("{output}");
    assert_eq!(
        output.code(),
        Some(0),
        "reflection behind tokens; output above"
    );
    closed.stop();
}

/// Whether `python3 -c "import grpc, grpc_tools.protoc"` works; Err says why not.
fn python_grpc_tools() -> Result<(), String> {
    python_modules("import grpc, grpc_tools.protoc")
}

/// Whether `python3 -c IMPORTS` works; Err says why not.
fn python_modules(imports: &str) -> Result<(), String> {
    match Command::new("python3")
        .args(["-c", imports])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        Ok(out) => Err(String::from_utf8_lossy(&out.stderr)
            .lines()
            .last()
            .unwrap_or("import failed")
            .to_owned()),
        Err(e) => Err(format!("python3: {e}")),
    }
}
