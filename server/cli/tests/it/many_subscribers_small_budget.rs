//! The response budget bounds how many responses exist at once, never
//! whether a subscriber finishes (issue 41). Each test runs a real server
//! with a budget of four full responses (256 KiB) and 16 times as many
//! subscribers reading full batches, and every subscriber must get every
//! event exactly once: catching up from the beginning (events, and chunk
//! mode), taking a burst at the live edge, and through a cluster, whose
//! streams read a peer's events through streams of the peer's own.
//!
//! Until the fix every stream kept its last response's budget until its
//! transport took the next, and needed budget to build that next one: once
//! every permit was held that way nobody could build, and each of these
//! tests stood still after a few responses (a storm of 5,000 subscribers
//! stopped the same way at the 128 MiB default, 2,048 full responses).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::cluster_nodes::{client, config_file, events_of, free_ports, start_node, wait_all_up};
use crate::serve_binary::Server;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::subscribe_response::Item;
use ringfeed_proto::{v1, RingFeedClient};

/// Four full responses (`batch_max_bytes` and `chunk_max_bytes` are 64 KiB).
const BUDGET: &str = "response_budget_bytes = 262144\n";
/// Sixteen times the responses the budget holds.
const SUBSCRIBERS: usize = 64;
/// ~250 bytes each: ~1 MB, 16 full batches per subscriber.
const EVENTS: usize = 4_000;
/// Far more than a healthy run takes (a few seconds), below the watchdog's
/// 60 s, so a stream that stands still fails here with the count.
const LIMIT: Duration = Duration::from_secs(40);

