//! A backward clock step (NTP, or a restart on a host whose clock is behind
//! the log) must not stall merged subscribers. Stamps keep increasing past
//! the step (`max(now, last + 1)`), so a busy shard's stamps run ahead of the
//! wall clock; a quiet shard used to claim only `max(now, its last stamp)`,
//! so a merge waiting on it stood still for the length of the step (here:
//! forever, the clock never moves again). Now a quiet shard claims any stamp
//! another shard already made visible at once.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::clock::ManualClock;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Durability, NewEvent, Start, Step, SubscribeRequest};

const SECOND: i64 = 1_000_000_000;

#[test]
fn a_clock_stepped_back_30s_does_not_stall_the_merge() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let clock = ManualClock::new(1_000 * SECOND);
    let engine = mem_engine_with_clock(small_engine_config(2), &storages, Arc::new(clock.clone()));
    // One directory per shard.
    let dir = |shard: u32| {
        (0..)
            .map(|i| format!("/d{i}"))
            .find(|d| engine.shard_for(d) == shard)
            .unwrap()
    };
    let (busy, quiet) = (dir(0), dir(1));
    let events = |d: &str, ids: std::ops::Range<u64>| -> Vec<NewEvent> {
        ids.map(|i| event(d, i)).collect()
    };
    engine
        .append_blocking(events(&busy, 0..3), Durability::Memory)
        .unwrap();
    engine
        .append_blocking(events(&quiet, 3..4), Durability::Memory)
        .unwrap();
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Now))
        .unwrap();

    // The clock steps back 30 s and stays there.
    clock.set(970 * SECOND);
    let appended = engine
        .append_blocking(events(&busy, 10..15), Durability::Memory)
        .unwrap();
    assert!(
        appended[0].ts > 1_000 * SECOND,
        "stamps keep increasing past the step"
    );
    for want in &appended {
        match sub.next_blocking(Duration::from_secs(5)).unwrap() {
            Step::Event(got) => assert_eq!((got.shard, got.offset), (want.shard, want.offset)),
            other => panic!(
                "the merge stalled behind the quiet shard after a clock step back: {other:?} \
                 instead of {want:?}"
            ),
        }
    }
    // The quiet shard's next event is stamped above what it claimed, so the
    // merged order stays (ts, shard, offset).
    let late = engine
        .append_blocking(events(&quiet, 20..21), Durability::Memory)
        .unwrap();
    assert!(late[0].ts > appended.last().unwrap().ts);
    match sub.next_blocking(Duration::from_secs(5)).unwrap() {
        Step::Event(got) => assert_eq!((got.shard, got.offset), (late[0].shard, late[0].offset)),
        other => panic!("expected the quiet shard's event, got {other:?}"),
    }
    engine.shutdown().unwrap();
}
