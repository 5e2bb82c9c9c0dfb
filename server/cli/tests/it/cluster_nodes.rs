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

/// Writes `text` as a config file in `dir`; its path, for `--config`.
pub fn config_file(dir: &std::path::Path, text: &str) -> String {
    let path = dir.join("cluster.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
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

/// A cluster stream from the beginning of every node's feed, one event a
/// response.
pub async fn cluster_stream(addr: &str) -> ringfeed_proto::tonic::Streaming<v1::SubscribeResponse> {
    client(addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(v1::subscribe_request::Start::Beginning(true)),
            scope: v1::Scope::Cluster as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
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

/// Reads all `events` from the beginning of `addr`'s feed as a batching
/// node-scope subscriber ("reader") whose every response waits for response
/// budget: how many it read, and when it had them all. Fails after 20 s,
/// saying the budget never came back.
pub async fn read_all_within_budget(addr: &str, events: usize) -> (usize, Instant) {
    let read = async {
        let mut stream = client(addr)
            .await
            .subscribe(v1::SubscribeRequest {
                client_name: "reader".into(),
                start: Some(v1::subscribe_request::Start::Beginning(true)),
                batching: true,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut seen = 0;
        while seen < events {
            seen += events_of(stream.message().await.unwrap().expect("a response")).len();
        }
        (seen, Instant::now())
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("the reader never got the budget back")
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

/// A real etcd (Debian's `etcd-server`) on loopback ports from the OS, with
/// its data in a scratch dir; killed on drop.
pub struct Etcd {
    child: std::process::Child,
    pub url: String,
    _dir: tempfile::TempDir,
}

impl Etcd {
    /// Starts etcd and waits until it answers (at most 20 s). `None` when
    /// etcd is not installed and this is not CI (`.ci/run` installs it, so
    /// under `CI` a missing etcd fails the test).
    pub async fn start() -> Option<Etcd> {
        let installed = std::process::Command::new("etcd")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !installed {
            assert!(
                !ringfeed_testkit::under_ci(),
                "etcd is missing: .ci/run installs it (bench/peers/install.sh), so CI must have it"
            );
            eprintln!("etcd not installed: skipped (apt-get install etcd-server; CI installs it)");
            return None;
        }
        let dir = data_dirs(1, "etcd-").pop().unwrap();
        let ports = free_ports(2);
        let (client, peer) = (
            format!("http://{}", ports[0]),
            format!("http://{}", ports[1]),
        );
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let child = std::process::Command::new("etcd")
            .arg("--name=test")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=test={peer}"))
            .arg("--initial-cluster-state=new")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting etcd");
        let etcd = Etcd {
            child,
            url: client,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let answered = async {
                let mut c = etcd_client::Client::connect([&etcd.url], None).await?;
                c.get("ready", None).await
            };
            match tokio::time::timeout(Duration::from_secs(2), answered).await {
                Ok(Ok(_)) => return Some(etcd),
                failed => {
                    let log = std::fs::read_to_string(etcd._dir.path().join("etcd.log"));
                    assert!(
                        Instant::now() < deadline,
                        "etcd did not answer within 20 s: {failed:?}\n{}",
                        log.unwrap_or_default()
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The nodes `addr` lists (ListNodes): (node id, up), this node first.
pub async fn nodes_of(addr: &str) -> Vec<(u32, bool)> {
    client(addr)
        .await
        .list_nodes(v1::ListNodesRequest {})
        .await
        .unwrap()
        .into_inner()
        .nodes
        .iter()
        .map(|n| (n.node_id, n.up))
        .collect()
}

/// Waits (at most `limit`) until `addr` lists exactly the nodes `ids`
/// (in any order), every one up.
pub async fn wait_nodes(addr: &str, ids: &[u32], limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut want = ids.to_vec();
    want.sort();
    loop {
        let nodes = nodes_of(addr).await;
        let mut got: Vec<u32> = nodes.iter().map(|n| n.0).collect();
        got.sort();
        if got == want && nodes.iter().all(|n| n.1) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{addr}: lists {nodes:?} after {limit:?}, not nodes {ids:?} all up"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits (at most `limit`) until `seen` holds `count` events.
pub async fn until(seen: &std::sync::Mutex<Vec<Seen>>, count: usize, limit: Duration, what: &str) {
    let start = Instant::now();
    loop {
        let n = seen.lock().unwrap().len();
        if n >= count {
            return;
        }
        assert!(
            start.elapsed() < limit,
            "{what}: {n} of {count} events after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every event of `seen` once, and each `(node, shard)`'s offsets dense
/// from 0 in delivery order (none missing, none twice, in order); the
/// events of each node counted.
pub fn assert_exact(seen: &[Seen], nodes: &[u32], shards: u32) -> Vec<usize> {
    let unique: std::collections::BTreeSet<(u32, u32, u64)> =
        seen.iter().map(|e| (e.1, e.2, e.3)).collect();
    assert_eq!(unique.len(), seen.len(), "no event twice");
    let mut per_node = Vec::new();
    for &node in nodes {
        let mut count = 0;
        for shard in 0..shards {
            let offsets: Vec<u64> = seen
                .iter()
                .filter(|e| e.1 == node && e.2 == shard)
                .map(|e| e.3)
                .collect();
            let dense: Vec<u64> = (0..offsets.len() as u64).collect();
            assert_eq!(
                offsets, dense,
                "node {node} shard {shard}: in order, none missing"
            );
            count += offsets.len();
        }
        per_node.push(count);
    }
    per_node
}

/// Follows a cluster stream of `addr` from the beginning on a task, every
/// event into the returned list.
pub async fn follow_cluster(
    addr: &str,
) -> (
    std::sync::Arc<std::sync::Mutex<Vec<Seen>>>,
    tokio::task::JoinHandle<()>,
) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::<Seen>::new()));
    let mut stream = client(addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(v1::subscribe_request::Start::Beginning(true)),
            scope: v1::Scope::Cluster as i32,
            batching: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let reader = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(response)) = stream.message().await {
                seen.lock().unwrap().extend(events_of(response));
            }
        })
    };
    (seen, reader)
}

/// Node `i` (id `i + 1`) of a static cluster on `ports`, over `dir`, with
/// `shards` shards and more `serve` flags.
pub fn start_node(
    ports: &[String],
    dir: &std::path::Path,
    i: usize,
    shards: u32,
    flags: &[&str],
) -> super::serve_binary::Server {
    let (id, peers) = ((i + 1).to_string(), peers_of(ports, i));
    let mut all = vec!["--node-id", &id, "--peers", &peers];
    all.extend_from_slice(flags);
    super::serve_binary::Server::start_on_with(dir, shards, &ports[i], &all)
}

/// Reads `count` events of a subscription of `addr` with `request`, each
/// with its response's cursor; fails after 20 s.
pub async fn read_with_cursors(
    addr: &str,
    request: v1::SubscribeRequest,
    count: usize,
) -> Vec<(Seen, Vec<u8>)> {
    let mut stream = client(addr)
        .await
        .subscribe(request)
        .await
        .unwrap_or_else(|s| panic!("{addr}: {s}"))
        .into_inner();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    while seen.len() < count {
        let left = deadline.saturating_duration_since(Instant::now());
        let response = tokio::time::timeout(left, stream.message())
            .await
            .unwrap_or_else(|_| panic!("{addr}: {} of {count} events in 20 s", seen.len()))
            .unwrap_or_else(|s| panic!("{addr}: {s}"))
            .expect("the stream goes on");
        let cursor = response.cursor.to_vec();
        seen.extend(events_of(response).into_iter().map(|e| (e, cursor.clone())));
    }
    seen
}
