//! Sealed segments in an object store (issue 40, the upload): a real server
//! with small segments and `--object-store file:///DIR`.
//!
//! - Every sealed segment reaches the store whole: its object is the
//!   segment file's bytes up to its last chunk, named in its shard's
//!   manifest with their checksum and offsets, the manifest's segments dense.
//! - With the store failing, local retention removes nothing the store
//!   lacks; once the store is back the uploads resume, and retention then
//!   removes exactly segments the store holds, byte for byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cluster_nodes::{append, config_file};
use crate::serve_binary::Server;
use ringfeed_engine::segment::sealed::sealed_files;

/// 8 KiB windows, 64 KiB segments, retention every second keeping two
/// segments a shard (when the store holds the rest).
pub(crate) const SMALL: &str =
    "window_bytes = 8192\nring_bytes = 65536\nmax_unflushed_bytes = 32768\n\
     max_event_bytes = 2048\nsegment_bytes = 65536\nretention_interval_secs = 1\n\
     retention_max_bytes = 131072\n";
pub(crate) const SHARDS: u32 = 2;

pub(crate) fn shard_dir(data: &Path, shard: u32) -> PathBuf {
    ringfeed_engine::shard_dir(data, shard)
}

/// The manifest of `shard` in the store at `store`, if there is one:
/// (name, first offset, next offset, bytes, crc32c) per segment.
pub(crate) fn manifest(store: &Path, shard: u32) -> Option<Vec<(String, u64, u64, u64, u32)>> {
    manifest_of(store, 0, shard)
}

/// [`manifest`] of node `node`.
pub(crate) fn manifest_of(
    store: &Path,
    node: u32,
    shard: u32,
) -> Option<Vec<(String, u64, u64, u64, u32)>> {
    let path = store
        .join(format!("node-{node}"))
        .join(format!("shard-{shard:03}"))
        .join("manifest.json");
    let text = std::fs::read(&path).ok()?;
    let v: serde_json::Value = serde_json::from_slice(&text).expect("a JSON manifest");
    assert_eq!(v["shard"], shard, "{v}");
    let segments = v["segments"].as_array().expect("segments");
    Some(
        segments
            .iter()
            .map(|s| {
                let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k} in {s}"));
                (
                    s["name"].as_str().expect("name").to_owned(),
                    n("first_offset"),
                    n("next_offset"),
                    n("bytes"),
                    n("crc32c") as u32,
                )
            })
            .collect(),
    )
}

fn object(store: &Path, shard: u32, name: &str) -> Vec<u8> {
    std::fs::read(
        store
            .join("node-0")
            .join(format!("shard-{shard:03}"))
            .join(name),
    )
    .unwrap_or_else(|e| panic!("object {name} of shard {shard}: {e}"))
}

/// Waits (at most `within`) until every shard's manifest names every
/// segment sealed locally now.
pub(crate) async fn until_uploaded(data: &Path, store: &Path, within: Duration) {
    until_uploaded_of(data, store, 0, within).await
}

