//! `ringfeed subscribers` lists a running `ringfeed tail`, and that tail
//! follows the feed through a server restart: every event printed once.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::serve_binary::{run_bounded, Output, Server};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(60);

fn ringfeed(addr: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(args).arg("--server").arg(addr);
    run_bounded(command, stdin.map(|s| s.as_bytes().to_vec()), TIMEOUT)
}

/// A `ringfeed tail` in the background; its stdout lines arrive on a channel.
struct Tail {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Tail {
    fn start(addr: &str, args: &[&str]) -> Tail {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .arg("tail")
            .args(args)
            .arg("--server")
            .arg(addr)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting ringfeed tail");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        Tail { child, lines }
    }

    fn line(&self) -> Value {
        let line = self
            .lines
            .recv_timeout(TIMEOUT)
            .expect("a line from ringfeed tail");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn append(addr: &str, names: &[&str]) {
    crate::serve_binary::append_creates(addr, &["/r"], names, TIMEOUT);
}

#[test]
fn subscribers_lists_a_tail_that_survives_a_server_restart() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 2);
    let addr = server.addr.clone();
    append(&addr, &["a", "b", "c"]);
    let tail = Tail::start(&addr, &["--beginning", "--batching"]);
    let mut names = Vec::new();
    for _ in 0..3 {
        names.push(
            tail.line()["event"]["newEntry"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }

    let listed = ringfeed(&addr, &["subscribers", "--json"], None);
    assert_eq!(listed.code(), Some(0), "{listed}");
    let json: Value = serde_json::from_str(&listed.stdout).expect("json");
    let subscribers = json["subscribers"].as_array().expect("subscribers");
    assert_eq!(subscribers.len(), 1, "{json}");
    assert_eq!(subscribers[0]["clientName"], "ringfeed tail");
    assert_eq!(subscribers[0]["mode"], "live");
    assert!(subscribers[0]["peer"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    let table = ringfeed(&addr, &["subscribers"], None);
    assert_eq!(table.code(), Some(0), "{table}");
    let header = table.stdout.lines().next().unwrap_or_default();
    for column in [
        "client",
        "epoch",
        "peer",
        "mode",
        "lag events",
        "filters",
        "cursor",
    ] {
        assert!(header.contains(column), "{header}");
    }
    assert!(table.stdout.contains("ringfeed tail"), "{table}");

    // Restart the server on the same port: the tail reconnects and resumes.
    server.stop();
    let server = Server::start_on(data.path(), 2, &addr);
    append(&addr, &["d", "e"]);
    for _ in 0..2 {
        names.push(
            tail.line()["event"]["newEntry"]["name"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    assert_eq!(names, ["a", "b", "c", "d", "e"]);
    assert!(
        tail.lines.recv_timeout(Duration::from_millis(500)).is_err(),
        "a line was printed twice"
    );
    drop(tail);
    // The server notices the closed connection at once; allow it a moment.
    let mut listed = String::new();
    for _ in 0..50 {
        listed = ringfeed(&addr, &["subscribers"], None).stdout;
        if listed.trim() == "no subscribers" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(listed.trim(), "no subscribers");
    server.stop();
}
