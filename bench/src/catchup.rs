//! `subscribe-catchup`: one in-process subscriber catching up over a
//! pre-loaded log (no gRPC): from segments with the ring cold (engine
//! reopened; once with the page cache dropped, once warm) and from the ring,
//! with a match-all filter and with two filters matching 1% of events: one
//! prefix, and 6,000 prefixes.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use ringfeed_engine::{
    Cursor, Durability, Engine, EngineConfig, Filter, NewEvent, Start, Step, SubscribeRequest,
};

use crate::util::{fresh_dir, machine, median};

/// One catch-up pass: events delivered and scanned, record bytes, time.
struct Pass {
    delivered: u64,
    scanned: u64,
    bytes: u64,
    elapsed: Duration,
}

pub fn subscribe_catchup(
    dir: &Path,
    events: u64,
    event_bytes: usize,
    reps: usize,
    drop_caches: bool,
) -> Result<()> {
    fresh_dir(dir)?;
    let config = EngineConfig {
        data_dir: dir.to_path_buf(),
        shards: 2,
        ..EngineConfig::default()
    };
    println!("# subscribe-catchup: {}", machine());
    println!(
        "# 2 shards, {events} events of {event_bytes} payload bytes, 1% under /hot; \
         window {} KiB, ring {} MiB per shard",
        config.window_bytes >> 10,
        config.ring_bytes >> 20
    );
    let engine = Engine::open(config.clone()).map_err(|e| anyhow!("{e}"))?;
    let started = Instant::now();
    let payload = ringfeed_proto::bytes::Bytes::from(vec![0x62u8; event_bytes]);
    let mut n = 0u64;
    let mut last_ts = 0;
    while n < events {
        let batch: Vec<NewEvent> = (0..1024.min(events - n))
            .map(|_| {
                n += 1;
                let hot = n.is_multiple_of(100);
                NewEvent {
                    directory: format!("/{}/d{}", if hot { "hot" } else { "cold" }, n % 64),
                    new_name: format!("f{n}"),
                    payload: payload.clone(),
                    ..Default::default()
                }
            })
            .collect();
        let positions = engine
            .append_blocking(batch, Durability::Memory)
            .map_err(|e| anyhow!("append: {e}"))?;
        last_ts = last_ts.max(positions.iter().map(|p| p.ts).max().unwrap_or(0));
    }
    futures_lite::future::block_on(engine.flush()).map_err(|e| anyhow!("flush: {e}"))?;
    eprintln!(
        "loaded {events} events in {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // From the ring: start where each shard's ring starts.
    let ring_start = Cursor::new(
        (0..2)
            .map(|s| engine.shard(s).watermarks.snapshot().evicted_below)
            .collect(),
    );
    let mut rows = Vec::new();
    for (filter_name, filter) in filters() {
        let passes = (0..reps)
            .map(|_| catch_up(&engine, Start::Cursor(ring_start.clone()), &filter, last_ts))
            .collect::<Result<Vec<_>>>()?;
        rows.push(("ring", filter_name, passes));
    }
    engine.shutdown().map_err(|e| anyhow!("{e}"))?;

    // From segments: a reopened engine has an empty ring.
    let engine = Engine::open(config).map_err(|e| anyhow!("{e}"))?;
    for (filter_name, filter) in filters() {
        if drop_caches {
            let mut cold = Vec::new();
            for _ in 0..reps {
                drop_page_cache()?;
                cold.push(catch_up(&engine, Start::Beginning, &filter, last_ts)?);
            }
            rows.push(("segments, page cache dropped", filter_name, cold));
        }
        let passes = (0..reps)
            .map(|_| catch_up(&engine, Start::Beginning, &filter, last_ts))
            .collect::<Result<Vec<_>>>()?;
        rows.push(("segments, page cache warm", filter_name, passes));
    }
    engine.shutdown().map_err(|e| anyhow!("{e}"))?;

    println!(
        "| source | filter | events scanned | delivered | scanned ev/s | delivered ev/s | MB/s scanned |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for (source, filter, passes) in rows {
        let secs = median(passes.iter().map(|p| p.elapsed.as_secs_f64()).collect());
        let p = &passes[0];
        println!(
            "| {source} | {filter} | {} | {} | {:.2} M | {:.2} M | {:.0} |",
            p.scanned,
            p.delivered,
            p.scanned as f64 / secs / 1e6,
            p.delivered as f64 / secs / 1e6,
            p.bytes as f64 / secs / 1e6,
        );
    }
    println!("# medians of {reps} passes; one subscriber thread polling the engine, merged order");
    fresh_dir(dir)?;
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

fn filters() -> [(&'static str, Filter); 3] {
    [
        ("all", Filter::default()),
        ("/hot (1%)", Filter::prefix("/hot")),
        (
            "6,000 prefixes (1%)",
            // The 64 hot directories among 5,936 that match nothing (half
            // of them sharing the cold events' first component): a
            // subscriber that names every directory it syncs.
            Filter {
                prefixes: (0..6000)
                    .map(|i| match i {
                        0..64 => format!("/hot/d{i}"),
                        _ if i % 2 == 0 => format!("/cold/x{i}"),
                        _ => format!("/other/{i}"),
                    })
                    .collect(),
                ..Filter::default()
            },
        ),
    ]
}

fn catch_up(engine: &Engine, start: Start, filter: &Filter, until: i64) -> Result<Pass> {
    let mut sub = engine
        .subscribe(SubscribeRequest {
            start,
            filter: filter.clone(),
            until_ns: Some(until),
            ordering: ringfeed_engine::Ordering::Merged,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .map_err(|e| anyhow!("subscribe: {e}"))?;
    let from: u64 = sub.cursor().offsets().iter().sum();
    let started = Instant::now();
    let (mut delivered, mut bytes) = (0u64, 0u64);
    loop {
        match sub.next_blocking(Duration::from_secs(10)) {
            Ok(Step::Event(e)) => {
                delivered += 1;
                bytes += e.record_bytes().len() as u64;
            }
            Ok(Step::End) => break,
            Ok(Step::Pending) => bail!("catch-up stalled at {}", sub.cursor()),
            Err(e) => bail!("subscription: {e}"),
        }
    }
    let elapsed = started.elapsed();
    let scanned = sub.cursor().offsets().iter().sum::<u64>() - from;
    // Scanned bytes: delivered bytes scaled by the scanned/delivered ratio
    // (every event here has the same size).
    let bytes = (bytes * scanned).checked_div(delivered).unwrap_or(0);
    Ok(Pass {
        delivered,
        scanned,
        bytes,
        elapsed,
    })
}

fn drop_page_cache() -> Result<()> {
    // Dirty pages cannot be dropped: write them back first.
    let _ = std::process::Command::new("sync").status();
    std::fs::write("/proc/sys/vm/drop_caches", "1\n")
        .map_err(|e| anyhow!("dropping the page cache needs root: {e}"))
}
