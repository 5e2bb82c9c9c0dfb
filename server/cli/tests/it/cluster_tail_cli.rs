//! `ringfeed tail --cluster` (issue 20): three real nodes, appends to each;
//! the tail on node 1 prints every event of every node once, with its node,
//! each `(node, shard)` in order; the cursor printed on any line (the tail
//! reads batches: most lines are inside one), given to a
//! tail on node 2, prints exactly the lines after it. A tail starting now
//! prints only what is appended after it started, on every node, and one
//! from a time only what was appended after that time; one `--until` a
//! time prints everything up to it from every node and exits 0.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::cluster_nodes::*;
use crate::serve_binary::Server;

/// (node, shard, offset, cursor, name) of each of the first `count` lines
/// of `ringfeed tail --cluster` on `addr` from `start`; the tail is killed
/// then.
fn tail(addr: &str, start: &[&str], count: usize) -> Vec<(u32, u32, u64, String, String)> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
        .args(["tail", "--server", addr, "--cluster"])
        .args(start)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting ringfeed tail");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if tx.send(line.expect("utf-8 lines")).is_err() {
                return;
            }
        }
    });
    let mut lines = Vec::new();
    while lines.len() < count {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(line) => lines.push(line),
            Err(e) => {
                let _ = child.kill();
                panic!("{addr}: {} of {count} lines, then {e}", lines.len());
            }
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    lines
        .iter()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let field = |k: &str| v[k].as_u64().unwrap_or_else(|| panic!("{k} in {line}"));
            assert!(
                line.starts_with(r#"{"ts":"#) && line.contains(r#","node":"#),
                "{line}"
            );
            (
                field("node") as u32,
                field("shard") as u32,
                field("offset"),
                v["cursor"].as_str().expect("a cursor").to_owned(),
                v["event"]["newEntry"]["name"]
                    .as_str()
                    .unwrap_or_else(|| panic!("a name in {line}"))
                    .to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_cluster_prints_every_node_once_and_its_cursor_resumes_on_another_node() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-tail-");
    let servers: Vec<Server> = (0..3)
        .map(|i| start_node(&ports, dirs[i].path(), i, 2, &[]))
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    for (i, addr) in ports.iter().enumerate() {
        append(addr, i + 1, 0, 30, true).await;
    }
    let (p0, p1) = (ports[0].clone(), ports[1].clone());
    let all = tokio::task::spawn_blocking(move || tail(&p0, &["--beginning"], 90))
        .await
        .unwrap();
    let seen: Vec<Seen> = all.iter().map(|l| (0, l.0, l.1, l.2, Vec::new())).collect();
    assert_eq!(assert_exact(&seen, &[1, 2, 3], 2), vec![30, 30, 30]);

    // The tail reads batches: cursors inside a batch resume exactly too.
    for at in [0, 17, 44, 88] {
        let (p1, cursor) = (p1.clone(), all[at].3.clone());
        let rest = tokio::task::spawn_blocking(move || tail(&p1, &["--cursor", &cursor], 89 - at))
            .await
            .unwrap();
        let want: BTreeSet<(u32, u32, u64)> =
            all[at + 1..].iter().map(|l| (l.0, l.1, l.2)).collect();
        let got: BTreeSet<(u32, u32, u64)> = rest.iter().map(|l| (l.0, l.1, l.2)).collect();
        assert_eq!(
            got, want,
            "resumed on node 2 after line {at}: exactly the lines after its cursor"
        );
    }

    // From a time: only what was appended after it, from every node.
    let since = ringfeed_engine::clock::now_ns().to_string();
    for (i, addr) in ports.iter().enumerate() {
        append(addr, i + 1, 30, 5, true).await;
    }
    let (p2, since_arg) = (ports[2].clone(), since.clone());
    let later = tokio::task::spawn_blocking(move || tail(&p2, &["--since-ns", &since_arg], 15))
        .await
        .unwrap();
    let names = |lines: &[(u32, u32, u64, String, String)]| -> BTreeSet<(u32, String)> {
        lines.iter().map(|l| (l.0, l.4.clone())).collect()
    };
    let round = |from: usize| -> BTreeSet<(u32, String)> {
        (1..=3u32)
            .flat_map(|node| (from..from + 5).map(move |i| (node, format!("f{i}"))))
            .collect()
    };
    assert_eq!(
        names(&later),
        round(30),
        "--since-ns: exactly the later events"
    );

    // Now: a tail on node 2, once it is subscribed, sees only new events.
    let p1 = ports[1].clone();
    let now = tokio::task::spawn_blocking(move || tail(&p1, &[], 15));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let listed = client(&ports[1])
            .await
            .list_subscribers(ringfeed_proto::v1::ListSubscribersRequest {})
            .await
            .unwrap()
            .into_inner()
            .subscribers;
        if listed.iter().any(|s| s.client_name == "ringfeed tail") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the tail subscribed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (i, addr) in ports.iter().enumerate() {
        append(addr, i + 1, 35, 5, true).await;
    }
    let now = now.await.unwrap();
    assert_eq!(
        names(&now),
        round(35),
        "a tail from now: exactly the new events"
    );

    // Until the time before round 2: the 90 lines of round 1, then exit 0.
    let until = (since.parse::<i64>().unwrap() - 1).to_string();
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args([
        "tail",
        "--server",
        &ports[0],
        "--cluster",
        "--beginning",
        "--until-ns",
        &until,
    ]);
    let out = tokio::task::spawn_blocking(move || {
        crate::serve_binary::run_bounded(command, None, Duration::from_secs(20))
    })
    .await
    .unwrap();
    assert!(
        out.status.is_some_and(|s| s.success()),
        "tail --until exits 0 by itself: {:?} {}",
        out.status,
        out.stderr
    );
    let lines: BTreeSet<(u32, String)> = out
        .stdout
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
            let name = v["event"]["newEntry"]["name"].as_str().unwrap().to_owned();
            (v["node"].as_u64().unwrap() as u32, name)
        })
        .collect();
    assert_eq!(out.stdout.lines().count(), 90, "each line once");
    let first: BTreeSet<(u32, String)> = (1..=3u32)
        .flat_map(|node| (0..30).map(move |i| (node, format!("f{i}"))))
        .collect();
    assert_eq!(lines, first, "--until: exactly round 1 of every node");
    for server in servers {
        server.stop();
    }
}
