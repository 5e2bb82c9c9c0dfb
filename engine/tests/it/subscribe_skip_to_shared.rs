//! Encode once for all rests on this: two subscriptions of one shape deliver
//! the same events between two positions, so one that stands at or before
//! another's starting point can skip to where the other ended and miss or
//! repeat nothing. Filtered runs, both shards, several seeds.

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Filter, Start, SubscribeRequest, Subscription};

fn request(until: i64) -> SubscribeRequest {
    SubscribeRequest {
        filter: Filter::prefix("/a"),
        until_ns: Some(until),
        ..SubscribeRequest::from(Start::Beginning)
    }
}

#[test]
fn a_subscription_skipping_to_anothers_progress_delivers_exactly_the_same_events() {
    for seed in seeds(6) {
        let mut rng = Rng::new(seed);
        let storages = vec![MemStorage::new(), MemStorage::new()];
        let engine = mem_engine(small_engine_config(2), &storages);
        let events = (0..600)
            .map(|i| {
                let top = if rng.below(3) == 0 { "/b" } else { "/a" };
                event(&format!("{top}/d{}", rng.below(6)), i)
            })
            .collect::<Vec<_>>();
        let under_a: Vec<Vec<u8>> = events
            .iter()
            .filter(|e| e.directory.starts_with("/a/"))
            .map(|e| e.payload.to_vec())
            .collect();
        let mut appended = Vec::new();
        for batch in events.chunks(7) {
            appended.extend(append_all(&engine, batch.to_vec()));
        }
        let until = appended.iter().map(|e| e.2).max().unwrap();
        let want = merged_order(
            appended
                .into_iter()
                .filter(|e| under_a.contains(&e.3))
                .collect(),
        );
        assert!(
            want.iter().any(|e| e.0 == 0) && want.iter().any(|e| e.0 == 1),
            "seed {seed}: both shards deliver"
        );
        let mut leader = engine.subscribe(request(until)).unwrap();
        let mut follower = engine.subscribe(request(until)).unwrap();
        let mut led = Vec::new();
        let mut followed = Vec::new();
        loop {
            let from = leader.progress();
            assert_eq!(
                follower.offsets().collect::<Vec<_>>(),
                from.offsets().collect::<Vec<_>>(),
                "seed {seed}: both stand at one position before each step"
            );
            let chunk = take(&mut leader, 1 + rng.below(40) as usize);
            if chunk.is_empty() {
                assert!(take(&mut follower, 1).is_empty(), "seed {seed}: both end");
                break;
            }
            let to = leader.progress();
            match rng.below(3) {
                // Takes its own (the response was not shared): it may stop
                // short of filtered-out records the leader walked over.
                0 => {
                    followed.extend(take(&mut follower, chunk.len()));
                    assert!(follower.skip_to(&to).unwrap(), "seed {seed}");
                }
                // Took the first event itself, then was handed the rest.
                1 => {
                    followed.extend(take(&mut follower, 1));
                    assert!(follower.skip_to(&to).unwrap(), "seed {seed}");
                    followed.extend(chunk[1..].iter().cloned());
                }
                // Handed the whole response.
                _ => {
                    assert!(follower.skip_to(&to).unwrap(), "seed {seed}");
                    followed.extend(chunk.iter().cloned());
                }
            }
            assert_eq!(follower.cursor(), leader.cursor(), "seed {seed}");
            led.extend(chunk);
        }
        assert_stream(&led, &want, &format!("seed {seed}: the leader"));
        assert_stream(&followed, &want, &format!("seed {seed}: the follower"));
    }
}

#[test]
fn a_subscription_past_the_target_does_not_move() {
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    let appended = append_all(&engine, (0..50).map(|i| event("/a", i)).collect());
    let until = appended.iter().map(|e| e.2).max().unwrap();
    let mut behind: Subscription = engine.subscribe(request(until)).unwrap();
    take(&mut behind, 10);
    let target = behind.progress();
    let mut ahead = engine.subscribe(request(until)).unwrap();
    take(&mut ahead, 20);
    let cursor = ahead.cursor();
    assert!(!ahead.skip_to(&target).unwrap());
    assert_eq!(ahead.cursor(), cursor, "refused: nothing changed");
    let rest = take_to_end(&mut ahead);
    assert_eq!(rest.len(), 30, "and it goes on from where it stood");
}
