//! A peer that dies holds a cluster stream for at most `peer_hold`, and its
//! events are late but never lost (issue 20): three real nodes, a cluster
//! stream on node 1; node 3 is SIGKILLed after its first durable events; the
//! stream goes on with nodes 1 and 2; node 3 restarts on its data dir and
//! appends more; the stream then has every durable event of every node
//! exactly once, each source in order, node 3's equal to reading it alone.
//! Run twice: with static peers, and with membership in a real etcd (where
//! node 3 also leaves the member list when its lease runs out, and comes
//! back when it restarts).

use std::time::Duration;

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_proto::v1::{self, subscribe_request::Start};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_peer_holds_the_feed_briefly_and_its_events_come_late_exactly_once() {
    let _watchdog = ringfeed_testkit::arm();
    killed_peer(None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_membership_in_etcd() {
    let _watchdog = ringfeed_testkit::arm();
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    killed_peer(Some(&etcd.url)).await;
}

async fn killed_peer(etcd: Option<&str>) {
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-down-");
    let config = config_file(dirs[0].path(), "peer_hold_ms = 500\netcd_lease_s = 2\n");
    let start = |i: usize| match etcd {
        None => start_node(&ports, dirs[i].path(), i, 2, &["--config", &config]),
        Some(url) => {
            let id = (i + 1).to_string();
            let flags = ["--node-id", &id, "--etcd", url, "--config", &config];
            Server::start_on_with(dirs[i].path(), 2, &ports[i], &flags)
        }
    };
    let mut servers: Vec<Option<Server>> = (0..3).map(|i| Some(start(i))).collect();
    for addr in &ports {
        wait_nodes(addr, &[1, 2, 3], Duration::from_secs(20)).await;
    }

    let (seen, reader) = follow_cluster(&ports[0]).await;

    for (i, addr) in ports.iter().enumerate() {
        append(addr, i + 1, 0, 40, true).await;
    }
    until(&seen, 120, Duration::from_secs(20), "before the kill").await;

    servers[2].take().expect("node 3").kill();
    append(&ports[0], 1, 40, 40, true).await;
    append(&ports[1], 2, 40, 40, true).await;
    // The feed goes on without node 3 once it has held it for peer_hold.
    until(&seen, 200, Duration::from_secs(20), "with node 3 down").await;

    servers[2] = Some(start(2));
    append(&ports[2], 3, 40, 40, true).await;
    until(
        &seen,
        240,
        Duration::from_secs(20),
        "after node 3 came back",
    )
    .await;
    // Nothing more than that arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 240, "every event once, nothing more");
    assert_eq!(assert_exact(&seen, &[1, 2, 3], 2), vec![80, 80, 80]);
    // Node 3's events as it holds them now, read alone (node scope: node 0).
    let mut alone = client(&ports[2])
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::Beginning(true)),
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut want = Vec::new();
    while want.len() < 80 {
        let response = tokio::time::timeout(Duration::from_secs(10), alone.message())
            .await
            .expect("node 3 reads alone")
            .unwrap()
            .unwrap();
        want.extend(events_of(response));
    }
    let mut want: Vec<Seen> = want.into_iter().map(|e| (e.0, 3, e.2, e.3, e.4)).collect();
    let mut got: Vec<Seen> = seen.into_iter().filter(|e| e.1 == 3).collect();
    got.sort();
    want.sort();
    assert_eq!(got, want, "node 3's events exactly as it holds them");

    reader.abort();
    for server in servers.into_iter().flatten() {
        server.stop();
    }
}
