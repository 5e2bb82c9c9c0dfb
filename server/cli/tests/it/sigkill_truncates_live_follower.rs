//! A real `ringfeed serve` killed with SIGKILL under live `ringfeed tail`
//! followers, through the CLI exactly as a user runs it.
//!
//! The issue this reproduces: a tail had printed memory-acknowledged events
//! that the crash then lost; after the restart new events took their offsets,
//! and the tail reconnected on its own and silently missed them (or stopped
//! with a false "not made by this data dir"). Now:
//! - the default tail exits 9 (FAILED_PRECONDITION) saying the feed was
//!   truncated by a crash, where it survived and how many printed events no
//!   longer exist, and prints nothing of the new generation;
//! - `--durable-only` never printed the lost events, so it follows through
//!   the restart and prints the new events, every offset once;
//! - `--cursor C --resume-truncated` continues from the surviving end.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::serve_binary::{run_bounded, Server};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(40);

/// A `ringfeed tail` child whose stdout lines are collected as they come.
struct Tail {
    child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
    stderr: Arc<Mutex<String>>,
    /// The threads reading its stdout and stderr: they end when it exits.
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Tail {
    fn start(addr: &str, flags: &[&str]) -> Tail {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .args(["tail", "--server", addr])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting ringfeed tail");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stderr = Arc::new(Mutex::new(String::new()));
        let (out, sink) = (child.stdout.take().expect("stdout"), lines.clone());
        let stdout_reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("tail printed {line:?}: {e}"));
                sink.lock().unwrap().push(value);
            }
        });
        let (err, sink) = (child.stderr.take().expect("stderr"), stderr.clone());
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("tail: {line}");
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Tail {
            child,
            lines,
            stderr,
            readers: vec![stdout_reader, stderr_reader],
        }
    }

    fn offsets(&self) -> Vec<u64> {
        let lines = self.lines.lock().unwrap();
        lines
            .iter()
            .map(|l| l["offset"].as_u64().unwrap())
            .collect()
    }

    fn wait_for_lines(&self, count: usize, what: &str) {
        let start = Instant::now();
        while self.lines.lock().unwrap().len() < count {
            assert!(
                start.elapsed() < TIMEOUT,
                "{what}: {} of {count} lines after {TIMEOUT:?}; stderr: {}",
                self.lines.lock().unwrap().len(),
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for the exit; kills the tail and fails if it does not come.
    fn wait_exit(&mut self, what: &str) -> Option<i32> {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for tail") {
                // Its pipes are closed: the readers have taken the last lines
                // once they end.
                for reader in self.readers.drain(..) {
                    if let Err(panic) = reader.join() {
                        std::panic::resume_unwind(panic);
                    }
                }
                return status.code();
            }
            if start.elapsed() > TIMEOUT {
                let _ = self.child.kill();
                panic!("{what}: still running after {TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Tail {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Appends `count` events in /d through the CLI; returns the acks.
fn append(addr: &str, first_id: usize, count: usize, durable: bool) -> Vec<Value> {
    let input: String = (first_id..first_id + count)
        .map(|i| format!("{{\"directory\":\"/d\",\"newEntry\":{{\"name\":\"f{i}\"}}}}\n"))
        .collect();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["append", "--server", addr]);
    if durable {
        command.arg("--durable");
    }
    let output = run_bounded(command, Some(input.into_bytes()), TIMEOUT);
    assert_eq!(output.code(), Some(0), "{output}");
    output
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_sigkill_under_live_tails_is_reported_never_skipped() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let data = tempfile::tempdir().expect("temp dir");
    let config = data.path().join("ringfeed.toml");
    // Memory-acknowledged events stay unflushed until the kill.
    std::fs::write(&config, "flush_interval_ms = 600000\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let data_dir = data.path().join("data");
    let flags = ["--config", config.as_str()];
    let server = Server::start_with(&data_dir, 1, &flags);
    let addr = server.addr.clone();

    let mut tail = Tail::start(&addr, &["--beginning"]);
    let durable_tail = Tail::start(&addr, &["--beginning", "--durable-only"]);
    append(&addr, 0, 10, true); // offsets 0..10, durable
    append(&addr, 10, 40, false); // offsets 10..50, in memory only
    tail.wait_for_lines(50, "the default tail before the kill");
    durable_tail.wait_for_lines(10, "the durable-only tail before the kill");
    let printed = tail.lines.lock().unwrap().last().unwrap()["cursor"]
        .as_str()
        .unwrap()
        .to_owned();

    server.kill();
    let server = Server::start_on_with(&data_dir, 1, &addr, &flags);
    // New events take the lost offsets 10..50, and more.
    let acks = append(&addr, 1000, 100, true);
    assert_eq!(acks.first().unwrap()["offset"], 10, "the crash kept 0..10");
    let last_ts = acks.last().unwrap()["ts"].as_i64().unwrap();

    // The default tail reconnects by itself and is told, not fed the new events.
    let code = tail.wait_exit("the default tail after the restart");
    let stderr = tail.stderr.lock().unwrap().clone();
    assert_eq!(code, Some(9), "FAILED_PRECONDITION; stderr: {stderr}");
    for part in [
        "FAILED_PRECONDITION",
        "truncated by a crash",
        "passed 40 event(s) that no longer exist",
        "last surviving is 9",
        "--resume-truncated",
    ] {
        assert!(stderr.contains(part), "{stderr:?} lacks {part:?}");
    }
    assert_eq!(
        tail.offsets(),
        (0..50).collect::<Vec<_>>(),
        "nothing after the restart"
    );

    // The durable-only tail never saw the lost events and follows on.
    durable_tail.wait_for_lines(110, "the durable-only tail after the restart");
    assert_eq!(durable_tail.offsets(), (0..110).collect::<Vec<_>>());
    let names: Vec<String> = durable_tail.lines.lock().unwrap()[10..]
        .iter()
        .map(|l| l["event"]["newEntry"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        names,
        (1000..1100).map(|i| format!("f{i}")).collect::<Vec<_>>()
    );

    // Resuming the truncated cursor explicitly continues at the surviving end.
    let until = last_ts.to_string();
    let mut resumed = Tail::start(
        &addr,
        &[
            "--cursor",
            &printed,
            "--resume-truncated",
            "--until-ns",
            &until,
        ],
    );
    assert_eq!(resumed.wait_exit("the resumed tail"), Some(0));
    assert_eq!(resumed.offsets(), (10..110).collect::<Vec<_>>());
    // Without the flag the same cursor is refused again, never retried.
    let mut again = Tail::start(&addr, &["--cursor", &printed]);
    assert_eq!(again.wait_exit("the refused tail"), Some(9));
    server.stop();
}
