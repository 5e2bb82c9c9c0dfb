//! Backlog then live, exactly once: events spread over segments, sealed
//! windows and the active window (small windows, a small ring, single-event
//! windows, adjacent stamps at every boundary) are delivered once each, in
//! merged order, to subscribers starting at many cursors and since_ns values;
//! and live appends made afterwards follow without a gap or a repeat.

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Start, SubscribeRequest};

#[test]
fn every_start_gets_exactly_its_suffix_then_live_events() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let config = ringfeed_engine::EngineConfig {
        ring_bytes: 480 << 10,
        ..small_engine_config(2)
    };
    let engine = mem_engine(config, &storages);
    let mut all = Vec::new();
    let mut id = 0;
    // Big events fill windows in a few; single events in their own batch
    // make windows whose records are stamped 1 ns apart across the boundary.
    for round in 0..150u64 {
        let size = if round % 4 == 0 { 15 << 10 } else { 300 };
        let batch: Vec<_> = (0..(1 + round % 5))
            .map(|_| {
                id += 1;
                let mut e = event(&format!("/d{}", id % 3), id);
                let mut payload = e.payload.to_vec();
                payload.resize(size, b'x');
                e.payload = payload.into();
                e
            })
            .collect();
        all.extend(append_all(&engine, batch));
        if round % 10 == 9 {
            futures_lite::future::block_on(engine.flush()).unwrap();
        }
    }
    // Make sure some of it is only on disk and some only in memory.
    wait_until(std::time::Duration::from_secs(10), "eviction", || {
        (0..2).any(|s| engine.shard(s).watermarks.snapshot().evicted_below > 0)
    });
    let stream = merged_order(all.clone());
    let total = stream.len();

    for k in (0..=total).step_by(7).chain([1, total - 1]) {
        let cursor = cursor_after(&stream, k, &[0, 0]);
        let mut sub = engine
            .subscribe(SubscribeRequest::from(Start::Cursor(cursor)))
            .unwrap();
        assert_stream(
            &take(&mut sub, total - k),
            &stream[k..],
            &format!("cursor at {k}"),
        );
    }
    // since_ns at every event's own stamp, and 1 ns after it.
    for (k, e) in stream.iter().enumerate().step_by(3) {
        for (since, want_from) in [(e.2, k), (e.2 + 1, k + 1)] {
            let want: Vec<Seen> = stream.iter().filter(|x| x.2 >= since).cloned().collect();
            let mut sub = engine
                .subscribe(SubscribeRequest::from(Start::SinceNs(since)))
                .unwrap();
            let got = take(&mut sub, want.len());
            assert_stream(&got, &want, &format!("since {since} (event {want_from})"));
        }
    }

    // Backlog, then live: a subscriber from the beginning keeps going.
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    assert_stream(&take(&mut sub, total), &stream, "beginning");
    let now_sub_start = engine
        .subscribe(SubscribeRequest::from(Start::Now))
        .unwrap();
    let mut live = Vec::new();
    for i in 0..50u64 {
        live.extend(append_all(
            &engine,
            vec![event(&format!("/live{}", i % 4), 10_000 + i)],
        ));
    }
    let live = merged_order(live);
    assert_stream(&take(&mut sub, live.len()), &live, "live after backlog");
    let mut now_sub = now_sub_start;
    assert_stream(&take(&mut now_sub, live.len()), &live, "from now");
    assert!(
        matches!(
            sub.next_blocking(std::time::Duration::from_millis(50))
                .unwrap(),
            ringfeed_engine::Step::Pending
        ),
        "nothing beyond what was appended"
    );
    engine.shutdown().unwrap();
}
