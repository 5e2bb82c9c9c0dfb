//! Membership through etcd (issue 20): real nodes register in a real etcd
//! (`serve --etcd`) and pick up each other without restarts. Nodes 1 and 2
//! start, a cluster stream on node 1 follows both; node 3 starts mid-stream
//! and joins the stream (its events delivered, late); node 3 stops cleanly
//! and leaves the member list at once (its lease revoked), node 2 is
//! SIGKILLed and leaves when its lease runs out. The stream has every event
//! of every node exactly once, each `(node, shard)` in order.

use std::time::Duration;

use crate::cluster_nodes::*;
use crate::serve_binary::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_join_and_leave_through_etcd_and_a_joining_node_joins_the_stream() {
    let _watchdog = ringfeed_testkit::arm();
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-etcd-");
    let config = config_file(dirs[0].path(), "peer_hold_ms = 500\netcd_lease_s = 2\n");
    let start = |i: usize| {
        let id = (i + 1).to_string();
        let flags = ["--node-id", &id, "--etcd", &etcd.url, "--config", &config];
        Server::start_on_with(dirs[i].path(), 2, &ports[i], &flags)
    };
    let node1 = start(0);
    let node2 = start(1);
    wait_nodes(&ports[0], &[1, 2], Duration::from_secs(10)).await;
    wait_nodes(&ports[1], &[1, 2], Duration::from_secs(10)).await;

    let (seen, reader) = follow_cluster(&ports[0]).await;
    append(&ports[0], 1, 0, 30, true).await;
    append(&ports[1], 2, 0, 30, true).await;
    until(&seen, 60, Duration::from_secs(10), "nodes 1 and 2").await;

    // Node 3 joins: its events were appended before anyone followed it.
    let node3 = start(2);
    append(&ports[2], 3, 0, 30, true).await;
    wait_nodes(&ports[0], &[1, 2, 3], Duration::from_secs(10)).await;
    until(&seen, 90, Duration::from_secs(10), "node 3 joined").await;
    append(&ports[2], 3, 30, 10, true).await;
    append(&ports[0], 1, 30, 10, true).await;
    until(&seen, 110, Duration::from_secs(10), "all three").await;

    // A clean stop revokes the lease: gone well before it would run out.
    node3.stop();
    wait_nodes(&ports[0], &[1, 2], Duration::from_millis(1500)).await;
    // A killed node leaves when its lease (2 s) runs out.
    node2.kill();
    wait_nodes(&ports[0], &[1], Duration::from_secs(10)).await;

    // The stream goes on with what is left, and nothing repeats.
    append(&ports[0], 1, 40, 10, true).await;
    until(&seen, 120, Duration::from_secs(10), "after two left").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 120, "every event once, nothing more");
    let per_node = assert_exact(&seen, &[1, 2, 3], 2);
    assert_eq!(per_node, vec![50, 30, 40]);
    reader.abort();
    node1.stop();
}
