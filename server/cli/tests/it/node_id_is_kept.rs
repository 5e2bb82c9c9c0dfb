//! `serve --node-id` (issue 20's node identity): the id is recorded in the
//! data dir, shown by `ringfeed status`, kept when the flag is left out, and
//! a data dir of another node is refused at start with the fix named.

use std::process::Command;
use std::time::Duration;

use crate::serve_binary::{run_bounded, Output, Server};

const TIMEOUT: Duration = Duration::from_secs(30);

fn status(server: &Server) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["status", "--server", &server.addr]);
    run_bounded(command, None, TIMEOUT)
}

#[test]
fn a_data_dir_keeps_its_node_id_and_refuses_another() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("node-id-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();

    let server = Server::start_with(dir.path(), 1, &["--node-id", "2"]);
    let shown = status(&server);
    assert_eq!(shown.code(), Some(0), "{shown}");
    assert!(shown.stdout.contains("(node 2)"), "{shown}");
    server.stop();

    // Without the flag, the node is the one the data dir records.
    let server = Server::start(dir.path(), 1);
    let shown = status(&server);
    assert!(shown.stdout.contains("(node 2)"), "{shown}");
    server.stop();

    let mut serve = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    serve
        .args(["serve", "--listen", "127.0.0.1:0", "--shards", "1"])
        .args(["--node-id", "3", "--data-dir"])
        .arg(dir.path());
    let refused = run_bounded(serve, None, TIMEOUT);
    assert_ne!(refused.code(), Some(0), "{refused}");
    assert!(refused.code().is_some(), "it exits, never hangs: {refused}");
    assert!(
        refused.stderr.contains("belongs to node 2") && refused.stderr.contains("--node-id 2"),
        "{refused}"
    );
    assert!(!refused.stdout.contains("listening on"), "{refused}");

    // 0 is not an id.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    serve
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--node-id",
            "0",
            "--data-dir",
        ])
        .arg(dir.path());
    let zero = run_bounded(serve, None, TIMEOUT);
    assert_eq!(zero.code(), Some(2), "a usage error: {zero}");
}
