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
use ringfeed_proto::tonic::transport::{Channel, Endpoint};

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

/// A client of `server`'s filer API (`--filer-listen`), on the gRPC port of
/// the `HOST:PORT.GRPCPORT` it printed.
pub(crate) async fn filer_api_client(server: &Server) -> SeaweedFilerClient<Channel> {
    let api = server.filer_api.clone().unwrap();
    let (host, grpc) = (
        api.rsplit_once(':').unwrap().0,
        api.rsplit_once('.').unwrap().1,
    );
    SeaweedFilerClient::connect(format!("http://{host}:{grpc}"))
        .await
        .unwrap()
}

/// A server in `data` following `weed`'s filer and serving the filer API on
/// a free loopback port, with `more` flags.
fn fronting(weed: &Weed, data: &std::path::Path, more: &[&str]) -> Server {
    let mut flags = vec![
        "--follow-filer",
        &weed.filer,
        "--filer-listen",
        "127.0.0.1:0",
    ];
    flags.extend_from_slice(more);
    Server::start_with(data, 2, &flags)
}

/// `weed filer.backup` of `-filerPath=path` from `filer` into the local
/// directory `at/out`, run in `at` (where its `replication.toml` is written).
fn local_backup(
    weed: &Weed,
    filer: &str,
    path: &str,
    at: &std::path::Path,
) -> std::process::Command {
    std::fs::create_dir_all(at).unwrap();
    std::fs::write(
        at.join("replication.toml"),
        format!(
            "[sink.local]\nenabled = true\ndirectory = \"{}\"\nis_incremental = false\n",
            at.join("out").display()
        ),
    )
    .unwrap();
    let mut backup = weed.command(&[
        "filer.backup",
        &format!("-filer={filer}"),
        &format!("-filerPath={path}"),
    ]);
    backup.current_dir(at);
    backup
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
    let server = fronting(&weed, dir.path(), &[]);
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
    let mut client = filer_api_client(&server).await;
    let refused = client
        .create_entry(filer_pb::CreateEntryRequest {
            directory: "/".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), ringfeed_proto::tonic::Code::Unimplemented);
    assert!(
        refused
            .message()
            .starts_with("CreateEntry: ringfeed serves the SeaweedFS metadata feed only"),
        "{}",
        refused.message()
    );
    // Reads forwarded to the followed filer: none is followed here. A
    // lookup finds nothing, said as a filer says it (SeaweedFS clients
    // match `filer_pb.ErrNotFound`'s message); a listing is refused.
    let not_found = client
        .lookup_directory_entry(filer_pb::LookupDirectoryEntryRequest {
            directory: "/".into(),
            name: "x".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(not_found.code(), ringfeed_proto::tonic::Code::Unknown);
    assert_eq!(
        not_found.message(),
        "filer: no entry is found in filer store"
    );
    let unanswered = match client
        .list_entries(filer_pb::ListEntriesRequest {
            directory: "/".into(),
            ..Default::default()
        })
        .await
    {
        Ok(listed) => listed.into_inner().message().await.unwrap_err(),
        Err(status) => status,
    };
    assert_eq!(
        unanswered.code(),
        ringfeed_proto::tonic::Code::FailedPrecondition
    );
    assert!(
        unanswered.message().contains("follows no filer"),
        "{}",
        unanswered.message()
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
    // A subscription's paths are bounded as natively (200,000 prefixes, a
    // 2.4 MB request, were once taken and read at ~1,000 events/s).
    let too_many = client
        .subscribe_metadata(filer_pb::SubscribeMetadataRequest {
            client_name: "too many".into(),
            path_prefixes: (0..200_000).map(|i| format!("/p/{i}")).collect(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        too_many.code(),
        ringfeed_proto::tonic::Code::InvalidArgument
    );
    assert!(
        too_many.message().contains("more than the 65536"),
        "{}",
        too_many.message()
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
            "the SeaweedFS filer API (--filer-listen 0.0.0.0:0) takes no tokens: anyone on the network could read the feed"
        ),
        "{refused}"
    );
    assert!(!data.exists(), "refused before the data dir is made");
}

/// With a token file, the filer API is served over mutual TLS, SeaweedFS's
/// own gRPC security: `weed filer.meta.tail` with the CA and a client
/// certificate in its `security.toml` prints the feed; a client without a
/// certificate gets nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weed_reads_the_filer_api_over_mutual_tls() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(60));
    let Some(weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let pki = crate::tls_round_trip::make_pki(dir.path());
    let (_, table) = crate::serve_binary::new_token(&["--read", "/"]);
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, table).unwrap();
    let path = |p: &std::path::Path| p.to_str().unwrap().to_owned();
    let server = fronting(
        &weed,
        &dir.path().join("data"),
        &[
            "--token-file",
            &path(&tokens),
            "--tls-cert",
            &path(&pki.server_cert),
            "--tls-key",
            &path(&pki.server_key),
            "--tls-client-ca",
            &path(&pki.ca),
        ],
    );
    let ringfeed = server.filer_api.clone().unwrap();
    let mut filer = weed.client().await.unwrap();
    weed::create(&mut filer, "/", "tls", true).await.unwrap();
    for i in 0..3 {
        weed::create(&mut filer, "/tls", &format!("f{i}"), false)
            .await
            .unwrap();
    }
    // The plaintext client of the other tests is refused.
    let api = ringfeed.clone();
    let (host, grpc) = (
        api.rsplit_once(':').unwrap().0,
        api.rsplit_once('.').unwrap().1,
    );
    let plain = async {
        let mut client = SeaweedFilerClient::connect(format!("http://{host}:{grpc}")).await?;
        client
            .get_filer_configuration(filer_pb::GetFilerConfigurationRequest::default())
            .await
            .map(|_| ())
            .map_err(Into::<Box<dyn std::error::Error>>::into)
    };
    let refused = tokio::time::timeout(Duration::from_secs(10), plain).await;
    assert!(
        matches!(refused, Ok(Err(_))),
        "a client without TLS must not be answered: {refused:?}"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;

    let secure = tempfile::tempdir().unwrap();
    std::fs::write(
        secure.path().join("security.toml"),
        format!(
            "[grpc]\nca = {:?}\n\n[grpc.client]\ncert = {:?}\nkey = {:?}\n",
            path(&pki.ca),
            path(&pki.client_cert),
            path(&pki.client_key)
        ),
    )
    .unwrap();
    tokio::task::spawn_blocking(move || {
        let mut command = weed.command(&[
            "filer.meta.tail",
            &format!("-filer={ringfeed}"),
            "-timeAgo=1h",
            "-untilTimeAgo=500ms",
            "-pathPrefix=/tls",
        ]);
        command.current_dir(secure.path());
        let out = run_bounded(command, None, Duration::from_secs(20));
        assert_eq!(
            out.code(),
            Some(0),
            "weed filer.meta.tail over mutual TLS: {out}"
        );
        for name in ["\"tls\"", "\"f0\"", "\"f1\"", "\"f2\""] {
            assert!(out.stdout.contains(name), "{name} missing: {out}");
        }
        drop(weed);
    })
    .await
    .unwrap();
    server.stop();
}

/// The filer API's streams draw on the response budget the native streams
/// do, and a SeaweedFS client that stops reading gives its share back after
/// `stall_timeout`: a native reader waits for the budget until then, and the
/// stalled client, once it reads again, gets what its transport held, then
/// UNAVAILABLE (a SeaweedFS client reconnects from its last `ts_ns`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_filer_api_client_gives_its_budget_back() {
    use crate::cluster_nodes::{append, config_file, read_all_within_budget};
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let stall_timeout = Duration::from_secs(3);
    let config = config_file(
        dir.path(),
        "response_budget_bytes = 16384\nsubscriber_send_buffer_bytes = 8192\n\
         stall_timeout_secs = 3\n",
    );
    let server = Server::start_with(
        &dir.path().join("data"),
        1,
        &["--config", &config, "--filer-listen", "127.0.0.1:0"],
    );
    // ~0.5 MB of responses: far more than the budget covers.
    const EVENTS: usize = 4_000;
    append(&server.addr, 1, 0, EVENTS, true).await;
    // A SeaweedFS client that never reads, with an 8 KiB stream window: its
    // transport fills at once, then its queue, up to the budget.
    let api = server.filer_api.clone().unwrap();
    let (host, grpc) = (
        api.rsplit_once(':').unwrap().0,
        api.rsplit_once('.').unwrap().1,
    );
    let channel = Endpoint::from_shared(format!("http://{host}:{grpc}"))
        .unwrap()
        .initial_stream_window_size(Some(8 << 10))
        .connect()
        .await
        .unwrap();
    let subscribed = Instant::now();
    let mut stalled = SeaweedFilerClient::new(channel)
        .subscribe_metadata(filer_pb::SubscribeMetadataRequest {
            client_name: "stalled".into(),
            path_prefix: "/".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A node-scope reader of everything: each response waits for budget.
    let (seen, done) = read_all_within_budget(&server.addr, EVENTS).await;
    assert!(
        done >= subscribed + stall_timeout,
        "the reader finished {:?} after the stalled filer API client subscribed, before its \
         stall timeout of {stall_timeout:?} gave the budget back",
        done - subscribed
    );
    assert_eq!(seen, EVENTS);
    let mut received = 0;
    let ended = loop {
        match tokio::time::timeout(Duration::from_secs(20), stalled.message())
            .await
            .expect("the stalled stream neither sent nor ended")
        {
            Ok(Some(r)) => received += 1 + r.events.len(),
            Ok(None) => panic!("the stream ended OK after {received} events"),
            Err(status) => break status,
        }
    };
    assert!(
        received > 0 && received < EVENTS,
        "{received} events before the end"
    );
    crate::common::assert_given_back(&ended);
    server.stop();
}

/// The files under `dir`, by path relative to it, with their contents.
fn tree(dir: &std::path::Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut files = std::collections::BTreeMap::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(at) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                todo.push(path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                files.insert(name, bytes);
            }
        }
    }
    files
}

/// `weed filer.backup` (local sink) pointed at ringfeed copies what it
/// copies pointed at the filer: the same files with the same contents (read
/// from the volume servers the forwarded `LookupVolume` names; the sink
/// holds the paths under `-filerPath`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weed_filer_backup_copies_the_same_through_ringfeed() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = fronting(&weed, dir.path().join("data").as_path(), &[]);
    let ringfeed = server.filer_api.clone().unwrap();
    for i in 0..10 {
        weed.put_file(
            &format!("/bk/f{i}.txt"),
            format!("file {i} ").repeat(i + 1).as_bytes(),
        );
    }
    weed.put_file("/bk/sub/deep.bin", &[7u8; 3000]);
    weed.put_file("/bk/f3.txt", b"written again");
    let want: std::collections::BTreeMap<String, Vec<u8>> = (0..10)
        .map(|i| {
            let body = match i {
                3 => b"written again".to_vec(),
                i => format!("file {i} ").repeat(i + 1).into_bytes(),
            };
            (format!("f{i}.txt"), body)
        })
        .chain([("sub/deep.bin".to_owned(), vec![7u8; 3000])])
        .collect();
    let dir = dir.path().to_owned();
    tokio::task::spawn_blocking(move || {
        let mut copies = Vec::new();
        for (name, filer) in [("direct", weed.filer.clone()), ("ringfeed", ringfeed)] {
            let at = dir.join(name);
            let mut backup = local_backup(&weed, &filer, "/bk", &at);
            backup
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            let mut child = backup.spawn().unwrap();
            let _owned = ringfeed_testkit::own_child(child.id());
            let started = Instant::now();
            let copied = loop {
                let copied = tree(&at.join("out"));
                if copied == want {
                    break copied;
                }
                assert!(
                    child.try_wait().unwrap().is_none(),
                    "weed filer.backup -filer={filer} exited"
                );
                std::thread::sleep(Duration::from_millis(100));
            };
            eprintln!(
                "filer.backup through {name}: {} files in {:?}",
                copied.len(),
                started.elapsed()
            );
            let _ = child.kill();
            let _ = child.wait();
            copies.push(copied);
        }
        assert_eq!(copies[0], copies[1]);
        drop(weed);
    })
    .await
    .unwrap();
    server.stop();
}

/// `weed filer.backup` keeps its offset in ringfeed (`KvPut`, every 3 s while
/// events flow) and, restarted, resumes from it (`KvGet`): a file copied
/// before the offset and removed from the backup since is not copied again,
/// and the files written while it was down are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weed_filer_backup_resumes_from_its_offset_in_ringfeed() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(weed) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = fronting(&weed, dir.path().join("data").as_path(), &[]);
    let ringfeed = server.filer_api.clone().unwrap();
    let at = dir.path().join("backup");
    let out = at.join("out");
    tokio::task::spawn_blocking(move || {
        let backup = |log: &str| {
            let mut backup = local_backup(&weed, &ringfeed, "/rs", &at);
            let log = std::fs::File::create(at.join(log)).unwrap();
            backup.stdout(std::process::Stdio::null()).stderr(log);
            let child = backup.spawn().unwrap();
            let owned = ringfeed_testkit::own_child(child.id());
            (child, owned)
        };
        let until = |what: &str, done: &dyn Fn() -> bool| {
            let started = Instant::now();
            while !done() {
                assert!(started.elapsed() < Duration::from_secs(20), "{what}");
                std::thread::sleep(Duration::from_millis(100));
            }
        };
        for i in 0..3 {
            weed.put_file(&format!("/rs/a{i}.txt"), format!("a{i}").as_bytes());
        }
        let (mut first, owned) = backup("first.log");
        until("the first files copied", &|| out.join("a2.txt").exists());
        // An event more than 3 s after the first: filer.backup saves its
        // offset (KvPut to ringfeed) as it processes it.
        std::thread::sleep(Duration::from_millis(3500));
        weed.put_file("/rs/a3.txt", b"a3");
        until("the offset saved", &|| {
            std::fs::read_to_string(at.join("first.log"))
                .unwrap_or_default()
                .contains("progressed to")
        });
        until("a3 copied", &|| out.join("a3.txt").exists());
        let _ = first.kill();
        let _ = first.wait();
        drop(owned);
        std::fs::remove_file(out.join("a0.txt")).unwrap();
        for i in 0..3 {
            weed.put_file(&format!("/rs/b{i}.txt"), format!("b{i}").as_bytes());
        }
        let (mut second, _owned) = backup("second.log");
        until("the files written while it was down copied", &|| {
            (0..3).all(|i| out.join(format!("b{i}.txt")).exists())
        });
        std::thread::sleep(Duration::from_secs(1));
        assert!(
            !out.join("a0.txt").exists(),
            "filer.backup started over instead of resuming from its offset in ringfeed"
        );
        for name in ["a1.txt", "a2.txt", "a3.txt", "b0.txt", "b1.txt", "b2.txt"] {
            let want = name.trim_end_matches(".txt");
            assert_eq!(
                std::fs::read(out.join(name)).unwrap(),
                want.as_bytes(),
                "{name}"
            );
        }
        let _ = second.kill();
        let _ = second.wait();
        drop(weed);
    })
    .await
    .unwrap();
    server.stop();
}

/// `weed filer.sync` with ringfeed as its source (`-a`, active-passive)
/// copies a filer's files to a second filer: the files there before it
/// started and those written after, an overwrite and a delete; the contents
/// read from the first filer's volume servers (`LookupVolume` forwarded).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weed_filer_sync_copies_from_ringfeed_to_another_filer() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(source) = Weed::start().await else {
        return;
    };
    let Some(target) = Weed::start().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = fronting(&source, dir.path(), &[]);
    let ringfeed = server.filer_api.clone().unwrap();
    let body = |name: &str| format!("{name} ").repeat(50).into_bytes();
    for i in 0..5 {
        source.put_file(&format!("/sync/f{i}.txt"), &body(&format!("f{i}")));
    }
    let mut sync = source.command(&[
        "filer.sync",
        &format!("-a={ringfeed}"),
        &format!("-b={}", target.filer),
        "-isActivePassive",
    ]);
    sync.stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    let mut child = sync.spawn().unwrap();
    let _owned = ringfeed_testkit::own_child(child.id());
    for i in 0..5 {
        source.put_file(&format!("/sync/g{i}.txt"), &body(&format!("g{i}")));
    }
    source.put_file("/sync/f0.txt", b"written again");
    let mut filer = source.client().await.unwrap();
    weed::delete(&mut filer, "/sync", "f1.txt").await;
    let want: Vec<(String, Option<Vec<u8>>)> = (0..5)
        .map(|i| {
            let f = match i {
                0 => Some(b"written again".to_vec()),
                1 => None,
                i => Some(body(&format!("f{i}"))),
            };
            (format!("/sync/f{i}.txt"), f)
        })
        .chain((0..5).map(|i| (format!("/sync/g{i}.txt"), Some(body(&format!("g{i}"))))))
        .collect();
    let started = Instant::now();
    tokio::task::spawn_blocking(move || {
        loop {
            let differ: Vec<&String> = want
                .iter()
                .filter(|(path, body)| target.get_file(path) != *body)
                .map(|(path, _)| path)
                .collect();
            if differ.is_empty() {
                break;
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "weed filer.sync -a={ringfeed} exited"
            );
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the target filer still differs after 30 s: {differ:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        eprintln!(
            "filer.sync from ringfeed: in step after {:?}",
            started.elapsed()
        );
        let _ = child.kill();
        let _ = child.wait();
        drop((source, target));
    })
    .await
    .unwrap();
    server.stop();
}

/// `KvPut` is durable: a restarted server answers `KvGet` with it (where
/// `filer.backup` and `filer.sync` keep their offsets); a missing key is an
/// empty value, and an empty value removes a key, as on a filer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kv_puts_survive_a_restart() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 1, &["--filer-listen", "127.0.0.1:0"]);
    let mut kv = filer_api_client(&server).await;
    let get = |key: &'static [u8]| filer_pb::KvGetRequest {
        key: key.to_vec().into(),
    };
    assert!(kv
        .kv_get(get(b"backup.offset"))
        .await
        .unwrap()
        .into_inner()
        .value
        .is_empty());
    for (key, value) in [
        (&b"backup.offset"[..], &b"\x00\x01\x02\x03"[..]),
        (b"gone", b"x"),
        (b"gone", b""),
    ] {
        let put = kv
            .kv_put(filer_pb::KvPutRequest {
                key: key.to_vec().into(),
                value: value.to_vec().into(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(put.error.is_empty(), "{}", put.error);
    }
    server.kill();
    let server = Server::start_with(dir.path(), 1, &["--filer-listen", "127.0.0.1:0"]);
    let mut kv = filer_api_client(&server).await;
    let got = kv.kv_get(get(b"backup.offset")).await.unwrap().into_inner();
    assert_eq!(
        (&got.value[..], got.error.as_str()),
        (&b"\x00\x01\x02\x03"[..], "")
    );
    assert!(kv
        .kv_get(get(b"gone"))
        .await
        .unwrap()
        .into_inner()
        .value
        .is_empty());
    server.stop();
}

/// Many streams of the same few requests, catching up together and then
/// following live, each get every event they match exactly once, in time
/// order, whether they built a round of responses or took one another
/// stream of the same request built (`ringfeed_shared_responses_reused_total`
/// says they did); streams of other requests, and late joiners at other
/// positions, are not mixed up with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_of_one_request_share_rounds_and_each_get_every_event_once() {
    use crate::cluster_nodes::append;
    use crate::metrics_endpoint::{scrape_until, Scrape};
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        2,
        &[
            "--filer-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    const BEFORE: usize = 3_000;
    const LIVE: usize = 600;
    for from in (0..BEFORE).step_by(1_000) {
        append(&server.addr, 1, from, 1_000, false).await;
    }
    // (events `append` makes: /n1/d{i % 5}/f{i})
    let wanted = |prefix: &str, until: usize| -> Vec<String> {
        (0..until)
            .map(|i| format!("/n1/d{}/f{i}", i % 5))
            .filter(|p| p.starts_with(prefix))
            .collect()
    };
    // Subscribed when awaited; the reader it returns checks the stream.
    #[allow(clippy::async_yields_async)]
    let subscribe = |prefix: &'static str, batching: bool| {
        let server_api = filer_api_client(&server);
        async move {
            let mut client = server_api.await;
            let mut stream = client
                .subscribe_metadata(filer_pb::SubscribeMetadataRequest {
                    client_name: "shared".into(),
                    path_prefix: prefix.into(),
                    client_supports_batching: batching,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
            let want = wanted(prefix, BEFORE + LIVE);
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut last_ts = 0;
                while got.len() < want.len() {
                    let response = stream.message().await.unwrap().expect("open");
                    for r in std::iter::once(&response).chain(&response.events) {
                        let Some(n) = &r.event_notification else {
                            continue;
                        };
                        let Some(entry) = &n.new_entry else { continue };
                        assert!(r.ts_ns >= last_ts, "out of time order");
                        last_ts = r.ts_ns;
                        got.push(format!("{}/{}", r.directory, entry.name));
                    }
                }
                // In time order (checked above), which across shards is
                // not the order of `i`: each event once.
                let mut sorted = got.clone();
                sorted.sort();
                let mut expected = want.clone();
                expected.sort();
                let first_difference = sorted.iter().zip(&expected).find(|(g, w)| g != w);
                assert!(
                    sorted == expected,
                    "{prefix} (batching {batching}): {} events, {} wanted; first difference \
                     (got, wanted): {first_difference:?}",
                    got.len(),
                    want.len()
                );
            })
        }
    };
    let mut readers = Vec::new();
    for _ in 0..12 {
        readers.push(subscribe("/", false).await);
    }
    for _ in 0..6 {
        readers.push(subscribe("/n1/d0", false).await);
        readers.push(subscribe("/", true).await);
    }
    // Late joiners, at other positions of the same requests.
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..3 {
        readers.push(subscribe("/", false).await);
    }
    append(&server.addr, 1, BEFORE, LIVE / 2, false).await;
    for _ in 0..3 {
        readers.push(subscribe("/n1/d0", false).await);
    }
    append(&server.addr, 1, BEFORE + LIVE / 2, LIVE / 2, false).await;
    for reader in readers {
        tokio::time::timeout(Duration::from_secs(20), reader)
            .await
            .expect("a stream did not get all its events in 20 s")
            .unwrap();
    }
    let metrics = server.metrics.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        let reused = |s: &Scrape| s.sum("ringfeed_shared_responses_reused_total");
        scrape_until(&metrics, "rounds shared", |s| reused(s) > 0.0);
    })
    .await
    .unwrap();
    server.stop();
}

