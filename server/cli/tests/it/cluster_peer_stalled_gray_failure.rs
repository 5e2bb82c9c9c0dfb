//! A gray failure (issue 20): node 3 is frozen with SIGSTOP for 20 s, its
//! connections open and silent. A cluster stream on node 1 goes on with
//! nodes 1 and 2 once node 3 has held it for `peer_hold` (events appended
//! to them during the freeze arrive during the freeze, not after it); after
//! SIGCONT node 3's new events arrive too, and the stream has every event
//! of every node exactly once, each `(node, shard)` in order. A second
//! stream with heartbeats is told node 3 holds the merge, then that it is
//! skipped, and once it is back, that nobody is; `ListSubscribers` shows
//! the cluster streams skipping node 3 during the freeze.

use std::time::{Duration, Instant};

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_proto::v1::{self, subscribe_request::Start, subscribe_response::Item};

const FROZEN: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_peer_holds_the_feed_only_for_peer_hold_and_loses_nothing() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-stop-");
    let config = config_file(dirs[0].path(), "peer_hold_ms = 500\n");
    let servers: Vec<Server> = (0..3)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &["--config", &config]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    let (seen, reader) = follow_cluster(&ports[0]).await;
    // (held by, skipped) of each heartbeat of a second stream.
    let beats = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(Vec<u32>, Vec<u32>)>::new()));
    let mut stream = client(&ports[0])
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            scope: v1::Scope::Cluster as i32,
            heartbeats: true,
            heartbeat_interval_ms: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let beat_reader = {
        let beats = beats.clone();
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                if let Some(Item::Heartbeat(h)) = response.item {
                    beats
                        .lock()
                        .unwrap()
                        .push((h.held_by_nodes, h.skipped_nodes));
                }
            }
        })
    };
    for (i, addr) in ports.iter().enumerate() {
        append(addr, i + 1, 0, 20, true).await;
    }
    until(&seen, 60, Duration::from_secs(10), "before the freeze").await;

    servers[2].pause();
    let frozen = Instant::now();
    // Rounds of appends to nodes 1 and 2 while node 3 is frozen: each
    // round arrives while it still is.
    let mut next = 20;
    let mut want = 60;
    while frozen.elapsed() + Duration::from_secs(3) < FROZEN {
        append(&ports[0], 1, next, 10, true).await;
        append(&ports[1], 2, next, 10, true).await;
        next += 10;
        want += 20;
        until(&seen, want, Duration::from_secs(2), "node 3 frozen").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        frozen.elapsed() < FROZEN,
        "the rounds took longer than the freeze"
    );
    {
        let beats = beats.lock().unwrap();
        assert!(
            beats.iter().any(|b| b.0 == [3]),
            "a heartbeat says node 3 holds the merge: {beats:?}"
        );
        assert!(
            beats.iter().any(|b| b.1 == [3]),
            "a heartbeat says node 3 is skipped: {beats:?}"
        );
    }
    let thawed_from = beats.lock().unwrap().len();
    let listed = client(&ports[0])
        .await
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner()
        .subscribers;
    let modes: Vec<&str> = listed.iter().map(|s| s.mode.as_str()).collect();
    assert_eq!(listed.len(), 2, "both cluster streams listed: {modes:?}");
    assert!(
        modes.iter().all(|m| m.contains("skipping node(s) 3")),
        "{modes:?}"
    );
    tokio::time::sleep(FROZEN.saturating_sub(frozen.elapsed())).await;
    servers[2].resume();

    append(&ports[2], 3, 20, 20, true).await;
    append(&ports[0], 1, next, 10, true).await;
    want += 30;
    until(&seen, want, Duration::from_secs(10), "after the thaw").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    {
        let beats = beats.lock().unwrap();
        let last = beats.last().expect("heartbeats");
        assert!(
            last.1.is_empty() && last.0.is_empty(),
            "after the thaw nobody is skipped: {:?}",
            &beats[thawed_from..]
        );
    }
    beat_reader.abort();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), want, "every event once, nothing more");
    let per_node = assert_exact(&seen, &[1, 2, 3], 2);
    assert_eq!(per_node, vec![next + 10, next, 40]);
    reader.abort();
    for server in servers {
        server.stop();
    }
}
