//! A cluster stream's cursor is exact after every response in `per_shard`
//! ordering too: two nodes of four shards, one event per response; resumed
//! from the cursor after any response, on either node, it yields exactly
//! the events after it. (Each node's part of the cursor moves shard by
//! shard as events are delivered; a whole node cursor taken after an event
//! could cover another shard's events read but not delivered yet. With the
//! whole backlog there when the stream starts, `per_shard` comes in stamp
//! order, so this test does not reach that window; the shared peer feed's
//! test resumes cursors made across feed handovers, which do.)

use std::collections::BTreeSet;

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_proto::v1::{self, subscribe_request::Start};

const SHARDS: u32 = 4;
const ROUNDS: usize = 6;
const PER_ROUND: usize = 20;

/// `count` events of a per_shard cluster stream of `addr` from `start`, one
/// per response, each with the cursor after it.
async fn read(addr: &str, start: Start, count: usize) -> Vec<(Seen, Vec<u8>)> {
    let request = v1::SubscribeRequest {
        start: Some(start),
        scope: v1::Scope::Cluster as i32,
        ordering: v1::Ordering::PerShard as i32,
        ..Default::default()
    };
    read_with_cursors(addr, request, count).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cursor_resumes_exactly_in_per_shard_order() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-any-order-");
    let _servers: Vec<Server> = (0..2)
        .map(|i| start_node(&ports, dirs[i].path(), i, SHARDS, &[]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    for round in 0..ROUNDS {
        for (node, addr) in ports.iter().enumerate() {
            append(addr, node + 1, round * PER_ROUND, PER_ROUND, false).await;
        }
    }
    let total = 2 * ROUNDS * PER_ROUND;
    let all = read(&ports[0], Start::Beginning(true), total).await;
    let events: Vec<Seen> = all.iter().map(|(e, _)| e.clone()).collect();
    assert_exact(&events, &[1, 2], SHARDS);
    let key = |e: &Seen| (e.1, e.2, e.3);
    for i in (0..total - 1).step_by(5) {
        let addr = &ports[i % 2];
        let rest = read(addr, Start::Cursor(all[i].1.clone().into()), total - 1 - i).await;
        let got: BTreeSet<_> = rest.iter().map(|(e, _)| key(e)).collect();
        let want: BTreeSet<_> = events[i + 1..].iter().map(key).collect();
        assert_eq!(
            got.len(),
            rest.len(),
            "resumed after event {i} on {addr}: no event twice"
        );
        assert_eq!(
            got, want,
            "resumed after event {i} on {addr}: exactly the events after it"
        );
    }
}
