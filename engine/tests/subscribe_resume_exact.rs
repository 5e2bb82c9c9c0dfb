//! Resume is exact: cutting a subscription after every event and resuming
//! from the cursor it reports yields exactly the rest of the stream; and the
//! merged order is the same on every replay, whatever the pause pattern.

mod common;

use common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Ordering, Start, SubscribeRequest};

#[test]
fn resuming_from_the_reported_cursor_yields_exactly_the_rest() {
    let _watchdog = ringfeed_watchdog::arm();
    let storages = vec![MemStorage::new(), MemStorage::new(), MemStorage::new()];
    let config = ringfeed_engine::EngineConfig {
        ring_bytes: 480 << 10,
        ..small_engine_config(3)
    };
    let engine = mem_engine(config, &storages);
    let mut all = Vec::new();
    for i in 0..240u64 {
        let mut e = event(&format!("/r{}", i % 5), i);
        e.payload = {
            let mut p = e.payload.to_vec();
            p.resize(if i % 9 == 0 { 12 << 10 } else { 100 }, b'p');
            p.into()
        };
        all.extend(append_all(&engine, vec![e]));
    }
    let stream = merged_order(all);
    let total = stream.len();
    for cut in 0..=total {
        let mut sub = engine
            .subscribe(SubscribeRequest::from(Start::Beginning))
            .unwrap();
        let head = take(&mut sub, cut);
        let cursor = sub.cursor();
        drop(sub);
        // The cursor survives its text form, as a client would store it.
        let cursor: ringfeed_engine::Cursor = cursor.to_string().parse().unwrap();
        let mut resumed = engine
            .subscribe(SubscribeRequest::from(Start::Cursor(cursor)))
            .unwrap();
        let tail = take(&mut resumed, total - cut);
        let mut joined = head;
        joined.extend(tail);
        assert_stream(&joined, &stream, &format!("cut after {cut}"));
    }
    engine.shutdown().unwrap();
}

#[test]
fn merged_order_is_the_same_on_every_replay_and_pause_pattern() {
    let _watchdog = ringfeed_watchdog::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    let mut rng = Rng::new(seeds(1)[0]);
    let mut first: Option<Vec<Seen>> = None;
    let mut appended = Vec::new();
    // A writer appends while subscribers with different pause patterns read.
    for replay in 0..6u64 {
        if replay < 3 {
            for i in 0..80u64 {
                let id = replay * 1000 + i;
                appended.extend(append_all(
                    &engine,
                    vec![event(&format!("/m{}", id % 7), id)],
                ));
            }
        }
        let mut sub = engine
            .subscribe(SubscribeRequest {
                ordering: Ordering::Merged,
                ..SubscribeRequest::from(Start::Beginning)
            })
            .unwrap();
        let mut got = Vec::new();
        let want = appended.len();
        while got.len() < want {
            let n = 1 + rng.below(20) as usize;
            got.extend(take(&mut sub, n.min(want - got.len())));
            if rng.below(3) == 0 {
                std::thread::sleep(std::time::Duration::from_millis(rng.below(4)));
            }
        }
        match &first {
            None => first = Some(got),
            Some(f) => assert_stream(&got[..f.len()], f, &format!("replay {replay}")),
        }
        // The stream is the model's merged order.
        assert_stream(
            &first.clone().unwrap(),
            &merged_order(appended[..first.as_ref().unwrap().len()].to_vec()),
            "model",
        );
    }
    engine.shutdown().unwrap();
}
