//! The `ringfeed` command line against the real server: what `append` acks
//! (from stdin JSON lines and from flags) is exactly what `tail` prints back,
//! in merged order, with cursors that resume exactly; filters apply; `status`
//! counts it; a bad stdin line and a refused event exit non-zero with the
//! line number or the gRPC code.

use std::process::Command;
use std::time::Duration;

use crate::serve_binary::{run_bounded, Output, Server};
use serde_json::{json, Value};

const TIMEOUT: Duration = Duration::from_secs(60);

fn ringfeed(server: &Server, args: &[&str], stdin: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(args).arg("--server").arg(&server.addr);
    run_bounded(command, stdin.map(|s| s.as_bytes().to_vec()), TIMEOUT)
}

fn ok(output: Output) -> Vec<Value> {
    assert_eq!(output.code(), Some(0), "{output}");
    output
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

fn position(line: &Value) -> (i64, u64, u64) {
    (
        line["ts"].as_i64().expect("ts is a number"),
        line["shard"].as_u64().expect("shard is a number"),
        line["offset"].as_u64().expect("offset is a number"),
    )
}

#[test]
fn appended_events_tail_back_exactly() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 2);

    // Proto3 JSON as pbjson prints it, so input and output compare as values.
    let from_stdin = [
        json!({"directory": "/a", "newEntry": {"name": "f"}}),
        json!({"directory": "/a/b", "newEntry": {"name": "g", "size": "10", "isDirectory": true}}),
        json!({"directory": "/c", "oldEntry": {"name": "h"}, "signatures": [9]}),
        json!({"directory": "/a", "oldEntry": {"name": "f"}, "newEntry": {"name": "f", "size": "3"}}),
        json!({"directory": "/d\u{e9}", "newEntry": {"name": "\u{fc}"}}),
    ];
    let mut input = String::new();
    for (i, event) in from_stdin.iter().enumerate() {
        input.push_str(&event.to_string());
        input.push('\n');
        if i == 1 {
            input.push_str("   \n"); // blank lines are skipped
        }
    }
    let mut acks = ok(ringfeed(&server, &["append", "--batch", "2"], Some(&input)));
    acks.extend(ok(ringfeed(
        &server,
        &[
            "append",
            "--dir",
            "/cli",
            "--name",
            "x",
            "--op",
            "rename",
            "--new-dir",
            "/cli2",
            "--new-name",
            "y",
            "--signature",
            "9",
            "--durable",
        ],
        None,
    )));
    let mut events = from_stdin.to_vec();
    events.push(json!({
        "directory": "/cli", "oldEntry": {"name": "x"}, "newEntry": {"name": "y"},
        "newParentPath": "/cli2", "signatures": [9]
    }));
    assert_eq!(acks.len(), events.len());
    for ack in &acks {
        let keys: Vec<&String> = ack.as_object().expect("object").keys().collect();
        assert_eq!(keys.len(), 3, "{ack}");
        position(ack);
    }

    // Merged order is (ts, shard, offset); each event where its ack says.
    let mut expected: Vec<((i64, u64, u64), Value)> = acks
        .iter()
        .map(position)
        .zip(events.iter().cloned())
        .collect();
    expected.sort_by_key(|(p, _)| *p);
    let until = expected.last().expect("events").0 .0.to_string();
    let tailed = ok(ringfeed(
        &server,
        &["tail", "--beginning", "--until-ns", &until],
        None,
    ));
    let delivered: Vec<((i64, u64, u64), Value)> = tailed
        .iter()
        .map(|line| (position(line), line["event"].clone()))
        .collect();
    assert_eq!(delivered, expected);
    assert!(tailed
        .iter()
        .all(|l| l["cursor"].as_str().is_some_and(|c| !c.is_empty())));
    // Each line names what its event did (issue 35).
    let op_of = |event: &Value| match (event.get("oldEntry"), event.get("newEntry")) {
        (None, Some(_)) => "create",
        (Some(_), None) => "delete",
        (Some(_), Some(_)) if event.get("newParentPath").is_some() => "rename",
        _ => "update",
    };
    for line in &tailed {
        assert_eq!(line["op"], op_of(&line["event"]), "{line}");
    }
    let ops: std::collections::BTreeSet<&str> =
        tailed.iter().filter_map(|l| l["op"].as_str()).collect();
    assert_eq!(ops.len(), 4, "every op in the test: {ops:?}");

    // Resuming from a line's cursor prints exactly the lines after it.
    let cursor = tailed[1]["cursor"].as_str().expect("cursor");
    let resumed = ok(ringfeed(
        &server,
        &["tail", "--cursor", cursor, "--until-ns", &until],
        None,
    ));
    assert_eq!(resumed, tailed[2..]);

    // Filters: a rename matches by its new path; signatures skip.
    let moved = ok(ringfeed(
        &server,
        &[
            "tail",
            "--beginning",
            "--until-ns",
            &until,
            "--prefix",
            "/cli2",
        ],
        None,
    ));
    assert_eq!(moved, tailed[tailed.len() - 1..]);
    let unsigned = ok(ringfeed(
        &server,
        &[
            "tail",
            "--beginning",
            "--until-ns",
            &until,
            "--signature",
            "9",
            "--per-shard",
        ],
        None,
    ));
    let mut want: Vec<Value> = tailed
        .iter()
        .filter(|l| l["event"]["signatures"].is_null())
        .map(|l| l["event"].clone())
        .collect();
    let mut got: Vec<Value> = unsigned.iter().map(|l| l["event"].clone()).collect();
    let by_json = |a: &Value, b: &Value| a.to_string().cmp(&b.to_string());
    want.sort_by(by_json);
    got.sort_by(by_json);
    assert_eq!(got, want);

    let status = ok(ringfeed(&server, &["status", "--json"], None));
    let shards = status[0]["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 2);
    let committed: u64 = shards
        .iter()
        .map(|s| {
            s["committedNext"]
                .as_str()
                .map_or(0, |n| n.parse::<u64>().expect("number"))
        })
        .sum();
    assert_eq!(committed, events.len() as u64);
    let table = ringfeed(&server, &["status"], None);
    assert_eq!(table.code(), Some(0), "{table}");
    assert!(table.stdout.contains("committed"), "{table}");

    // A bad line: the batch before it is appended, its own batch is not.
    let good = events[0].to_string();
    let bad = ringfeed(
        &server,
        &["append", "--batch", "1"],
        Some(&format!(
            "{good}\n{{\"directory\": \"/x\", \"newEntri\": {{}}}}\n{good}\n"
        )),
    );
    assert_eq!(bad.code(), Some(1), "{bad}");
    assert!(bad.stderr.contains("stdin line 2"), "{bad}");
    assert_eq!(bad.stdout.lines().count(), 1, "{bad}");

    // A refused event exits with its gRPC code (INVALID_ARGUMENT = 3).
    let refused = ringfeed(
        &server,
        &[
            "append", "--dir", "relative", "--name", "x", "--op", "create",
        ],
        None,
    );
    assert_eq!(refused.code(), Some(3), "{refused}");
    assert!(
        refused.stderr.contains("error: INVALID_ARGUMENT: "),
        "{refused}"
    );
    assert!(refused.stdout.is_empty(), "{refused}");

    server.stop();
}

