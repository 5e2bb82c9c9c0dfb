//! A running `ringfeed tail` says on stderr when it loses the server and
//! when it is back, once per outage, with the cursor it resumes after (issue
//! 35: before, a tail whose server restarted said nothing at all), and
//! prints every event once across the restart.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::serve_binary::{append_creates, tailed_name, Server};

fn append(addr: &str, names: std::ops::Range<usize>) {
    let names = names.map(|i| format!("e{i}"));
    append_creates(addr, &["/r"], names, Duration::from_secs(30));
}

/// Waits (at most 30 s) until `lines` holds a line `pick` accepts.
fn wait_until(lines: &Mutex<Vec<String>>, what: &str, pick: impl Fn(&[String]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !pick(&lines.lock().unwrap()) {
        assert!(
            Instant::now() < deadline,
            "no {what} within 30 s; got {:?}",
            lines.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn tail_says_when_it_loses_the_server_and_when_it_is_back() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = Server::start(&data, 1);
    let addr = server.addr.clone();
    let mut tail = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args(["tail", "--server", &addr, "--beginning"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting ringfeed tail");
    let _watched = ringfeed_testkit::watch_child(tail.id());
    let collect = |pipe: Box<dyn std::io::Read + Send>| {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let into = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                into.lock().unwrap().push(line);
            }
        });
        lines
    };
    let stdout = collect(Box::new(tail.stdout.take().unwrap()));
    let stderr = collect(Box::new(tail.stderr.take().unwrap()));

    append(&addr, 0..10);
    wait_until(&stdout, "10 lines", |l| l.len() >= 10);
    let tenth: serde_json::Value = serde_json::from_str(&stdout.lock().unwrap()[9]).unwrap();
    let cursor = tenth["cursor"].as_str().unwrap().to_owned();

    server.stop();
    wait_until(&stderr, "a `lost` line", |l| {
        l.iter().any(|line| line.contains("ringfeed: lost"))
    });
    // Down for a few retries: still one line for the outage.
    std::thread::sleep(Duration::from_secs(3));
    let server = Server::start_on(&data, 1, &addr);
    wait_until(&stderr, "a `back` line", |l| {
        l.iter().any(|line| line.contains("ringfeed: back on"))
    });
    append(&addr, 10..15);
    wait_until(&stdout, "15 lines", |l| l.len() >= 15);

    let _ = Command::new("kill")
        .args(["-TERM", &tail.id().to_string()])
        .status();
    let status = tail.wait().unwrap();
    assert_eq!(status.code(), Some(143), "a tail stopped by SIGTERM");
    drop(server);

    let stderr = stderr.lock().unwrap().clone();
    let lost: Vec<&String> = stderr.iter().filter(|l| l.contains("lost")).collect();
    let back: Vec<&String> = stderr.iter().filter(|l| l.contains("back on")).collect();
    assert_eq!(lost.len(), 1, "one `lost` line per outage: {stderr:?}");
    assert_eq!(back.len(), 1, "one `back` line per outage: {stderr:?}");
    assert!(lost[0].contains(&addr), "{}", lost[0]);
    assert!(
        back[0].contains(&format!("resuming after cursor {cursor}")),
        "the cursor it resumes after: {} (expected {cursor})",
        back[0]
    );
    let names: Vec<String> = stdout
        .lock()
        .unwrap()
        .iter()
        .map(|line| tailed_name(line))
        .collect();
    let expected: Vec<String> = (0..15).map(|i| format!("e{i}")).collect();
    assert_eq!(names, expected, "every event once across the restart");
}
