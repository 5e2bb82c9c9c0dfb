//! `serve --filer-listen`: SeaweedFS's own `weed filer.meta.tail`, pointed
//! at ringfeed following a real filer, prints the events it prints pointed
//! at the filer itself (the same `tsNs`, paths and notifications, in the same
//! order; ringfeed adds its signature), with `-pathPrefix`, `-timeAgo` and
//! `-untilTimeAgo`; and the filer API's other RPCs are refused, saying why.

use std::time::{Duration, Instant};

use crate::serve_binary::{run_bounded, Server};
use crate::weed::{self, Weed};
use ringfeed_proto::filer_pb;
use ringfeed_proto::filer_pb::seaweed_filer_client::SeaweedFilerClient;

/// What `weed filer.meta.tail` printed: one JSON object per event, without
/// its signatures (each server adds its own) and without the response's
/// batch and flush fields (how it was sent: weed prints a batch's envelope
/// with the batch in it, then each event of the batch on its own).
fn tail(weed: &Weed, filer: &str, flags: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["filer.meta.tail"];
    let filer = format!("-filer={filer}");
    args.push(&filer);
    args.extend_from_slice(flags);
    let started = Instant::now();
    let out = run_bounded(weed.command(&args), None, Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "weed {args:?}: {out}");
    eprintln!(
        "weed {args:?}: {:?}\nSTDERR {}",
        started.elapsed(),
        out.stderr
    );
    let mut events = Vec::new();
    for printed in serde_json::Deserializer::from_str(&out.stdout).into_iter::<serde_json::Value>()
    {
        let mut event =
            printed.unwrap_or_else(|e| panic!("weed printed other than JSON: {e}\n{out}"));
        let Some(fields) = event.as_object_mut() else {
            continue;
        };
        fields.remove("events");
        fields.remove("flushedTsNs");
        fields.remove("logFileRefs");
        match fields
            .get_mut("eventNotification")
            .and_then(|n| n.as_object_mut())
        {
            Some(n) => {
                n.remove("signatures");
            }
            None => continue,
        }
        events.push(event);
    }
    events
}

/// The two printouts are the same, event by event.
fn assert_same(ringfeed: &[serde_json::Value], filer: &[serde_json::Value]) {
    let ts = |events: &[serde_json::Value]| -> Vec<String> {
        events.iter().map(|e| e["tsNs"].to_string()).collect()
    };
    let (r, f) = (ts(ringfeed), ts(filer));
    if r != f {
        let only_r: Vec<_> = r.iter().filter(|t| !f.contains(t)).collect();
        let only_f: Vec<_> = f.iter().filter(|t| !r.contains(t)).collect();
        panic!(
            "ringfeed printed {} events, the filer {}; only ringfeed's: {only_r:?}; only the \
             filer's: {only_f:?}",
            r.len(),
            f.len()
        );
    }
    for (r, f) in ringfeed.iter().zip(filer) {
        assert_eq!(r, f, "the event at {}", f["tsNs"]);
    }
}

