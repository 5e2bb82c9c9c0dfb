//! `ringfeed-bench bucket-catchup` (issue 40): a catch-up from the
//! beginning read from the object store against the same read from the
//! local log, in the same run.
//!
//! One real `ringfeed serve` loads the backlog with `--object-store`
//! (`file://` under `--dir` unless `--store` names another) and uploads
//! every sealed segment; its data dir is then copied. Server L runs on the
//! original (no retention: everything local); server B runs on the copy
//! with local retention removing every uploaded segment, so all but its
//! open segment is read from the store, with a `--cache-mib` cache. Passes
//! alternate L and B, one subscriber and K at once; each subscriber checks
//! it got every event once, offsets dense. Each row starts its server
//! anew, so B's cache is cold and every row reads the store (the store's
//! files and L's segments may be in the page cache alike). Figures per row (medians of
//! passes): events/s delivered (all subscribers together), the server's
//! CPU µs per event delivered, its peak RSS during the pass, and the bytes
//! it fetched from the store.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::{self, subscribe_request::Start, subscribe_response::Item};
use ringfeed_proto::RingFeedClient;

use crate::systems::{ringfeed_connect, ringfeed_event as event, spawn_server_with, Process};
use crate::util::{fresh_dir, machine, median, now_ns, runtime};

#[derive(clap::Args)]
pub struct Args {
    /// Scratch directory (data dirs, the file:// store); removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Backlog events.
    #[arg(long, default_value_t = 1_000_000)]
    pub events: u64,
    /// Payload bytes per event.
    #[arg(long, default_value_t = 200)]
    pub payload: usize,
    /// Shards.
    #[arg(long, default_value_t = 2)]
    pub shards: u32,
    /// Subscribers at once in the second row of each server.
    #[arg(long, default_value_t = 100)]
    pub subscribers: usize,
    /// Passes (L and B alternating); medians are reported.
    #[arg(long, default_value_t = 3)]
    pub passes: usize,
    /// The object store (`--object-store` of serve; AWS_* from the
    /// environment); default a file:// store under --dir.
    #[arg(long)]
    pub store: Option<String>,
    /// Server B's object_store_cache_bytes, in MiB (the server's default).
    #[arg(long, default_value_t = 256)]
    pub cache_mib: u64,
    /// Segment size in MiB.
    #[arg(long, default_value_t = 16)]
    pub segment_mib: u64,
}

struct Server {
    /// `None` only while it restarts.
    process: Option<Process>,
    addr: String,
    dir: PathBuf,
    config: String,
    shards: u32,
}

impl Server {
    /// Stops the server and starts it again on its data dir.
    fn restart(&mut self) -> Result<()> {
        // Stopped (dropped) first: the data dir is one process's.
        self.process = None;
        *self = start(&self.dir, self.shards, &self.config)?;
        Ok(())
    }

    fn process(&self) -> &Process {
        self.process.as_ref().expect("running")
    }
}

#[derive(Default)]
struct Sample {
    eps: f64,
    cpu_us: f64,
    peak_mib: f64,
    fetched_mib: f64,
}

pub fn run(args: &Args) -> Result<()> {
    if args.subscribers == 0 || args.passes == 0 {
        bail!("--subscribers and --passes: at least 1");
    }
    fresh_dir(&args.dir)?;
    let dir = std::fs::canonicalize(&args.dir)?;
    let store = match &args.store {
        Some(url) => url.clone(),
        None => format!("file://{}", dir.join("store").display()),
    };
    println!(
        "bucket-catchup: {} events of {} B payload, {} shard(s), {} MiB segments, store {store}, \
         B's cache {} MiB; {} pass(es) of 1 and {} subscriber(s); {}",
        args.events,
        args.payload,
        args.shards,
        args.segment_mib,
        args.cache_mib,
        args.passes,
        args.subscribers,
        machine()
    );
    let rt = runtime()?;
    let result = rt.block_on(measure(args, &dir, &store));
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn config(dir: &Path, name: &str, text: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, text)?;
    Ok(path.display().to_string())
}

