//! `delivery-latency`: what delivering only durable events costs. An
//! in-process engine (O_DIRECT, default configuration unless told), an
//! open-loop producer at a fixed rate, and two live merged subscribers side by
//! side on the same feed: one delivering events as soon as they are visible,
//! one `durable_only`. Latency is delivery time minus the event's stamp, per
//! event, in HdrHistogram; a run with memory-acknowledged and one with durable
//! appends.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hdrhistogram::Histogram;
use ringfeed_engine::clock::{Clock, SystemClock};
use ringfeed_engine::{Durability, Engine, EngineConfig, NewEvent, Start, Step, SubscribeRequest};

use crate::util::{create_event, fresh_dir, machine};

pub struct Args<'a> {
    pub dir: &'a Path,
    pub rate: u64,
    pub seconds: f64,
    pub shards: u32,
    pub flush_interval_ms: u64,
}

pub fn delivery_latency(args: &Args<'_>) -> Result<()> {
    if args.rate == 0 || args.seconds <= 0.0 || args.shards == 0 || args.flush_interval_ms == 0 {
        bail!("rate, seconds, shards and flush interval must be positive");
    }
    println!("# delivery-latency: {}", machine());
    println!(
        "# {} shard(s), open-loop producer at {} events/s for {} s, flush_interval {} ms; \
         latency = delivery time - event stamp",
        args.shards, args.rate, args.seconds, args.flush_interval_ms
    );
    println!("| appends | subscriber | events | p50 µs | p99 µs | p99.9 µs | max µs |");
    println!("|---|---|---:|---:|---:|---:|---:|");
    for durability in [Durability::Memory, Durability::Durable] {
        fresh_dir(args.dir)?;
        let engine = Arc::new(
            Engine::open(EngineConfig {
                data_dir: args.dir.to_path_buf(),
                shards: args.shards,
                flush_interval: Duration::from_millis(args.flush_interval_ms),
                ..EngineConfig::default()
            })
            .map_err(|e| anyhow!("{e}"))?,
        );
        let total = (args.rate as f64 * args.seconds) as u64;
        let done = Arc::new(AtomicBool::new(false));
        let readers: Vec<_> = [false, true]
            .into_iter()
            .map(|durable_only| {
                let sub = engine
                    .subscribe(SubscribeRequest {
                        durable_only,
                        ..SubscribeRequest::from(Start::Now)
                    })
                    .map_err(|e| anyhow!("{e}"));
                let done = done.clone();
                let engine2 = engine.clone();
                std::thread::spawn(move || -> Result<Histogram<u64>> {
                    let mut sub = sub?;
                    // 1 µs to 60 s: anything slower is recorded as 60 s.
                    let mut latency =
                        Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
                    let mut got = 0;
                    while got < total {
                        match sub.next_blocking(Duration::from_millis(100))? {
                            Step::Event(d) => {
                                let flushed = engine2.shard(d.shard).watermarks.flushed_next();
                                if durable_only && flushed <= d.offset {
                                    bail!(
                                        "durable_only delivered shard {} offset {} unflushed",
                                        d.shard,
                                        d.offset
                                    );
                                }
                                let us = (SystemClock.now_ns() - d.ts).max(0) as u64 / 1000;
                                latency.saturating_record(us); // clamps at 60 s
                                got += 1;
                            }
                            Step::Pending if done.load(AtomicOrdering::Acquire) => {
                                bail!("{got} of {total} events delivered after the producer ended")
                            }
                            Step::Pending | Step::End => {}
                        }
                    }
                    Ok(latency)
                })
            })
            .collect();
        produce(&engine, args.rate, total, durability)?;
        // Durable-only readers need the last events flushed; the ticker does
        // that within the flush interval. Give them a bound, not forever.
        std::thread::sleep(Duration::from_millis(args.flush_interval_ms * 3 + 1000));
        done.store(true, AtomicOrdering::Release);
        for (reader, name) in readers.into_iter().zip(["visible", "durable_only"]) {
            let h = reader.join().map_err(|_| anyhow!("reader panicked"))??;
            println!(
                "| {:?} | {name} | {} | {} | {} | {} | {} |",
                durability,
                h.len(),
                h.value_at_quantile(0.5),
                h.value_at_quantile(0.99),
                h.value_at_quantile(0.999),
                h.max()
            );
        }
        drop(engine);
    }
    Ok(())
}

/// Appends `total` events at `rate` per second, one batch per millisecond
/// tick (open loop: a late tick catches up, it never lowers the rate).
fn produce(engine: &Engine, rate: u64, total: u64, durability: Durability) -> Result<()> {
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < total {
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64).min(total);
        if due > sent {
            let batch: Vec<NewEvent> = (sent..due).map(|i| create_event(i, 200)).collect();
            engine
                .append_blocking(batch, durability)
                .map_err(|e| anyhow!("append: {e}"))?;
            sent = due;
        } else {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    Ok(())
}
