//! Cluster subscriptions (issue 20, first version): three real nodes on
//! loopback, each given the others with `--peers`, appends to all three;
//! a cluster subscription on each node delivers every event of every node
//! exactly once, in `(ts, node, shard)` order, the same sequence on every
//! node, each node's part equal to a reference read of that node alone; the
//! last response's cluster cursor covers every node, and resumed on another
//! node it yields nothing more (nothing was appended since) while a new
//! append on any node comes through it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_engine::ClusterCursor;
use ringfeed_proto::prost::Message;
use ringfeed_proto::v1::{self, subscribe_request::Start};

const PER_NODE: usize = 240;

/// Reads `count` events from a subscription (and returns the last cursor),
/// failing after 30 s.
async fn read(addr: &str, scope: v1::Scope, start: Start, count: usize) -> (Vec<Seen>, Vec<u8>) {
    let mut stream = client(addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(start),
            scope: scope as i32,
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|s| panic!("{addr}: {s}"))
        .into_inner();
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut seen, mut cursor) = (Vec::new(), Vec::new());
    while seen.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        let response = tokio::time::timeout(left, stream.message())
            .await
            .unwrap_or_else(|_| panic!("{addr}: {} of {count} events in 30 s", seen.len()))
            .unwrap_or_else(|s| panic!("{addr}: {s}"))
            .expect("the stream goes on");
        let response_cursor = response.cursor.to_vec();
        seen.extend(events_of(response));
        cursor = response_cursor;
    }
    assert_eq!(seen.len(), count, "{addr}: no more than asked for");
    (seen, cursor)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_one_exact_merged_feed_on_each() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-");
    let servers: Vec<Server> = (0..3)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &[]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    for round in 0..PER_NODE / 30 {
        for (node, addr) in ports.iter().enumerate() {
            append(addr, node + 1, round * 30, 30, false).await;
        }
    }
    // The reference: each node read alone.
    let mut reference: BTreeMap<u32, Vec<Seen>> = BTreeMap::new();
    for (i, addr) in ports.iter().enumerate() {
        let (alone, _) = read(addr, v1::Scope::Node, Start::Beginning(true), PER_NODE).await;
        reference.insert(i as u32 + 1, alone);
    }
    let total = 3 * PER_NODE;
    let mut feeds = Vec::new();
    let mut cursors = Vec::new();
    for addr in &ports {
        let (feed, cursor) = read(addr, v1::Scope::Cluster, Start::Beginning(true), total).await;
        // (ts, node, shard) order, each event once.
        for pair in feed.windows(2) {
            assert!(
                (pair[0].0, pair[0].1, pair[0].2) < (pair[1].0, pair[1].1, pair[1].2),
                "{addr}: out of order: {:?} then {:?}",
                &pair[0].0..,
                &pair[1].0..
            );
        }
        for (node, alone) in &reference {
            let part: Vec<(u32, u64, i64, &Vec<u8>)> = feed
                .iter()
                .filter(|e| e.1 == *node)
                .map(|e| (e.2, e.3, e.0, &e.4))
                .collect();
            let want: Vec<(u32, u64, i64, &Vec<u8>)> =
                alone.iter().map(|e| (e.2, e.3, e.0, &e.4)).collect();
            assert_eq!(part, want, "{addr}: node {node}'s events as read alone");
        }
        feeds.push(feed);
        cursors.push(cursor);
    }
    assert_eq!(feeds[0], feeds[1], "the same feed on nodes 1 and 2");
    assert_eq!(feeds[0], feeds[2], "the same feed on nodes 1 and 3");
    let cursor = ClusterCursor::from_bytes(&cursors[0]).expect("a cluster cursor");
    let covered: Vec<u32> = cursor.nodes().map(|(id, _)| id).collect();
    assert_eq!(covered, [1, 2, 3]);
    for (id, part) in cursor.nodes() {
        assert_eq!(
            part.offsets().iter().sum::<u64>(),
            PER_NODE as u64,
            "node {id}'s part covers its events"
        );
    }

    // Node 1's cursor resumed on node 3: the next event is a new one.
    append(&ports[1], 2, 9_999, 1, false).await;
    let (next, _) = read(
        &ports[2],
        v1::Scope::Cluster,
        Start::Cursor(cursors[0].clone().into()),
        1,
    )
    .await;
    assert_eq!((next[0].1, next[0].3 >= 1), (2, true), "{next:?}");
    let want = event(2, 9_999).encode_to_vec();
    assert_eq!(next[0].4, want, "the new event, nothing before it again");

    for server in servers {
        server.stop();
    }
}