async fn measure(args: &Args, dir: &Path, store: &str) -> Result<()> {
    let base = format!(
        "segment_bytes = {}\nobject_store = \"{store}\"\n",
        args.segment_mib << 20
    );
    let local_dir = dir.join("local");
    let bucket_dir = dir.join("bucket");
    let local_config = config(dir, "local.toml", &base)?;
    let bucket_config = config(
        dir,
        "bucket.toml",
        &format!(
            "{base}retention_max_bytes = 1\nretention_interval_secs = 1\n\
             object_store_cache_bytes = {}\n",
            args.cache_mib << 20
        ),
    )?;

    // Load, and wait until every sealed segment is uploaded.
    let loader = start(&local_dir, args.shards, &local_config)?;
    let started = Instant::now();
    load(&loader.addr, args.events, args.payload).await?;
    eprintln!(
        "loaded {} events in {:.1} s",
        args.events,
        started.elapsed().as_secs_f64()
    );
    until(&loader.addr, "every sealed segment uploaded", |s| {
        s.object_store
            .as_ref()
            .is_some_and(|o| o.lag_segments == 0 && o.uploaded_below.iter().any(|&b| b > 0))
    })
    .await?;
    drop(loader);
    copy_dir(&local_dir, &bucket_dir)?;

    let mut local = start(&local_dir, args.shards, &local_config)?;
    let mut bucket = start(&bucket_dir, args.shards, &bucket_config)?;
    // B's local log keeps only what the store does not hold.
    let status = until(&bucket.addr, "local retention on B", |s| {
        let below = s
            .object_store
            .as_ref()
            .map(|o| o.uploaded_below.clone())
            .unwrap_or_default();
        !below.is_empty()
            && s.shards
                .iter()
                .zip(&below)
                .all(|(shard, &b)| b > 0 && shard.retained_from >= b)
    })
    .await?;
    let from_store: u64 = status
        .object_store
        .map_or(0, |o| o.uploaded_below.iter().sum());
    println!(
        "B reads {from_store} of {} events from the store, the rest from its open segments",
        args.events
    );
    let until_ns = now_ns();

    let mut rows: Vec<(String, Vec<Sample>)> =
        ["L local, 1", "B store, 1", "L local, K", "B store, K"]
            .iter()
            .map(|l| (l.replace('K', &args.subscribers.to_string()), Vec::new()))
            .collect();
    for pass in 0..args.passes {
        for (row, (on_bucket, k)) in [
            (false, 1),
            (true, 1),
            (false, args.subscribers),
            (true, args.subscribers),
        ]
        .into_iter()
        .enumerate()
        {
            let server = if on_bucket { &mut bucket } else { &mut local };
            server.restart()?;
            let sample = catch_up(server, k, args.events, until_ns).await?;
            eprintln!(
                "pass {pass}: {}: {:.0} ev/s, {:.2} CPU µs/ev, peak {:.0} MiB, {:.1} MiB fetched",
                rows[row].0, sample.eps, sample.cpu_us, sample.peak_mib, sample.fetched_mib
            );
            rows[row].1.push(sample);
        }
    }
    println!();
    println!(
        "{:<18} {:>14} {:>16} {:>14} {:>14}",
        "read", "events/s", "server CPU µs/ev", "peak RSS MiB", "fetched MiB"
    );
    for (label, samples) in &rows {
        let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
        println!(
            "{:<18} {:>14.0} {:>16.2} {:>14.0} {:>14.1}",
            label,
            m(|s| s.eps),
            m(|s| s.cpu_us),
            m(|s| s.peak_mib),
            m(|s| s.fetched_mib)
        );
    }
    Ok(())
}