/// `tail` asks for batches by default (issue 35) and for one event per
/// response with `--no-batching`. Unfiltered, both print the same bytes,
/// cursors included, from the beginning, from a cursor inside what a batch
/// carried, and per shard. Filtered, the same events; a cursor may then
/// reach past events the filter skipped (a batch's cursor covers what the
/// server read for it), so each is checked by resuming from it.
#[test]
fn batched_and_single_event_tails_print_the_same_events_and_cursors() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 2);
    let mut input = String::new();
    for i in 0..5_000 {
        let dir = ["/a", "/a/b", "/c", "/d"][i % 4];
        input.push_str(
            &json!({"directory": dir, "newEntry": {"name": format!("f{i}")}}).to_string(),
        );
        input.push('\n');
    }
    let appended = ringfeed(&server, &["append"], Some(&input));
    assert_eq!(appended.code(), Some(0), "{appended}");
    let until = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string();
    let tail = |args: &[&str]| {
        let mut all = vec!["tail", "--until-ns", until.as_str()];
        all.extend_from_slice(args);
        let out = ringfeed(&server, &all, None);
        assert_eq!(out.code(), Some(0), "{out}");
        out.stdout
    };
    let both = |args: &[&str]| {
        let batched = tail(args);
        let single = tail(&[args, &["--no-batching"]].concat());
        (batched, single)
    };
    let same_bytes = |args: &[&str]| {
        let (batched, single) = both(args);
        assert!(
            batched == single,
            "tail {args:?}: the default and --no-batching print different bytes"
        );
        batched
    };
    let all = same_bytes(&["--beginning"]);
    assert_eq!(all.lines().count(), 5_000);
    let middle: Value = serde_json::from_str(all.lines().nth(2_345).unwrap()).unwrap();
    let cursor = middle["cursor"].as_str().unwrap().to_owned();
    assert_eq!(
        same_bytes(&["--cursor", &cursor]).lines().count(),
        5_000 - 2_346
    );
    assert_eq!(
        same_bytes(&["--beginning", "--per-shard"]).lines().count(),
        5_000
    );

    let events = |text: &str| -> Vec<Value> {
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap()["event"].clone())
            .collect()
    };
    for filter in [&["--prefix", "/a"][..], &["--dir", "/c"]] {
        let (batched, single) = both(&[&["--beginning"][..], filter].concat());
        let expected = events(&single);
        assert_eq!(events(&batched), expected, "tail {filter:?}");
        assert_eq!(
            expected.len(),
            if filter[0] == "--dir" { 1_250 } else { 2_500 }
        );
        for text in [&batched, &single] {
            for (n, line) in text.lines().enumerate().step_by(613) {
                let line: Value = serde_json::from_str(line).unwrap();
                let cursor = line["cursor"].as_str().unwrap();
                let rest = tail(&[&["--cursor", cursor][..], filter].concat());
                assert_eq!(events(&rest), expected[n + 1..], "resumed after line {n}");
            }
        }
    }
}

