//! Resume is exact: cutting a subscription after every event and resuming
//! from the cursor it reports yields exactly the rest of the stream; and the
//! merged order is the same on every replay, whatever the pause pattern.

use crate::common::*;
use ringfeed_engine::storage::MemStorage;
use ringfeed_engine::{Ordering, Start, SubscribeRequest};

#[test]
fn resuming_from_the_reported_cursor_yields_exactly_the_rest() {
    let _watchdog = ringfeed_testkit::arm();
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
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let engine = mem_engine(small_engine_config(2), &storages);
    const EVENTS: u64 = 240;
    const READERS: u64 = 4;
    // A writer appends while subscribers with different pause patterns read
    // from the beginning, each joining at another moment of the writes; every
    // reader's whole stream must be the model's merged order of everything
    // appended.
    let (appended, streams) = std::thread::scope(|scope| {
        let engine = &engine;
        let writer = scope.spawn(move || {
            let mut rng = Rng::new(seeds(1)[0]);
            let mut appended = Vec::new();
            for id in 0..EVENTS {
                appended.extend(append_all(
                    engine,
                    vec![event(&format!("/m{}", id % 7), id)],
                ));
                if rng.below(4) == 0 {
                    std::thread::sleep(std::time::Duration::from_millis(rng.below(3)));
                }
            }
            appended
        });
        let readers: Vec<_> = (0..READERS)
            .map(|reader| {
                scope.spawn(move || {
                    let mut rng = Rng::new(seeds(1)[0] ^ (reader + 1));
                    // Join while the writer is at work (the first at once).
                    std::thread::sleep(std::time::Duration::from_millis(reader * 7));
                    let mut sub = engine
                        .subscribe(SubscribeRequest {
                            ordering: Ordering::Merged,
                            ..SubscribeRequest::from(Start::Beginning)
                        })
                        .unwrap();
                    let mut got = Vec::new();
                    while got.len() < EVENTS as usize {
                        let n = 1 + rng.below(20) as usize;
                        got.extend(take(&mut sub, n.min(EVENTS as usize - got.len())));
                        if rng.below(3) == 0 {
                            std::thread::sleep(std::time::Duration::from_millis(rng.below(4)));
                        }
                    }
                    got
                })
            })
            .collect();
        let appended = writer.join().unwrap();
        let streams: Vec<_> = readers.into_iter().map(|r| r.join().unwrap()).collect();
        (appended, streams)
    });
    let model = merged_order(appended);
    assert_eq!(model.len(), EVENTS as usize);
    for (reader, got) in streams.iter().enumerate() {
        assert_stream(got, &model, &format!("reader {reader}"));
    }
    // And a replay after the writes, with no pauses, reads the same.
    let mut sub = engine
        .subscribe(SubscribeRequest {
            ordering: Ordering::Merged,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    assert_stream(
        &take(&mut sub, model.len()),
        &model,
        "replay after the writes",
    );
    engine.shutdown().unwrap();
}
