//! `ringfeed serve --metrics-listen`: the Prometheus endpoint's counters move
//! with what clients did, its label sets stay bounded whatever clients call
//! themselves, and `--log-format json` writes JSON lines to stderr.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, Instant};

use crate::serve_binary::{http_request, Server};
use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};

/// One scrape: series (name and labels, as written) to value.
pub(crate) struct Scrape {
    series: Vec<(String, Vec<(String, String)>, f64)>,
}

impl Scrape {
    pub(crate) fn get(at: &str) -> Scrape {
        let (code, head, body) = http_request(at, "GET", "/metrics", None);
        assert_eq!(code, 200, "{head}");
        assert!(head.contains("text/plain; version=0.0.4"), "{head}");
        let series = body
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(parse_line)
            .collect();
        Scrape { series }
    }

    /// Sum of every series of `name` (all shards).
    pub(crate) fn sum(&self, name: &str) -> f64 {
        let values: Vec<f64> = self
            .series
            .iter()
            .filter(|(n, _, _)| n == name)
            .map(|(_, _, v)| *v)
            .collect();
        assert!(!values.is_empty(), "no series named {name}");
        values.iter().sum()
    }

    /// The value of the series of `name` whose `label` is `value`.
    pub(crate) fn labelled(&self, name: &str, label: &str, value: &str) -> f64 {
        self.series
            .iter()
            .find(|(n, labels, _)| {
                n == name && labels.iter().any(|(k, v)| k == label && v == value)
            })
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("no series {name}{{{label}={value:?}}}"))
    }

    /// Sum of the `le="+Inf"` buckets of a histogram (all shards).
    fn inf_bucket(&self, name: &str) -> f64 {
        self.series
            .iter()
            .filter(|(n, labels, _)| {
                n == name && labels.iter().any(|(k, v)| k == "le" && v == "+Inf")
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    /// Series identities (name and labels), values left out.
    fn identities(&self) -> BTreeSet<String> {
        self.series
            .iter()
            .map(|(n, labels, _)| format!("{n}{labels:?}"))
            .collect()
    }
}

/// `name{k="v",...} value` or `name value`; label values may hold escapes.
fn parse_line(line: &str) -> (String, Vec<(String, String)>, f64) {
    let (series, value) = line.rsplit_once(' ').expect("series and value");
    let value = match value {
        "+Inf" => f64::INFINITY,
        v => v.parse().unwrap_or_else(|_| panic!("value of {line}")),
    };
    let Some((name, rest)) = series.split_once('{') else {
        return (series.to_owned(), Vec::new(), value);
    };
    let mut labels = Vec::new();
    let mut chars = rest.strip_suffix('}').expect("closing brace").chars();
    loop {
        let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
        if key.is_empty() {
            break;
        }
        assert_eq!(chars.next(), Some('"'), "{line}");
        let mut value = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => value.extend(chars.next()),
                '"' => break,
                c => value.push(c),
            }
        }
        labels.push((key.trim_start_matches(',').to_owned(), value));
    }
    (name.to_owned(), labels, value)
}

