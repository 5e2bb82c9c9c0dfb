//! The command line's parsing, output forms and exit codes.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::{
    Entry, Event, Ordering, Position, ShardStatus, StatusResponse, SubscriberInfo,
};

use ringfeed_client::FollowedEvent;

use super::append::{ack_line, flag_event, read_batches, AppendArgs};
use super::exit_code;
use super::status::{render_status, StatusArgs};
use super::tail::{event_line, subscribe_request, Progress, TailArgs};
use super::time::parse_timestamp;

use clap::Parser;
use ringfeed_proto::prost::Message;

#[derive(Parser, Debug)]
enum Cli {
    Append(AppendArgs),
    Tail(TailArgs),
    Status(StatusArgs),
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("ringfeed").chain(args.iter().copied()))
}

fn append_args(args: &[&str]) -> AppendArgs {
    let mut all = vec!["append"];
    all.extend_from_slice(args);
    match parse(&all).expect("parse") {
        Cli::Append(a) => a,
        other => panic!("{other:?}"),
    }
}

fn tail_args(args: &[&str]) -> TailArgs {
    let mut all = vec!["tail"];
    all.extend_from_slice(args);
    match parse(&all).expect("parse") {
        Cli::Tail(a) => a,
        other => panic!("{other:?}"),
    }
}

fn entry(name: &str) -> Option<Entry> {
    Some(Entry {
        name: name.into(),
        ..Default::default()
    })
}

/// The synopsis in docs/commands.md names every flag `--help` shows for
/// append and tail (the access flags --token and --tls-* are described
/// under Security).
#[test]
fn the_readme_synopsis_lists_every_flag() {
    use clap::CommandFactory;
    let commands = include_str!("../../../docs/commands.md");
    for sub in ["append", "tail"] {
        let start = format!("ringfeed {sub} ");
        let synopsis: String = commands
            .lines()
            .skip_while(|line| !line.starts_with(&start))
            .take_while(|line| line.starts_with(&start) || line.starts_with("   "))
            .collect();
        assert!(
            !synopsis.is_empty(),
            "no `{start}` synopsis in docs/commands.md"
        );
        let mut cmd = Cli::command();
        let cmd = cmd.find_subcommand_mut(sub).expect("subcommand");
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            if arg.is_hide_set()
                || matches!(long, "help" | "token" | "tls-ca" | "tls-cert" | "tls-key")
            {
                continue;
            }
            assert!(
                synopsis.contains(&format!("--{long}")),
                "the `ringfeed {sub}` synopsis in docs/commands.md lacks --{long}"
            );
        }
    }
}

#[test]
fn help_documents_every_flag() {
    use clap::CommandFactory;
    for sub in ["append", "tail", "status"] {
        let mut cmd = Cli::command();
        let cmd = cmd.find_subcommand_mut(sub).expect("subcommand");
        for arg in cmd.get_arguments() {
            if matches!(arg.get_id().as_str(), "help" | "version") {
                continue;
            }
            assert!(
                arg.get_help().is_some_and(|h| !h.to_string().is_empty()),
                "{sub} --{} has no help",
                arg.get_id()
            );
        }
    }
}

#[test]
fn defaults() {
    let a = append_args(&[]);
    assert_eq!(a.access.server, "127.0.0.1:7070");
    assert_eq!(a.batch, 1024);
    assert!(!a.durable && a.dir.is_none());
    match parse(&["status", "--server", "h:1", "--json"]).expect("parse") {
        Cli::Status(s) => assert!(s.json && s.access.server == "h:1"),
        other => panic!("{other:?}"),
    }
    let request = subscribe_request(&tail_args(&[]), 5).expect("request");
    assert_eq!(request.start, Some(Start::Now(true)));
    assert_eq!(request.until_ns, 0);
    assert_eq!(request.ordering, Ordering::Merged as i32);
    // Batches by default (issue 35); --no-batching asks for one event per
    // response; a cluster tail batches too (issue 39).
    assert!(request.batching && !request.heartbeats);
    let one = subscribe_request(&tail_args(&["--no-batching"]), 5).expect("request");
    assert!(!one.batching);
    let cluster = subscribe_request(&tail_args(&["--cluster"]), 5).expect("request");
    assert!(cluster.batching);
    let cluster_one =
        subscribe_request(&tail_args(&["--cluster", "--no-batching"]), 5).expect("request");
    assert!(!cluster_one.batching);
    assert!(parse(&["tail", "--batching", "--no-batching"]).is_err());
}

