//! `ringfeed-bench cluster` (issue 20): N real `ringfeed serve` nodes on
//! loopback (static peers), a backlog appended across them, then one cluster
//! subscription on node 1 catching up from the beginning and tailing live.
//! Rows side by side: a single node read in node scope (no merge), and
//! cluster scope over 1..N nodes. Figures: catch-up events/s (median of
//! passes), CPU µs per event of node 1 and of all nodes during catch-up (the
//! merge's cost is the difference from node scope), and live delivery
//! latency (append send time to receipt) p50/p99 at a fixed rate spread over
//! the nodes, with `--subscribers K` cluster subscriptions on node 1 at once
//! (their latencies together), and the peers' CPU per live event: with one
//! shared live stream per peer it should not grow with K. Every pass checks
//! it got each event once. Each row also times `ringfeed tail --beginning`
//! (`--cluster` in cluster scope) over the same backlog, in events and
//! with `--chunk-mode`, JSON lines to a pipe, checked exact.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use hdrhistogram::Histogram;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::{self, subscribe_request::Start, subscribe_response::Item};
use ringfeed_proto::RingFeedClient;

use crate::systems::{
    free_ports, ringfeed_connect, ringfeed_event as event, spawn_server_on, unstamp, Delivered,
    Process,
};
use crate::util::{fresh_dir, machine, median, now_ns, runtime};

#[derive(clap::Args)]
pub struct Args {
    /// Scratch directory for the nodes' data dirs; removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Node counts, a run each.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    pub nodes: Vec<usize>,
    /// Backlog events, appended round-robin over the nodes.
    #[arg(long, default_value_t = 300_000)]
    pub events: u64,
    /// Payload bytes per event.
    #[arg(long, default_value_t = 200)]
    pub payload: usize,
    /// Shards per node.
    #[arg(long, default_value_t = 1)]
    pub shards: u32,
    /// Catch-up passes per row; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub passes: usize,
    /// Live events per second, round-robin over the nodes.
    #[arg(long, default_value_t = 1000)]
    pub rate: u64,
    /// Seconds of live events per row.
    #[arg(long, default_value_t = 10.0)]
    pub seconds: f64,
    /// Live events go to node 1 only; the other nodes stay quiet, so
    /// only their heartbeats let the merge deliver node 1's events.
    #[arg(long)]
    pub quiet_peers: bool,
    /// Cluster subscriptions on node 1 during the live phase.
    #[arg(long, default_value_t = 1)]
    pub subscribers: usize,
}

struct Row {
    label: String,
    catchup_eps: f64,
    /// `ringfeed tail` (with `--cluster` in cluster scope) from the
    /// beginning, JSON lines to a pipe, as users run it.
    tail_cli_eps: f64,
    /// The same with `--chunk-mode`.
    tail_chunks_eps: f64,
    node1_cpu_us: f64,
    all_cpu_us: f64,
    p50_ms: f64,
    p99_ms: f64,
    live_events: u64,
    /// CPU µs the peers (nodes 2..N) spent per live event appended.
    peers_live_cpu_us: f64,
}

pub fn run(args: &Args) -> Result<()> {
    println!("cluster: {} events of {} B payload, {} shard(s) per node, {} catch-up pass(es); live {} ev/s for {} s to {}, {} subscriber(s); {}",
        args.events, args.payload, args.shards, args.passes, args.rate, args.seconds,
        if args.quiet_peers { "node 1 only (quiet peers)" } else { "every node" },
        args.subscribers.max(1), machine());
    let rt = runtime()?;
    let mut rows = Vec::new();
    for &n in &args.nodes {
        if n == 0 {
            bail!("--nodes: at least 1");
        }
        let dir = args.dir.join(format!("cluster-{n}"));
        fresh_dir(&dir)?;
        let nodes = start_nodes(&dir, n, args.shards)?;
        let result = rt.block_on(measure(args, &nodes, n));
        drop(nodes);
        let _ = std::fs::remove_dir_all(&dir);
        rows.extend(result?);
    }
    println!();
    println!(
        "{:<22} {:>14} {:>13} {:>18} {:>16} {:>16} {:>10} {:>10} {:>8} {:>20}",
        "feed",
        "catch-up ev/s",
        "tail ev/s",
        "tail chunks ev/s",
        "node-1 CPU µs/ev",
        "all CPU µs/ev",
        "live p50",
        "live p99",
        "live ev",
        "peers CPU µs/live ev"
    );
    for r in &rows {
        println!(
            "{:<22} {:>14.0} {:>13.0} {:>18.0} {:>16.2} {:>16.2} {:>8.1}ms {:>8.1}ms {:>8} {:>20.1}",
            r.label,
            r.catchup_eps,
            r.tail_cli_eps,
            r.tail_chunks_eps,
            r.node1_cpu_us,
            r.all_cpu_us,
            r.p50_ms,
            r.p99_ms,
            r.live_events,
            r.peers_live_cpu_us
        );
    }
    Ok(())
}

struct Node {
    process: Process,
    addr: String,
}

