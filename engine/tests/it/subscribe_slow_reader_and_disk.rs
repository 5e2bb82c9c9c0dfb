//! A slow subscriber pushed off the ring by a write burst continues from disk
//! and misses nothing; and subscriptions over real O_DIRECT segment files
//! (read through memory mappings) see exactly what was appended, before and
//! after a restart.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Engine, EngineConfig, Start, SubscribeRequest};

#[test]
fn a_subscriber_pushed_off_the_ring_continues_from_disk() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let config = EngineConfig {
        ring_bytes: 480 << 10,
        ..small_engine_config(2)
    };
    let engine = mem_engine(config, &storages);
    let mut all = Vec::new();
    for i in 0..20u64 {
        all.extend(append_all(&engine, vec![event(&format!("/s{}", i % 2), i)]));
    }
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    let mut got = take(&mut sub, 10);
    // A burst far larger than the ring while the subscriber sleeps.
    for i in 0..300u64 {
        let mut e = event(&format!("/s{}", i % 2), 100 + i);
        e.payload = {
            let mut p = e.payload.to_vec();
            p.resize(12 << 10, b'b');
            p.into()
        };
        all.extend(append_all(&engine, vec![e]));
    }
    futures_lite::future::block_on(engine.flush()).unwrap();
    let cursor = sub.cursor();
    assert!(
        (0..2).all(|s| engine.shard(s).watermarks.snapshot().evicted_below > cursor.next_offset(s)),
        "the burst evicted what the subscriber had not read yet"
    );
    let all = merged_order(all);
    got.extend(take(&mut sub, all.len() - 10));
    assert_stream(&got, &all, "slow subscriber");
    engine.shutdown().unwrap();
}

#[test]
fn o_direct_segments_are_read_through_mappings_before_and_after_restart() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = EngineConfig {
        data_dir: dir.path().to_path_buf(),
        ring_bytes: 480 << 10,
        ..small_engine_config(2)
    };
    let engine = Engine::open(config.clone()).unwrap();
    let mut all = Vec::new();
    for i in 0..400u64 {
        let mut e = event(&format!("/o{}", i % 5), i);
        e.payload = {
            let mut p = e.payload.to_vec();
            p.resize(if i % 3 == 0 { 9000 } else { 200 }, b'o');
            p.into()
        };
        all.extend(append_all(&engine, vec![e]));
    }
    futures_lite::future::block_on(engine.flush()).unwrap();
    let all = merged_order(all);
    assert!(
        (0..2).any(|s| engine.shard(s).watermarks.snapshot().evicted_below > 0),
        "some events are only on disk"
    );
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    assert_stream(&take(&mut sub, all.len()), &all, "before restart");
    let cursor = sub.cursor();
    drop(sub);
    engine.shutdown().unwrap();

    let engine = Engine::open(config).unwrap();
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    assert_stream(&take(&mut sub, all.len()), &all, "after restart");
    // The old cursor resumes exactly at the end, then sees new events.
    let mut resumed = engine
        .subscribe(SubscribeRequest::from(Start::Cursor(cursor)))
        .unwrap();
    let more = append_all(&engine, vec![event("/o1", 9999)]);
    assert_stream(&take(&mut resumed, 1), &more, "resumed after restart");
    assert!(matches!(
        resumed.next_blocking(Duration::from_millis(30)).unwrap(),
        ringfeed_engine::Step::Pending
    ));
    engine.shutdown().unwrap();
}
