//! until_ns ends a subscription: on an empty log, exactly at an event's stamp
//! (that event included), and between events. A cursor below the retained
//! range is refused with the typed error naming the oldest retained position.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Cursor, Ordering, RetentionPolicy, Start, SubscribeError, SubscribeRequest};

#[test]
fn until_ends_on_an_empty_log_and_exactly_at_an_event() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    let now = ringfeed_engine::clock::Clock::now_ns(&ringfeed_engine::clock::SystemClock);
    for ordering in [Ordering::Merged, Ordering::PerShard] {
        let mut sub = engine
            .subscribe(SubscribeRequest {
                until_ns: Some(now),
                ordering,
                ..SubscribeRequest::from(Start::Beginning)
            })
            .unwrap();
        assert!(take_to_end(&mut sub).is_empty(), "empty log, {ordering:?}");
    }
    let mut all = Vec::new();
    for i in 0..40u64 {
        all.extend(append_all(&engine, vec![event(&format!("/u{}", i % 3), i)]));
    }
    let stream = merged_order(all);
    for ordering in [Ordering::Merged, Ordering::PerShard] {
        for k in [0, 1, 17, 39] {
            let until = stream[k].2;
            let mut sub = engine
                .subscribe(SubscribeRequest {
                    until_ns: Some(until),
                    ordering,
                    ..SubscribeRequest::from(Start::Beginning)
                })
                .unwrap();
            let mut got = take_to_end(&mut sub);
            got.sort_by_key(|e| (e.2, e.0, e.1));
            assert_stream(
                &got,
                &stream[..=k],
                &format!("until event {k}, {ordering:?}"),
            );
            // Between two events, and after the last one (the log then goes quiet).
            let mut sub = engine
                .subscribe(SubscribeRequest {
                    until_ns: Some(until + 1),
                    ordering,
                    ..SubscribeRequest::from(Start::SinceNs(until))
                })
                .unwrap();
            assert_eq!(
                take_to_end(&mut sub).len(),
                1,
                "one event in [until, until+1]"
            );
        }
    }
    engine.shutdown().unwrap();
}

#[test]
fn a_cursor_below_retention_names_the_oldest_retained_position() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let config = ringfeed_engine::EngineConfig {
        ring_bytes: 480 << 10,
        retention: RetentionPolicy {
            max_age: None,
            max_bytes: Some(2 << 20),
            ..Default::default()
        },
        retention_interval: Duration::from_millis(10),
        ..small_engine_config(1)
    };
    let engine = mem_engine(config, &storages);
    let mut sub_at_zero = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    for i in 0..400u64 {
        let mut e = event("/big", i);
        e.payload = {
            let mut p = e.payload.to_vec();
            p.resize(15 << 10, b'r');
            p.into()
        };
        append_all(&engine, vec![e]);
    }
    futures_lite::future::block_on(engine.flush()).unwrap();
    // Wait for a retention pass that saw the whole log, so the retained range
    // no longer moves. (Waiting for `retained_from > 0` alone could stop at a
    // pass made during the appends; the next pass then pruned under the
    // "from the beginning" subscriber below: BelowRetention, 1 CI run in 3.)
    let stats = engine.shard(0).stats();
    let passes = stats
        .retention_passes
        .load(std::sync::atomic::Ordering::Relaxed);
    wait_until(
        Duration::from_secs(10),
        "a retention pass after the flush",
        || {
            stats
                .retention_passes
                .load(std::sync::atomic::Ordering::Relaxed)
                > passes
        },
    );
    assert!(engine.shard(0).watermarks.snapshot().retained_from > 0);
    let retained = engine.shard(0).watermarks.snapshot().retained_from;
    let err = engine
        .subscribe(SubscribeRequest::from(Start::Cursor(Cursor::new(vec![0]))))
        .err()
        .expect("refused");
    match &err {
        SubscribeError::BelowRetention {
            shard: 0,
            offset: 0,
            retained_from,
            retained_ts: Some(ts),
        } => {
            assert_eq!(*retained_from, retained);
            assert!(*ts > 0);
        }
        other => panic!("wrong error: {other:?}"),
    }
    assert!(
        err.to_string().contains(&format!("offset {retained}")),
        "{err}"
    );
    // A subscription already running is told too, never silently skipped ahead.
    let got = sub_at_zero.next_blocking(Duration::from_secs(5));
    assert!(
        matches!(got, Err(SubscribeError::BelowRetention { .. })),
        "a reader left below retention gets the error, got {got:?}"
    );
    // From the beginning means the oldest retained event.
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    let first = take(&mut sub, 1);
    assert_eq!(first[0].1, retained);
    // A malformed or foreign cursor is refused before anything is read.
    for (cursor, what) in [
        (Cursor::new(vec![0, 0]), "shard"),
        (Cursor::new(vec![u64::MAX]), "beyond"),
    ] {
        let err = engine
            .subscribe(SubscribeRequest::from(Start::Cursor(cursor)))
            .err()
            .expect("refused");
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
    engine.shutdown().unwrap();
}