fn start_nodes(dir: &Path, n: usize, shards: u32) -> Result<Vec<Node>> {
    let ports: Vec<String> = free_ports(n)?
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    let mut nodes = Vec::new();
    for i in 0..n {
        let id = (i + 1).to_string();
        let peers: Vec<&str> = (0..n)
            .filter(|&j| j != i)
            .map(|j| ports[j].as_str())
            .collect();
        let peers = peers.join(",");
        let mut flags = vec!["--node-id", &id];
        if n > 1 {
            flags.extend(["--peers", &peers]);
        }
        let (process, addr) =
            spawn_server_on(&dir.join(format!("n{id}")), shards, &ports[i], &flags)?;
        nodes.push(Node { process, addr });
    }
    Ok(nodes)
}

async fn client(addr: &str) -> Result<RingFeedClient<Channel>> {
    Ok(ringfeed_connect(addr)
        .await?
        .max_decoding_message_size(64 << 20))
}

/// The bench's stamp (number, send time) in an event's attributes.
fn stamp_of(e: &v1::EventMessage) -> Result<Delivered> {
    e.event
        .as_ref()
        .and_then(|e| e.new_entry.as_ref())
        .and_then(|entry| unstamp(&entry.attributes))
        .context("an event without the bench's stamp")
}

/// Waits (at most 30 s) until every node has reached every peer.
async fn wait_up(nodes: &[Node]) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    for node in nodes {
        loop {
            let listed = client(&node.addr)
                .await?
                .list_nodes(v1::ListNodesRequest {})
                .await?;
            let listed = listed.into_inner().nodes;
            if listed.len() == nodes.len() && listed.iter().all(|n| n.up && n.node_id != 0) {
                break;
            }
            if Instant::now() > deadline {
                bail!("{}: peers not all up after 30 s: {listed:?}", node.addr);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// Appends events `range` round-robin over the nodes, 1,000 per batch, durable.
async fn load(nodes: &[Node], range: std::ops::Range<u64>, payload: usize) -> Result<()> {
    let mut clients = Vec::new();
    for node in nodes {
        clients.push(client(&node.addr).await?);
    }
    let mut next = range.start;
    let mut turn = 0;
    while next < range.end {
        let end = (next + 1000).min(range.end);
        let count = clients.len();
        clients[turn % count]
            .append(v1::AppendRequest {
                events: (next..end).map(|i| event(i, payload)).collect(),
                durability: v1::Durability::Durable as i32,
                ..Default::default()
            })
            .await?;
        next = end;
        turn += 1;
    }
    Ok(())
}

fn cpu(nodes: &[Node]) -> (f64, f64) {
    let each: Vec<f64> = nodes.iter().map(|n| n.process.cpu_seconds()).collect();
    (each[0], each.iter().sum())
}

fn subscribe_request(scope: v1::Scope, start: Start, batching: bool) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        client_name: "ringfeed-bench cluster".into(),
        start: Some(start),
        scope: scope as i32,
        batching,
        ..Default::default()
    }
}

fn events_of(item: Option<Item>) -> Vec<v1::EventMessage> {
    match item {
        Some(Item::Event(e)) => vec![e],
        Some(Item::Batch(b)) => b.events,
        _ => Vec::new(),
    }
}

async fn measure(args: &Args, nodes: &[Node], n: usize) -> Result<Vec<Row>> {
    wait_up(nodes).await?;
    load(nodes, 0..args.events, args.payload).await?;
    let scopes: &[v1::Scope] = if n == 1 {
        &[v1::Scope::Node, v1::Scope::Cluster]
    } else {
        &[v1::Scope::Cluster]
    };
    let mut rows = Vec::new();
    // Events in the logs: the backlog, then each row's live events (a later
    // row's catch-up reads those too, so its live phase starts at the edge).
    let mut live_from = args.events;
    for &scope in scopes {
        let label = match scope {
            v1::Scope::Node => "1 node, node scope".to_owned(),
            _ => format!("{n} node(s), cluster scope"),
        };
        let (mut eps, mut cpu1, mut cpu_all) = (Vec::new(), Vec::new(), Vec::new());
        let mut stream = None;
        for pass in 0..args.passes.max(1) {
            let (c1, call) = cpu(nodes);
            let started = Instant::now();
            let mut s = client(&nodes[0].addr)
                .await?
                .subscribe(subscribe_request(scope, Start::Beginning(true), true))
                .await?
                .into_inner();
            let backlog = live_from;
            let mut seen = HashSet::with_capacity(backlog as usize);
            while (seen.len() as u64) < backlog {
                let response = tokio::time::timeout(Duration::from_secs(60), s.message())
                    .await
                    .context("catch-up: no response in 60 s")??
                    .context("catch-up: the stream ended")?;
                for e in events_of(response.item) {
                    let index = stamp_of(&e)?.index;
                    if !seen.insert(index) {
                        bail!("{label}: event {index} delivered twice");
                    }
                }
            }
            let secs = started.elapsed().as_secs_f64();
            let (c1b, callb) = cpu(nodes);
            eps.push(backlog as f64 / secs);
            cpu1.push((c1b - c1) * 1e6 / backlog as f64);
            cpu_all.push((callb - call) * 1e6 / backlog as f64);
            println!(
                "  {label} pass {}: {backlog} events, {:.0} events/s",
                pass + 1,
                backlog as f64 / secs
            );
            stream = Some(s);
        }
        // The command-line tail over the same backlog, as users run it, in
        // events and in chunk mode.
        let tail_cli_eps = tail_cli(nodes, scope, live_from, args.payload, false, &label).await?;
        let tail_chunks_eps = tail_cli(nodes, scope, live_from, args.payload, true, &label).await?;
        // Live: the last catch-up stream goes on, with `subscribers - 1`
        // more from now (given a second to reach the peers' edge); one
        // event at a time round-robin over the nodes at `rate`.
        let mut streams = vec![stream.expect("a pass ran")];
        for _ in 1..args.subscribers.max(1) {
            let more = client(&nodes[0].addr)
                .await?
                .subscribe(subscribe_request(scope, Start::Now(true), true))
                .await?
                .into_inner();
            streams.push(more);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (c1, call) = cpu(nodes);
        let live = (args.rate as f64 * args.seconds) as u64;
        let range = live_from..live_from + live;
        live_from += live;
        let producer = {
            let live_nodes = if args.quiet_peers { 1 } else { nodes.len() };
            let addrs: Vec<String> = nodes[..live_nodes].iter().map(|n| n.addr.clone()).collect();
            let (rate, payload) = (args.rate.max(1), args.payload);
            tokio::spawn(async move {
                let mut clients = Vec::new();
                for a in &addrs {
                    clients.push(client(a).await?);
                }
                let mut ticks = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate));
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
                let count = clients.len();
                for (k, i) in range.clone().enumerate() {
                    ticks.tick().await;
                    clients[k % count]
                        .append(v1::AppendRequest {
                            events: vec![event(i, payload)],
                            ..Default::default()
                        })
                        .await?;
                }
                anyhow::Ok(())
            })
        };
        let readers: Vec<_> = streams
            .into_iter()
            .map(|mut s| {
                tokio::spawn(async move {
                    let mut latency = Histogram::<u64>::new(3)?;
                    let mut seen = HashSet::with_capacity(live as usize);
                    while (seen.len() as u64) < live {
                        let response = tokio::time::timeout(Duration::from_secs(30), s.message())
                            .await
                            .context("live: no response in 30 s")??
                            .context("live: the stream ended")?;
                        let at = now_ns();
                        for e in events_of(response.item) {
                            let stamp = stamp_of(&e)?;
                            if !seen.insert(stamp.index) {
                                bail!("live: event {} delivered twice", stamp.index);
                            }
                            latency.record((at - stamp.sent_ns).max(0) as u64)?;
                        }
                    }
                    anyhow::Ok(latency)
                })
            })
            .collect();
        let mut latency = Histogram::<u64>::new(3)?;
        for reader in readers {
            latency.add(reader.await??)?;
        }
        producer.await??;
        let (c1b, callb) = cpu(nodes);
        let got = latency.len();
        rows.push(Row {
            label,
            catchup_eps: median(eps),
            tail_cli_eps,
            tail_chunks_eps,
            node1_cpu_us: median(cpu1),
            all_cpu_us: median(cpu_all),
            p50_ms: latency.value_at_quantile(0.5) as f64 / 1e6,
            p99_ms: latency.value_at_quantile(0.99) as f64 / 1e6,
            live_events: got,
            peers_live_cpu_us: ((callb - call) - (c1b - c1)) * 1e6 / live as f64,
        });
    }
    Ok(rows)
}

