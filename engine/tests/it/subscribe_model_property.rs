//! Property: random appends across shards (random batch sizes and event
//! sizes), random flush and eviction timing (small ring, explicit flushes),
//! and subscribers that pause, drop and resume from their cursor at random
//! points, in both orderings, with and without a filter. Every subscriber's
//! delivered stream equals the model's: the appended events that match, in
//! `(ts, shard, offset)` order (merged) or in per-shard order (per-shard).
//! Two followers deliver durable events only: each of their events is below
//! its shard's flushed watermark when it is delivered, and their streams
//! still equal the model's.
//! Seeds come from RINGFEED_SEED (replay) or a fixed set.

use std::time::Duration;

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Filter, Ordering, Start, Step, SubscribeRequest};

struct Follower {
    ordering: Ordering,
    durable_only: bool,
    filter: Filter,
    sub: Option<ringfeed_engine::Subscription>,
    cursor: Option<ringfeed_engine::Cursor>,
    got: Vec<Seen>,
}

fn matches(filter: &Filter, e: &Seen) -> bool {
    // The model of the one filter used here: directories under /p1.
    filter.prefixes.is_empty() || String::from_utf8_lossy(&e.3).starts_with("/p1")
}

#[test]
fn delivered_streams_equal_the_model() {
    let _watchdog = ringfeed_testkit::arm();
    for seed in seeds(6) {
        let mut rng = Rng::new(seed);
        let shards = 1 + rng.below(3) as u32;
        let storages: Vec<MemStorage> = (0..shards).map(|_| MemStorage::new()).collect();
        let config = ringfeed_engine::EngineConfig {
            ring_bytes: 480 << 10,
            ..small_engine_config(shards)
        };
        let engine = mem_engine(config, &storages);
        let mut followers: Vec<Follower> = (0..6)
            .map(|i| Follower {
                durable_only: i >= 4,
                ordering: if i % 2 == 0 {
                    Ordering::Merged
                } else {
                    Ordering::PerShard
                },
                filter: if !(2..4).contains(&i) {
                    Filter::default()
                } else {
                    Filter::prefix("/p1")
                },
                sub: None,
                cursor: None,
                got: Vec::new(),
            })
            .collect();
        let mut appended: Vec<Seen> = Vec::new();
        let mut id = 0u64;
        for _step in 0..150 {
            match rng.below(10) {
                0..=5 => {
                    let batch: Vec<_> = (0..1 + rng.below(8))
                        .map(|_| {
                            id += 1;
                            let dir = format!("/p{}/d{}", rng.below(3), rng.below(5));
                            let mut e = event(&dir, id);
                            e.payload = format!("{dir}#{id}").into_bytes().into();
                            let max = if rng.below(8) == 0 { 14_000 } else { 400 };
                            e.payload = {
                                let mut p = e.payload.to_vec();
                                p.resize(20 + rng.below(max) as usize, b'.');
                                p.into()
                            };
                            e
                        })
                        .collect();
                    appended.extend(append_all(&engine, batch));
                }
                6 => futures_lite::future::block_on(engine.flush()).unwrap(),
                _ => {
                    let f = &mut followers[rng.below(6) as usize];
                    if f.sub.is_none() {
                        let start = f.cursor.clone().map_or(Start::Beginning, Start::Cursor);
                        f.sub = Some(
                            engine
                                .subscribe(SubscribeRequest {
                                    start,
                                    filter: f.filter.clone(),
                                    until_ns: None,
                                    ordering: f.ordering,
                                    durable_only: f.durable_only,
                                    resume_truncated: false,
                                })
                                .unwrap(),
                        );
                    }
                    let sub = f.sub.as_mut().unwrap();
                    for _ in 0..rng.below(60) {
                        match sub.next_blocking(Duration::from_millis(2)).unwrap() {
                            Step::Event(d) => {
                                if f.durable_only {
                                    let flushed = engine.shard(d.shard).watermarks.flushed_next();
                                    assert!(
                                        d.offset < flushed,
                                        "seed {seed:#x}: durable-only delivered shard {} offset {} \
                                         with flushed at {flushed}",
                                        d.shard,
                                        d.offset
                                    );
                                }
                                f.got.push((d.shard, d.offset, d.ts, d.payload().to_vec()))
                            }
                            Step::Pending => break,
                            Step::End => unreachable!("no until_ns"),
                        }
                    }
                    f.cursor = Some(sub.cursor());
                    if rng.below(3) == 0 {
                        f.sub = None; // disconnect; resume later from the cursor
                    }
                }
            }
        }
        // Durable-only followers see the rest once it is durable.
        futures_lite::future::block_on(engine.flush()).unwrap();
        for (i, f) in followers.iter_mut().enumerate() {
            let start = f.cursor.clone().map_or(Start::Beginning, Start::Cursor);
            let mut sub = engine
                .subscribe(SubscribeRequest {
                    start,
                    filter: f.filter.clone(),
                    until_ns: None,
                    ordering: f.ordering,
                    durable_only: f.durable_only,
                    resume_truncated: false,
                })
                .unwrap();
            let want: Vec<Seen> = merged_order(appended.clone())
                .into_iter()
                .filter(|e| matches(&f.filter, e))
                .collect();
            let rest = want.len() - f.got.len();
            f.got.extend(take(&mut sub, rest));
            let what = format!(
                "seed {seed:#x} follower {i} ({:?}, durable only {})",
                f.ordering, f.durable_only
            );
            match f.ordering {
                Ordering::Merged => assert_stream(&f.got, &want, &what),
                Ordering::PerShard => {
                    // Each shard in order, every event once.
                    for shard in 0..shards {
                        let got: Vec<Seen> =
                            f.got.iter().filter(|e| e.0 == shard).cloned().collect();
                        let want: Vec<Seen> =
                            want.iter().filter(|e| e.0 == shard).cloned().collect();
                        assert_stream(&got, &want, &format!("{what} shard {shard}"));
                    }
                    assert_eq!(f.got.len(), want.len(), "{what}");
                }
            }
        }
        engine.shutdown().unwrap();
    }
}