fn ms_since(at: Instant) -> String {
    format!("{}ms", at.elapsed().as_millis())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weed_filer_meta_tail_prints_the_same_through_ringfeed() {
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
            "--filer-listen",
            "127.0.0.1:0",
        ],
    );
    let ringfeed = server.filer_api.clone().unwrap();
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", "it", true).await.unwrap();
    for d in ["a", "b"] {
        weed::create(&mut filer, "/it", d, true).await.unwrap();
    }
    for i in 0..20 {
        weed::create(&mut filer, "/it/a", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let middle = Instant::now();
    let middle_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // weed takes `-timeAgo` and `-untilTimeAgo` from its own start, a moment
    // after the command is built: the gap keeps that moment off any event.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for i in 0..5 {
        let name = format!("f{i}");
        weed::rename(&mut filer, ("/it/a", &name), ("/it/b", &name)).await;
    }
    for i in 5..10 {
        weed::delete(&mut filer, "/it/a", &format!("f{i}")).await;
    }
    for i in 0..5 {
        weed::create(&mut filer, "/it/b", &format!("g{i}"), false)
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    let start = Instant::now();

    tokio::task::spawn_blocking(move || {
        // Everything up to half a second ago, then the end (OK).
        let whole = |to: &str| tail(&weed, to, &["-timeAgo=1h", "-untilTimeAgo=500ms"]);
        let direct = whole(&weed.filer);
        assert_eq!(
            direct.len(),
            39,
            "ready, /it, a, b, 20 creates, 5 moves, 5 deletes, 5 creates"
        );
        assert_same(&whole(&ringfeed), &direct);
        // A prefix: the source or the target path under it.
        let under = |to: &str| {
            tail(
                &weed,
                to,
                &["-timeAgo=1h", "-untilTimeAgo=500ms", "-pathPrefix=/it/b"],
            )
        };
        let direct = under(&weed.filer);
        assert_eq!(
            direct.len(),
            5 + 5 + 1,
            "5 moves in, 5 creates, /it/b itself"
        );
        assert_same(&under(&ringfeed), &direct);
        // From the middle, and up to it: the filer's own log cut there, and
        // what the filer prints asked the same.
        let ts = |e: &serde_json::Value| e["tsNs"].as_str().unwrap().parse::<u128>().unwrap();
        let log = whole(&weed.filer);
        let (before, after): (Vec<_>, Vec<_>) = log.into_iter().partition(|e| ts(e) <= middle_ns);
        assert_eq!(
            (before.len(), after.len()),
            (24, 15),
            "the filer's log around the middle"
        );
        let since = || format!("-timeAgo={}", ms_since(middle));
        assert_same(
            &tail(&weed, &weed.filer, &[&since(), "-untilTimeAgo=500ms"]),
            &after,
        );
        assert_same(
            &tail(&weed, &ringfeed, &[&since(), "-untilTimeAgo=500ms"]),
            &after,
        );
        let until = || format!("-untilTimeAgo={}", ms_since(middle));
        assert_same(
            &tail(&weed, &weed.filer, &["-timeAgo=1h", &until()]),
            &before,
        );
        assert_same(&tail(&weed, &ringfeed, &["-timeAgo=1h", &until()]), &before);
        eprintln!("compared in {:?}", start.elapsed());
        drop(weed);
    })
    .await
    .unwrap();
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_filer_apis_other_rpcs_say_ringfeed_serves_the_feed_only() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 1, &["--filer-listen", "127.0.0.1:0"]);
    let api = server.filer_api.clone().unwrap();
    let grpc = api.rsplit_once('.').unwrap().1;
    let host = api.rsplit_once(':').unwrap().0;
    let mut client = SeaweedFilerClient::connect(format!("http://{host}:{grpc}"))
        .await
        .unwrap();
    let refused = client
        .lookup_directory_entry(filer_pb::LookupDirectoryEntryRequest {
            directory: "/".into(),
            name: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ringfeed_proto::tonic::Code::Unimplemented);
    assert!(
        refused
            .message()
            .contains("LookupDirectoryEntry: ringfeed serves the SeaweedFS metadata feed only"),
        "{}",
        refused.message()
    );
    let configuration = client
        .get_filer_configuration(filer_pb::GetFilerConfigurationRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_ne!(configuration.signature, 0);
    assert!(
        configuration.version.starts_with("ringfeed "),
        "{}",
        configuration.version
    );
    server.stop();
}

/// The filer API takes no tokens: beyond loopback, or beside a token file,
/// it is refused unless the operator says `--insecure`.
#[test]
fn an_open_filer_api_needs_insecure() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut serve = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    serve.args(["serve", "--data-dir"]).arg(&data);
    serve.args(["--listen", "127.0.0.1:0", "--filer-listen", "0.0.0.0:0"]);
    let refused = run_bounded(serve, None, Duration::from_secs(20));
    assert_eq!(refused.code(), Some(1), "{refused}");
    assert!(
        refused.stderr.contains(
            "the SeaweedFS filer API (--filer-listen 0.0.0.0:0) takes no tokens and no TLS"
        ),
        "{refused}"
    );
    assert!(!data.exists(), "refused before the data dir is made");
}
