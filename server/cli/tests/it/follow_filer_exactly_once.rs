//! `serve --follow-filer` against a real SeaweedFS filer: ringfeed's feed
//! holds every event of the filer's own log once, in the filer's order, with
//! the filer's `ts_ns` and notification; across SIGKILLs of ringfeed in the
//! middle of the ingest, and of the filer; and one filer frozen does not
//! hold back another.

use std::time::Duration;

use crate::metrics_endpoint::scrape_until;
use crate::serve_binary::{run_bounded, Server};
use crate::weed::{self, LogEvent, Weed};
use ringfeed_proto::filer_pb;
use ringfeed_proto::prost::Message;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// Every SeaweedFS event in ringfeed's feed (from the beginning) at or
/// before filer time `until`, read until the first event past it (the one
/// [`cut`] made) arrives: so a duplicate anywhere before it is seen. The
/// watchdog bounds the wait.
async fn ringfeed_log(addr: &str, until: i64) -> Vec<LogEvent> {
    ringfeed_log_of(addr, None, until).await
}

/// [`ringfeed_log`] of the events from one `filer` (as `--follow-filer`
/// names it), or from every filer followed.
async fn ringfeed_log_of(addr: &str, filer: Option<&str>, until: i64) -> Vec<LogEvent> {
    let mut client = RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let mut stream = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            client_name: "filer-check".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    loop {
        let response = stream
            .message()
            .await
            .unwrap()
            .expect("the feed never ends");
        let messages = match response.item {
            Some(v1::subscribe_response::Item::Event(e)) => vec![e],
            Some(v1::subscribe_response::Item::Batch(b)) => b.events,
            _ => continue,
        };
        for message in messages {
            let event = message.event.unwrap();
            let stored = event.seaweedfs.clone().expect("only filer events here");
            if filer.is_some_and(|f| f != stored.filer) {
                continue;
            }
            let notification =
                filer_pb::EventNotification::decode(stored.event_notification.clone()).unwrap();
            // The native view names the same paths as the notification.
            assert_eq!(
                event.old_entry.as_ref().map(|e| &e.name),
                notification.old_entry.as_ref().map(|e| &e.name)
            );
            assert_eq!(
                event.new_entry.as_ref().map(|e| &e.name),
                notification.new_entry.as_ref().map(|e| &e.name)
            );
            if stored.ts_ns > until {
                return events;
            }
            events.push(LogEvent {
                ts_ns: stored.ts_ns,
                directory: event.directory,
                notification,
            });
        }
    }
}

/// Ends the filer's log for a comparison: everything up to now, then one
/// more event past it so a read `until` now ends.
async fn cut(weed: &Weed) -> i64 {
    let until = now_ns();
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", &format!("cut-{until}"), false)
        .await
        .unwrap();
    until
}

/// What the server logged about a filer stream that failed.
fn filer_warnings(server: &Server) -> Vec<String> {
    let lines = server.stderr.lock().unwrap();
    lines
        .iter()
        .filter(|l| l.contains("following the filer"))
        .cloned()
        .collect()
}

