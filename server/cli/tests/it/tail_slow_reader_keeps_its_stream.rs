//! `ringfeed tail | slow-program`: a tail whose stdout is not read keeps its
//! one stream open, shown falling behind, past the server's HTTP/2
//! keepalive (here a ping 2 s after the last frame, 1 s for the answer; 20 s
//! and 10 s by default), and prints every event once when the reader comes
//! back. Written from the runtime, a blocked stdout kept the tail from
//! answering the pings: the server closed the connection after the
//! keepalive and the tail reconnected from its cursor (no event lost, but
//! the stream dropped out of the subscriber list and came back as a new
//! one, every 30 s by default). The keepalive is shortened so the test
//! waits 8 s, not 40.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::serve_binary::Server;
use ringfeed_proto::{v1, RingFeedClient};

/// Longer than the server's keepalive interval plus its timeout (3 s here),
/// twice over.
const UNREAD_FOR: Duration = Duration::from_secs(8);
const EVENTS: usize = 2_000;

#[test]
fn a_tail_nobody_reads_keeps_its_stream_past_the_keepalive() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ringfeed.toml");
    std::fs::write(
        &config,
        "keepalive_interval_secs = 2\nkeepalive_timeout_secs = 1\n",
    )
    .unwrap();
    let server = Server::start_with(
        &dir.path().join("data"),
        2,
        &["--config", config.to_str().unwrap()],
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut client = rt
        .block_on(RingFeedClient::connect(format!("http://{}", server.addr)))
        .expect("connect");
    let mut tail = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args(["tail", "--beginning", "--server", &server.addr])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting ringfeed tail");
    let _watched = ringfeed_testkit::watch_child(tail.id());
    let listed = |client: &mut RingFeedClient<_>| {
        rt.block_on(client.list_subscribers(v1::ListSubscribersRequest {}))
            .expect("list subscribers")
            .into_inner()
            .subscribers
    };
    // 8 MB of events: far more than the pipe, the HTTP/2 windows and the
    // socket buffers hold, so the tail is stopped by its unread stdout.
    for batch in 0..EVENTS / 100 {
        let events = (0..100)
            .map(|i| v1::Event {
                directory: format!("/d{}", i % 5),
                new_entry: Some(v1::Entry {
                    name: format!("f{batch}-{i}"),
                    attributes: vec![b'x'; 4000].into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        rt.block_on(client.append(v1::AppendRequest {
            events,
            ..Default::default()
        }))
        .expect("append");
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let first = loop {
        match listed(&mut client).first() {
            Some(s) => break s.clone(),
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            None => panic!("the tail's stream was never listed"),
        }
    };
    let unread_until = Instant::now() + UNREAD_FOR;
    let mut behind = 0;
    while Instant::now() < unread_until {
        std::thread::sleep(Duration::from_millis(500));
        let now = listed(&mut client);
        assert_eq!(
            now.len(),
            1,
            "the tail's stream went away while its stdout was not read: {now:?}"
        );
        assert_eq!(
            now[0].connected_since_ns, first.connected_since_ns,
            "the tail reconnected while its stdout was not read"
        );
        behind = now[0].lag_events;
    }
    assert!(behind > 0, "the unread tail was never shown behind");
    // The reader comes back: every event, once.
    let mut offsets = BTreeSet::new();
    let mut lines = BufReader::new(tail.stdout.take().expect("stdout")).lines();
    while offsets.len() < EVENTS {
        let line = lines.next().expect("a line").expect("reading the tail");
        let value: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        let at = (
            value["shard"].as_u64().unwrap(),
            value["offset"].as_u64().unwrap(),
        );
        assert!(offsets.insert(at), "printed twice: {line}");
    }
    let _ = tail.kill();
    let _ = tail.wait();
    server.stop();
}
