//! A failed write or sync latches the shard: the failing durable append is
//! refused, and so is every later append, durable or not, until reopened. A
//! durable-only subscriber waiting on events the latched shard will never
//! flush gets a typed error instead of waiting silently forever.

mod common;

use common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use std::time::Duration;

use ringfeed_engine::{AppendError, Durability, Start, Step, SubscribeError, SubscribeRequest};

fn latches_after(faults: Faults) {
    let storage = MemStorage::new();
    let engine = mem_engine(small_engine_config(1), &[storage.clone()]);
    engine
        .append_blocking(vec![event("/a", 0)], Durability::Durable)
        .unwrap();
    storage.set_faults(faults);
    let failed = engine.append_blocking(vec![event("/a", 1)], Durability::Durable);
    assert!(
        matches!(failed, Err(AppendError::Latched { shard: 0, .. })),
        "got {failed:?}"
    );
    assert!(engine.shard(0).latched().is_some());
    for durability in [Durability::Memory, Durability::Durable] {
        let later = engine.append_blocking(vec![event("/a", 2)], durability);
        assert!(
            matches!(later, Err(AppendError::Latched { .. })),
            "{durability:?} append after the failure: {later:?}"
        );
    }
    drop(engine);
    storage.process_crash();
    let engine = mem_engine(small_engine_config(1), &[storage.clone()]);
    engine
        .append_blocking(vec![event("/a", 3)], Durability::Durable)
        .expect("a reopened engine works");
}

#[test]
fn failed_write_latches() {
    let _watchdog = ringfeed_watchdog::arm();
    latches_after(Faults {
        fail_write: Some(0),
        ..Faults::default()
    });
}

#[test]
fn failed_sync_latches() {
    let _watchdog = ringfeed_watchdog::arm();
    latches_after(Faults {
        fail_sync: Some(0),
        ..Faults::default()
    });
}

#[test]
fn a_durable_only_subscriber_is_told_when_a_latch_stops_the_flushes() {
    let _watchdog = ringfeed_watchdog::arm();
    let storage = MemStorage::new();
    let config = ringfeed_engine::EngineConfig {
        flush_interval: Duration::from_secs(3600),
        ..small_engine_config(1)
    };
    let engine = mem_engine(config, &[storage.clone()]);
    engine
        .append_blocking(vec![event("/a", 0)], Durability::Durable)
        .unwrap();
    let mut durable = engine
        .subscribe(SubscribeRequest {
            durable_only: true,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    assert!(matches!(
        durable.next_blocking(Duration::from_secs(5)).unwrap(),
        Step::Event(_)
    ));
    // Memory-acked, unflushed: the durable-only subscriber waits for a flush.
    engine
        .append_blocking(vec![event("/a", 1)], Durability::Memory)
        .unwrap();
    assert!(matches!(
        durable.next_blocking(Duration::from_millis(50)).unwrap(),
        Step::Pending
    ));
    storage.set_faults(Faults {
        fail_write: Some(0),
        ..Faults::default()
    });
    let failed = engine.append_blocking(vec![event("/a", 2)], Durability::Durable);
    assert!(
        matches!(failed, Err(AppendError::Latched { .. })),
        "{failed:?}"
    );
    match durable.next_blocking(Duration::from_secs(5)) {
        Err(SubscribeError::Latched {
            shard: 0,
            durable_end: 1,
            ..
        }) => {}
        other => panic!("expected Latched at 1, got {other:?}"),
    }
}
