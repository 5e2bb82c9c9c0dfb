//! Subscribers at scale against a real `ringfeed serve` process (the binary
//! next to this one), so the server's CPU time and peak RSS are its own:
//!
//! - `catchup`: one follower over a pre-loaded log, event mode vs chunk mode;
//! - `storm`: K followers resuming at once, each behind by N events, over a
//!   large log: time to first event, time until all are caught up, peak RSS,
//!   and every follower checked exact against a reference read;
//! - `fanout`: K live followers while a producer appends at a fixed rate
//!   (open loop): append-to-delivery latency.
//!
//! Clients use the client library (`ringfeed_server::client::Follower`); they
//! run in this process, on the same cores as the server.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};
use ringfeed_server::client::{Backoff, Follower};

use crate::grpc::event;
use crate::{fresh_dir, machine, now_ns, runtime};

/// Linux reports process CPU time in USER_HZ ticks, 100 per second on every
/// architecture's user-space ABI.
const TICKS_PER_SECOND: f64 = 100.0;

/// `ringfeed serve` as a child process; SIGTERM and wait on drop.
pub struct ServerProcess {
    child: Child,
    pub addr: String,
}

impl ServerProcess {
    pub fn start(dir: &Path, shards: u32) -> Result<ServerProcess> {
        let exe = std::env::current_exe()?;
        let binary: PathBuf = exe.with_file_name("ringfeed");
        if !binary.exists() {
            bail!(
                "{} not found: build it with `cargo build --release -p ringfeed-server`",
                binary.display()
            );
        }
        let mut child = Command::new(&binary)
            .arg("serve")
            .arg("--data-dir")
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--shards", &shards.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = tx.send(addr.trim().to_owned());
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(120))
            .map_err(|_| anyhow!("the server printed no `listening on` line"))?;
        Ok(ServerProcess { child, addr })
    }

    fn proc_file(&self, name: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id())).unwrap_or_default()
    }

    /// User plus system CPU seconds the server has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        let stat = self.proc_file("stat");
        // Fields after the parenthesised command name; utime and stime are 14 and 15.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        (ticks(11) + ticks(12)) / TICKS_PER_SECOND
    }

    /// A `/proc/PID/status` memory line (VmRSS, VmHWM) in bytes.
    pub fn memory(&self, key: &str) -> u64 {
        self.proc_file("status")
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| {
                v.trim_start_matches(':')
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib * 1024)
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

async fn client(addr: &str) -> Result<RingFeedClient<Channel>> {
    RingFeedClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| anyhow!("connecting to {addr}: {e}"))
}

/// Appends `count` events numbered from `first` with 4 pipelined clients;
/// returns the highest stamp acknowledged.
async fn preload(addr: &str, first: u64, count: u64, payload: usize) -> Result<i64> {
    const BATCH: u64 = 2_048;
    const CLIENTS: u64 = 4;
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let mut client = client(addr).await?;
        tasks.push(tokio::spawn(async move {
            let mut last = 0i64;
            let mut i = c * BATCH;
            while i < count {
                let n = BATCH.min(count - i);
                let events = (first + i..first + i + n)
                    .map(|k| event(k, payload))
                    .collect();
                let acks = client
                    .append(v1::AppendRequest {
                        events,
                        durability: 0,
                    })
                    .await
                    .map_err(|e| anyhow!("append: {e}"))?
                    .into_inner();
                last = last.max(acks.positions.iter().map(|p| p.ts_ns).max().unwrap_or(0));
                i += BATCH * CLIENTS;
            }
            Ok::<_, anyhow::Error>(last)
        }));
    }
    let mut last = 0;
    for t in tasks {
        last = last.max(t.await??);
    }
    Ok(last)
}

fn request(start: Start, until_ns: i64, chunk_mode: bool) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(start),
        until_ns,
        batching: true,
        chunk_mode,
        ..Default::default()
    }
}

