//! Stamps strictly increase per shard even when the wall clock steps
//! backwards, stand still, or the engine restarts under an earlier clock.

use std::sync::Arc;

use crate::common::*;
use ringfeed_engine::clock::ManualClock;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::Durability;

#[test]
fn stamps_never_go_backwards() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let clock = ManualClock::new(1_000_000);
    let engine = mem_engine_with_clock(
        small_engine_config(1),
        std::slice::from_ref(&storage),
        Arc::new(clock.clone()),
    );
    let mut stamps = Vec::new();
    for (i, now) in [1_000_000i64, 1_000_000, 500_000, 2_000_000, 1, 2_000_000]
        .into_iter()
        .enumerate()
    {
        clock.set(now);
        let batch = (0..3).map(|k| event("/c", i as u64 * 10 + k)).collect();
        stamps.extend(
            engine
                .append_blocking(batch, Durability::Memory)
                .unwrap()
                .into_iter()
                .map(|p| p.ts),
        );
    }
    assert!(stamps.windows(2).all(|w| w[1] > w[0]), "stamps {stamps:?}");
    assert!(
        stamps[3] >= 1_000_000,
        "a clock that stands still still gets fresh stamps"
    );
    let last = *stamps.last().unwrap();
    drop(engine);

    // Restart with the clock far in the past: stamps continue above the log's last.
    clock.set(10);
    let engine = mem_engine_with_clock(small_engine_config(1), &[storage], Arc::new(clock.clone()));
    let p = engine
        .append_blocking(vec![event("/c", 99)], Durability::Memory)
        .unwrap();
    assert!(
        p[0].ts > last,
        "stamp {} after restart is not above {last}",
        p[0].ts
    );
    assert_eq!(
        p[0].offset,
        stamps.len() as u64,
        "offsets continue after restart"
    );
}

#[test]
fn a_claim_fences_later_stamps() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let clock = ManualClock::new(5_000);
    let engine = mem_engine_with_clock(small_engine_config(1), &[storage], Arc::new(clock.clone()));
    engine
        .append_blocking(vec![event("/c", 1)], Durability::Memory)
        .unwrap();
    let shard = engine.shard(0).clone();
    clock.set(9_000);
    shard.request_claim(9_000);
    wait_until(
        std::time::Duration::from_secs(5),
        "the idle shard to claim",
        || shard.watermarks.claimed_ts() >= 9_000,
    );
    clock.set(6_000);
    let p = engine
        .append_blocking(vec![event("/c", 2)], Durability::Memory)
        .unwrap();
    assert!(p[0].ts > 9_000, "stamp {} is not above the claim", p[0].ts);
}
