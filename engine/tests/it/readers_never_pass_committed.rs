//! A reader never hands out a record before the committed watermark covers
//! it. A batch that fills several windows seals them while it is staged, and
//! sealing makes a window's records readable; the committed watermark is
//! published only after the whole batch. Readers used to hand out the sealed
//! windows' records in that gap, so a cursor taken from them was, for a
//! moment, "beyond the last event" and refused.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Durability, EngineConfig, Limits, Start, Step, SubscribeRequest};

#[test]
fn no_record_is_delivered_before_it_is_committed() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new()];
    let config = EngineConfig {
        window_bytes: 4096,
        ring_bytes: 1 << 20,
        max_unflushed_bytes: 256 << 10,
        segment_bytes: 1 << 20,
        limits: Limits {
            max_event_bytes: 1024,
            ..Limits::default()
        },
        ..small_engine_config(1)
    };
    let engine = Arc::new(mem_engine(config, &storages));
    let done = Arc::new(AtomicBool::new(false));
    let producer = {
        let (engine, done) = (engine.clone(), done.clone());
        std::thread::spawn(move || {
            for b in 0..1500u64 {
                // About 40 KB: ten windows per batch.
                let batch = (0..100)
                    .map(|i| {
                        let mut e = event("/d", b * 100 + i);
                        e.payload = vec![b'p'; 300].into();
                        e
                    })
                    .collect();
                engine.append_blocking(batch, Durability::Memory).unwrap();
            }
            done.store(true, Ordering::Release);
        })
    };
    let mut sub = engine
        .subscribe(SubscribeRequest::from(Start::Beginning))
        .unwrap();
    let mut delivered = 0u64;
    while delivered < 150_000 {
        match sub.next_blocking(Duration::from_secs(10)).unwrap() {
            Step::Event(d) => {
                let committed = engine.shard(0).watermarks.committed_next();
                assert!(
                    d.offset < committed,
                    "offset {} delivered while committed_next was {committed}",
                    d.offset
                );
                assert_eq!(d.offset, delivered);
                delivered += 1;
            }
            Step::Pending => assert!(!done.load(Ordering::Acquire), "stalled at {delivered}"),
            Step::End => unreachable!(),
        }
    }
    producer.join().unwrap();
}
