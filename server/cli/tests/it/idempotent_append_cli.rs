//! `ringfeed append --producer-id ID --first-sequence N` against the real
//! server (issue 15): replaying the same input with the same id and first
//! sequence prints identical acknowledgements and stores nothing new, also
//! after a restart and when only a tail of the input is replayed; a replay
//! after SIGKILL stores exactly the events the crash destroyed; a gap is
//! refused with the sequence to resend from.

use std::process::Command;
use std::time::Duration;

use crate::serve_binary::{run_bounded, Output, Server};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(60);
const EVENTS: usize = 300;

fn ringfeed(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(args).arg("--server").arg(&server.addr);
    run_bounded(command, stdin.map(|s| s.as_bytes().to_vec()), TIMEOUT)
}

fn input(range: std::ops::Range<usize>) -> String {
    range
        .map(|i| json!({"directory": format!("/p/{}", i % 11), "newEntry": {"name": format!("f{i}")}}))
        .map(|e| format!("{e}\n"))
        .collect()
}

fn append(server: &Server, first: usize, range: std::ops::Range<usize>, extra: &[&str]) -> Output {
    let first = first.to_string();
    let mut args = vec![
        "append",
        "--producer-id",
        "77",
        "--first-sequence",
        &first,
        "--batch",
        "64",
    ];
    args.extend_from_slice(extra);
    ringfeed(server, &args, Some(&input(range)))
}

fn ok(output: Output) -> Output {
    assert_eq!(output.code(), Some(0), "{output}");
    output
}

/// Every stored event's name, read back with `tail` (up to the last ack's stamp).
fn stored_names(server: &Server, until_ns: i64) -> Vec<String> {
    let until = until_ns.to_string();
    let out = ok(ringfeed(
        server,
        &["tail", "--beginning", "--until-ns", &until],
        None,
    ));
    let mut names: Vec<String> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("json"))
        .map(|v| {
            v["event"]["newEntry"]["name"]
                .as_str()
                .expect("name")
                .to_owned()
        })
        .collect();
    names.sort();
    names
}

fn last_ts(acks: &str) -> i64 {
    acks.lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).expect("json")["ts"]
                .as_i64()
                .expect("ts")
        })
        .max()
        .expect("acks")
}

fn all_names(range: std::ops::Range<usize>) -> Vec<String> {
    let mut names: Vec<String> = range.map(|i| format!("f{i}")).collect();
    names.sort();
    names
}

#[test]
fn replaying_the_same_input_prints_the_same_acks_and_stores_nothing_new() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 2);

    let first = ok(append(&server, 0, 0..EVENTS, &[]));
    assert_eq!(first.stdout.lines().count(), EVENTS, "{first}");
    assert!(!first.stderr.contains("stored before"), "{first}");

    let again = ok(append(&server, 0, 0..EVENTS, &[]));
    assert_eq!(again.stdout, first.stdout, "identical acks");
    assert!(
        again.stderr.contains(&format!(
            "{EVENTS} of {EVENTS} acknowledged event(s) were stored before"
        )),
        "{again}"
    );
    // A tail of the input, numbered as it was the first time.
    let tail = ok(append(&server, 200, 200..EVENTS, &["--durable"]));
    let first_lines: Vec<&str> = first.stdout.lines().collect();
    assert_eq!(tail.stdout.lines().collect::<Vec<_>>(), first_lines[200..]);
    let until = last_ts(&first.stdout);
    assert_eq!(stored_names(&server, until), all_names(0..EVENTS));

    // A gap is refused, naming where to resume.
    let gap = append(&server, EVENTS + 5, 0..3, &[]);
    assert_ne!(gap.code(), Some(0), "{gap}");
    assert!(gap.stderr.contains("Resend from sequence 300"), "{gap}");

    // After a restart the table is rebuilt from the log: still duplicates.
    let addr = server.addr.clone();
    server.stop();
    let server = Server::start_on(data.path(), 2, &addr);
    let after = ok(append(&server, 0, 0..EVENTS, &[]));
    assert_eq!(after.stdout, first.stdout, "identical acks after a restart");
    let more = ok(append(&server, EVENTS, EVENTS..EVENTS + 10, &[]));
    assert!(!more.stderr.contains("stored before"), "{more}");
    assert_eq!(
        stored_names(&server, last_ts(&more.stdout)),
        all_names(0..EVENTS + 10)
    );
}

#[test]
fn a_replay_after_sigkill_stores_exactly_what_the_crash_destroyed() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let data_dir = data.path().join("data");
    let config = data.path().join("ringfeed.toml");
    // Memory-acknowledged events stay unflushed until the kill.
    std::fs::write(&config, "flush_interval_ms = 600000\n").unwrap();
    let config = config.to_str().unwrap().to_owned();
    let flags = ["--config", config.as_str()];
    let server = Server::start_with(&data_dir, 2, &flags);
    ok(append(&server, 0, 0..100, &["--durable"]));
    ok(append(&server, 100, 100..EVENTS, &[]));
    let addr = server.addr.clone();
    server.kill();

    let server = Server::start_on_with(&data_dir, 2, &addr, &flags);
    // The producer cannot know which memory-acked events survived: it
    // replays everything. The durable ones are duplicates, the rest is new.
    let replay = ok(append(&server, 0, 0..EVENTS, &["--durable"]));
    assert!(
        replay.stderr.contains(&format!(
            "100 of {EVENTS} acknowledged event(s) were stored before"
        )),
        "{replay}"
    );
    assert_eq!(
        stored_names(&server, last_ts(&replay.stdout)),
        all_names(0..EVENTS),
        "each event stored exactly once"
    );
}
