//! Static membership (issue 20): three real nodes on loopback, each given
//! the others with `--peers`; `ringfeed nodes` on each lists all three with
//! their ids, the others up, and `status --cluster` shows each node's status;
//! a killed node shows as down, with why; a node
//! with peers but no id, or a peer that is not HOST:PORT, is refused at start.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::serve_binary::{run_bounded, Output, Server};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(30);

/// Nodes as `ringfeed nodes --json` lists them: (id, address, this node, up, error).
fn nodes(addr: &str) -> Vec<(u64, String, bool, bool, String)> {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["nodes", "--json", "--server", addr]);
    let out = run_bounded(command, None, TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    let list: Value =
        serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    list["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| {
            (
                n["nodeId"].as_u64().unwrap_or(0),
                n["address"].as_str().unwrap_or("").to_owned(),
                n["thisNode"].as_bool().unwrap_or(false),
                n["up"].as_bool().unwrap_or(false),
                n["error"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

/// `ringfeed status --cluster` asked at `addr`: its text.
fn status_cluster(addr: &str) -> String {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["status", "--cluster", "--server", addr]);
    let out = run_bounded(command, None, TIMEOUT);
    assert_eq!(out.code(), Some(0), "{out}");
    out.stdout
}

/// Waits (at most 20 s, polling) until `addr`'s view satisfies `done`.
fn until(addr: &str, what: &str, done: impl Fn(&[(u64, String, bool, bool, String)]) -> bool) {
    let start = Instant::now();
    loop {
        let seen = nodes(addr);
        if done(&seen) {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{what}: {addr} still sees {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn three_nodes_list_each_other_and_a_killed_one_goes_down() {
    let _watchdog = ringfeed_testkit::arm();
    // Ports from the OS, handed to the nodes (each must know the others').
    let ports = crate::cluster_nodes::free_ports(3);
    let dirs = crate::cluster_nodes::data_dirs(3, "peers-");
    let mut servers: Vec<Server> = (0..3)
        .map(|i| crate::cluster_nodes::start_node(&ports, dirs[i].path(), i, 1, &[]))
        .collect();
    for (i, addr) in ports.iter().enumerate() {
        until(addr, "every node up with its id", |seen| {
            seen.len() == 3
                && seen[0] == (i as u64 + 1, addr.clone(), true, true, String::new())
                && seen[1..].iter().all(|n| n.3 && n.0 != 0 && !n.2)
        });
        let mut ids: Vec<u64> = nodes(addr).iter().map(|n| n.0).collect();
        ids.sort();
        assert_eq!(ids, [1, 2, 3], "{addr}");
    }
    // The table names them too.
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["nodes", "--server", &ports[0]]);
    let table: Output = run_bounded(command, None, TIMEOUT);
    assert!(
        table.stdout.contains("this node") && table.stdout.contains(&ports[2]),
        "{table}"
    );

    // Every node's status, each asked at its own address.
    let cluster = status_cluster(&ports[1]);
    for id in 1..=3 {
        assert!(cluster.contains(&format!("(node {id})")), "{cluster}");
    }
    assert!(
        cluster.contains(&format!("node 2 at {} (this node)", ports[1])),
        "{cluster}"
    );

    servers.pop().expect("node 3").kill();
    until(&ports[0], "node 3 down, the others up", |seen| {
        let three = seen.iter().find(|n| n.1 == ports[2]).expect("listed");
        let two = seen.iter().find(|n| n.1 == ports[1]).expect("listed");
        !three.3 && three.0 == 3 && !three.4.is_empty() && two.3
    });
    let cluster = status_cluster(&ports[0]);
    assert!(
        cluster.contains(&format!("node 3 at {}: down", ports[2])) && !cluster.contains("(node 3)"),
        "{cluster}"
    );
    for server in servers {
        server.stop();
    }
}

#[test]
fn peers_need_a_node_id_and_addresses() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("peers-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let serve = |flags: &[&str]| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
        command
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--shards",
                "1",
                "--data-dir",
            ])
            .arg(dir.path())
            .args(flags);
        run_bounded(command, None, TIMEOUT)
    };
    let no_id = serve(&["--peers", "127.0.0.1:1"]);
    assert_ne!(no_id.code(), Some(0), "{no_id}");
    assert!(no_id.stderr.contains("--node-id"), "{no_id}");
    let bad = serve(&["--node-id", "1", "--peers", "localhost"]);
    assert_ne!(bad.code(), Some(0), "{bad}");
    assert!(bad.stderr.contains("not HOST:PORT"), "{bad}");
}

#[test]
fn a_peer_with_this_nodes_id_is_down_with_that_reason() {
    let _watchdog = ringfeed_testkit::arm();
    let dirs = crate::cluster_nodes::data_dirs(2, "peers-");
    let b = Server::start_with(dirs[1].path(), 1, &["--node-id", "1"]);
    let a = Server::start_with(dirs[0].path(), 1, &["--node-id", "1", "--peers", &b.addr]);
    until(&a.addr, "the twin listed down", |seen| {
        seen.len() == 2 && !seen[1].3 && seen[1].4.contains("this node's id 1")
    });
    a.stop();
    b.stop();
}
