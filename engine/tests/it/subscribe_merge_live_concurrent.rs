//! The merge under concurrency: writer threads append to every shard while
//! merged subscribers follow live. Each delivered stream must be in strict
//! `(ts, shard, offset)` order and complete: an event may only be emitted once
//! every other shard has shown a later event or claimed past its stamp, so an
//! event appended on a quiet shard just after another shard's can never be
//! delivered out of order. The clock stands still, so each shard's stamps
//! advance only with its own appends and shards drift far apart in stamp:
//! a merge that emitted without waiting would be caught at once. At the end the
//! clock jumps ahead, and claims (not events) release what is left.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Start, SubscribeRequest};

#[test]
fn live_merged_streams_are_ordered_and_complete() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new(), MemStorage::new()];
    let clock = Arc::new(ringfeed_engine::clock::ManualClock::new(1_000));
    let engine = Arc::new(mem_engine_with_clock(
        small_engine_config(3),
        &storages,
        clock.clone(),
    ));
    let subs: Vec<_> = (0..3)
        .map(|_| {
            engine
                .subscribe(SubscribeRequest::from(Start::Now))
                .unwrap()
        })
        .collect();
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let engine = engine.clone();
            std::thread::spawn(move || {
                let mut rng = Rng::new(seeds(1)[0] ^ w);
                let mut appended = Vec::new();
                for i in 0..400u64 {
                    let id = w * 100_000 + i;
                    let dir = format!("/w{}", rng.below(9) * rng.below(3));
                    appended.extend(append_all(&engine, vec![event(&dir, id)]));
                    if rng.below(40) == 0 {
                        std::thread::sleep(Duration::from_millis(rng.below(15)));
                    }
                }
                appended
            })
        })
        .collect();
    let readers: Vec<_> = subs
        .into_iter()
        .map(|mut sub| std::thread::spawn(move || take(&mut sub, 800)))
        .collect();
    let mut appended = Vec::new();
    for w in writers {
        appended.extend(w.join().unwrap());
    }
    // Shards that got fewer events are behind in stamp: only claims past the
    // others' stamps release the merge now.
    clock.set(1_000_000_000_000);
    let want = merged_order(appended);
    for (i, r) in readers.into_iter().enumerate() {
        let got = r.join().unwrap();
        for pair in got.windows(2) {
            assert!(
                (pair[0].2, pair[0].0, pair[0].1) < (pair[1].2, pair[1].0, pair[1].1),
                "subscriber {i}: {:?} delivered before {:?}",
                (pair[0].0, pair[0].1, pair[0].2),
                (pair[1].0, pair[1].1, pair[1].2)
            );
        }
        assert_stream(&got, &want, &format!("subscriber {i}"));
    }
}