/// Scrapes until `done` holds, failing after 20 s.
pub(crate) fn scrape_until(at: &str, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let scrape = Scrape::get(at);
        if done(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "metrics never showed {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client(server: &Server) -> RingFeedClient<Channel> {
    RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap()
}

fn subscribe_request(name: &str) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(Start::Beginning(true)),
        client_name: name.into(),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_follow_appends_and_subscriptions() {
    let _watchdog = ringfeed_testkit::arm();
    const N: usize = 300;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 2, &["--metrics-listen", "127.0.0.1:0"]);
    let at = server.metrics.clone().unwrap();
    let mut client = client(&server).await;

    let events: Vec<v1::Event> = (0..N)
        .map(|i| crate::common::create(&format!("/m/d{}", i % 7), &format!("f{i}")))
        .collect();
    let event_bytes: usize = events.iter().map(|e| e.encoded_len()).sum();
    for chunk in events.chunks(50) {
        client
            .append(crate::common::request(chunk.to_vec(), true))
            .await
            .unwrap();
    }

    let mut stream = client
        .subscribe(subscribe_request("counter-test"))
        .await
        .unwrap()
        .into_inner();
    let mut cursor = Vec::new();
    let got = crate::common::read_events(&mut stream, N, &mut cursor).await;
    assert_eq!(got.len(), N);

    let m = tokio::task::spawn_blocking(move || Scrape::get(&at))
        .await
        .unwrap();
    let n = N as f64;
    assert_eq!(m.sum("ringfeed_shard_append_events_total"), n);
    assert_eq!(m.sum("ringfeed_shard_committed_offset"), n);
    // Durable acks: everything acknowledged is flushed, through flush rounds.
    assert_eq!(m.sum("ringfeed_shard_flushed_offset"), n);
    assert!(m.sum("ringfeed_shard_flush_seconds_count") > 0.0);
    assert!(m.sum("ringfeed_shard_fsync_seconds_count") > 0.0);
    assert_eq!(
        m.sum("ringfeed_shard_flush_seconds_count"),
        m.inf_bucket("ringfeed_shard_flush_seconds_bucket"),
        "the +Inf buckets hold every flush"
    );
    // Records frame each event's encoding; responses carry it.
    assert!(m.sum("ringfeed_shard_append_bytes_total") >= event_bytes as f64);
    assert!(m.sum("ringfeed_shard_flushed_bytes_total") >= event_bytes as f64);
    assert_eq!(m.sum("ringfeed_shard_latched"), 0.0);
    assert_eq!(m.sum("ringfeed_shard_io_errors_total"), 0.0);
    assert!(m.sum("ringfeed_subscriber_events_sent_total") >= n);
    assert!(m.sum("ringfeed_subscriber_bytes_sent_total") >= event_bytes as f64);
    assert!(m.sum("ringfeed_subscriber_lag_seconds_count") >= 1.0);
    assert_eq!(m.sum("ringfeed_subscribers_connected"), 1.0);
    assert!(m.sum("ringfeed_process_resident_memory_bytes") > 0.0);
    assert!(m.sum("ringfeed_process_open_fds") > 0.0);

    // A subscriber asking for heartbeats gets them, and they are counted.
    let mut beating = client
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Now(true)),
            heartbeats: true,
            heartbeat_interval_ms: 10,
            ..subscribe_request("heartbeat-test")
        })
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(20), beating.message())
        .await
        .expect("a heartbeat within 20 s")
        .unwrap()
        .unwrap();
    assert!(matches!(
        first.item,
        Some(v1::subscribe_response::Item::Heartbeat(_))
    ));
    let at = server.metrics.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        scrape_until(&at, "a heartbeat and two subscribers", |m| {
            m.sum("ringfeed_heartbeats_sent_total") >= 1.0
                && m.sum("ringfeed_subscribers_connected") == 2.0
        })
    })
    .await
    .unwrap();

    // Both streams end: the gauge returns to 0.
    drop(stream);
    drop(beating);
    let at = server.metrics.clone().unwrap();
    tokio::task::spawn_blocking(move || {
        scrape_until(&at, "no subscriber connected", |m| {
            m.sum("ringfeed_subscribers_connected") == 0.0
        })
    })
    .await
    .unwrap();
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn labels_stay_bounded_whatever_clients_are_called() {
    let _watchdog = ringfeed_testkit::arm();
    const SHARDS: u32 = 3;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), SHARDS, &["--metrics-listen", "127.0.0.1:0"]);
    let mut client = client(&server).await;
    let events: Vec<v1::Event> = (0..60)
        .map(|i| crate::common::create(&format!("/l/d{i}"), "x"))
        .collect();
    client
        .append(crate::common::request(events, false))
        .await
        .unwrap();

    let names = |from: usize, to: usize| -> Vec<String> {
        (from..to)
            .map(|i| format!("client \"{i}\", peer=evil{{shard=\"9\"}}"))
            .collect()
    };
    let mut streams = Vec::new();
    let mut scrapes = Vec::new();
    for (from, to) in [(0, 3), (3, 9)] {
        for name in names(from, to) {
            let mut stream = client
                .subscribe(subscribe_request(&name))
                .await
                .unwrap()
                .into_inner();
            let mut cursor = Vec::new();
            assert_eq!(
                crate::common::read_events(&mut stream, 60, &mut cursor)
                    .await
                    .len(),
                60
            );
            streams.push(stream);
        }
        let at = server.metrics.clone().unwrap();
        let connected = to as f64;
        scrapes.push(
            tokio::task::spawn_blocking(move || {
                scrape_until(&at, "every subscriber connected", |m| {
                    m.sum("ringfeed_subscribers_connected") == connected
                })
            })
            .await
            .unwrap(),
        );
    }

    let allowed_shards: Vec<String> = (0..SHARDS).map(|s| s.to_string()).collect();
    for scrape in &scrapes {
        for (name, labels, _) in &scrape.series {
            assert!(name.starts_with("ringfeed_"), "{name}");
            for (key, value) in labels {
                match key.as_str() {
                    "shard" => assert!(allowed_shards.contains(value), "{name}: shard {value}"),
                    "le" | "quantile" => assert!(
                        value == "+Inf" || value.parse::<f64>().is_ok(),
                        "{name}: {key}={value}"
                    ),
                    other => panic!("{name} has label {other}={value:?}"),
                }
            }
        }
    }
    // Three more clients, not one more series.
    assert_eq!(scrapes[0].identities(), scrapes[1].identities());
    drop(streams);
    server.stop();
}

#[test]
fn json_logs_go_to_stderr() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(dir.path(), 1, &["--log-format", "json"]);
    assert!(server.metrics.is_none(), "no endpoint unless asked for");
    let stderr = server.stderr.clone();
    server.stop();
    let lines = stderr.lock().unwrap().clone();
    let logs: Vec<HashMap<String, serde_json::Value>> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        logs.iter().any(|l| l["level"] == "INFO"
            && l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("stopping"))),
        "{lines:?}"
    );
}
