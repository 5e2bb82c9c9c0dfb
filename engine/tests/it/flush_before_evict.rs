//! Flush before evict under a stalled disk: the ring keeps every unflushed
//! window, memory stays within its bounds, appends back-pressure and then
//! fail with ResourceExhausted; when syncs resume everything drains.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{AppendError, Durability};

#[test]
fn stalled_flush_bounds_memory_then_drains() {
    let _watchdog = ringfeed_testkit::arm();
    let storage = MemStorage::new();
    let mut config = small_engine_config(1);
    config.append_timeout = Duration::from_millis(300);
    let (ring_budget, window, max_unflushed) = (
        config.ring_bytes,
        config.window_bytes,
        config.max_unflushed_bytes,
    );
    let engine = mem_engine(config, std::slice::from_ref(&storage));
    let shard = engine.shard(0).clone();

    // Some flushed history first, so eviction has something it may evict.
    for i in 0..2_000 {
        engine
            .append_blocking(vec![event("/x", i)], Durability::Memory)
            .unwrap();
    }
    futures_lite::future::block_on(engine.flush()).unwrap();

    storage.stall_syncs(true);
    let mut refused = None;
    let mut id = 10_000;
    for _ in 0..10_000 {
        let batch: Vec<_> = (0..20).map(|k| event("/x", id + k)).collect();
        id += 20;
        match engine.append_blocking(batch, Durability::Memory) {
            Ok(_) => {}
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        let w = shard.watermarks.snapshot();
        assert!(
            w.evicted_below <= w.flushed_next,
            "evicted {} past flushed {}",
            w.evicted_below,
            w.flushed_next
        );
        assert!(
            shard.unflushed_bytes() <= max_unflushed,
            "unflushed {} over its bound",
            shard.unflushed_bytes()
        );
        assert!(
            shard.ring_bytes() <= ring_budget + window,
            "ring {} over its budget",
            shard.ring_bytes()
        );
    }
    match refused {
        Some(AppendError::ResourceExhausted {
            shard: 0, waited, ..
        }) => assert!(waited >= Duration::from_millis(300)),
        other => panic!("expected back-pressure to end in ResourceExhausted, got {other:?}"),
    }
    let stalled = shard.watermarks.snapshot();
    assert!(
        stalled.committed_next > stalled.flushed_next,
        "events wait in memory, unflushed"
    );
    // Every unflushed event is still readable from the ring.
    let first_in_ring = shard.ring.first_offset().unwrap();
    assert!(first_in_ring <= stalled.flushed_next);

    storage.stall_syncs(false);
    futures_lite::future::block_on(engine.flush()).unwrap();
    let drained = shard.watermarks.snapshot();
    assert_eq!(
        drained.flushed_next, drained.committed_next,
        "everything drained"
    );
    assert_eq!(shard.unflushed_bytes(), 0);
    engine
        .append_blocking(vec![event("/x", 1)], Durability::Durable)
        .expect("appends flow again");
    let committed = shard.watermarks.committed_next();
    drop(engine);
    assert_eq!(
        stored_records(&storage, 0).len() as u64,
        committed,
        "nothing lost across the stall"
    );
}