fn assert_same_log(filer: &[LogEvent], ringfeed: &[LogEvent]) {
    eprintln!(
        "the filer's log: {} events; ringfeed's copy: {}",
        filer.len(),
        ringfeed.len()
    );
    let ts = |log: &[LogEvent]| log.iter().map(|e| e.ts_ns).collect::<Vec<_>>();
    assert_eq!(
        ts(ringfeed),
        ts(filer),
        "ringfeed holds each of the filer's events once, in its order"
    );
    assert_eq!(ringfeed, filer, "as the filer sent them");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_filer_is_stored_once_in_its_order() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        2,
        &[
            "--follow-filer",
            &weed.filer,
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", "it", true).await.unwrap();
    for d in ["a", "b"] {
        weed::create(&mut filer, "/it", d, true).await.unwrap();
    }
    for i in 0..30 {
        weed::create(&mut filer, "/it/a", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    for i in 0..10 {
        let name = format!("f{i}");
        weed::rename(&mut filer, ("/it/a", &name), ("/it/b", &name)).await;
    }
    for i in 10..15 {
        let (old, new) = (format!("f{i}"), format!("g{i}"));
        weed::rename(&mut filer, ("/it/a", &old), ("/it/a", &new)).await;
    }
    for i in 15..20 {
        weed::delete(&mut filer, "/it/a", &format!("f{i}")).await;
    }
    let until = cut(&weed).await;
    let log = weed::filer_log(&weed, until).await;
    assert!(log.len() >= 53, "the filer logged {} events", log.len());
    let stored = ringfeed_log(&server.addr, until).await;
    assert_same_log(&log, &stored);
    let warned = filer_warnings(&server);
    assert!(warned.is_empty(), "{warned:?}");

    // The filer is visible: `ringfeed status` and /metrics.
    let mut status = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    status.args(["status", "--server", &server.addr]);
    let status = run_bounded(status, None, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0), "{status}");
    let text = &status.stdout;
    let row = text
        .lines()
        .find(|l| l.starts_with(&weed.filer))
        .unwrap_or_else(|| panic!("no row for the filer:\n{text}"));
    assert!(row.contains("streaming"), "{row}");
    let at = server.metrics.clone().unwrap();
    let stored_count = stored.len() as f64;
    let scrape = tokio::task::spawn_blocking(move || {
        scrape_until(&at, "the filer's events counted", |m| {
            m.sum("ringfeed_filer_events_total") > stored_count
        })
    })
    .await
    .unwrap();
    assert_eq!(scrape.sum("ringfeed_filer_connected"), 1.0);
    assert_eq!(scrape.sum("ringfeed_filer_failing"), 0.0);
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_ingest_keeps_each_event_once() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let flags = ["--follow-filer", weed.filer.as_str()];
    let mut server = Server::start_with(dir.path(), 2, &flags);
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", "k", true).await.unwrap();
    // Paced, so the kills fall while the filer's events stream in: about
    // 2 s of creates, ringfeed killed every 300 ms (and down while it
    // restarts, so it also catches up a backlog each time).
    let (done_tx, mut done) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(async move {
        for i in 0..600 {
            weed::create(&mut filer, "/k", &format!("f{i}"), false)
                .await
                .unwrap();
            if i % 10 == 9 {
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        }
        let _ = done_tx.send(true);
    });
    let mut kills = 0;
    while !*done.borrow() {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(300)) => {}
            _ = done.changed() => break,
        }
        // A restart resumes without a stream failing (the filer sends the
        // last stored event again; that is not a fault).
        let warned = filer_warnings(&server);
        assert!(warned.is_empty(), "{warned:?}");
        server.kill();
        kills += 1;
        server = Server::start_with(dir.path(), 2, &flags);
    }
    writer.await.unwrap();
    eprintln!("ringfeed killed {kills} times while the filer's events came in");
    assert!(kills >= 3, "killed mid-ingest only {kills} times");
    let until = cut(&weed).await;
    let log = weed::filer_log(&weed, until).await;
    assert!(log.len() >= 601, "the filer logged {} events", log.len());
    let stored = ringfeed_log(&server.addr, until).await;
    assert_same_log(&log, &stored);

    server.stop();
}

/// The filer SIGKILLed while ringfeed follows it and restarted: ringfeed
/// reconnects and resumes after its last stored event. A SeaweedFS filer
/// keeps the newest part of its metadata log in memory (flushed to its
/// volume servers about once a minute), so its own log after the restart
/// may have lost events ringfeed had already stored: ringfeed's copy holds
/// the filer's whole log, once each, in order, plus those.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filer_killed_mid_ingest_loses_nothing_ringfeed_stored() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(mut weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 2, &["--follow-filer", &weed.filer]);
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", "p", true).await.unwrap();
    for i in 0..150 {
        weed::create(&mut filer, "/p", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    weed.restart_filer().await;
    let mut filer = weed.client().await.unwrap();
    for i in 150..300 {
        weed::create(&mut filer, "/p", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    let until = cut(&weed).await;
    let log = weed::filer_log(&weed, until).await;
    let stored = ringfeed_log(&server.addr, until).await;
    let ts: Vec<i64> = stored.iter().map(|e| e.ts_ns).collect();
    assert!(
        ts.windows(2).all(|w| w[0] < w[1]),
        "ringfeed holds each event once, in the filer's order"
    );
    // Each event of the filer's log, as the filer sent it (the signature a
    // filer adds is its own, drawn anew at each start: compared without).
    let unsigned = |e: &LogEvent| {
        let mut e = e.clone();
        e.notification.signatures.clear();
        e
    };
    let held: std::collections::HashMap<i64, LogEvent> =
        stored.iter().map(|e| (e.ts_ns, unsigned(e))).collect();
    for event in &log {
        assert_eq!(
            held.get(&event.ts_ns),
            Some(&unsigned(event)),
            "the filer's event at {} is in ringfeed's copy",
            event.ts_ns
        );
    }
    let names = |log: &[LogEvent]| {
        log.iter()
            .filter(|e| e.directory == "/p")
            .filter_map(|e| e.notification.new_entry.as_ref().map(|n| n.name.clone()))
            .collect::<std::collections::BTreeSet<_>>()
            .len()
    };
    eprintln!(
        "the filer's log after its restart: {} events ({} files of /p); ringfeed's copy: {} ({} files)",
        log.len(),
        names(&log),
        stored.len(),
        names(&stored)
    );
    let warned = filer_warnings(&server);
    assert!(
        warned.iter().all(|w| !w.contains("went back")),
        "{warned:?}"
    );
    server.stop();
}

/// Two filers followed, one frozen (SIGSTOP) while both take creates, for
/// longer than the filer API's hold: the other's events are stored while it
/// is frozen, and reach a `SubscribeMetadata` subscriber once the hold has
/// run out; once thawed (SIGCONT), the frozen filer's events are stored and
/// delivered too (late); each of ringfeed's copies equals its filer's own
/// log, and the subscriber got every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_filer_holds_back_only_itself() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(a) = Weed::start().await else {
        return;
    };
    let Some(b) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        2,
        &[
            "--follow-filer",
            &a.filer,
            "--follow-filer",
            &b.filer,
            "--filer-listen",
            "127.0.0.1:0",
        ],
    );
    let mut client = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    // A SeaweedFS subscriber of both, through ringfeed's filer API: the
    // names it got, in order.
    let delivered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut view = crate::filer_api_weed_clients::filer_api_client(&server)
        .await
        .subscribe_metadata(filer_pb::SubscribeMetadataRequest {
            client_name: "frozen-filer-test".into(),
            path_prefix: "/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let reading = tokio::spawn({
        let delivered = delivered.clone();
        async move {
            while let Some(response) = view.message().await.unwrap() {
                let names = std::iter::once(&response).chain(&response.events);
                for r in names {
                    if let Some(entry) = r
                        .event_notification
                        .as_ref()
                        .and_then(|n| n.new_entry.as_ref())
                    {
                        let path = format!("{}/{}", r.directory, entry.name);
                        delivered.lock().unwrap().push(path);
                    }
                }
            }
        }
    });
    let got = |path: &str| {
        delivered
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    };
    let events_of = |status: &v1::StatusResponse, filer: &str| {
        let f = status.filers.iter().find(|f| f.filer == filer).unwrap();
        (f.events, f.seen_ts_ns)
    };
    let (mut to_a, mut to_b) = (a.client().await.unwrap(), b.client().await.unwrap());
    weed::create(&mut to_a, "/", "a", true).await.unwrap();
    weed::create(&mut to_b, "/", "b", true).await.unwrap();
    for i in 0..20 {
        weed::create(&mut to_b, "/b", &format!("before{i}"), false)
            .await
            .unwrap();
    }
    b.signal_filer("STOP");
    let frozen_at = now_ns();
    // What the filer sent before it froze may still be on its way (its own
    // log's flushes are events too, and a loaded machine reads them late):
    // its count is taken once it has held still for a second.
    let mut stable = (0, std::time::Instant::now());
    let stored_b = loop {
        let status = client.status(v1::StatusRequest::default()).await.unwrap();
        let (events, seen) = events_of(status.get_ref(), &b.filer);
        if events != stable.0 {
            stable = (events, std::time::Instant::now());
        }
        if events >= 21 && seen > 0 && stable.1.elapsed() >= Duration::from_secs(1) {
            break events;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // The frozen filer's creates wait in its socket; the other's flow.
    let writer = tokio::spawn(async move {
        for i in 0..20 {
            weed::create(&mut to_b, "/b", &format!("frozen{i}"), false)
                .await
                .unwrap();
        }
        to_b
    });
    for i in 0..200 {
        weed::create(&mut to_a, "/a", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    let a_log = weed::filer_log(&a, now_ns()).await;
    let want_a = a_log.len() as u64;
    loop {
        let status = client.status(v1::StatusRequest::default()).await.unwrap();
        let (a_events, _) = events_of(status.get_ref(), &a.filer);
        let (b_events, b_seen) = events_of(status.get_ref(), &b.filer);
        assert_eq!(b_events, stored_b, "nothing came from the frozen filer");
        assert!(b_seen <= frozen_at, "nor a heartbeat");
        // Frozen past one of its heartbeats (every 5 s): visibly behind;
        // and past the filer API's hold (8 s): the other's events go out.
        if a_events >= want_a && now_ns() - frozen_at > 10_000_000_000 {
            assert!(now_ns() - b_seen > 5_000_000_000);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "while one filer was frozen for {:.1} s, the other's {want_a} events were stored",
        (now_ns() - frozen_at) as f64 / 1e9
    );
    let waited = std::time::Instant::now();
    while (0..200).any(|i| got(&format!("/a/f{i}")) == 0) {
        assert!(
            waited.elapsed() < Duration::from_secs(5),
            "the other filer's events did not reach the subscriber while one was frozen \
             past the hold: {} of 200",
            (0..200).filter(|i| got(&format!("/a/f{i}")) > 0).count()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(got("/b/frozen0"), 0, "nothing of the frozen filer's yet");
    b.signal_filer("CONT");
    let mut to_b = writer.await.unwrap();
    for i in 0..20 {
        weed::create(&mut to_b, "/b", &format!("after{i}"), false)
            .await
            .unwrap();
    }
    for weed in [&a, &b] {
        let until = cut(weed).await;
        let log = weed::filer_log(weed, until).await;
        let stored = ringfeed_log_of(&server.addr, Some(&weed.filer), until).await;
        assert_same_log(&log, &stored);
    }
    // The subscriber got every event of both, once (the frozen filer's late).
    let names: Vec<String> = (0..200)
        .map(|i| format!("/a/f{i}"))
        .chain(
            ["before", "frozen", "after"]
                .iter()
                .flat_map(|w| (0..20).map(move |i| format!("/b/{w}{i}"))),
        )
        .collect();
    let waited = std::time::Instant::now();
    while names.iter().any(|n| got(n) == 0) && waited.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for name in &names {
        assert_eq!(got(name), 1, "{name} through the filer API");
    }
    reading.abort();
    let warned = filer_warnings(&server);
    assert!(warned.is_empty(), "{warned:?}");
    server.stop();
}
