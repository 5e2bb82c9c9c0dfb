//! A failed write or sync latches the shard: the failing durable append is
//! refused, and so is every later append, durable or not, until reopened.

mod common;

use common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use ringfeed_engine::{AppendError, Durability};

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