/// [`until_uploaded`] for node `node`.
pub(crate) async fn until_uploaded_of(data: &Path, store: &Path, node: u32, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let done = (0..SHARDS).all(|shard| {
            let sealed = sealed_files(&shard_dir(data, shard)).unwrap();
            let uploaded_below = manifest_of(store, node, shard)
                .and_then(|m| m.last().map(|s| s.2))
                .unwrap_or(0);
            sealed
                .last()
                .is_none_or(|s| s.next_offset <= uploaded_below)
        });
        if done {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "sealed segments not uploaded within {within:?}: {:?}",
            (0..SHARDS)
                .map(|s| manifest_of(store, node, s))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `ringfeed serve` over `data` with `config`, uploading to `url`, with
/// `more` flags.
pub(crate) fn serve(data: &Path, config: &str, url: &str, more: &[&str]) -> Server {
    let mut flags = vec!["--config", config, "--object-store", url];
    flags.extend_from_slice(more);
    Server::start_with(data, SHARDS, &flags)
}

/// Appends `rounds` × 500 durable events.
pub(crate) async fn fill(addr: &str, rounds: usize) {
    for round in 0..rounds {
        append(addr, 1, round * 500, 500, true).await;
    }
}

/// Each shard's sealed segments now: name -> file bytes.
fn sealed_bytes(data: &Path) -> BTreeMap<(u32, String), Vec<u8>> {
    let mut all = BTreeMap::new();
    for shard in 0..SHARDS {
        let dir = shard_dir(data, shard);
        for s in sealed_files(&dir).unwrap() {
            all.insert(
                (shard, s.name.clone()),
                std::fs::read(dir.join(&s.name)).unwrap(),
            );
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_reach_the_store_whole_and_named_in_its_manifest() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = tempfile::tempdir().unwrap();
    // No retention here: every segment stays to be compared.
    let config = config_file(
        data.path(),
        &SMALL.replace("retention_max_bytes = 131072\n", ""),
    );
    let url = format!("file://{}", store.path().display());
    let server = serve(
        data.path(),
        &config,
        &url,
        &["--metrics-listen", "127.0.0.1:0"],
    );
    fill(&server.addr, 12).await;
    until_uploaded(data.path(), store.path(), Duration::from_secs(20)).await;
    let named: usize = (0..SHARDS)
        .map(|s| manifest(store.path(), s).map_or(0, |m| m.len()))
        .sum();
    let at = server.metrics.clone().expect("a metrics address");
    crate::metrics_endpoint::scrape_until(&at, "every upload counted", |m| {
        m.sum("ringfeed_object_store_segments_uploaded_total") == named as f64
            && m.sum("ringfeed_object_store_upload_lag_segments") == 0.0
            && m.sum("ringfeed_object_store_upload_lag_bytes") == 0.0
            && m.sum("ringfeed_object_store_upload_errors_total") == 0.0
    });
    for shard in 0..SHARDS {
        let segments = manifest(store.path(), shard).expect("a manifest");
        assert!(segments.len() >= 2, "shard {shard}: {segments:?}");
        let mut next = 0;
        for (name, first, end, bytes, crc) in &segments {
            assert_eq!(
                *first, next,
                "shard {shard}: the manifest's segments are dense"
            );
            next = *end;
            let object = object(store.path(), shard, name);
            let file = std::fs::read(shard_dir(data.path(), shard).join(name)).unwrap();
            assert_eq!(object.len() as u64, *bytes, "{name}");
            assert_eq!(crc32c::crc32c(&object), *crc, "{name}");
            assert_eq!(
                &file[..object.len()],
                &object[..],
                "{name}: the file's prefix"
            );
        }
    }
    server.stop();

    // `ringfeed inspect --object-store` lists every segment, and says
    // which object a manifest names is gone (exit status 1).
    let inspect = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .args(["inspect", "--object-store", &url])
            .output()
            .unwrap()
    };
    let listed = inspect();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    for shard in 0..SHARDS {
        assert!(text.contains(&format!("node 0 shard {shard}: ")), "{text}");
        for (name, first, end, bytes, _) in manifest(store.path(), shard).unwrap() {
            let line = format!("  {name}: offsets {first}..{end}, {bytes} bytes,");
            assert!(text.contains(&line), "{line:?} in:\n{text}");
        }
    }
    let (gone, ..) = manifest(store.path(), 1).unwrap().remove(0);
    std::fs::remove_file(store.path().join("node-0/shard-001").join(&gone)).unwrap();
    let listed = inspect();
    let text = String::from_utf8_lossy(&listed.stdout);
    assert_eq!(listed.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("  {gone}: ")) && text.contains("MISSING from the bucket"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_what_the_store_lacks_and_uploads_resume() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let store = scratch.path().join("store");
    std::fs::create_dir(&store).unwrap();
    let config = config_file(data.path(), SMALL);
    let url = format!("file://{}", store.display());
    let server = serve(data.path(), &config, &url, &[]);
    // The store fails: where its directory was, a file.
    std::fs::remove_dir(&store).unwrap();
    std::fs::write(&store, b"not a directory").unwrap();
    fill(&server.addr, 12).await;
    // Three retention passes with nothing in the store: nothing goes.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = sealed_bytes(data.path());
    for shard in 0..SHARDS {
        let sealed: Vec<_> = before.keys().filter(|k| k.0 == shard).collect();
        assert!(sealed.len() >= 3, "shard {shard}: {sealed:?}");
        assert_eq!(
            sealed[0].1,
            ringfeed_engine::segment::segment_name(0),
            "shard {shard}: its first segment is kept"
        );
    }
    // `ringfeed status` says the uploads fail and segments wait.
    let status = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .args(["status", "--server", &server.addr])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let shown = status();
    assert!(
        shown.contains(&format!("object store {url}: 0 segment(s)"))
            && shown.contains("the last upload pass failed")
            && !shown.contains(" 0 sealed segment(s) waiting")
            && !shown.contains("(0 bytes)")
            && shown.contains(" bytes), the oldest sealed "),
        "{shown}"
    );
    let errors = server.stderr.lock().unwrap().join("\n");
    assert!(
        errors.contains("upload"),
        "the failures are logged:\n{errors}"
    );

    // The store is back: the uploads resume (after their backoff), then
    // retention removes what the store holds.
    std::fs::remove_file(&store).unwrap();
    std::fs::create_dir(&store).unwrap();
    until_uploaded(data.path(), &store, Duration::from_secs(30)).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let shown = status();
        if shown.contains(" 0 sealed segment(s) waiting") && !shown.contains("failed") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "status after the uploads:\n{shown}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let removed = loop {
        let now = sealed_bytes(data.path());
        let removed: Vec<(u32, String)> = before
            .keys()
            .filter(|k| !now.contains_key(*k))
            .cloned()
            .collect();
        if (0..SHARDS).all(|s| removed.iter().any(|r| r.0 == s)) {
            break removed;
        }
        assert!(
            Instant::now() < deadline,
            "retention removed nothing once uploaded"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (shard, name) in &removed {
        let named = manifest(&store, *shard).expect("a manifest");
        assert!(
            named.iter().any(|s| &s.0 == name),
            "{name} of shard {shard} was removed, not in the manifest"
        );
        let object = object(&store, *shard, name);
        assert_eq!(
            &before[&(*shard, name.clone())][..object.len()],
            &object[..]
        );
    }
    server.stop();
}

/// Another data dir holding a feed of its own, with the same store and
/// node id (an empty one is rebuilt from the store instead, see
/// object_store_read.rs), uploads nothing over the first one's segments:
/// its shards' manifests name the other feed, so it says so and leaves
/// them, and its own retention keeps every segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_data_dir_never_overwrites_the_store() {
    let _watchdog = ringfeed_testkit::arm();
    let store = tempfile::tempdir().unwrap();
    let url = format!("file://{}", store.path().display());
    let first = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config_file(first.path(), SMALL);
    let server = serve(first.path(), &config, &url, &[]);
    fill(&server.addr, 6).await;
    until_uploaded(first.path(), store.path(), Duration::from_secs(20)).await;
    server.stop();
    let manifests: Vec<_> = (0..SHARDS).map(|s| manifest(store.path(), s)).collect();

    let second = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Its own feed first, made without the store.
    Server::start_with(second.path(), SHARDS, &["--config", &config]).stop();
    let server = serve(second.path(), &config, &url, &[]);
    fill(&server.addr, 12).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let logged = server.stderr.lock().unwrap().join("\n");
    assert!(
        logged.contains("comes from another data dir"),
        "the refusal is logged:\n{logged}"
    );
    let now: Vec<_> = (0..SHARDS).map(|s| manifest(store.path(), s)).collect();
    assert_eq!(now, manifests, "the store's manifests are untouched");
    for shard in 0..SHARDS {
        let sealed = sealed_files(&shard_dir(second.path(), shard)).unwrap();
        assert_eq!(sealed[0].first_offset, 0, "shard {shard}: nothing removed");
    }
    server.stop();
}

/// The same against a real S3 server, SeaweedFS's gateway, with the
/// gateway SIGKILLed while segments wait: the uploads resume once it is
/// back, nothing in the bucket is half a segment, and every object the
/// manifests name is its file's bytes. Then a catch-up from the bucket
/// that meets the gateway SIGKILLed (its fetches fail and are retried)
/// and goes on once it is restarted: every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_reach_seaweedfs_s3_through_a_gateway_crash() {
    use ringfeed_server::bucket::Bucket;
    let _watchdog = ringfeed_testkit::arm();
    let Some(mut weed) = crate::weed::Weed::start().await else {
        return;
    };
    let endpoint = weed.start_s3("ringfeed").await;
    // The credentials from the environment, the endpoint from the config
    // file (`object_store_options`): both ways reach the S3 client.
    let env = [
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", "ringfeed-test"),
        ("AWS_SECRET_ACCESS_KEY", "ringfeed-test"),
        ("AWS_REGION", "us-east-1"),
    ];
    let bucket = Bucket::open_with(
        "s3://ringfeed/feeds",
        &[
            ("aws_endpoint", endpoint.as_str()),
            ("aws_allow_http", "true"),
            ("aws_access_key_id", "ringfeed-test"),
            ("aws_secret_access_key", "ringfeed-test"),
            ("aws_region", "us-east-1"),
        ],
    )
    .unwrap();
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config_file(
        data.path(),
        &format!("{SMALL}[object_store_options]\naws_endpoint = \"{endpoint}\"\n"),
    );
    let server = Server::start_with_env(
        data.path(),
        SHARDS,
        &["--config", &config, "--object-store", "s3://ringfeed/feeds"],
        &env,
    );
    // Every local sealed segment named in its shard's manifest, within `within`.
    let uploaded = |within: Duration| {
        let (bucket, data) = (&bucket, data.path());
        async move {
            let deadline = Instant::now() + within;
            loop {
                let mut all = true;
                for shard in 0..SHARDS {
                    let sealed = sealed_files(&shard_dir(data, shard)).unwrap();
                    let below = match bucket.manifest(0, shard).await {
                        Ok(Some(m)) => m.uploaded_below(),
                        _ => 0,
                    };
                    all &= sealed.last().is_none_or(|s| s.next_offset <= below);
                }
                if all {
                    return;
                }
                assert!(Instant::now() < deadline, "not uploaded within {within:?}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    fill(&server.addr, 6).await;
    uploaded(Duration::from_secs(30)).await;

    weed.kill_s3();
    fill(&server.addr, 6).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let waiting = sealed_bytes(data.path());
    weed.restart_s3();
    uploaded(Duration::from_secs(40)).await;

    for shard in 0..SHARDS {
        let manifest = bucket
            .manifest(0, shard)
            .await
            .unwrap()
            .expect("a manifest");
        let mut next = manifest.segments[0].first_offset;
        for s in &manifest.segments {
            assert_eq!(s.first_offset, next, "shard {shard}: dense");
            next = s.next_offset;
            let object = bucket.get(0, shard, &s.name).await.unwrap();
            assert_eq!(object.len() as u64, s.bytes, "{}", s.name);
            assert_eq!(crc32c::crc32c(&object), s.crc32c, "{}", s.name);
            if let Some(file) = waiting.get(&(shard, s.name.clone())) {
                assert_eq!(&file[..object.len()], &object[..], "{}", s.name);
            }
        }
    }

    // A catch-up from the bucket (retention removed the first segments
    // locally) that meets the gateway SIGKILLed, then restarted: every
    // event once, offsets dense from 0.
    let deadline = Instant::now() + Duration::from_secs(20);
    while (0..SHARDS).any(|s| {
        sealed_files(&shard_dir(data.path(), s))
            .unwrap()
            .first()
            .is_none_or(|f| f.first_offset == 0)
    }) {
        assert!(Instant::now() < deadline, "retention removed nothing");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let until = ringfeed_engine::clock::now_ns();
    let request = ringfeed_proto::v1::SubscribeRequest {
        start: Some(ringfeed_proto::v1::subscribe_request::Start::Beginning(
            true,
        )),
        until_ns: until,
        ..Default::default()
    };
    // The gateway dies as the catch-up starts: its fetches fail (and are
    // retried) until the gateway is back.
    weed.kill_s3();
    let addr = server.addr.clone();
    let catch_up = tokio::spawn(async move {
        crate::common::follow(&addr, request, usize::MAX, Duration::from_secs(40)).await
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = crate::cluster_nodes::client(&server.addr)
            .await
            .status(ringfeed_proto::v1::StatusRequest::default())
            .await
            .unwrap()
            .into_inner();
        let reads = status.object_store.expect("object store status");
        if reads.read_errors > 0 {
            assert!(!reads.read_error.is_empty(), "{reads:?}");
            break;
        }
        assert!(Instant::now() < deadline, "no fetch failed: {reads:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    weed.restart_s3();
    let (got, _) = catch_up.await.unwrap();
    assert_eq!(got.len(), 12 * 500, "every event of the catch-up");
    let mut next = [0u64; SHARDS as usize];
    for e in &got {
        assert_eq!(
            e.offset, next[e.shard as usize],
            "shard {}: once, in order",
            e.shard
        );
        next[e.shard as usize] += 1;
    }
    server.stop();
}

/// The status page (in a real headless Chromium) shows the uploads: the
/// store, what went, that nothing waits, and each shard's uploaded offset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_the_uploads() {
    let _watchdog = ringfeed_testkit::arm();
    let Some(chromium) = crate::browser::chromium() else {
        eprintln!("chromium not installed: skipped (CI installs it)");
        return;
    };
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let store = tempfile::tempdir().unwrap();
    let config = config_file(data.path(), SMALL);
    let url = format!("file://{}", store.path().display());
    let server = serve(
        data.path(),
        &config,
        &url,
        &["--http-listen", "127.0.0.1:0"],
    );
    fill(&server.addr, 6).await;
    until_uploaded(data.path(), store.path(), Duration::from_secs(20)).await;
    let page = server.page.clone().expect("a status page address");
    let below: Vec<String> = (0..SHARDS)
        .map(|s| {
            let uploaded = manifest(store.path(), s).and_then(|m| m.last().map(|e| e.2));
            format!("shard {s} below {}", uploaded.unwrap_or(0))
        })
        .collect();
    let shown = tokio::task::spawn_blocking(move || {
        let mut browser =
            crate::browser::Browser::open(&chromium, &format!("http://{page}/"), 1200, 700);
        browser.wait_for(
            "the uploads",
            r#"(() => ({
              hidden: document.getElementById('object-store').hidden,
              url: document.getElementById('object-store-url').textContent,
              text: document.getElementById('object-store-text').textContent,
            }))()"#,
            Duration::from_secs(20),
            |v| {
                let text = v["text"].as_str().unwrap_or("");
                v["hidden"] == false
                    && text.contains(" 0 sealed segment(s) waiting")
                    && below.iter().all(|b| text.contains(b.as_str()))
            },
        )
    })
    .await
    .unwrap();
    assert_eq!(shown["url"], url.as_str(), "{shown}");
    server.stop();
}

/// Credentials the store refuses (SeaweedFS's S3 gateway with identities;
/// the key given is not one of them): on an empty data dir `serve` stops
/// at once saying the store refused it; on a data dir holding a feed it
/// serves, and the status says why nothing is uploaded; with the right
/// key the same data dir uploads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_said_at_start_and_in_status() {
    let _watchdog = ringfeed_testkit::arm();
    let Some(mut weed) = crate::weed::Weed::start().await else {
        return;
    };
    let identities = r#"{"identities":[
        {"name":"anonymous","actions":["Admin","Read","Write","List","Tagging"]},
        {"name":"ringfeed","credentials":[{"accessKey":"ringfeed-good","secretKey":"ringfeed-good-secret"}],
         "actions":["Admin","Read","Write","List","Tagging"]}]}"#;
    let endpoint = weed.start_s3_with("ringfeed", Some(identities)).await;
    let env = |key: &'static str| {
        [
            ("AWS_ALLOW_HTTP", "true"),
            ("AWS_ACCESS_KEY_ID", key),
            ("AWS_SECRET_ACCESS_KEY", "ringfeed-good-secret"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ENDPOINT_URL", endpoint.as_str()),
        ]
    };

    // An empty data dir: serve stops, naming the refusal.
    let empty = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .envs(env("ringfeed-wrong"))
        .args(["serve", "--listen", "127.0.0.1:0", "--shards", "2"])
        .arg("--data-dir")
        .arg(empty.path().join("data"))
        .args(["--object-store", "s3://ringfeed/feeds"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("the object store cannot be read") && said.contains("403"),
        "{said}"
    );

    // A data dir holding a feed: it serves, and says why nothing goes.
    let data = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = config_file(data.path(), SMALL);
    Server::start_with(data.path(), SHARDS, &["--config", &config]).stop();
    let flags = ["--config", &config, "--object-store", "s3://ringfeed/feeds"];
    let server = Server::start_with_env(data.path(), SHARDS, &flags, &env("ringfeed-wrong"));
    fill(&server.addr, 6).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let shown = status_of(&server.addr);
        if shown.contains("the last upload pass failed") && shown.contains("403") {
            break;
        }
        assert!(Instant::now() < deadline, "status:\n{shown}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let logged = server.stderr.lock().unwrap().join("\n");
    assert!(
        logged.contains("reading manifests") && logged.contains("403"),
        "{logged}"
    );
    server.stop();

    // The right key: the same data dir uploads.
    let server = Server::start_with_env(data.path(), SHARDS, &flags, &env("ringfeed-good"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = status_of(&server.addr);
        if shown.contains(" 0 sealed segment(s) waiting") && !shown.contains("failed") {
            break;
        }
        assert!(Instant::now() < deadline, "status:\n{shown}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    server.stop();
}

fn status_of(addr: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args(["status", "--server", addr])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}
