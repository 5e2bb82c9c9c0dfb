//! SIGTERM during a durable write load: the real `ringfeed serve` binary stops
//! accepting, flushes, syncs and exits 0, and after a restart every
//! acknowledged durable event is there (read back through Subscribe).

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::*;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;

fn start_server(dir: &std::path::Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--shards",
            "2",
            "--data-dir",
        ])
        .arg(dir)
        .stdout(Stdio::piped())
        .spawn()
        .expect("server starts");
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        let line = lines.next().expect("server printed its address").unwrap();
        if let Some(addr) = line.strip_prefix("listening on ") {
            break addr.to_string();
        }
    };
    // Keep draining stdout so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_acknowledged_durable_event_survives_sigterm() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (mut child, addr) = start_server(dir.path());
    let url = format!("http://{addr}");
    let mut writers = Vec::new();
    for w in 0..4 {
        let url = url.clone();
        writers.push(tokio::spawn(async move {
            let mut client = ringfeed_proto::RingFeedClient::connect(url).await.unwrap();
            let mut acked = Vec::new();
            for i in 0.. {
                let events: Vec<v1::Event> = (0..20)
                    .map(|j| create(&format!("/w{w}/d{}", j % 4), &format!("f{i}-{j}")))
                    .collect();
                match client.append(request(events.clone(), true)).await {
                    Ok(r) => acked.extend(r.into_inner().positions.into_iter().zip(events)),
                    Err(_) => break, // the server is going away
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    // SIGTERM to the child we started, by its PID.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(exit.success(), "graceful stop exits 0, got {exit:?}");
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.unwrap());
    }
    assert!(acked.len() > 100, "the load ran ({} acked)", acked.len());

    let (mut child, addr) = start_server(dir.path());
    let mut client = ringfeed_proto::RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let until = acked.iter().map(|(p, _)| p.ts_ns).max().unwrap();
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            until_ns: until,
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let stored = read_events(&mut stream, usize::MAX, &mut Vec::new()).await;
    let stored: std::collections::HashMap<(u32, u64), v1::Event> =
        stored.into_iter().map(|(_, s, o, e)| ((s, o), e)).collect();
    for (p, e) in &acked {
        assert_eq!(
            stored.get(&(p.shard, p.offset)),
            Some(e),
            "acked event at {p:?} is missing or different"
        );
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}

/// `listening on` is a promise that SIGTERM is handled: a SIGTERM sent the
/// moment the line appears stops the server gracefully (exit 0), never kills
/// it. The handler used to be installed only when the server was first
/// polled, after the line; under load the signal landed first (CI).
#[test]
fn sigterm_right_after_listening_is_graceful() {
    let _watchdog = ringfeed_testkit::arm();
    for round in 0..10 {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let (mut child, _) = start_server(dir.path());
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().unwrap();
        assert!(status.success(), "round {round}: {status:?}");
    }
}
