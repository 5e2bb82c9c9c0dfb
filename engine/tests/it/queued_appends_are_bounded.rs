//! The commands queued for a shard are bounded in bytes (docs/design.md
//! 2.11): while a shard is stuck (here: its disk hangs and it waits for room),
//! further appends are refused at once with `QueueFull`, nothing of them
//! appended, instead of piling up in its command queue without limit.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{AppendError, Durability, EngineConfig};

#[test]
fn appends_past_the_queue_bound_are_refused_whole() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let engine = mem_engine(
        EngineConfig {
            max_queued_bytes: 64 << 10,
            ..small_engine_config(1)
        },
        &storages,
    );
    stick_shard_0(&engine, &storages[0]);
    let committed = engine.shard(0).watermarks.committed_next();

    // Each of these is sent (or refused) at its first poll; the shard is
    // stuck on the first, waiting for room that the hung disk never makes.
    let mut waiting = Vec::new();
    let mut refused = None;
    for k in 0..20u64 {
        let batch = (0..2).map(|j| big_event(1000 + 2 * k + j)).collect();
        let mut append = Box::pin(engine.append(batch, Durability::Memory));
        match futures_lite::future::block_on(futures_lite::future::poll_once(&mut append)) {
            None => waiting.push(append),
            Some(Err(e @ AppendError::QueueFull { .. })) => {
                refused = Some((k, e));
                break;
            }
            Some(other) => panic!("append {k}: {other:?}"),
        }
    }
    let queued = engine.shard(0).queued_bytes();
    // Release the disk before any assertion, so a failure cannot hang the
    // engine's shutdown on the stuck shard.
    drop(waiting);
    storages[0].stall_syncs(false);
    let (k, e) = refused.expect("the queue never refused an append");
    assert!(k >= 2, "refused too early, at append {k}: {e}");
    assert!(queued <= (64 << 10) + (20 << 10), "queued {queued} bytes");
    assert!(e.to_string().contains("max_queued_bytes"), "{e}");

    // The callers gave up: the shard drops their commands and the queue empties.
    futures_lite::future::block_on(engine.flush()).unwrap();
    wait_until(Duration::from_secs(10), "the queue to empty", || {
        engine.shard(0).queued_bytes() == 0
    });
    assert_eq!(
        engine.shard(0).watermarks.committed_next(),
        committed,
        "nothing queued was applied"
    );
    engine.shutdown().unwrap();
}
