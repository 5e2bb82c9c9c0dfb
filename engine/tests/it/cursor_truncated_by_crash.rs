//! Offsets are never silently reused (docs/design.md 2.6): a subscriber
//! that saw memory-acknowledged events which a crash then destroyed resumes
//! its cursor into a typed truncation error naming the surviving end, not
//! into the new events that took those offsets, and not into a false "not
//! made by this data dir". Resuming explicitly from the surviving end works;
//! a cursor within what survived stays valid; a durable-only subscriber never
//! sees what the crash destroyed; a clean restart keeps every cursor valid.
//!
//! Before generations, the resumed cursor silently skipped the new events
//! (they had the offsets the lost ones had), or was refused as foreign.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::{Faults, MemStorage};
use ringfeed_engine::{
    Cursor, CursorError, Durability, EngineConfig, Start, Step, SubscribeError, SubscribeRequest,
    Subscription,
};

fn config() -> EngineConfig {
    EngineConfig {
        // Memory-acked events stay unflushed until the test flushes.
        flush_interval: Duration::from_secs(3600),
        ..small_engine_config(1)
    }
}

/// Every event available now (until the subscription has nothing more).
fn drain(sub: &mut Subscription) -> Vec<Seen> {
    let mut got = Vec::new();
    loop {
        match sub.next_blocking(Duration::from_millis(50)).unwrap() {
            Step::Event(d) => got.push((d.shard, d.offset, d.ts, d.payload().to_vec())),
            Step::Pending | Step::End => return got,
        }
    }
}

fn events(ids: std::ops::Range<u64>) -> Vec<ringfeed_engine::NewEvent> {
    ids.map(|id| event("/d", id)).collect()
}

#[test]
fn a_cursor_past_what_a_crash_kept_is_refused_with_the_surviving_end() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let engine = mem_engine(config(), &storages);
    engine
        .append_blocking(events(0..10), Durability::Durable)
        .unwrap();
    engine
        .append_blocking(events(10..15), Durability::Memory)
        .unwrap();

    let mut live = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    assert_eq!(
        drain(&mut live).len(),
        15,
        "memory-acked events are visible"
    );
    let seen_all = live.cursor();
    let mut durable = engine
        .subscribe(SubscribeRequest {
            durable_only: true,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    let durable_seen = drain(&mut durable);
    assert_eq!(
        durable_seen.iter().map(|e| e.1).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>(),
        "durable-only delivers only what is flushed"
    );
    let durable_cursor = durable.cursor();
    let mut within = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    let _ = take(&mut within, 8);
    let within_cursor = within.cursor();
    drop((live, durable, within));

    // Crash: no more I/O reaches the storage, then power loss drops the unsynced.
    storages[0].set_faults(Faults {
        halt_after_ops: Some(0),
        ..Faults::default()
    });
    drop(engine);
    storages[0].power_loss();
    storages[0].set_faults(Faults::default());

    let engine = mem_engine(config(), &storages);
    assert_eq!(
        engine.shard(0).watermarks.committed_next(),
        10,
        "the crash kept 0..10"
    );
    // New events take the offsets the lost ones had, and more: without
    // generations the old cursor (at 15) would now resume silently at 15.
    engine
        .append_blocking(events(100..107), Durability::Durable)
        .unwrap();

    let err = engine
        .subscribe(SubscribeRequest::from(Start::Cursor(seen_all.clone())))
        .err()
        .expect("a truncated cursor is refused");
    match &err {
        SubscribeError::Truncated {
            shard: 0,
            surviving_end: 10,
            next: 15,
            ..
        } => {}
        other => panic!("expected Truncated at 10 for a cursor at 15, got {other:?}"),
    }
    let message = err.to_string();
    for part in [
        "truncated by a crash",
        "passed 5 event(s)",
        "last surviving is 9",
    ] {
        assert!(message.contains(part), "{message:?} lacks {part:?}");
    }

    // Explicitly resumed, the subscriber continues at the surviving end:
    // the new events, which now hold offsets 10..17.
    let mut resumed = engine
        .subscribe(SubscribeRequest {
            resume_truncated: true,
            ..SubscribeRequest::from(Start::Cursor(seen_all))
        })
        .unwrap();
    let got = drain(&mut resumed);
    assert_eq!(
        got.iter().map(|e| (e.1, e.3.clone())).collect::<Vec<_>>(),
        (100..107)
            .enumerate()
            .map(|(i, id)| (10 + i as u64, format!("payload-{id}").into_bytes()))
            .collect::<Vec<_>>()
    );

    // Cursors inside what survived, and the durable-only one, stay valid.
    for (cursor, first) in [(within_cursor, 8u64), (durable_cursor, 10)] {
        let mut sub = engine
            .subscribe(SubscribeRequest::from(Start::Cursor(cursor)))
            .unwrap();
        let got = drain(&mut sub);
        assert_eq!(got.first().map(|e| e.1), Some(first));
        assert_eq!(got.last().map(|e| e.1), Some(16));
    }

    // A cursor of a generation this shard never ran is foreign; a version-1
    // cursor (no generations) past the end is refused as before, saying why
    // it cannot tell.
    let foreign = Cursor::with_generations(vec![3], vec![99]);
    assert!(matches!(
        engine
            .subscribe(SubscribeRequest::from(Start::Cursor(foreign)))
            .err(),
        Some(SubscribeError::Cursor(CursorError::UnknownGeneration {
            generation: 99,
            ..
        }))
    ));
    let legacy = Cursor::new(vec![18]);
    assert!(matches!(
        engine
            .subscribe(SubscribeRequest::from(Start::Cursor(legacy)))
            .err(),
        Some(SubscribeError::Cursor(CursorError::Beyond {
            legacy: true,
            ..
        }))
    ));

    // A clean restart truncates nothing: the latest cursor still resumes.
    let latest = resumed.cursor();
    drop(resumed);
    engine.shutdown().unwrap();
    let engine = mem_engine(config(), &storages);
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Cursor(latest)))
        .unwrap();
    engine
        .append_blocking(events(200..201), Durability::Durable)
        .unwrap();
    assert_eq!(take(&mut sub, 1)[0].1, 17);
    engine.shutdown().unwrap();
}