#[test]
fn flag_events_map_ops_to_entries() {
    let event = |args: &[&str]| flag_event(&append_args(args));
    assert_eq!(
        event(&[
            "--dir",
            "/a",
            "--name",
            "f",
            "--op",
            "create",
            "--signature",
            "3",
            "--signature",
            "4"
        ])
        .expect("create"),
        Event {
            directory: "/a".into(),
            new_entry: entry("f"),
            signatures: vec![3, 4],
            ..Default::default()
        }
    );
    assert_eq!(
        event(&["--dir", "/a", "--name", "f", "--op", "delete"]).expect("delete"),
        Event {
            directory: "/a".into(),
            old_entry: entry("f"),
            ..Default::default()
        }
    );
    assert_eq!(
        event(&["--dir", "/a", "--name", "f", "--op", "update"]).expect("update"),
        Event {
            directory: "/a".into(),
            old_entry: entry("f"),
            new_entry: entry("f"),
            ..Default::default()
        }
    );
    assert_eq!(
        event(&[
            "--dir",
            "/a",
            "--name",
            "f",
            "--op",
            "rename",
            "--new-dir",
            "/b"
        ])
        .expect("move"),
        Event {
            directory: "/a".into(),
            old_entry: entry("f"),
            new_entry: entry("f"),
            new_parent_path: "/b".into(),
            ..Default::default()
        }
    );
    assert_eq!(
        event(&[
            "--dir",
            "/a",
            "--name",
            "f",
            "--op",
            "rename",
            "--new-name",
            "g"
        ])
        .expect("rename"),
        Event {
            directory: "/a".into(),
            old_entry: entry("f"),
            new_entry: entry("g"),
            ..Default::default()
        }
    );
    assert!(event(&["--dir", "/a", "--name", "f", "--op", "rename"]).is_err());
    assert!(event(&[
        "--dir",
        "/a",
        "--name",
        "f",
        "--op",
        "create",
        "--new-name",
        "g"
    ])
    .is_err());
}

#[test]
fn flag_event_flags_need_each_other() {
    assert!(parse(&["append", "--dir", "/a", "--op", "create"]).is_err());
    assert!(parse(&["append", "--dir", "/a", "--name", "f"]).is_err());
    assert!(parse(&["append", "--name", "f"]).is_err());
    assert!(parse(&["append", "--signature", "1"]).is_err());
    assert!(parse(&["append", "--dir", "/a", "--name", "f", "--op", "move"]).is_err());
    assert!(parse(&["append", "--batch", "0"]).is_err());
}

fn batches(input: &str, batch: usize) -> (Result<u64>, Vec<Vec<Event>>) {
    let mut got = Vec::new();
    let result = read_batches(input.as_bytes(), batch, |events| {
        got.push(events);
        true
    });
    (result, got)
}

fn dir_event(dir: &str) -> Event {
    Event {
        directory: dir.into(),
        new_entry: entry("f"),
        ..Default::default()
    }
}

#[test]
fn json_lines_are_batched_in_order() {
    let input = "{\"directory\":\"/1\",\"newEntry\":{\"name\":\"f\"}}\n\n   \n\
                 {\"directory\":\"/2\",\"new_entry\":{\"name\":\"f\"}}\n\
                 {\"directory\":\"/3\",\"newEntry\":{\"name\":\"f\"}}";
    let (result, got) = batches(input, 2);
    assert_eq!(result.expect("read"), 3);
    assert_eq!(
        got,
        vec![
            vec![dir_event("/1"), dir_event("/2")],
            vec![dir_event("/3")]
        ]
    );
    let (result, got) = batches("", 2);
    assert_eq!(result.expect("read"), 0);
    assert!(got.is_empty());
}

#[test]
fn a_bad_line_names_its_number_and_sends_nothing_of_its_batch() {
    let good = "{\"directory\":\"/1\",\"newEntry\":{\"name\":\"f\"}}\n";
    let input = format!("{good}{good}{good}{{\"directory\":\"/4\",\"newEntri\":{{}}}}\n{good}");
    let (result, got) = batches(&input, 2);
    let err = format!("{:#}", result.expect_err("bad line accepted"));
    assert!(err.contains("stdin line 4"), "{err}");
    assert!(err.contains("newEntri"), "{err}");
    // Lines 1-2 went as a batch; line 3 shared a batch with line 4.
    assert_eq!(got, vec![vec![dir_event("/1"), dir_event("/1")]]);
}

