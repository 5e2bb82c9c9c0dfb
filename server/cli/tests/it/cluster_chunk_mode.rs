//! Chunk mode in cluster scope: three real nodes with small rings, so each
//! holds its feed on disk, in sealed windows and in its open one.
//!
//! - A chunk-mode cluster stream ships chunks of every node (each naming
//!   it), one `ChunkModeEnd`, then events; a follower of it hands out
//!   exactly the events an event-mode cluster follower does, per (node,
//!   shard), each once.
//! - Its checkpoint taken inside a peer's chunks, resumed on another node,
//!   continues with exactly the rest.
//! - A peer down while the stream ships chunks holds it for at most
//!   `peer_hold`; its events come once it is back, exactly once.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_proto::v1::{self, subscribe_request::Start, subscribe_response::Item};
use ringfeed_server::client::{Backoff, FollowedEvent, Follower};

const PER_NODE: usize = 12_000;
/// 16 KiB windows in a 128 KiB ring a shard: each node's feed starts on
/// disk and ends in sealed windows and the open one.
const SMALL_RING: &str =
    "window_bytes = 16384\nring_bytes = 131072\nmax_unflushed_bytes = 65536\nmax_event_bytes = 4096\npeer_hold_ms = 500\n";

/// Starts three nodes with small rings and appends `PER_NODE` events to
/// each; the time after the last append.
async fn three_nodes(dirs: &[tempfile::TempDir], ports: &[String]) -> (Vec<Server>, i64) {
    let config = config_file(dirs[0].path(), SMALL_RING);
    let servers: Vec<Server> = (0..3)
        .map(|i| start_node(ports, dirs[i].path(), i, 2, &["--config", &config]))
        .collect();
    for addr in ports {
        wait_all_up(addr).await;
    }
    for (i, addr) in ports.iter().enumerate() {
        for from in (0..PER_NODE).step_by(1000) {
            append(addr, i + 1, from, 1000, false).await;
        }
    }
    (servers, ringfeed_engine::clock::now_ns())
}

fn cluster_request(start: Start, until_ns: i64, chunk_mode: bool) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(start),
        until_ns,
        chunk_mode,
        scope: v1::Scope::Cluster as i32,
        ..Default::default()
    }
}

/// Up to `most` events of a follower of `addr`, and the follower; fails
/// after 30 s.
async fn follow(
    addr: &str,
    request: v1::SubscribeRequest,
    most: usize,
) -> (Vec<FollowedEvent>, Follower) {
    crate::common::follow(addr, request, most, Duration::from_secs(30)).await
}

fn seen(events: &[FollowedEvent]) -> Vec<Seen> {
    events
        .iter()
        .map(|e| (e.ts_ns, e.node, e.shard, e.offset, e.event.to_vec()))
        .collect()
}

