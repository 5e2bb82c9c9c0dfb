//! `ringfeed tail --cursor-file F` keeps its place across restarts (issue
//! 35): stopped five times by SIGTERM or SIGINT during a 100k-event
//! catch-up with live appends going on, and started again each time, it
//! prints every event exactly once; killed with SIGKILL, it prints at most
//! its last unsaved lines again and never skips one. A file that holds no
//! cursor is refused.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::serve_binary::{append_creates, run_bounded, tailed_name, Server};

const PRELOADED: usize = 100_000;
const LIVE_BATCHES: usize = 20;
const LIVE_BATCH: usize = 500;

/// Appends a create event per name, spread over four directories.
fn append(addr: &str, names: impl Iterator<Item = String>) {
    append_creates(
        addr,
        &["/a", "/b/c", "/d", "/e/f/g"],
        names,
        Duration::from_secs(60),
    );
}

/// A running tail and the names of the events it printed so far.
struct Tail {
    child: Child,
    names: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Tail {
    fn start(server: &Server, file: &std::path::Path, more: &[&str]) -> Tail {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .args([
                "tail",
                "--server",
                &server.addr,
                "--beginning",
                "--cursor-file",
            ])
            .arg(file)
            .args(more)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting ringfeed tail");
        let stdout = child.stdout.take().unwrap();
        let names = Arc::new(Mutex::new(Vec::new()));
        let into = names.clone();
        let reader = std::thread::spawn(move || {
            let mut stdout = BufReader::new(stdout);
            let mut line = String::new();
            while stdout.read_line(&mut line).unwrap_or(0) > 0 {
                // A line without its newline was cut by SIGKILL: not printed.
                let Some(whole) = line.strip_suffix('\n') else {
                    break;
                };
                into.lock().unwrap().push(tailed_name(whole));
                line.clear();
            }
        });
        Tail {
            child,
            names,
            reader,
        }
    }

    fn printed(&self) -> usize {
        self.names.lock().unwrap().len()
    }

    /// Waits until it printed `lines` lines (at most 60 s).
    fn wait_for(&self, lines: usize) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.printed() < lines {
            assert!(
                Instant::now() < deadline,
                "the tail printed {} of {lines} lines in 60 s",
                self.printed()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Sends `signal`, waits for the exit (at most 30 s) and every line it
    /// wrote: (exit code, the names printed).
    fn stop(self, signal: &str) -> (Option<i32>, Vec<String>) {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args([signal, &pid]).status().unwrap();
        assert!(sent.success());
        self.wait(Duration::from_secs(30))
    }

    fn wait(mut self, limit: Duration) -> (Option<i32>, Vec<String>) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("the tail did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        self.reader.join().unwrap();
        let names = std::mem::take(&mut *self.names.lock().unwrap());
        (status.code(), names)
    }
}

#[test]
fn a_tail_with_a_cursor_file_resumes_exactly_across_restarts() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), 2);
    append(&server.addr, (0..PRELOADED).map(|i| format!("p{i}")));
    let mut runs: Vec<Vec<String>> = Vec::new();

    // Live appends while the tail stops and starts.
    let until = std::thread::scope(|scope| {
        // Live appends while the tail stops and starts.
        let addr = server.addr.clone();
        let live = scope.spawn(move || {
            for batch in 0..LIVE_BATCHES {
                let first = batch * LIVE_BATCH;
                append(&addr, (first..first + LIVE_BATCH).map(|i| format!("l{i}")));
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        let file = dir.path().join("tail.cursor");
        for (run, signal) in ["-TERM", "-INT", "-TERM", "-INT", "-TERM"]
            .iter()
            .enumerate()
        {
            let tail = Tail::start(&server, &file, &[]);
            tail.wait_for(12_000);
            let (code, names) = tail.stop(signal);
            let expected_code = if *signal == "-INT" { 130 } else { 143 };
            assert_eq!(
                code,
                Some(expected_code),
                "run {run}: exit code after {signal}"
            );
            assert!(file.exists(), "run {run}: no cursor file saved");
            runs.push(names);
        }
        // SIGKILL: what it wrote after its last save prints again.
        let tail = Tail::start(&server, &file, &[]);
        tail.wait_for(10_000);
        let (code, killed) = tail.stop("-KILL");
        assert_eq!(code, None, "killed");
        runs.push(killed);
        assert!(live.join().is_ok(), "the live appender failed");
        let until = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            .to_string();
        let last = Tail::start(&server, &file, &["--until-ns", &until]);
        let (code, rest) = last.wait(Duration::from_secs(60));
        assert_eq!(code, Some(0), "the last run ends at --until-ns");
        runs.push(rest);
        until
    });
    // The same range in one uninterrupted tail (without a cursor file).
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args([
        "tail",
        "--server",
        &server.addr,
        "--beginning",
        "--until-ns",
        &until,
    ]);
    let whole = run_bounded(command, None, Duration::from_secs(60));
    assert_eq!(whole.code(), Some(0), "{whole}");
    let whole: Vec<String> = whole.stdout.lines().map(tailed_name).collect();
    assert_eq!(whole.len(), PRELOADED + LIVE_BATCHES * LIVE_BATCH);
    let differs = |what: &str, got: &[String], from: usize| {
        let at = got.iter().zip(&whole[from..]).position(|(a, b)| a != b);
        assert!(
            at.is_none() && from + got.len() <= whole.len(),
            "{what}: {} lines from line {from} differ from one uninterrupted tail at {at:?}",
            got.len()
        );
    };
    // Five clean stops: the runs, one after another, are the uninterrupted
    // tail: no line missed or repeated.
    let mut next = 0;
    for (run, names) in runs[..5].iter().enumerate() {
        assert!(names.len() >= 12_000, "run {run} printed {}", names.len());
        differs(&format!("run {run}"), names, next);
        next += names.len();
    }
    // After SIGKILL the next run starts at or before the line after the
    // killed run's last: it repeats at most what the killed run printed.
    let killed = &runs[5];
    differs("the killed run", killed, next);
    let rest = &runs[6];
    let resumed = whole.len() - rest.len();
    assert!(
        resumed >= next && resumed <= next + killed.len(),
        "after SIGKILL the tail resumed at line {resumed}; the killed run printed lines \
         {next}..{}",
        next + killed.len()
    );
    differs("the run after SIGKILL", rest, resumed);
    eprintln!(
        "clean runs printed {next} lines; the killed run {}, of which {} printed again",
        killed.len(),
        next + killed.len() - resumed
    );
}

#[test]
fn a_cursor_file_that_holds_no_cursor_is_refused() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), 1);
    let file = dir.path().join("tail.cursor");
    std::fs::write(&file, "not a cursor\n").unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command
        .args(["tail", "--server", &server.addr, "--cursor-file"])
        .arg(&file);
    let out = run_bounded(command, None, Duration::from_secs(30));
    assert_eq!(out.code(), Some(3), "INVALID_ARGUMENT: {out}");
    assert!(out.stderr.contains("holds no cursor"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "not a cursor\n");
}