#[test]
fn reading_stops_when_nobody_listens() {
    let good = "{\"directory\":\"/1\"}\n".repeat(5);
    let mut calls = 0;
    let sent = read_batches(good.as_bytes(), 2, |_| {
        calls += 1;
        calls < 2
    })
    .expect("read");
    assert_eq!((sent, calls), (2, 2));
}

#[test]
fn ack_lines_are_numbers() {
    let line = ack_line(&Position {
        shard: 1,
        offset: 18446744073709551615,
        ts_ns: 1_700_000_000_123_456_789,
    });
    assert_eq!(
        line,
        r#"{"shard":1,"offset":18446744073709551615,"ts":1700000000123456789}"#
    );
    let value: serde_json::Value = serde_json::from_str(&line).expect("json");
    assert!(value["shard"].is_u64() && value["offset"].is_u64() && value["ts"].is_i64());
}

#[test]
fn tail_filters_and_bounds() {
    let request = subscribe_request(
        &tail_args(&[
            "--prefix",
            "/a",
            "--prefix",
            "/b",
            "--prefix",
            "/c",
            "--exclude",
            "/a/tmp",
            "--dir",
            "/d",
            "--since-ns",
            "42",
            "--until-ns",
            "99",
            "--per-shard",
            "--signature",
            "7",
            "--progress",
        ]),
        0,
    )
    .expect("request");
    assert_eq!(request.path_prefix, "/a");
    assert_eq!(request.path_prefixes, ["/b", "/c"]);
    assert_eq!(request.exclude_prefixes, ["/a/tmp"]);
    assert_eq!(request.directories, ["/d"]);
    assert_eq!(request.start, Some(Start::SinceNs(42)));
    assert_eq!(request.until_ns, 99);
    assert_eq!(request.ordering, Ordering::PerShard as i32);
    assert_eq!(request.signature, 7);
    assert!(request.heartbeats);

    let start =
        |args: &[&str]| subscribe_request(&tail_args(args), 10_000_000_000_000).map(|r| r.start);
    assert_eq!(
        start(&["--beginning"]).expect("beginning"),
        Some(Start::Beginning(true))
    );
    assert_eq!(
        start(&["--since", "1h"]).expect("since 1h"),
        Some(Start::SinceNs(10_000_000_000_000 - 3_600_000_000_000))
    );
    assert_eq!(
        start(&["--since", "1970-01-01T00:00:01.5Z"]).expect("since time"),
        Some(Start::SinceNs(1_500_000_000))
    );
    assert_eq!(
        start(&["--cursor", "AAEC_w"]).expect("cursor"),
        Some(Start::Cursor(Bytes::from_static(&[0, 1, 2, 255])))
    );
    assert!(start(&["--since", "yesterday-ish"]).is_err());
    assert!(start(&["--cursor", "not base64!"]).is_err());
    assert!(start(&["--signature", "0"]).is_err());
    assert!(parse(&["tail", "--beginning", "--since", "1h"]).is_err());
    assert!(parse(&["tail", "--cursor", "AA", "--since-ns", "1"]).is_err());
    assert!(parse(&["tail", "--until", "2026-01-01T00:00:00Z", "--until-ns", "1"]).is_err());
    assert!(parse(&["tail", "--until-ns", "0"]).is_err());
    let until = subscribe_request(&tail_args(&["--until", "2026-11-29T10:00:00Z"]), 0)
        .expect("until")
        .until_ns;
    assert_eq!(until, 1_795_946_400_000_000_000);
    // --until takes the forms --since does (issue 35).
    let now = 1_795_946_400_000_000_000;
    let until = subscribe_request(&tail_args(&["--until", "10m"]), now)
        .expect("until 10m")
        .until_ns;
    assert_eq!(until, now - 600_000_000_000);
    // A --since in the future is refused, saying so.
    let future = subscribe_request(&tail_args(&["--since", "2027-01-01T00:00:00Z"]), now);
    let refused = future.expect_err("a future --since");
    assert!(refused.to_string().contains("in the future"), "{refused}");
    // A cursor as subscribers --json prints it (standard base64) reads alike.
    assert_eq!(
        start(&["--cursor", "AAEC/w=="]).expect("standard base64"),
        Some(Start::Cursor(Bytes::from_static(&[0, 1, 2, 255])))
    );
}