/// The reads ringfeed forwards go to the first followed filer whose stream
/// is open: with the first followed filer down, `ListEntries` is answered
/// by the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_reads_go_to_a_followed_filer_that_is_up() {
    use ringfeed_proto::{v1, RingFeedClient};
    let _watchdog = ringfeed_testkit::arm();
    let up = crate::fake_filer::FakeFiler::start(vec![], crate::fake_filer::Then::Hold).await;
    up.set_log_files(&["2026-12-06/10-00.abc"]);
    // A port nobody listens on.
    let down = {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("127.0.0.1:1.{}", closed.local_addr().unwrap().port())
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        1,
        &[
            "--follow-filer",
            &down,
            "--follow-filer",
            &up.address,
            "--filer-listen",
            "127.0.0.1:0",
        ],
    );
    let mut status = RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    loop {
        let filers = status
            .status(v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner()
            .filers;
        if !filers[0].connected && filers[1].connected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut client = filer_api_client(&server).await;
    let mut listed = client
        .list_entries(filer_pb::ListEntriesRequest {
            directory: "/topics/.system/log".into(),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut names = Vec::new();
    while let Some(entry) = listed.message().await.unwrap() {
        names.push(entry.entry.unwrap().name);
    }
    assert_eq!(names, ["2026-12-06"]);
    server.stop();
}

/// SubscribeMetadata streams stay open while a followed filer's stored
/// watermark moves a thousand times a second (a fake filer heartbeating
/// every millisecond): no stream ends on its own. (Written after a wake-up
/// future polled once it had completed panicked and ended streams cleanly
/// under the fanout bench; that race is nanoseconds wide, and this test did
/// not hit it in three runs of the old code: the bench is what found it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_stay_open_while_a_filer_moves_on_every_millisecond() {
    let _watchdog = ringfeed_testkit::arm();
    let filer = crate::fake_filer::FakeFiler::start(
        vec![crate::fake_filer::Sent::Create {
            ts_ns: 10_000_000_000,
            directory: "/m".into(),
            name: "one".into(),
        }],
        crate::fake_filer::Then::Heartbeats,
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        1,
        &[
            "--follow-filer",
            &filer.address,
            "--filer-listen",
            "127.0.0.1:0",
        ],
    );
    let mut streams = Vec::new();
    for id in 1..=20 {
        let mut client = filer_api_client(&server).await;
        let mut stream = client
            .subscribe_metadata(filer_pb::SubscribeMetadataRequest {
                client_name: "still-open".into(),
                path_prefix: "/".into(),
                client_id: id,
                client_epoch: 1,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let first = stream.message().await.unwrap().unwrap();
        assert_eq!(first.ts_ns, 10_000_000_000, "the filer's one event");
        streams.push(stream);
    }
    // Three seconds of the watermark moving: every stream is still open
    // (nothing more to send: no event, and no heartbeat asked for).
    let open: Vec<_> = streams
        .into_iter()
        .map(|mut stream| {
            tokio::spawn(async move {
                tokio::time::timeout(Duration::from_secs(3), stream.message())
                    .await
                    .map(|m| m.map(|m| m.is_some()))
            })
        })
        .collect();
    for (i, task) in open.into_iter().enumerate() {
        let ended = task.await.unwrap();
        assert!(ended.is_err(), "stream {i} ended: {ended:?}");
    }
    server.stop();
}
