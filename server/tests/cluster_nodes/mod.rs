//! What the cluster tests share: ports and data dirs for several real nodes,
//! waiting until every node has reached its peers, events to append, and
//! the events of a subscription response.
#![allow(dead_code)]

use std::net::TcpListener;
use std::time::{Duration, Instant};

use ringfeed_proto::prost::Message;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::{self, subscribe_response::Item};
use ringfeed_proto::RingFeedClient;

/// (ts, node, shard, offset, event bytes) of a delivered event.
pub type Seen = (i64, u32, u32, u64, Vec<u8>);

/// `n` loopback addresses with ports from the OS, all distinct (held at
/// once), freed for the nodes to bind.
pub fn free_ports(n: usize) -> Vec<String> {
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|l| l.local_addr().unwrap().to_string())
        .collect()
}

/// `n` scratch data dirs.
pub fn data_dirs(n: usize, prefix: &str) -> Vec<tempfile::TempDir> {
    (0..n)
        .map(|_| {
            tempfile::Builder::new()
                .prefix(prefix)
                .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
                .unwrap()
        })
        .collect()
}

/// Every address but the `i`th, comma-separated (a `--peers` value).
pub fn peers_of(ports: &[String], i: usize) -> String {
    let others: Vec<&str> = (0..ports.len())
        .filter(|&j| j != i)
        .map(|j| ports[j].as_str())
        .collect();
    others.join(",")
}

pub async fn client(addr: &str) -> RingFeedClient<Channel> {
    RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Waits (at most 20 s) until `addr` has reached every peer (their ids known).
pub async fn wait_all_up(addr: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let nodes = client(addr)
            .await
            .list_nodes(v1::ListNodesRequest {})
            .await
            .unwrap()
            .into_inner()
            .nodes;
        if nodes.iter().all(|n| n.up && n.node_id != 0) {
            return;
        }
        assert!(Instant::now() < deadline, "{addr}: {nodes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Event `i` of node `node`, in one of its five directories.
pub fn event(node: usize, i: usize) -> v1::Event {
    v1::Event {
        directory: format!("/n{node}/d{}", i % 5),
        new_entry: Some(v1::Entry {
            name: format!("f{i}"),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Appends events `from..from + count` of node `node` to `addr`.
pub async fn append(addr: &str, node: usize, from: usize, count: usize, durable: bool) {
    let durability = if durable {
        v1::Durability::Durable
    } else {
        v1::Durability::Memory
    };
    client(addr)
        .await
        .append(v1::AppendRequest {
            events: (from..from + count).map(|i| event(node, i)).collect(),
            durability: durability as i32,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|s| panic!("append to {addr}: {s}"));
}

/// The events a response carries (none for other items).
pub fn events_of(response: v1::SubscribeResponse) -> Vec<Seen> {
    let events = match response.item {
        Some(Item::Event(e)) => vec![e],
        Some(Item::Batch(b)) => b.events,
        _ => Vec::new(),
    };
    events
        .into_iter()
        .map(|e| {
            let bytes = e.event.map(|e| e.encode_to_vec()).unwrap_or_default();
            (e.ts_ns, e.node, e.shard, e.offset, bytes)
        })
        .collect()
}