fn start(dir: &Path, shards: u32, config: &str) -> Result<Server> {
    let (process, addr) = spawn_server_with(dir, shards, &["--config", config])?;
    Ok(Server {
        process: Some(process),
        addr,
        dir: dir.to_path_buf(),
        config: config.to_owned(),
        shards,
    })
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()?;
    if !status.success() {
        bail!("cp -a {} {}: {status}", from.display(), to.display());
    }
    Ok(())
}

async fn client(addr: &str) -> Result<RingFeedClient<Channel>> {
    Ok(ringfeed_connect(addr)
        .await?
        .max_decoding_message_size(64 << 20))
}

async fn load(addr: &str, events: u64, payload: usize) -> Result<()> {
    let mut c = client(addr).await?;
    let mut next = 0;
    while next < events {
        let end = (next + 1000).min(events);
        c.append(v1::AppendRequest {
            events: (next..end).map(|i| event(i, payload)).collect(),
            durability: v1::Durability::Durable as i32,
            ..Default::default()
        })
        .await?;
        next = end;
    }
    Ok(())
}

/// Polls the status (at most 120 s) until `done`.
async fn until(
    addr: &str,
    what: &str,
    done: impl Fn(&v1::StatusResponse) -> bool,
) -> Result<v1::StatusResponse> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let status = client(addr)
            .await?
            .status(v1::StatusRequest::default())
            .await?
            .into_inner();
        if done(&status) {
            return Ok(status);
        }
        if Instant::now() > deadline {
            bail!("{addr}: not {what} within 120 s: {status:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn fetched(addr: &str) -> Result<u64> {
    Ok(client(addr)
        .await?
        .status(v1::StatusRequest::default())
        .await?
        .into_inner()
        .object_store
        .map_or(0, |o| o.bytes_fetched))
}

/// `k` subscribers from the beginning to `until_ns` at once.
async fn catch_up(server: &Server, k: usize, events: u64, until_ns: i64) -> Result<Sample> {
    let fetched_before = fetched(&server.addr).await?;
    server.process().reset_peak();
    let cpu_before = server.process().cpu_seconds();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..k {
        let addr = server.addr.clone();
        tasks.push(tokio::spawn(async move { read_all(&addr, until_ns).await }));
    }
    for task in tasks {
        let got = task.await.context("a subscriber")??;
        if got != events {
            bail!("a subscriber got {got} events of {events}");
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let delivered = (events * k as u64) as f64;
    Ok(Sample {
        eps: delivered / elapsed,
        cpu_us: (server.process().cpu_seconds() - cpu_before) * 1e6 / delivered,
        peak_mib: server.process().memory("VmHWM") as f64 / f64::from(1 << 20),
        fetched_mib: (fetched(&server.addr).await? - fetched_before) as f64 / f64::from(1 << 20),
    })
}

/// Reads from the beginning to `until_ns`, checking offsets dense per
/// shard from 0: the events it got.
async fn read_all(addr: &str, until_ns: i64) -> Result<u64> {
    let mut stream = client(addr)
        .await?
        .subscribe(v1::SubscribeRequest {
            client_name: "ringfeed-bench bucket-catchup".into(),
            start: Some(Start::Beginning(true)),
            until_ns,
            batching: true,
            ..Default::default()
        })
        .await?
        .into_inner();
    let mut next: Vec<u64> = Vec::new();
    let mut got = 0;
    while let Some(response) = stream.message().await? {
        let events = match response.item {
            Some(Item::Event(e)) => vec![e],
            Some(Item::Batch(b)) => b.events,
            _ => continue,
        };
        for e in events {
            let shard = e.shard as usize;
            if next.len() <= shard {
                next.resize(shard + 1, 0);
            }
            if e.offset != next[shard] {
                bail!(
                    "shard {shard}: offset {} where {} was next",
                    e.offset,
                    next[shard]
                );
            }
            next[shard] += 1;
            got += 1;
        }
    }
    Ok(got)
}
