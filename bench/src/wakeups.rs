//! `shard-wakeups`: what waiting subscribers cost a shard's append (issue 19).
//! An in-process engine, K live subscribers as tokio tasks (as the server
//! runs them), each parked in `Subscription::next`, and one producer
//! appending single-event batches at a fixed rate. The figure is the shard's
//! time in its non-yielding stamp-and-publish step per batch
//! (`ShardStats::append_ns`), which wakes every waiting subscriber; it should
//! not grow with K.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use ringfeed_engine::{Durability, Engine, EngineConfig, Start, SubscribeRequest};

use crate::util::{create_event, fresh_dir, machine};

pub struct Args<'a> {
    pub dir: &'a Path,
    pub shards: u32,
    pub subscribers: &'a [usize],
    pub rate: u64,
    pub seconds: f64,
}

pub fn run(args: &Args<'_>) -> Result<()> {
    if args.rate == 0 || args.seconds <= 0.0 || args.shards == 0 {
        bail!("rate, seconds and shards must be positive");
    }
    println!("# shard-wakeups: {}", machine());
    println!(
        "# {} shard(s), one producer appending single-event batches at {} batches/s for {} s; \
         K live subscribers parked in next() on 2 tokio threads",
        args.shards, args.rate, args.seconds
    );
    println!("| subscribers | batches | shard ns per batch | deliveries | expected |");
    println!("|---:|---:|---:|---:|---:|");
    for &k in args.subscribers {
        fresh_dir(args.dir)?;
        let engine = Arc::new(
            Engine::open(EngineConfig {
                data_dir: args.dir.to_path_buf(),
                shards: args.shards,
                ..EngineConfig::default()
            })
            .map_err(|e| anyhow!("{e}"))?,
        );
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("wakeups-sub")
            .enable_all()
            .build()?;
        let delivered = Arc::new(AtomicU64::new(0));
        for _ in 0..k {
            let mut sub = engine
                .subscribe(SubscribeRequest::from(Start::Now))
                .map_err(|e| anyhow!("subscribe: {e}"))?;
            let delivered = delivered.clone();
            runtime.spawn(async move {
                while let Ok(Some(_)) = sub.next().await {
                    delivered.fetch_add(1, AtomicOrdering::Relaxed);
                }
            });
        }
        // Let every subscriber park before the clock starts.
        std::thread::sleep(Duration::from_millis(200));
        let stamp_ns = |engine: &Engine| -> u64 {
            (0..engine.shard_count())
                .map(|s| {
                    engine
                        .shard(s)
                        .stats()
                        .append_ns
                        .load(AtomicOrdering::Relaxed)
                })
                .sum()
        };
        let before = stamp_ns(&engine);
        let total = (args.rate as f64 * args.seconds) as u64;
        let start = Instant::now();
        for i in 0..total {
            let due = start + Duration::from_secs_f64(i as f64 / args.rate as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            engine
                .append_blocking(vec![create_event(i, 200)], Durability::Memory)
                .map_err(|e| anyhow!("append: {e}"))?;
        }
        let spent = stamp_ns(&engine) - before;
        // Deliveries finish shortly after the last append; wait up to 10 s.
        let expected = total * k as u64;
        let deadline = Instant::now() + Duration::from_secs(10);
        while delivered.load(AtomicOrdering::Relaxed) < expected && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        println!(
            "| {k} | {total} | {:.0} | {} | {expected} |",
            spent as f64 / total.max(1) as f64,
            delivered.load(AtomicOrdering::Relaxed),
        );
        runtime.shutdown_background();
        Arc::try_unwrap(engine)
            .map_err(|_| anyhow!("the engine is still shared"))?
            .shutdown()
            .map_err(|e| anyhow!("{e}"))?;
    }
    std::fs::remove_dir_all(args.dir)?;
    Ok(())
}