/// Every fresh data dir starts at offset 0 and generation 1, so another
/// server's cursor fits this one's offsets: it is refused by the feed id it
/// carries, never resumed as if it were this feed's (issue 35).
#[test]
fn a_cursor_of_another_server_is_refused() {
    let _watchdog = ringfeed_testkit::arm();
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    let servers: Vec<Server> = dirs.iter().map(|d| Server::start(d.path(), 1)).collect();
    for server in &servers {
        crate::serve_binary::append_creates(&server.addr, &["/same"], ["a", "b", "c"], TIMEOUT);
    }
    let lines = |server: &Server, start: &[&str]| {
        let args = [&["tail"][..], start, &["--until", "0s"]].concat();
        ok(ringfeed(server, &args, None))
    };
    let of_a = lines(&servers[0], &["--beginning"]);
    assert_eq!(of_a.len(), 3);
    let cursor = of_a[0]["cursor"].as_str().expect("cursor");
    // A resumes its own cursor.
    assert_eq!(lines(&servers[0], &["--cursor", cursor]), of_a[1..]);
    // B refuses it, saying why.
    let out = ringfeed(
        &servers[1],
        &["tail", "--cursor", cursor, "--until", "0s"],
        None,
    );
    assert_ne!(out.code(), Some(0), "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    assert!(
        out.stderr.contains("made by another data dir"),
        "the refusal says why: {out}"
    );
}
