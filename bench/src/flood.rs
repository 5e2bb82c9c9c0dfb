//! `append-flood`: many clients each send one large append batch to a real
//! `ringfeed serve` at the same moment. Reports the server's peak RSS and how
//! every client ended (acked or refused, with the gRPC code), and checks that
//! what the server committed is exactly what it acknowledged: nothing of a
//! refused batch stored. Each client's batch goes to one directory, so to one
//! shard (a batch spanning shards can be part-appended when one shard fails;
//! that is the engine's documented behaviour, not what is measured here).

use std::path::Path;
use std::time::Instant;

use anyhow::{anyhow, bail, Result};
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::{v1, RingFeedClient};

use crate::systems::{spawn_server_with, Process};
use crate::util::{fresh_dir, machine};

pub struct Args<'a> {
    pub dir: &'a Path,
    pub clients: usize,
    pub batch_mib: usize,
    pub shards: u32,
    /// `append_budget_bytes` for the server's config file; `None`: its default.
    pub budget_mib: Option<usize>,
}

pub fn append_flood(args: &Args<'_>) -> Result<()> {
    if args.clients == 0 || args.batch_mib == 0 || args.shards == 0 {
        bail!("clients, batch size and shards must be positive");
    }
    fresh_dir(args.dir)?;
    let config = args.dir.join("flood.toml");
    let mut text = String::new();
    if let Some(mib) = args.budget_mib {
        text.push_str(&format!("append_budget_bytes = {}\n", mib << 20));
    }
    std::fs::write(&config, text)?;
    let data = args.dir.join("data");
    let config_arg = config.display().to_string();
    let (server, addr) = spawn_server_with(&data, args.shards, &["--config", &config_arg])?;
    println!("# append-flood: {}", machine());
    println!(
        "# {} clients, one {} MiB batch each (1,000-byte events, memory durability), at once; \
         {} shard(s); append_budget_bytes {}",
        args.clients,
        args.batch_mib,
        args.shards,
        args.budget_mib
            .map_or("default".to_string(), |m| format!("{m} MiB"))
    );
    let baseline = server.memory("VmRSS") >> 20;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    let outcomes = runtime.block_on(flood(&addr, args.clients, args.batch_mib))?;
    let elapsed = started.elapsed();
    let peak = server.memory("VmHWM") >> 20;
    let committed = runtime.block_on(committed(&addr))?;
    report(&server, &outcomes, committed, baseline, peak, elapsed)
}

/// One client's end: events acknowledged, or the refusal's code.
type Outcome = Result<u64, ringfeed_proto::tonic::Code>;

async fn flood(addr: &str, clients: usize, batch_mib: usize) -> Result<Vec<Outcome>> {
    let url = format!("http://{addr}");
    let mut connected = Vec::with_capacity(clients);
    for _ in 0..clients {
        let client = RingFeedClient::connect(url.clone())
            .await
            .map_err(|e| anyhow!("connecting to {url}: {e}"))?
            .max_encoding_message_size(usize::MAX)
            .max_decoding_message_size(usize::MAX);
        connected.push(client);
    }
    let events_per_batch = (batch_mib << 20) / 1000;
    // Build every batch first, then send them all at once.
    let batches: Vec<v1::AppendRequest> = (0..clients)
        .map(|c| v1::AppendRequest {
            events: (0..events_per_batch)
                .map(|i| v1::Event {
                    directory: format!("/flood/{c}"),
                    new_entry: Some(v1::Entry {
                        name: format!("f{i}"),
                        attributes: vec![b'a'; 960].into(),
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .collect(),
            durability: v1::Durability::Memory as i32,
            ..Default::default()
        })
        .collect();
    let tasks: Vec<_> = connected
        .into_iter()
        .zip(batches)
        .map(|(mut client, batch): (RingFeedClient<Channel>, _)| {
            tokio::spawn(async move {
                match client.append(batch).await {
                    Ok(r) => Ok(r.into_inner().positions.len() as u64),
                    Err(status) => Err(status.code()),
                }
            })
        })
        .collect();
    let mut outcomes = Vec::with_capacity(clients);
    for task in tasks {
        outcomes.push(task.await?);
    }
    Ok(outcomes)
}

async fn committed(addr: &str) -> Result<u64> {
    let mut client = RingFeedClient::connect(format!("http://{addr}")).await?;
    let status = client
        .status(v1::StatusRequest::default())
        .await?
        .into_inner();
    Ok(status.shards.iter().map(|s| s.committed_next).sum())
}

fn report(
    server: &Process,
    outcomes: &[Outcome],
    committed: u64,
    baseline_mib: u64,
    peak_mib: u64,
    elapsed: std::time::Duration,
) -> Result<()> {
    let acked: Vec<u64> = outcomes.iter().filter_map(|o| o.ok()).collect();
    let acked_events: u64 = acked.iter().sum();
    let mut refused = std::collections::BTreeMap::<String, usize>::new();
    for code in outcomes.iter().filter_map(|o| o.err()) {
        *refused.entry(format!("{code:?}")).or_default() += 1;
    }
    println!("| clients | acked | refused | server RSS before | server peak RSS | time |");
    println!("|---:|---:|---|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {baseline_mib} MiB | {peak_mib} MiB | {:.1} s |",
        outcomes.len(),
        acked.len(),
        if refused.is_empty() {
            "0".to_string()
        } else {
            refused
                .iter()
                .map(|(code, n)| format!("{n} {code}"))
                .collect::<Vec<_>>()
                .join(", ")
        },
        elapsed.as_secs_f64()
    );
    let _ = server;
    if committed != acked_events {
        bail!("NOT EXACT: the server committed {committed} events but acknowledged {acked_events}");
    }
    if refused.keys().any(|code| code != "ResourceExhausted") {
        bail!("a client was refused with something other than RESOURCE_EXHAUSTED: {refused:?}");
    }
    println!("# committed {committed} events = acknowledged; refused batches stored nothing");
    Ok(())
}
