//! AppendStream groups the requests queued behind one into one engine batch.
//! When a shard failed during such a group, only the first request got the
//! error and the stream ended: the other requests of the group went
//! unanswered although their events on the healthy shard were stored. Now
//! every request of the group is answered: positions if stored in full,
//! `failure` naming what of it was stored otherwise; then the stream ends.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use ringfeed_engine::clock::SystemClock;
use ringfeed_engine::storage::{Faults, MemStorage};
use ringfeed_engine::{Engine, EngineConfig, Ordering, Start, Step, SubscribeRequest};
use ringfeed_proto::v1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_of_a_failed_group_is_answered() {
    let _watchdog = ringfeed_testkit::arm();
    let storages = vec![MemStorage::new(), MemStorage::new()];
    let opened = storages.clone();
    let engine = Engine::open_with(
        EngineConfig {
            data_dir: "unused".into(),
            shards: 2,
            ..EngineConfig::default()
        },
        Arc::new(SystemClock),
        move |shard| opened[shard as usize].clone(),
    )
    .unwrap();
    let dir = |shard: u32| {
        (0..)
            .map(|i| format!("/d{i}"))
            .find(|d| engine.shard_for(d) == shard)
            .unwrap()
    };
    let (healthy, failing) = (dir(0), dir(1));
    let server = TestServer::start(engine).await;
    // Shard 1's disk dies: its durable appends fail (and latch it).
    storages[1].set_faults(Faults {
        halt_after_ops: Some(0),
        ..Faults::default()
    });

    // Requests: most on the healthy shard, some on the failing one, some on both.
    let mut requests = Vec::new();
    for r in 0..300 {
        let dirs: Vec<&str> = match r % 10 {
            3 => vec![&failing],
            7 => vec![&healthy, &failing],
            _ => vec![&healthy],
        };
        let events = dirs
            .iter()
            .enumerate()
            .map(|(e, d)| create(d, &format!("r{r}-e{e}")))
            .collect();
        requests.push(request(events, true));
    }
    let sent = requests.clone();
    let mut responses = server
        .client()
        .await
        .append_stream(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();
    let mut answers = Vec::new();
    let end = loop {
        match tokio::time::timeout(Duration::from_secs(20), responses.message())
            .await
            .expect("stalled")
        {
            Ok(Some(response)) => answers.push(response),
            Ok(None) => break None,
            Err(status) => break Some(status),
        }
    };
    assert!(end.is_some(), "the stream ended without the shard's error");
    assert!(
        answers.iter().any(|a| a.failure.is_some()),
        "no request answered with a failure (was the group formed?)"
    );

    // What shard 0 (healthy) stored, by event name.
    let mut sub = server
        .engine
        .subscribe(SubscribeRequest {
            ordering: Ordering::PerShard,
            ..SubscribeRequest::from(Start::Beginning)
        })
        .unwrap();
    let mut stored: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    while let Step::Event(d) = sub.next_blocking(Duration::from_millis(200)).unwrap() {
        if d.shard == 0 {
            let event = <v1::Event as ringfeed_proto::prost::Message>::decode(d.payload()).unwrap();
            stored.insert(event.new_entry.unwrap().name, (d.shard, d.offset));
        }
    }
    for (r, request) in sent.iter().enumerate() {
        let names: Vec<String> = request
            .events
            .iter()
            .map(|e| e.new_entry.as_ref().unwrap().name.clone())
            .collect();
        let on_healthy: BTreeSet<usize> = (0..names.len())
            .filter(|&i| stored.contains_key(&names[i]))
            .collect();
        match answers.get(r) {
            Some(v1::AppendResponse {
                failure: None,
                positions,
                ..
            }) => {
                assert_eq!(positions.len(), names.len(), "request {r}");
            }
            Some(v1::AppendResponse {
                failure: Some(f), ..
            }) => {
                let listed: BTreeSet<usize> =
                    f.stored_indexes.iter().map(|&i| i as usize).collect();
                assert_eq!(
                    listed, on_healthy,
                    "request {r}: what its failure says was stored"
                );
            }
            None => assert!(
                on_healthy.is_empty(),
                "request {r} was left unanswered although {on_healthy:?} of it was stored"
            ),
        }
    }
    server.stop().await;
}
