//! `since-lookup`: the cost of finding "the first chunk with an event at or
//! after T" (a `since_ns` start) as the log grows, with the chunk index's
//! binary search (`LogIndex::find_ts`, what readers use) beside a linear walk
//! over the same chunk entries (what the reader did before the index: chunk
//! after chunk from the oldest retained segment). In memory, no I/O: it
//! measures the search alone, over logs of each `--segments` count with
//! `--chunks` chunks per segment, for targets spread over the whole log.

use std::time::Instant;

use ringfeed_engine::segment::index::{ChunkEntry, LogIndex, SegmentIndex};

use crate::util::{machine, median};

pub struct Args {
    pub segments: Vec<u64>,
    pub chunks: u64,
    pub lookups: u64,
    pub reps: usize,
}

pub fn since_lookup(args: &Args) -> anyhow::Result<()> {
    println!("# since-lookup: {}", machine());
    println!(
        "# {} chunks per segment, 100 records per chunk; {} look-ups per rep, {} reps; ns per look-up, medians",
        args.chunks, args.lookups, args.reps
    );
    println!("| segments | chunks | binary search ns | linear walk ns | walk / search |");
    println!("|---:|---:|---:|---:|---:|");
    for &segments in &args.segments {
        let (index, all) = build(segments, args.chunks);
        let total = all.len() as u64;
        let last_ts = all.last().map_or(0, |c| c.last_ts);
        let targets: Vec<i64> = (0..args.lookups)
            .map(|i| (i * 7919 % args.lookups) as i64 * last_ts / args.lookups as i64)
            .collect();
        let mut search = Vec::new();
        let mut walk = Vec::new();
        for _ in 0..args.reps {
            let started = Instant::now();
            let mut found = 0u64;
            for &t in &targets {
                found += index.find_ts(t).map_or(0, |(_, c)| c.first_offset);
            }
            search.push(started.elapsed().as_nanos() as f64 / targets.len() as f64);
            let started = Instant::now();
            let mut walked = 0u64;
            for &t in &targets {
                walked += all
                    .iter()
                    .find(|c| c.last_ts >= t)
                    .map_or(0, |c| c.first_offset);
            }
            walk.push(started.elapsed().as_nanos() as f64 / targets.len() as f64);
            anyhow::ensure!(found == walked, "the two searches disagree");
        }
        let (s, w) = (median(search), median(walk));
        println!("| {segments} | {total} | {s:.0} | {w:.0} | {:.0} |", w / s);
    }
    Ok(())
}

/// A log of `segments` segments of `chunks` chunks of 100 records each,
/// stamps 10 ns apart: its published index, and every chunk in order.
fn build(segments: u64, chunks: u64) -> (LogIndex, Vec<ChunkEntry>) {
    let mut all = Vec::new();
    let mut logs = Vec::new();
    for s in 0..segments {
        let mut idx = SegmentIndex::default();
        for c in 0..chunks {
            let first = (s * chunks + c) * 100;
            let entry = ChunkEntry {
                first_offset: first,
                record_count: 100,
                first_ts: first as i64 * 10 + 1,
                last_ts: (first + 99) as i64 * 10 + 1,
                position: 4096 + c * 65536,
                disk_len: 65536,
                generation: 1,
            };
            idx.push(entry);
            all.push(entry);
        }
        logs.push((s * chunks * 100, idx));
    }
    let mut index = LogIndex::default();
    index.sync_from(logs.iter().map(|(f, i)| (*f, i)));
    (index, all)
}
