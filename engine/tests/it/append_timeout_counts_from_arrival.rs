//! `append_timeout` is counted from an append's arrival at the engine, not
//! from when its shard takes it (issue 15): an append queued behind another
//! that waits for room on a stuck shard fails one timeout after it arrived,
//! not after the one ahead of it gave up plus a whole timeout of its own.
//!
//! Before the fix the second append here failed about two timeouts (4 s)
//! after it was called; the bound below (3 s) sits between the two.

use std::time::{Duration, Instant};

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{AppendError, Durability, EngineConfig};

/// 24 KiB: more than the room a stuck shard 0 has left.
fn batch(k: u64) -> Vec<ringfeed_engine::NewEvent> {
    (0..3).map(|i| big_event(100 * k + i)).collect()
}

#[test]
fn a_queued_append_times_out_one_timeout_after_it_arrived() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let timeout = Duration::from_secs(2);
    let engine = std::sync::Arc::new(mem_engine(
        EngineConfig {
            append_timeout: timeout,
            ..small_engine_config(1)
        },
        &storages,
    ));
    stick_shard_0(&engine, &storages[0]);

    let first = {
        let engine = engine.clone();
        std::thread::spawn(move || engine.append_blocking(batch(1), Durability::Memory))
    };
    std::thread::sleep(Duration::from_millis(100));
    let called = Instant::now();
    let second = engine.append_blocking(batch(2), Durability::Memory);
    let took = called.elapsed();
    let first = first.join().expect("first append thread");
    storages[0].stall_syncs(false);

    for (which, result) in [("first", &first), ("second", &second)] {
        assert!(
            matches!(result, Err(AppendError::ResourceExhausted { .. })),
            "{which}: {result:?}"
        );
    }
    assert!(
        took < timeout + Duration::from_secs(1),
        "the queued append failed {took:?} after it was called (timeout {timeout:?}): \
         its time in the queue was not counted"
    );
}
