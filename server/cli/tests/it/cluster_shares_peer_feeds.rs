//! One shared live stream per peer (issue 20): five cluster streams on
//! node 1, caught up, read each peer through one stream of node 1's (node 2
//! and node 3 each list one "shared feed of node 1" and none of the streams'
//! own followers), and every stream says so in ListSubscribers. A stream
//! that stops reading while a burst passes its feeds' rings (node 1 keeps
//! 64 items per feed here) leaves them, follows the peers on its own from
//! where it is, and comes back once at their edge. Every stream gets every
//! event exactly once throughout, and the cursors of that stream (one event
//! per response, through both handovers) each resume exactly on the other
//! nodes.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cluster_nodes::*;
use crate::serve_binary::Server;
use ringfeed_proto::v1;

const SHARDS: u32 = 2;
const BACKLOG: usize = 300;
const BURST: usize = 400;

/// The streams node `addr` lists.
async fn listed(addr: &str) -> Vec<v1::SubscriberInfo> {
    client(addr)
        .await
        .list_subscribers(v1::ListSubscribersRequest {})
        .await
        .unwrap()
        .into_inner()
        .subscribers
}

/// The cluster streams node `addr` lists, by mode.
async fn cluster_modes(addr: &str) -> Vec<String> {
    let list = listed(addr).await;
    list.into_iter()
        .filter(|s| s.mode.starts_with("cluster"))
        .map(|s| s.mode)
        .collect()
}

/// How many streams node `addr` lists under each of `names`.
async fn streams_named(addr: &str, names: &[&str]) -> Vec<usize> {
    let list = listed(addr).await;
    names
        .iter()
        .map(|name| list.iter().filter(|s| s.client_name == *name).count())
        .collect()
}

/// Waits (at most 15 s) until `check` holds, asking again every 100 ms.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match check().await {
            Ok(()) => return,
            Err(last) if Instant::now() > deadline => panic!("{what}: after 15 s: {last}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Every listed cluster stream of node 1 reads both peers from their
/// shared feeds.
async fn all_shared(addr: &str, streams: usize) -> Result<(), String> {
    let modes = cluster_modes(addr).await;
    let shared = modes
        .iter()
        .filter(|m| m.contains("2 on shared peer feeds"))
        .count();
    if modes.len() == streams && shared == streams {
        Ok(())
    } else {
        Err(format!("{modes:?}"))
    }
}

/// Node `addr` serves node 1 one shared feed and no stream's own follower.
async fn one_feed(addr: &str) -> Result<(), String> {
    let names = ["shared feed of node 1", "cluster stream of node 1"];
    match streams_named(addr, &names).await[..] {
        [1, 0] => Ok(()),
        ref n => Err(format!("{addr}: {n:?} streams named {names:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_streams_share_one_live_stream_per_peer() {
    let _watchdog = ringfeed_testkit::arm();
    let ports = free_ports(3);
    let dirs = data_dirs(3, "cluster-shared-");
    let config = config_file(dirs[0].path(), "peer_feed_events = 64\n");
    let servers: Vec<Server> = (0..3)
        .map(|i| {
            let flags: &[&str] = if i == 0 { &["--config", &config] } else { &[] };
            start_node(&ports, dirs[i].path(), i, SHARDS, flags)
        })
        .collect();
    for addr in &ports {
        wait_all_up(addr).await;
    }
    for (node, addr) in ports.iter().enumerate() {
        append(addr, node + 1, 0, BACKLOG, false).await;
    }
    let mut feeds = Vec::new();
    for _ in 0..4 {
        feeds.push(follow_cluster(&ports[0]).await);
    }
    // The fifth stream is read by a reader that can be paused.
    let paused = Arc::new(tokio::sync::RwLock::new(()));
    let slow = Arc::new(Mutex::new(Vec::<Seen>::new()));
    let cursors = Arc::new(Mutex::new(Vec::<Vec<u8>>::new()));
    let mut stream = cluster_stream(&ports[0]).await;
    let slow_reader = {
        let (slow, cursors, paused) = (slow.clone(), cursors.clone(), paused.clone());
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                let _unpaused = paused.read().await;
                let cursor = response.cursor.to_vec();
                let events = events_of(response);
                let mut slow = slow.lock().unwrap();
                for event in events {
                    slow.push(event);
                    cursors.lock().unwrap().push(cursor.clone());
                }
            }
        })
    };
    let backlog = 3 * BACKLOG;
    for (seen, _) in &feeds {
        until(seen, backlog, Duration::from_secs(20), "catch-up").await;
    }
    until(&slow, backlog, Duration::from_secs(20), "catch-up (fifth)").await;

    // At the edge: each peer is read through one stream of node 1's.
    eventually("every stream on the shared feeds", || {
        all_shared(&ports[0], 5)
    })
    .await;
    for addr in &ports[1..] {
        eventually("one stream per peer", || one_feed(addr)).await;
    }

    // The fifth reader stops while a burst passes node 1's 64-item rings.
    let pause = paused.write().await;
    for round in 0..BURST / 100 {
        for (node, addr) in ports.iter().enumerate() {
            append(addr, node + 1, BACKLOG + round * 100, 100, false).await;
        }
    }
    let total = backlog + 3 * BURST;
    for (seen, _) in &feeds {
        until(seen, total, Duration::from_secs(20), "the burst").await;
    }
    // Wait until the stopped stream has left a feed (it cannot send, so it
    // stops reading its rings, which the burst passes).
    let left = "a cluster stream leaves the peer's shared feed";
    eventually("the stopped stream leaves a shared feed", || {
        let lines = servers[0].stderr.lock().unwrap().clone();
        async move {
            match lines.iter().any(|l| l.contains(left)) {
                true => Ok(()),
                false => Err("no such line in node 1's log".to_owned()),
            }
        }
    })
    .await;
    drop(pause);
    until(&slow, total, Duration::from_secs(20), "the burst (fifth)").await;
    // Back on the shared feeds once caught up.
    eventually("back on the shared feeds", || all_shared(&ports[0], 5)).await;
    for addr in &ports[1..] {
        eventually("one stream per peer again", || one_feed(addr)).await;
    }

    // Exactly once for every stream.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let reference = slow.lock().unwrap().clone();
    assert_eq!(
        assert_exact(&reference, &[1, 2, 3], SHARDS),
        vec![BACKLOG + BURST; 3]
    );
    for (seen, reader) in &feeds {
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), total, "no more than every event");
        assert_exact(&seen, &[1, 2, 3], SHARDS);
        reader.abort();
    }
    slow_reader.abort();

    // The stopped stream's cursors, made across its handovers, each resume
    // exactly the events after them, on node 2 or 3.
    let cursors = cursors.lock().unwrap().clone();
    let key = |e: &Seen| (e.1, e.2, e.3);
    for i in (0..total - 1).step_by(97).chain([backlog + 1, total - 2]) {
        let addr = &ports[1 + i % 2];
        let request = v1::SubscribeRequest {
            start: Some(v1::subscribe_request::Start::Cursor(
                cursors[i].clone().into(),
            )),
            scope: v1::Scope::Cluster as i32,
            batching: true,
            ..Default::default()
        };
        let rest: Vec<Seen> = read_with_cursors(addr, request, total - 1 - i)
            .await
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        let got: std::collections::BTreeSet<_> = rest.iter().map(key).collect();
        let want: std::collections::BTreeSet<_> = reference[i + 1..].iter().map(key).collect();
        assert_eq!(
            got.len(),
            rest.len(),
            "after event {i}, on {addr}: none twice"
        );
        assert_eq!(got, want, "after event {i}, on {addr}: exactly the rest");
    }
}
