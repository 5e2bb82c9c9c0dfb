//! Filers that send what a filer must not (a notification decoders read
//! differently, a timestamp going back) fail alone, with a clear error in
//! `status` and on `/metrics`; nothing wrong is stored, and a filer beside
//! them that heartbeats endlessly goes on being followed.

use std::time::Duration;

use crate::fake_filer::{first_filer_until, FakeFiler, Sent, Then};
use crate::metrics_endpoint::Scrape;
use crate::serve_binary::{run_bounded, Server};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};

fn create(ts_ns: i64, directory: &str, name: &str) -> Sent {
    Sent::Create {
        ts_ns,
        directory: directory.into(),
        name: name.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_filers_fail_alone_and_nothing_wrong_is_stored() {
    let _watchdog = ringfeed_testkit::arm();
    let good = FakeFiler::start(
        (1..=10)
            .map(|i| create(i * 1000, "/good", &format!("f{i}")))
            .collect(),
        Then::Heartbeats,
    )
    .await;
    // old_entry (field 1) as a group (wire type 3): prost and Python's
    // protobuf read such bytes differently.
    let malformed = FakeFiler::start(
        vec![
            create(100, "/bad", "first"),
            Sent::Raw {
                ts_ns: 200,
                directory: "/bad".into(),
                bytes: vec![0x0b, 0x0c],
            },
            create(300, "/bad", "after"),
        ],
        Then::Hold,
    )
    .await;
    // Back 2.5 s: more than a filer's own disorder (concurrent writes) explains.
    let backwards = FakeFiler::start(
        vec![
            create(3_000_000_000, "/back", "a"),
            create(500_000_000, "/back", "b"),
        ],
        Then::Hold,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        2,
        &[
            "--follow-filer",
            &good.address,
            "--follow-filer",
            &malformed.address,
            "--follow-filer",
            &backwards.address,
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let mut client = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    // Each hostile filer is tried again (with backoff) and fails the same way.
    let filers = loop {
        let status = client
            .status(v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner();
        let by = |address: &str| {
            status
                .filers
                .iter()
                .find(|f| f.filer == address)
                .cloned()
                .unwrap()
        };
        let (g, m, b) = (
            by(&good.address),
            by(&malformed.address),
            by(&backwards.address),
        );
        // The malformed filer sends its bad event on every stream, so it is
        // refused again after each backoff; the one that went back is
        // resumed after the last event stored and is not asked for it again.
        if g.events == 10
            && m.refused >= 2
            && m.last_refused.contains("event_notification")
            && b.refused == 1
            && b.last_refused.contains("went back more than 2 s")
            && b.connected
        {
            break (g, m, b);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (good_status, malformed_status, backwards_status) = filers;
    assert!(good_status.connected && good_status.error.is_empty());
    assert_eq!(good_status.refused, 0);
    assert!(good_status.seen_ts_ns > 10_000, "its heartbeats are seen");
    assert_eq!(malformed_status.events, 1, "the event before the bad one");
    assert_eq!(malformed_status.stored_ts_ns, 100);
    assert_eq!(backwards_status.events, 1);
    assert_eq!(backwards_status.stored_ts_ns, 3_000_000_000);

    // The operator sees why, per filer: `ringfeed status` and /metrics.
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["status", "--server", &server.addr]);
    let status = run_bounded(command, None, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{status}");
    let refused = |filer: &str| format!("filer {filer}: last refused: ");
    for (filer, why) in [
        (&malformed.address, "wire type 3 (a group) is refused"),
        (&backwards.address, "its log went back more than 2 s"),
    ] {
        let line = status
            .stdout
            .lines()
            .find(|l| l.starts_with(&refused(filer)))
            .unwrap_or_else(|| panic!("no refusal shown for {filer}:\n{}", status.stdout));
        assert!(line.contains(why), "{line}");
    }
    assert!(
        !status.stdout.contains(&refused(&good.address)),
        "{}",
        status.stdout
    );
    let at = server.metrics.clone().unwrap();
    let scrape = tokio::task::spawn_blocking(move || Scrape::get(&at))
        .await
        .unwrap();
    let count = |filer: &str| scrape.labelled("ringfeed_filer_refused_total", "filer", filer);
    assert_eq!(count(&good.address), 0.0);
    assert!(count(&malformed.address) >= 2.0);
    assert_eq!(count(&backwards.address), 1.0);

    // Stored: the good filer's ten, and each hostile one's event before its fault.
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut got = crate::common::read_events(&mut stream, 12, &mut Vec::new()).await;
    let status = client
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let committed: u64 = status.shards.iter().map(|s| s.committed_next).sum();
    assert_eq!(committed, 12, "nothing else is stored");
    got.sort_by_key(|(_, _, _, e)| {
        let s = e.seaweedfs.clone().unwrap();
        (s.filer, s.ts_ns)
    });
    let stored: Vec<(String, i64, String)> = got
        .into_iter()
        .map(|(_, _, _, e)| {
            let s = e.seaweedfs.unwrap();
            (s.filer, s.ts_ns, e.new_entry.unwrap().name)
        })
        .collect();
    let mut want: Vec<(String, i64, String)> = (1..=10)
        .map(|i| (good.address.clone(), i * 1000, format!("f{i}")))
        .collect();
    want.push((malformed.address.clone(), 100, "first".into()));
    want.push((backwards.address.clone(), 3_000_000_000, "a".into()));
    want.sort();
    assert_eq!(stored, want);
    server.stop();
}

/// A filer that keeps its stream open and sends nothing, not even the
/// heartbeat a SeaweedFS filer sends every 5 s (a frozen process whose
/// kernel still holds the connection): given up as stalled, shown as down
/// with why, and opened again; what it sent is stored once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_filer_is_given_up_as_stalled() {
    let _watchdog = ringfeed_testkit::arm();
    let silent = FakeFiler::start(vec![create(100, "/quiet", "only")], Then::Hold).await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 1, &["--follow-filer", &silent.address]);
    let started = std::time::Instant::now();
    let (filer, _) = first_filer_until(&server, |f| {
        f.reconnects >= 1 && f.error.contains("stalled")
    })
    .await;
    eprintln!(
        "given up as stalled after {:?}: {}",
        started.elapsed(),
        filer.error
    );
    assert!(!filer.connected);
    assert_eq!(
        (filer.events, filer.stored_ts_ns, filer.refused),
        (1, 100, 0)
    );
    server.stop();
}
