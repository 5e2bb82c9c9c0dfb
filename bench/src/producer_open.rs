//! `producer-open`: what idempotent producers cost at open. Two data dirs
//! with the same events, one appended without a producer and one by
//! `--producers` idempotent producers; each is closed cleanly and reopened
//! `--reps` times. Prints the median open time of each, and the time the
//! producer data dir's open spent rebuilding the producer table (reading the
//! stamps of records recovery reads and verifies anyway).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use ringfeed_engine::{Durability, Engine, EngineConfig, NewEvent, Producer};

use crate::util::{create_event, fresh_dir, machine, median};

pub struct Args<'a> {
    pub dir: &'a Path,
    pub events: u64,
    pub producers: u64,
    pub reps: usize,
}

pub fn producer_open(args: &Args<'_>) -> Result<()> {
    println!("# producer-open: {}", machine());
    println!(
        "# 2 shards, {} events of 100 payload bytes; idempotent run: {} producers, \
         batches of 1000 events over 64 directories; {} reopen(s) each",
        args.events, args.producers, args.reps
    );
    let mut rows = Vec::new();
    for idempotent in [false, true] {
        let dir = args
            .dir
            .join(if idempotent { "producers" } else { "plain" });
        fresh_dir(&dir)?;
        let config = EngineConfig {
            data_dir: dir.clone(),
            shards: 2,
            ..EngineConfig::default()
        };
        let engine = Engine::open(config.clone()).map_err(|e| anyhow!("{e}"))?;
        let mut next = vec![0u64; args.producers.max(1) as usize];
        let mut n = 0u64;
        while n < args.events {
            let count = 1000.min(args.events - n);
            let batch: Vec<NewEvent> = (n..n + count).map(|i| create_event(i, 100)).collect();
            let slot = ((n / 1000) % next.len() as u64) as usize;
            let producer = idempotent.then(|| Producer {
                id: slot as u64 + 1,
                first_sequence: next[slot],
            });
            next[slot] += count;
            futures_lite::future::block_on(engine.append_idempotent(
                batch,
                Durability::Memory,
                producer,
            ))
            .map_err(|e| anyhow!("{e}"))?;
            n += count;
        }
        drop(engine);
        let mut opens = Vec::new();
        let mut rebuilds = Vec::new();
        let mut found = 0;
        for _ in 0..args.reps {
            let started = Instant::now();
            let engine = Engine::open(config.clone()).map_err(|e| anyhow!("{e}"))?;
            opens.push(started.elapsed());
            let reports = engine.recovery_reports();
            rebuilds.push(reports.iter().map(|r| r.producer_rebuild).sum::<Duration>());
            found = reports.iter().map(|r| r.producers).sum::<usize>();
            drop(engine);
        }
        let open = median(opens.iter().map(Duration::as_secs_f64).collect());
        let rebuild = median(rebuilds.iter().map(Duration::as_secs_f64).collect());
        println!(
            "{:<12} open median {:>8.1} ms, table rebuild {:>7.1} ms, {} producer entries (shards summed)",
            if idempotent { "producers" } else { "plain" },
            open * 1e3,
            rebuild * 1e3,
            found
        );
        rows.push(open);
        std::fs::remove_dir_all(&dir).ok();
    }
    println!(
        "ratio open(producers) / open(plain): {:.2}",
        rows[1] / rows[0]
    );
    Ok(())
}
