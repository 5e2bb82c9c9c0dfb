//! `serve --http-listen`: the status page in a real browser (Debian's
//! headless Chromium). The page shows each shard's offsets as the server
//! counts them and one row per subscriber, a client name full of markup as
//! plain text, and a subscriber's lag growing while it stops reading and
//! falling back once it catches up, in the same open page (it polls
//! `/api/status` once a second); with a token file it needs an admin token,
//! given in the URL's fragment.

use std::time::Duration;

use crate::browser::Browser;
use crate::serve_binary::{http_request as request, new_token, Server};
use ringfeed_proto::tonic::transport::{Channel, Endpoint};
use ringfeed_proto::v1::subscribe_response::Item;
use ringfeed_proto::{v1, RingFeedClient};
use serde_json::Value;

/// A client name that would run script, load an image and close the table
/// if the page put it into the document as markup.
const EVIL_NAME: &str = "<script>document.body.dataset.pwned='script'</script>\
     <img src=x onerror=\"document.body.dataset.pwned='img'\"></td></tr><b>bold";

/// What the page shows, read from its document: each shard row's cells and
/// each subscriber row's cells (their text), and whether anything ran.
const READ_PAGE: &str = r#"(() => {
  const rows = (sel) => [...document.querySelectorAll(sel)].map((tr) =>
    Object.fromEntries([...tr.cells].map((td) => [td.dataset.k, td.textContent])));
  const lag = [...document.querySelectorAll('#subscribers tbody td[data-k="lagSeconds"]')]
    .map((td) => Number(td.dataset.v));
  return {
    state: document.body.dataset.state,
    updates: Number(document.body.dataset.updates),
    pwned: document.body.dataset.pwned || null,
    bold: document.querySelectorAll('#subscribers b').length,
    images: document.querySelectorAll('img').length,
    shards: rows('#shards tbody tr'),
    subscribers: rows('#subscribers tbody tr'),
    lagSeconds: lag,
    sparkPoints: Number(document.getElementById('spark-rate').dataset.points || 0),
  };
})()"#;

/// The page's waits: it polls once a second, so anything it should show is
/// there within a few polls; longer means the page is wrong or stuck.
const SHOWS_WITHIN: Duration = Duration::from_secs(20);