/// `ringfeed tail --beginning` on node 1 (`--cluster` in cluster scope,
/// `--chunk-mode` with `chunk_mode`), JSON lines to a pipe, over the
/// `events` in the logs: its events/s, checked exact.
async fn tail_cli(
    nodes: &[Node],
    scope: v1::Scope,
    events: u64,
    payload: usize,
    chunk_mode: bool,
    label: &str,
) -> Result<f64> {
    let binary = std::env::current_exe()?.with_file_name("ringfeed");
    let mut command = std::process::Command::new(binary);
    command.args(["tail", "--server", &nodes[0].addr, "--beginning"]);
    if scope == v1::Scope::Cluster {
        command.arg("--cluster");
    }
    if chunk_mode {
        command.arg("--chunk-mode");
    }
    let cli = crate::systems::TailCli {
        command,
        terminator: b"\n",
        payload: &["event", "newEntry", "attributes"],
    };
    let row = crate::scenarios::catchup::cli_catch_up(
        crate::systems::Kind::Ringfeed,
        cli,
        events,
        payload,
        Duration::from_secs(120),
    )
    .await?;
    let mode = if chunk_mode { " --chunk-mode" } else { "" };
    if row.get("inexact") != Some(0.0) {
        bail!("{label}: the command-line tail{mode} did not print every event once");
    }
    let eps = row.get("events/s").unwrap_or(0.0);
    println!("  {label} tail CLI{mode}: {events} events, {eps:.0} events/s");
    Ok(eps)
}