#[test]
fn timestamps_with_offsets() {
    let utc = parse_timestamp("2026-11-29T10:00:00Z").expect("utc");
    assert_eq!(
        parse_timestamp("2026-11-29T12:00:00+02:00").expect("+2"),
        utc
    );
    assert_eq!(
        parse_timestamp("2026-11-29T08:30:00-01:30").expect("-1:30"),
        utc
    );
    assert_eq!(
        parse_timestamp("2026-11-29 10:00:00").expect("space, no zone"),
        utc
    );
    assert_eq!(
        parse_timestamp("2026-11-29T10:00:00.000000001Z").expect("ns"),
        utc + 1
    );
    assert!(parse_timestamp("2026-11-29T12:00:00+0200").is_err());
    assert!(parse_timestamp("1h").is_err());
}

#[test]
fn tail_lines_are_one_json_object_per_event() {
    let event = FollowedEvent {
        ts_ns: 1000,
        shard: 1,
        offset: 0,
        node: 0,
        event: dir_event("/a").encode_to_vec().into(),
    };
    let mut text = Vec::new();
    event_line(&mut text, &event, &[1]).expect("event");
    assert_eq!(
        String::from_utf8(text.clone()).unwrap(),
        "{\"ts\":1000,\"shard\":1,\"offset\":0,\"cursor\":\"AQ\",\"op\":\"create\",\"event\":{\"directory\":\"/a\",\"newEntry\":{\"name\":\"f\"}}}\n"
    );
    let garbage = FollowedEvent {
        event: Bytes::from_static(&[0xff]),
        ..event
    };
    let before = text.len();
    assert!(event_line(&mut text, &garbage, &[1]).is_err());
    assert_eq!(text.len(), before, "a line that fails is not half written");
}

#[test]
fn progress_speaks_at_most_once_a_second_while_behind() {
    let mut progress = Progress::new();
    let t0 = progress.since;
    let now_ns = 100_000_000_000;
    progress.observe(1, 1000);
    assert!(progress
        .line(t0 + Duration::from_millis(500), now_ns)
        .is_none());
    let line = progress
        .line(t0 + Duration::from_secs(2), now_ns)
        .expect("line");
    assert!(
        line.starts_with("progress: 1 events, 0 events/s, lag 100.0s"),
        "{line}"
    );
    // Caught up and quiet: silent.
    progress.observe(0, now_ns - 1000);
    assert!(progress.line(t0 + Duration::from_secs(4), now_ns).is_none());
    // Quiet with a heartbeat period of lag: still silent; far behind: speaks.
    assert!(progress
        .line(t0 + Duration::from_secs(6), now_ns + 1_500_000_000)
        .is_none());
    let line = progress
        .line(t0 + Duration::from_secs(8), now_ns + 10_000_000_000)
        .expect("behind");
    assert!(line.ends_with("lag 10.0s"), "{line}");
    // Nothing known yet: nothing to say.
    assert!(Progress::new()
        .line(Instant::now() + Duration::from_secs(2), now_ns)
        .is_none());
}

#[test]
fn progress_says_caught_up_once_at_the_live_edge() {
    let mut progress = Progress::new();
    let t0 = progress.since;
    let now_ns = 100_000_000_000;
    // Far behind at the edge of what arrived: not caught up.
    assert!(progress.at_edge(now_ns - 10_000_000_000, now_ns).is_none());
    progress.observe(5, now_ns - 10_000_000);
    let line = progress
        .at_edge(now_ns - 5_000_000, now_ns)
        .expect("caught up");
    assert_eq!(line, "caught up: 5 events, lag 0.0s; following live");
    assert!(progress.at_edge(now_ns, now_ns).is_none(), "said once");
    // Live events then are not progress to report.
    progress.observe(3, now_ns);
    assert!(progress.line(t0 + Duration::from_secs(2), now_ns).is_none());
    // Far behind again: progress lines, then caught up again.
    assert!(progress
        .line(t0 + Duration::from_secs(4), now_ns + 10_000_000_000)
        .is_some());
    let now_ns = now_ns + 10_000_000_000;
    assert!(progress.at_edge(now_ns, now_ns).is_some());
}