/// Per (node, shard): its events in order, as (offset, ts, bytes).
fn per_source(events: &[FollowedEvent]) -> BTreeMap<(u32, u32), Vec<(u64, i64, Vec<u8>)>> {
    let mut sources: BTreeMap<(u32, u32), Vec<_>> = BTreeMap::new();
    for e in events {
        sources
            .entry((e.node, e.shard))
            .or_default()
            .push((e.offset, e.ts_ns, e.event.to_vec()));
    }
    sources
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_chunk_mode_ships_every_nodes_chunks_and_resumes_inside_them() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-chunks-");
    let (servers, until) = three_nodes(&dirs, &ports).await;
    crate::common::assert_starts_on_disk(&mut client(&ports[1]).await).await;

    // The wire: chunks of every node, each naming it, one end marker, and
    // no chunk after it.
    let mut stream = client(&ports[0])
        .await
        .subscribe(cluster_request(Start::Beginning(true), until, true))
        .await
        .unwrap()
        .into_inner();
    let mut chunks: BTreeMap<u32, usize> = BTreeMap::new();
    let (mut ends, mut events_after) = (0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Some(response) = tokio::time::timeout_at(deadline.into(), stream.message())
        .await
        .expect("the stream ends within 30 s")
        .unwrap()
    {
        match response.item {
            Some(Item::Chunk(c)) => {
                assert_eq!(ends, 0, "a chunk after ChunkModeEnd");
                *chunks.entry(c.node).or_default() += 1;
            }
            Some(Item::ChunkModeEnd(_)) => ends += 1,
            item => {
                events_after += events_of(v1::SubscribeResponse {
                    cursor: Default::default(),
                    item,
                })
                .len()
            }
        }
    }
    assert_eq!(ends, 1, "one ChunkModeEnd");
    assert_eq!(
        chunks.keys().copied().collect::<Vec<_>>(),
        [1, 2, 3],
        "chunks of every node, each naming it: {chunks:?}"
    );
    assert!(events_after > 0, "the open windows' events come as events");

    // The same events as event mode, each once.
    let (events, _) = follow(
        &ports[0],
        cluster_request(Start::Beginning(true), until, false),
        usize::MAX,
    )
    .await;
    let (chunked, follower) = follow(
        &ports[0],
        cluster_request(Start::Beginning(true), until, true),
        usize::MAX,
    )
    .await;
    assert!(follower.stats.chunks > 0);
    assert_eq!(
        assert_exact(&seen(&chunked), &[1, 2, 3], 2),
        vec![PER_NODE; 3]
    );
    assert!(
        per_source(&events) == per_source(&chunked),
        "chunk mode hands out what event mode does, per node and shard"
    );

    // A checkpoint inside node 2's chunks (node 1's come first), resumed on
    // node 3: exactly the rest.
    let k = PER_NODE + PER_NODE / 2;
    let (first, follower) = follow(
        &ports[0],
        cluster_request(Start::Beginning(true), until, true),
        k,
    )
    .await;
    assert_eq!(
        first[k - 1].node,
        2,
        "the checkpoint is inside node 2's chunks"
    );
    let mut cursor = Vec::new();
    follower.checkpoint_bytes(&mut cursor);
    drop(follower);
    let (rest, _) = follow(
        &ports[2],
        cluster_request(Start::Cursor(cursor.into()), until, true),
        usize::MAX,
    )
    .await;
    let mut all = first;
    all.extend(rest);
    assert_eq!(assert_exact(&seen(&all), &[1, 2, 3], 2), vec![PER_NODE; 3]);

    for server in servers {
        server.stop();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_down_during_the_chunks_holds_them_briefly_and_its_events_come_once() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-chunks-down-");
    let (mut servers, until) = three_nodes(&dirs, &ports).await;
    servers.pop().expect("node 3").stop();

    let addr = ports[0].clone();
    let count = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = count.clone();
    let reader = tokio::spawn(async move {
        let request = cluster_request(Start::Beginning(true), until, true);
        let mut follower = Follower::new(&addr, request, Backoff::default()).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Some(e) = tokio::time::timeout_at(deadline.into(), follower.next())
            .await
            .unwrap_or_else(|_| panic!("{} events, then nothing", got.len()))
            .unwrap()
        {
            got.push(e);
            counted.store(got.len(), std::sync::atomic::Ordering::Relaxed);
        }
        got
    });
    // Every event of nodes 1 and 2 comes while node 3 is down (it holds
    // the stream for peer_hold, in its chunks' turn and in the merge).
    let deadline = Instant::now() + Duration::from_secs(30);
    while count.load(std::sync::atomic::Ordering::Relaxed) < 2 * PER_NODE {
        assert!(
            Instant::now() < deadline,
            "{} of nodes 1 and 2's {} events with node 3 down",
            count.load(std::sync::atomic::Ordering::Relaxed),
            2 * PER_NODE
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let config = config_file(dirs[0].path(), SMALL_RING);
    let third = start_node(&ports, dirs[2].path(), 2, 2, &["--config", &config]);
    let got = reader.await.unwrap();
    let before: Vec<u32> = got[..2 * PER_NODE].iter().map(|e| e.node).collect();
    assert!(
        before.iter().all(|&n| n != 3),
        "node 3's events only once it is back"
    );
    assert_eq!(assert_exact(&seen(&got), &[1, 2, 3], 2), vec![PER_NODE; 3]);
    third.stop();
    for server in servers {
        server.stop();
    }
}