/// Follows to the end; returns (events, order-sensitive fingerprint).
async fn follow(addr: &str, request: v1::SubscribeRequest) -> Result<(u64, u64, Duration)> {
    let mut follower = Follower::new(addr, request, Backoff::default())?;
    let started = Instant::now();
    let mut first = None;
    let (mut n, mut print) = (0u64, 0u64);
    while let Some(e) = follower.next().await? {
        first.get_or_insert_with(|| started.elapsed());
        n += 1;
        let position = (u64::from(e.shard) << 48) | e.offset;
        print = print.rotate_left(5) ^ position.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    Ok((n, print, first.unwrap_or_default()))
}

/// `catchup`: one follower from the beginning, event mode then chunk mode.
pub fn catchup(dir: &Path, events: u64, payload: usize, reps: usize) -> Result<()> {
    fresh_dir(dir)?;
    let server = ServerProcess::start(dir, 2)?;
    let rt = runtime()?;
    println!(
        "# catchup: {}; server process `ringfeed serve`, 2 shards, client in the bench process",
        machine()
    );
    let until = rt.block_on(preload(&server.addr, 0, events, payload))?;
    println!("pre-loaded {events} events of {payload} payload bytes");
    println!("| mode | events | median s | events/s | MB/s (payload) | server CPU s |");
    println!("|---|---:|---:|---:|---:|---:|");
    let mut prints = Vec::new();
    for chunk_mode in [false, true] {
        let mut secs = Vec::new();
        let mut cpu = Vec::new();
        for _ in 0..reps {
            let cpu0 = server.cpu_seconds();
            let started = Instant::now();
            let (n, print, _) = rt.block_on(follow(
                &server.addr,
                request(Start::Beginning(true), until, chunk_mode),
            ))?;
            secs.push(started.elapsed().as_secs_f64());
            cpu.push(server.cpu_seconds() - cpu0);
            if n != events {
                bail!("catch-up delivered {n} events, {events} expected");
            }
            prints.push(print);
        }
        let s = crate::median(secs);
        println!(
            "| {} | {events} | {s:.3} | {:.0} | {:.1} | {:.2} |",
            if chunk_mode {
                "chunks"
            } else {
                "events, batched"
            },
            events as f64 / s,
            events as f64 * payload as f64 / s / 1e6,
            crate::median(cpu)
        );
    }
    // Per shard the order is the same in both modes; across shards chunk mode
    // interleaves by chunk, so only the event-mode prints must all agree.
    if prints[..reps].iter().any(|p| *p != prints[0]) {
        bail!("event-mode catch-ups differ between runs");
    }
    Ok(())
}

/// `storm`: `subscribers` followers resume at once, each `behind` events
/// behind, over a log of `backlog` events.
pub fn storm(
    dir: &Path,
    backlog: u64,
    behind: u64,
    subscribers: usize,
    chunk_mode: bool,
    payload: usize,
) -> Result<()> {
    fresh_dir(dir)?;
    let server = ServerProcess::start(dir, 2)?;
    let rt = runtime()?;
    println!(
        "# storm: {}; {subscribers} followers ({}) resume at once, each {behind} events behind, over {} events on disk",
        machine(),
        if chunk_mode { "chunk mode" } else { "event mode, batched" },
        backlog + behind
    );
    rt.block_on(preload(&server.addr, 0, backlog, payload))?;
    let since = now_ns();
    let until = rt.block_on(preload(&server.addr, backlog, behind, payload))?;
    // The reference: one follower in event mode.
    let (expected, expected_print, _) = rt.block_on(follow(
        &server.addr,
        request(Start::SinceNs(since), until, false),
    ))?;
    if expected != behind {
        bail!("the reference read {expected} events, {behind} expected");
    }
    let rss_before = server.memory("VmRSS");
    let cpu0 = server.cpu_seconds();
    let started = Instant::now();
    let results = rt.block_on(async {
        let addr = Arc::new(server.addr.clone());
        let tasks: Vec<_> = (0..subscribers)
            .map(|_| {
                let addr = addr.clone();
                tokio::spawn(async move {
                    let (n, print, first) =
                        follow(&addr, request(Start::SinceNs(since), until, chunk_mode)).await?;
                    Ok::<_, anyhow::Error>((n, print, first, started.elapsed()))
                })
            })
            .collect();
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await??);
        }
        Ok::<_, anyhow::Error>(results)
    })?;
    let all_done = started.elapsed();
    let cpu = server.cpu_seconds() - cpu0;
    let mut first = Histogram::<u64>::new(3)?;
    let mut done = Histogram::<u64>::new(3)?;
    let mut inexact = 0;
    for (n, print, t_first, t_done) in &results {
        first.record(t_first.as_millis() as u64)?;
        done.record(t_done.as_millis() as u64)?;
        // Chunk mode interleaves shards by chunk: only the count is comparable.
        if *n != expected || (!chunk_mode && *print != expected_print) {
            inexact += 1;
        }
    }
    println!("| subscribers | events each | all caught up s | first event p50 / p99 ms | caught up p50 / p99 ms | server CPU s | server RSS before MiB | server peak RSS MiB | inexact |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {subscribers} | {expected} | {:.2} | {} / {} | {} / {} | {cpu:.1} | {} | {} | {inexact} |",
        all_done.as_secs_f64(),
        first.value_at_quantile(0.5),
        first.value_at_quantile(0.99),
        done.value_at_quantile(0.5),
        done.value_at_quantile(0.99),
        rss_before >> 20,
        server.memory("VmHWM") >> 20,
    );
    if inexact > 0 {
        bail!("{inexact} of {subscribers} followers did not get exactly the reference stream");
    }
    Ok(())
}