#[test]
fn exit_codes_follow_grpc_status() {
    let err = anyhow::Error::from(Status::out_of_range("cursor 5 on shard 0\nis gone"));
    assert_eq!(
        exit_code(&err),
        (
            11,
            "error: OUT_OF_RANGE: cursor 5 on shard 0 is gone".to_owned()
        )
    );
    let err = anyhow::Error::from(Status::invalid_argument("events[0].directory: relative"))
        .context("appending");
    assert_eq!(
        exit_code(&err),
        (
            3,
            "error: INVALID_ARGUMENT: events[0].directory: relative".to_owned()
        )
    );
    let err = anyhow!("stdin line 4 is not an Event").context("append");
    assert_eq!(
        exit_code(&err),
        (1, "error: append: stdin line 4 is not an Event".to_owned())
    );
}

#[test]
fn error_chains_say_each_cause_once() {
    // As the engine's I/O errors are: the message ends with its source's.
    #[derive(Debug, thiserror::Error)]
    #[error("{what}: {source}")]
    struct Io {
        what: String,
        #[source]
        source: std::io::Error,
    }
    let io = Io {
        what: "creating /data/shard-000".into(),
        source: std::io::Error::from_raw_os_error(13),
    };
    let err = anyhow::Error::from(io).context("opening data dir /data");
    assert_eq!(
        exit_code(&err).1,
        "error: opening data dir /data: creating /data/shard-000: Permission denied (os error 13)"
    );
    // Causes that say something new are all kept.
    let err = anyhow!("disk full").context("flushing").context("shard 0");
    assert_eq!(exit_code(&err).1, "error: shard 0: flushing: disk full");
}

#[test]
fn status_renders_as_tables() {
    let status = StatusResponse {
        shards: vec![
            ShardStatus {
                shard: 0,
                committed_next: 1200,
                committed_ts_ns: 1_795_946_400_000_000_000,
                flushed_next: 1100,
                evicted_below: 1000,
                ring_bytes: 8 << 20,
                unflushed_bytes: 4096,
                segment_count: 2,
                ..Default::default()
            },
            ShardStatus {
                shard: 1,
                latched: "fdatasync failed: EIO".into(),
                ..Default::default()
            },
        ],
        subscribers: 1,
        now_ns: 1_795_946_401_000_000_000,
        version: "0.1.0".into(),
        node_id: 0,
        ..Default::default()
    };
    let subscriber = SubscriberInfo {
        client_name: "ringfeed tail".into(),
        peer: "127.0.0.1:5000".into(),
        path_prefix: "/a".into(),
        exclude_prefixes: vec!["/a/tmp".into()],
        mode: "live".into(),
        lag_seconds: 0.25,
        events_sent: 7,
        cursor: vec![0x52, 0x43, 0x01].into(),
        ..Default::default()
    };
    let text = render_status(&status, Some(&[subscriber]));
    let expected = "\
ringfeed 0.1.0 at 2026-11-29T10:00:01.000000Z: 2 shards, 1 subscriber

shard  committed  flushed  evicted  retained  ring bytes  unflushed bytes  segments  last committed               latched
    0       1200     1100     1000         0     8388608             4096         2  2026-11-29T10:00:00.000000Z  -
    1          0        0        0         0           0                0         0  -                            fdatasync failed: EIO
(committed/flushed = first offset not yet committed/durable; evicted = ring holds offsets from here; retained = oldest offset on disk)

client         id  epoch  peer            mode  lag events  lag s  sent  connected since  filters                   cursor
ringfeed tail   0      0  127.0.0.1:5000  live           0  0.250     7  -                prefix=/a exclude=/a/tmp  UkMB
";
    assert_eq!(text, expected, "\n{text}");
    assert!(render_status(&status, Some(&[])).ends_with("\nno subscribers\n"));
    // A node of a cluster says which.
    let node = StatusResponse {
        node_id: 3,
        ..status
    };
    assert!(render_status(&node, None)
        .starts_with("ringfeed 0.1.0 (node 3) at 2026-11-29T10:00:01.000000Z: 2 shards"));
}
