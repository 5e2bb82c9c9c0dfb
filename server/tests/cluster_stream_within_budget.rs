//! A cluster stream's merge counts against the response budget (issue 20):
//! with a budget far smaller than what piles up while a frozen peer holds
//! the merge, the stream stops pulling at the budget, goes on after
//! `peer_hold`, and still delivers every event exactly once, each
//! `(node, shard)` in order. (What this checks is that the budget never
//! stalls or loses anything; that memory stays under it is the budget's
//! accounting, not measured here.)

mod cluster_nodes;
mod serve_binary;

use std::time::Duration;

use cluster_nodes::*;
use serve_binary::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_smaller_than_a_held_backlog_never_stalls_or_loses() {
    let _watchdog = ringfeed_watchdog::arm();
    let ports = free_ports(2);
    let dirs = data_dirs(2, "cluster-budget-");
    // 16 KiB: about 130 queued events of this test.
    let config = config_file(
        dirs[0].path(),
        "peer_hold_ms = 1000\nresponse_budget_bytes = 16384\n",
    );
    let servers: Vec<Server> = (0..2)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &["--config", &config]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    let (seen, reader) = follow_cluster(&ports[0]).await;
    append(&ports[1], 2, 0, 10, true).await;
    until(&seen, 10, Duration::from_secs(10), "node 2 first").await;

    servers[1].pause();
    // Far more than the budget covers, appended while node 2 holds the merge.
    for batch in 0..10 {
        append(&ports[0], 1, batch * 300, 300, true).await;
    }
    until(&seen, 3010, Duration::from_secs(20), "node 2 frozen").await;
    servers[1].resume();
    append(&ports[1], 2, 10, 10, true).await;
    append(&ports[0], 1, 3000, 10, true).await;
    until(&seen, 3030, Duration::from_secs(20), "after the thaw").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 3030, "every event once, nothing more");
    assert_eq!(assert_exact(&seen, &[1, 2], 2), vec![3010, 20]);
    reader.abort();
    for server in servers {
        server.stop();
    }
}