/// Event `i` of `node`: ~250 bytes, so 64 KiB batches are full by bytes.
fn event(node: usize, i: usize) -> v1::Event {
    v1::Event {
        directory: format!("/n{node}/d{}", i % 7),
        new_entry: Some(v1::Entry {
            name: format!("f{i}-{}", "x".repeat(200)),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Appends events `from..to` of `node` in appends of 500.
async fn append(addr: &str, node: usize, from: usize, to: usize) {
    let mut c = client(addr).await;
    for start in (from..to).step_by(500) {
        c.append(v1::AppendRequest {
            events: (start..to.min(start + 500))
                .map(|i| event(node, i))
                .collect(),
            ..Default::default()
        })
        .await
        .unwrap();
    }
}

/// A client on a connection of its own (as the storm's are).
async fn own_client(addr: &str) -> RingFeedClient<Channel> {
    RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Starts `SUBSCRIBERS` readers of `request`, each reading until it has
/// `count` events; returns, per reader, `(node, shard) -> offsets` in
/// delivery order. Fails naming how many finished if any is still reading
/// after `LIMIT`.
async fn read_all(addr: &str, request: v1::SubscribeRequest, count: usize) -> Vec<Offsets> {
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut readers = Vec::new();
    for k in 0..SUBSCRIBERS {
        let mut c = own_client(addr).await;
        let request = v1::SubscribeRequest {
            client_name: format!("reader {k}"),
            ..request.clone()
        };
        let done = done_tx.clone();
        readers.push(tokio::spawn(async move {
            let mut stream = c.subscribe(request).await.unwrap().into_inner();
            let mut got = Offsets::new();
            let mut n = 0;
            while n < count {
                let response = stream.message().await.unwrap().expect("the stream ended");
                n += record(&mut got, response);
            }
            let _ = done.send(());
            got
        }));
    }
    let mut finished = 0;
    let deadline = tokio::time::Instant::now() + LIMIT;
    while finished < SUBSCRIBERS {
        match tokio::time::timeout_at(deadline, done_rx.recv()).await {
            Ok(_) => finished += 1,
            Err(_) => panic!(
                "{finished} of {SUBSCRIBERS} subscribers got their {count} events in {LIMIT:?}; \
                 the rest stand still"
            ),
        }
    }
    let mut all = Vec::new();
    for reader in readers {
        all.push(reader.await.unwrap());
    }
    all
}

/// Per `(node, shard)`, the offsets delivered, in order.
type Offsets = BTreeMap<(u32, u32), Vec<u64>>;

/// Adds the events of `response` (events, batches or chunks) to `got`:
/// how many.
fn record(got: &mut Offsets, response: v1::SubscribeResponse) -> usize {
    if let Some(Item::Chunk(chunk)) = &response.item {
        let offsets = got.entry((0, chunk.shard)).or_default();
        let first = chunk.first_offset;
        offsets.extend(first..first + u64::from(chunk.record_count));
        return chunk.record_count as usize;
    }
    let events = events_of(response);
    for e in &events {
        got.entry((e.1, e.2)).or_default().push(e.3);
    }
    events.len()
}

/// Every reader got exactly `count` events, each `(node, shard)` dense from
/// `from` of it, in order.
fn assert_exact(all: &[Offsets], count: usize, from: &BTreeMap<(u32, u32), u64>) {
    for (k, got) in all.iter().enumerate() {
        let total: usize = got.values().map(Vec::len).sum();
        assert_eq!(total, count, "reader {k}: every event once");
        for (key, offsets) in got {
            let start = from.get(key).copied().unwrap_or(0);
            let dense: Vec<u64> = (start..start + offsets.len() as u64).collect();
            assert_eq!(
                offsets, &dense,
                "reader {k}, (node, shard) {key:?}: none missing, none twice"
            );
        }
    }
}

/// Where each shard of `addr` stands now: `(0, shard) -> committed`.
async fn committed(addr: &str) -> BTreeMap<(u32, u32), u64> {
    let status = client(addr)
        .await
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    status
        .shards
        .iter()
        .map(|s| ((0, s.shard), s.committed_next))
        .collect()
}

fn from_the_beginning(chunk_mode: bool) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(Start::Beginning(true)),
        batching: true,
        chunk_mode,
        ..Default::default()
    }
}

fn small_budget_server(dir: &tempfile::TempDir) -> Server {
    let config = config_file(dir.path(), BUDGET);
    Server::start_with(&dir.path().join("data"), 2, &["--config", &config])
}

/// Every subscriber reads the whole log from the beginning.
async fn catch_up(chunk_mode: bool) {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = small_budget_server(&dir);
    append(&server.addr, 0, 0, EVENTS).await;
    let all = read_all(&server.addr, from_the_beginning(chunk_mode), EVENTS).await;
    assert_exact(&all, EVENTS, &BTreeMap::new());
    server.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catching_up_through_full_batches_every_subscriber_finishes() {
    catch_up(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catching_up_in_chunk_mode_every_subscriber_finishes() {
    catch_up(true).await;
}

/// Live subscribers at the edge, then a burst: each falls behind the edge
/// by a whole burst at once and reads it in full batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_at_the_live_edge_reaches_every_subscriber() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = small_budget_server(&dir);
    // Some history first, so the live subscribers start past offset 0.
    append(&server.addr, 0, 0, 100).await;
    let from = committed(&server.addr).await;
    let cursor = ringfeed_engine::Cursor::new(from.values().copied().collect());
    let request = v1::SubscribeRequest {
        start: Some(Start::Cursor(cursor.to_bytes().into())),
        batching: true,
        ..Default::default()
    };
    let addr = server.addr.clone();
    let readers = tokio::spawn(async move { read_all(&addr, request, EVENTS).await });
    // The burst once every subscriber waits at the edge.
    let mut c = client(&server.addr).await;
    loop {
        let listed = c
            .list_subscribers(v1::ListSubscribersRequest {})
            .await
            .unwrap()
            .into_inner()
            .subscribers;
        if listed.len() == SUBSCRIBERS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    append(&server.addr, 0, 100, 100 + EVENTS).await;
    let all = readers.await.unwrap();
    assert_exact(&all, EVENTS, &from);
    server.stop();
}

/// Cluster streams on node 1 read node 2's events through node 2's own
/// streams (one per cluster stream until the edge): both nodes with the
/// small budget, both kinds of stream many times over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_streams_on_a_small_budget_all_finish() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = crate::cluster_nodes::data_dirs(2, "small-budget-");
    let config = config_file(dirs[0].path(), BUDGET);
    let servers: Vec<Server> = (0..2)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &["--config", &config]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    append(&ports[0], 1, 0, EVENTS / 2).await;
    append(&ports[1], 2, 0, EVENTS / 2).await;
    let request = v1::SubscribeRequest {
        scope: v1::Scope::Cluster as i32,
        ..from_the_beginning(false)
    };
    let all = read_all(&ports[0], request, EVENTS).await;
    for (k, got) in all.iter().enumerate() {
        for node in [1, 2] {
            let of_node: usize = got
                .iter()
                .filter(|((n, _), _)| *n == node)
                .map(|(_, o)| o.len())
                .sum();
            assert_eq!(of_node, EVENTS / 2, "reader {k}: node {node}'s events");
        }
    }
    assert_exact(&all, EVENTS, &BTreeMap::new());
    for server in servers {
        server.stop();
    }
}