/// `fanout`: `subscribers` live followers while one producer appends `rate`
/// events/s (one per tick, open loop) for `seconds`.
pub fn fanout(
    dir: &Path,
    subscribers: usize,
    rate: u64,
    seconds: f64,
    payload: usize,
) -> Result<()> {
    fresh_dir(dir)?;
    let server = ServerProcess::start(dir, 2)?;
    let rt = runtime()?;
    println!(
        "# fanout: {}; {subscribers} live followers, {rate} events/s for {seconds} s",
        machine()
    );
    let total = (rate as f64 * seconds) as u64;
    let cpu0 = server.cpu_seconds();
    let started = Instant::now();
    let hist = rt.block_on(async {
        let addr = server.addr.clone();
        let mut followers = Vec::new();
        for _ in 0..subscribers {
            let mut follower = Follower::new(
                &addr,
                request(Start::Now(true), 0, false),
                Backoff::default(),
            )?;
            followers.push(tokio::spawn(async move {
                let mut hist = Histogram::<u64>::new(3).expect("histogram");
                let mut n = 0;
                while n < total {
                    let Some(e) = follower.next().await? else {
                        break;
                    };
                    // The producer put its send time (ns) in the entry name.
                    let sent: i64 = e
                        .decode()?
                        .new_entry
                        .and_then(|entry| entry.name.parse().ok())
                        .unwrap_or(0);
                    hist.record(((now_ns() - sent).max(0) / 1000) as u64).ok();
                    n += 1;
                }
                Ok::<_, anyhow::Error>(hist)
            }));
        }
        // Let every follower connect (they start at "now").
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Open loop: every tick sends its append without waiting for earlier
        // acks, so a slow server shows up as latency, not as a lower rate.
        let producer = client(&addr).await?;
        let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate as f64));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        let mut appends = Vec::with_capacity(total as usize);
        for _ in 0..total {
            tick.tick().await;
            let mut e = event(0, payload);
            e.new_entry.as_mut().expect("entry").name = now_ns().to_string();
            let mut producer = producer.clone();
            appends.push(tokio::spawn(async move {
                producer
                    .append(v1::AppendRequest {
                        events: vec![e],
                        durability: 0,
                    })
                    .await
                    .map_err(|e| anyhow!("append: {e}"))
            }));
        }
        let produced = started.elapsed();
        for a in appends {
            a.await??;
        }
        println!(
            "produced {total} events in {:.2} s ({:.0} events/s)",
            produced.as_secs_f64() - 2.0,
            total as f64 / (produced.as_secs_f64() - 2.0)
        );
        let mut all = Histogram::<u64>::new(3)?;
        for f in followers {
            let h = tokio::time::timeout(Duration::from_secs(120), f)
                .await
                .map_err(|_| anyhow!("a follower did not receive every event within 120 s"))???;
            all.add(&h)?;
        }
        Ok::<_, anyhow::Error>(all)
    })?;
    println!("| subscribers | events/s | deliveries | p50 ms | p99 ms | p99.9 ms | max ms | wall s | server CPU s |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {subscribers} | {rate} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} |",
        hist.len(),
        hist.value_at_quantile(0.5) as f64 / 1e3,
        hist.value_at_quantile(0.99) as f64 / 1e3,
        hist.value_at_quantile(0.999) as f64 / 1e3,
        hist.max() as f64 / 1e3,
        started.elapsed().as_secs_f64(),
        server.cpu_seconds() - cpu0
    );
    Ok(())
}