fn create(dir: &str, name: &str, bytes: usize) -> v1::Event {
    v1::Event {
        directory: dir.into(),
        new_entry: Some(v1::Entry {
            name: name.into(),
            size: 1,
            attributes: vec![b'x'; bytes].into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

async fn append(client: &mut RingFeedClient<Channel>, prefix: &str, count: usize, bytes: usize) {
    for batch in 0..count.div_ceil(50) {
        let events = (batch * 50..count.min(batch * 50 + 50))
            .map(|i| create(&format!("/{prefix}/d{}", i % 7), &format!("f{i}"), bytes))
            .collect();
        client
            .append(v1::AppendRequest {
                events,
                ..Default::default()
            })
            .await
            .expect("append");
    }
}

/// A client whose HTTP/2 windows are small, so a subscription it stops
/// reading stops the server's sending after a few responses (its lag then
/// shows on the server) instead of filling megabytes of buffers.
async fn small_window_client(addr: &str) -> RingFeedClient<Channel> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .expect("endpoint")
        .initial_stream_window_size(Some(65_535))
        .initial_connection_window_size(Some(65_535))
        .connect()
        .await
        .expect("connect");
    RingFeedClient::new(channel)
}

async fn read_events(
    stream: &mut ringfeed_proto::tonic::Streaming<v1::SubscribeResponse>,
    count: usize,
) {
    let mut got = 0;
    while got < count {
        let response = tokio::time::timeout(Duration::from_secs(20), stream.message())
            .await
            .expect("the subscription stalled")
            .expect("stream ok")
            .expect("stream open");
        if let Some(Item::Event(_)) = response.item {
            got += 1;
        }
    }
}

/// Subscribes per `request` and reads everything as it comes.
async fn drain(mut client: RingFeedClient<Channel>, request: v1::SubscribeRequest) {
    let mut stream = client
        .subscribe(request)
        .await
        .expect("subscribe")
        .into_inner();
    while let Ok(Some(_)) = stream.message().await {}
}

/// The subscriber row whose `key` is `value` in what the page shows.
fn row<'a>(shown: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    shown["subscribers"]
        .as_array()?
        .iter()
        .find(|s| s[key] == value)
}

fn as_u64(v: &Value) -> u64 {
    v.as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn the_page_shows_shards_subscribers_and_live_lag() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let Some(chromium) = crate::browser::chromium() else {
        eprintln!("skipped: no chromium (install Debian's chromium package)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 2, &["--http-listen", "127.0.0.1:0"]);
    let page = server.page.clone().expect("status page address");
    let rt = tokio::runtime::Runtime::new().unwrap();

    let mut client = rt
        .block_on(RingFeedClient::connect(format!("http://{}", server.addr)))
        .expect("connect");
    rt.block_on(append(&mut client, "a", 40, 10));
    // A subscriber that keeps up, and one named with markup that will stop
    // reading.
    let steady = rt.spawn(drain(
        client.clone(),
        v1::SubscribeRequest {
            start: Some(v1::subscribe_request::Start::Beginning(true)),
            client_name: "steady".into(),
            ..Default::default()
        },
    ));
    // One whose filter matches the first 40 events only: after them it
    // sends nothing, so it never shows a newer position, yet it is caught
    // up.
    let filtered = rt.spawn(drain(
        client.clone(),
        v1::SubscribeRequest {
            start: Some(v1::subscribe_request::Start::Beginning(true)),
            path_prefix: "/a".into(),
            client_name: "filtered".into(),
            ..Default::default()
        },
    ));
    // On a connection of its own: what it leaves unread holds its
    // connection's window.
    let mut stalled = rt.block_on(async {
        let mut stream = small_window_client(&server.addr)
            .await
            .subscribe(v1::SubscribeRequest {
                start: Some(v1::subscribe_request::Start::Beginning(true)),
                client_name: EVIL_NAME.into(),
                client_id: 7,
                client_epoch: 1,
                ..Default::default()
            })
            .await
            .expect("subscribe")
            .into_inner();
        read_events(&mut stream, 40).await;
        stream
    });

    let mut browser = Browser::open(&chromium, &format!("http://{page}/"), 1400, 760);
    let shown = browser.wait_for(
        "three subscribers, caught up",
        READ_PAGE,
        SHOWS_WITHIN,
        |v| {
            let subs = v["subscribers"].as_array().map_or(0, Vec::len);
            let caught_up = v["subscribers"]
                .as_array()
                .is_some_and(|s| s.iter().all(|s| s["lagEvents"] == "0"));
            v["state"] == "ok" && subs == 3 && caught_up
        },
    );
    // The shard rows carry the server's own offsets.
    let status = rt
        .block_on(client.status(v1::StatusRequest::default()))
        .expect("status")
        .into_inner();
    let rows = shown["shards"].as_array().expect("shard rows");
    assert_eq!(rows.len(), 2, "{shown}");
    for (row, shard) in rows.iter().zip(&status.shards) {
        assert_eq!(row["shard"], shard.shard.to_string(), "{shown}");
        assert_eq!(
            row["committedNext"],
            shard.committed_next.to_string(),
            "{shown}"
        );
    }
    let committed: u64 = rows.iter().map(|r| as_u64(&r["committedNext"])).sum();
    assert_eq!(committed, 40, "{shown}");
    // The name is text: nothing ran, no element came from it.
    let evil = row(&shown, "clientId", "7").expect("the stalled subscriber's row");
    assert_eq!(evil["clientName"], EVIL_NAME, "{shown}");
    assert_eq!(evil["eventsSent"], "40", "{shown}");
    assert_eq!(shown["pwned"], Value::Null, "{shown}");
    assert_eq!(shown["bold"], 0, "{shown}");
    assert_eq!(shown["images"], 0, "{shown}");

    // It stops reading: the page's lag for it grows while appends go on.
    rt.block_on(append(&mut client, "b", 300, 10_000));
    let lagging = browser.wait_for(
        "the stalled subscriber's lag in events",
        READ_PAGE,
        SHOWS_WITHIN,
        |v| row(v, "clientId", "7").is_some_and(|s| as_u64(&s["lagEvents"]) > 0),
    );
    // The most lagging first (the default sort).
    let subs = lagging["subscribers"].as_array().unwrap();
    assert_eq!(subs[0]["clientId"], "7", "{lagging}");
    let first_lag = lagging["lagSeconds"][0].as_f64().unwrap();
    browser.wait_for("the lag in seconds growing", READ_PAGE, SHOWS_WITHIN, |v| {
        v["lagSeconds"][0]
            .as_f64()
            .is_some_and(|lag| lag > first_lag + 1.0)
    });
    let shot = browser.screenshot();
    let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    std::fs::write(&path, &shot).expect("saving the screenshot");
    eprintln!("screenshot: {}", path.display());
    assert!(shot.starts_with(b"\x89PNG"), "not a PNG");

    // Sorting by lag the other way puts it last.
    browser.eval(r#"document.querySelector('#subscribers th[data-sort="lagSeconds"]').click()"#);
    let ascending = browser.eval(READ_PAGE);
    assert_eq!(ascending["subscribers"][2]["clientId"], "7", "{ascending}");

    // It reads again: the same page shows it caught up.
    rt.block_on(read_events(&mut stalled, 300));
    let caught_up = browser.wait_for("the lag back to 0", READ_PAGE, SHOWS_WITHIN, |v| {
        row(v, "clientId", "7").is_some_and(|s| s["lagEvents"] == "0" && s["eventsSent"] == "340")
    });
    // The filtered one, 300 events past what it sent, is shown caught up.
    let filtered_row =
        row(&caught_up, "clientName", "filtered").expect("the filtered subscriber's row");
    assert_eq!(filtered_row["lagEvents"], "0", "{caught_up}");
    assert_eq!(filtered_row["eventsSent"], "40", "{caught_up}");
    assert!(
        caught_up["sparkPoints"].as_u64().unwrap() >= 2,
        "{caught_up}"
    );
    assert!(caught_up["updates"].as_u64().unwrap() >= 3, "{caught_up}");
    drop(browser);

    // /api/status is the object `ringfeed status --json` prints.
    let (code, body) = get(&page, "/api/status", None);
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("JSON");
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["status", "--json", "--server", &server.addr]);
    let out = crate::serve_binary::run_bounded(command, None, Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let cli: Value = serde_json::from_str(&out.stdout).expect("status --json is JSON");
    let keys = |v: &Value| -> Vec<String> {
        let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
        keys.sort();
        keys
    };
    assert_eq!(keys(&api), keys(&cli), "{api}\n{cli}");
    for key in ["shards", "subscriberList", "history"] {
        assert!(api[key].is_array(), "{key} in {api}");
    }
    // Every field, zeros included: shard 0 says it is shard 0 (issue 35),
    // and every shard and subscriber has the same keys.
    for status in [&api, &cli] {
        let shards = status["shards"].as_array().expect("shards");
        assert_eq!(shards[0]["shard"], 0, "{status}");
        assert!(
            shards.iter().all(|s| keys(s) == keys(&shards[0])),
            "{status}"
        );
        let subscribers = status["subscriberList"].as_array().expect("subscribers");
        assert!(
            subscribers.iter().all(|s| keys(s) == keys(&subscribers[0])),
            "{status}"
        );
        assert_eq!(
            status["feedId"].as_str().map(str::len),
            Some(16),
            "{status}"
        );
    }
    // The five-minute history only when asked for.
    assert_eq!(api["history"].as_array().map(Vec::len), Some(0), "{api}");
    assert_eq!(cli["history"].as_array().map(Vec::len), Some(0), "{cli}");
    let (code, body) = get(&page, "/api/status?history=1", None);
    assert_eq!(code, 200, "{body}");
    let with_history: Value = serde_json::from_str(&body).expect("JSON");
    assert!(
        with_history["history"]
            .as_array()
            .is_some_and(|h| h.len() >= 2),
        "{with_history}"
    );
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["status", "--json", "--history", "--server", &server.addr]);
    let out = crate::serve_binary::run_bounded(command, None, Duration::from_secs(20));
    assert_eq!(out.code(), Some(0), "{}", out.stderr);
    let cli_history: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert!(
        cli_history["history"]
            .as_array()
            .is_some_and(|h| h.len() >= 2),
        "{cli_history}"
    );
    assert_eq!(
        api["subscriberList"].as_array().map(Vec::len),
        Some(3),
        "{api}"
    );
    assert_eq!(
        cli["subscriberList"].as_array().map(Vec::len),
        Some(3),
        "{cli}"
    );
    assert_eq!(api["dataDir"], cli["dataDir"]);
    steady.abort();
    filtered.abort();
    server.stop();
}

/// `GET path` with an optional bearer token: (status code, body).
fn get(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let (code, _, body) = request(addr, "GET", path, token);
    (code, body)
}

#[test]
fn with_tokens_the_page_needs_an_admin_token() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let dir = tempfile::tempdir().unwrap();
    let (admin, admin_table) = new_token(&["--admin"]);
    let (reader, reader_table) = new_token(&["--read", "/"]);
    let tokens = dir.path().join("tokens.toml");
    std::fs::write(&tokens, format!("{admin_table}\n{reader_table}\n")).unwrap();
    let data = dir.path().join("data");
    let server = Server::start_with(
        &data,
        1,
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--token-file",
            tokens.to_str().unwrap(),
        ],
    );
    let page = server.page.clone().expect("status page address");

    // The data needs an admin token; the page itself answers 401 (its body
    // asks for one), and its script and style are static.
    let (code, body) = get(&page, "/api/status", None);
    assert_eq!(code, 401, "{body}");
    assert!(body.contains("error"), "{body}");
    assert_eq!(get(&page, "/api/status", Some(&reader)).0, 403);
    let (code, body) = get(&page, "/api/status", Some(&admin));
    assert_eq!(code, 200, "{body}");
    let status: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status["shards"].as_array().map(Vec::len), Some(1), "{body}");
    assert_eq!(get(&page, "/", None).0, 401);
    assert_eq!(get(&page, "/", Some(&admin)).0, 200);
    assert_eq!(get(&page, "/app.js", None).0, 200);
    assert_eq!(get(&page, "/api/status?subscribers=x", Some(&admin)).0, 400);
    assert_eq!(get(&page, "/nothing", Some(&admin)).0, 404);

    let Some(chromium) = crate::browser::chromium() else {
        eprintln!("skipped the browser part: no chromium");
        server.stop();
        return;
    };
    // Without a token the page asks for one and shows no data.
    let mut browser = Browser::open(&chromium, &format!("http://{page}/"), 1000, 600);
    let asked = browser.wait_for(
        "the token form",
        "({state: document.body.dataset.state, form: !document.getElementById('token-form').hidden, rows: document.querySelectorAll('#shards tbody tr').length})",
        SHOWS_WITHIN,
        |v| v["state"] == "unauthorized",
    );
    assert_eq!(asked["form"], true, "{asked}");
    assert_eq!(asked["rows"], 0, "{asked}");
    drop(browser);
    // With the admin token in the fragment it shows the shards, and takes
    // the token out of the address bar.
    let mut browser = Browser::open(
        &chromium,
        &format!("http://{page}/#token={admin}"),
        1000,
        600,
    );
    let shown = browser.wait_for(
        "the shard rows",
        "({state: document.body.dataset.state, rows: document.querySelectorAll('#shards tbody tr').length, url: location.href})",
        SHOWS_WITHIN,
        |v| v["state"] == "ok" && v["rows"] == 1,
    );
    assert!(!shown["url"].as_str().unwrap().contains(&admin), "{shown}");
    drop(browser);
    server.stop();
}

/// `--http-listen` with the `--metrics-listen` address: one listener serves
/// the page, its data and the metrics.
#[test]
fn one_address_serves_the_page_and_the_metrics() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(
        dir.path(),
        1,
        &[
            "--http-listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
        ],
    );
    let page = server.page.clone().expect("status page address");
    assert_eq!(Some(&page), server.metrics.as_ref());
    for path in ["/", "/api/status", "/metrics"] {
        let (code, body) = get(&page, path, None);
        assert_eq!(code, 200, "{path}: {body}");
    }
    assert!(get(&page, "/metrics", None)
        .1
        .contains("ringfeed_shard_committed_offset"));
    // HEAD is GET without the body; other methods are refused with Allow.
    for path in ["/", "/api/status", "/metrics"] {
        let (code, head, body) = request(&page, "HEAD", path, None);
        assert_eq!((code, body.as_str()), (200, ""), "HEAD {path}: {head}");
        let (code, head, _) = request(&page, "POST", path, None);
        assert_eq!(code, 405, "POST {path}: {head}");
        assert!(head.contains("\r\nallow: get, head"), "POST {path}: {head}");
    }
    // A page on a listener of its own does not serve the metrics.
    let server = {
        server.stop();
        Server::start_with(dir.path(), 1, &["--http-listen", "127.0.0.1:0"])
    };
    let page = server.page.clone().expect("status page address");
    assert_eq!(get(&page, "/metrics", None).0, 404);
    server.stop();
}
