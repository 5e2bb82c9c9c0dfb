//! Readers on other threads, reading windows while a shard appends, see
//! exactly the appended records, in order, each once, and never a torn one
//! (every record's checksum is verified as it is read).

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Durability, Readers, ShardShared};

const EVENTS: u64 = 30_000;

/// Follows one shard through its ring from offset 0; returns the payloads read.
fn follow(shard: Arc<ShardShared>, until: u64) -> Vec<(u64, i64, Vec<u8>)> {
    let mut seen = Vec::new();
    let mut next = 0u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while next < until {
        assert!(
            std::time::Instant::now() < deadline,
            "reader stalled at offset {next}"
        );
        let waiter = Readers::wait(&shard);
        let committed = shard.watermarks.committed_next();
        let windows = shard.ring.windows();
        let first = windows.first().map(|w| w.first_offset());
        assert!(
            first.is_some_and(|f| f <= next) || next >= committed,
            "offset {next} was evicted before this reader got it"
        );
        for (i, window) in windows.iter().enumerate() {
            let end = windows.get(i + 1).map_or(u64::MAX, |w| w.first_offset());
            if end <= next {
                continue;
            }
            for record in window.records() {
                let record = record.expect("a committed record always verifies");
                if record.offset < next {
                    continue;
                }
                assert_eq!(record.offset, next, "records are dense and in order");
                seen.push((record.offset, record.ts, record.payload.to_vec()));
                next += 1;
            }
        }
        if next >= committed && next < until {
            waiter.wait_timeout(Duration::from_millis(50));
        }
    }
    seen
}

#[test]
fn concurrent_readers_see_every_record_once_in_order() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let mut config = small_engine_config(1);
    // Room for every window: this test is about visibility, not eviction.
    config.ring_bytes = 64 << 20;
    let engine = mem_engine(config, &[storage]);
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let shard = engine.shard(0).clone();
            std::thread::spawn(move || follow(shard, EVENTS))
        })
        .collect();
    let mut appended = Vec::new();
    let mut id = 0;
    while id < EVENTS {
        let batch: Vec<_> = (0..(1 + id % 50).min(EVENTS - id))
            .map(|k| event("/a/b", id + k))
            .collect();
        id += batch.len() as u64;
        let payloads: Vec<_> = batch.iter().map(|e| e.payload.to_vec()).collect();
        let positions = engine.append_blocking(batch, Durability::Memory).unwrap();
        appended.extend(
            positions
                .into_iter()
                .zip(payloads)
                .map(|(p, pl)| (p.offset, p.ts, pl)),
        );
    }
    for reader in readers {
        let seen = reader.join().expect("reader thread");
        assert_eq!(seen.len(), appended.len());
        assert!(
            seen == appended,
            "a reader saw something other than what was appended"
        );
    }
}
