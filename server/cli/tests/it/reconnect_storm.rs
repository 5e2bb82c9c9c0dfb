//! The reconnect storm: hundreds of followers resume at once after a server
//! restart, over a large log, while writes continue. Every follower must end
//! with exactly the stream a single careful reader sees, and the server's
//! peak memory must stay bounded.
//!
//! Sized for CI on 2 cores: 1,000,000 events on disk, 500 followers (half in
//! chunk mode, half named clients with epochs) each following the last
//! ~5,000 events plus ~8 s of live writes at 200 events/s.

use std::time::{Duration, Instant};

use crate::common::{create, request};
use crate::serve_binary::Server;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::subscribe_response::Item;
use ringfeed_proto::{v1, RingFeedClient};
use ringfeed_server::client::{Backoff, Follower};

const FOLLOWERS: usize = 500;
const PRELOAD: usize = 1_000_000;
const BACKLOG: usize = 5_000;
const LIVE_RATE: usize = 200; // events per second, in batches of 20
/// The server's peak RSS must stay below this, through both incarnations.
const PEAK_RSS_BOUND: u64 = 512 << 20;

fn events(from: usize, n: usize) -> Vec<v1::Event> {
    (from..from + n)
        .map(|k| create(&format!("/vol{}/dir{}", k % 5, k % 17), &format!("f{k}")))
        .collect()
}

async fn connect(addr: &str) -> RingFeedClient<ringfeed_proto::tonic::transport::Channel> {
    RingFeedClient::connect(format!("http://{addr}"))
        .await
        .unwrap()
}

/// Packs a position for compact per-follower logs.
fn pack(shard: u32, offset: u64) -> u64 {
    (u64::from(shard) << 48) | offset
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_follower_is_exact_after_a_restart_storm_and_memory_stays_bounded() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), 2);
    let addr = server.addr.clone();
    let mut client = connect(&addr).await;
    let started = Instant::now();
    for from in (0..PRELOAD).step_by(5_000) {
        client
            .append(request(events(from, 5_000), false))
            .await
            .unwrap();
    }
    eprintln!(
        "preloaded {PRELOAD} events in {:?}, server peak RSS {} MiB",
        started.elapsed(),
        server.peak_rss() >> 20
    );
    let since = ringfeed_engine::clock::Clock::now_ns(&ringfeed_engine::clock::SystemClock);
    client
        .append(request(events(PRELOAD, BACKLOG), false))
        .await
        .unwrap();
    let until = since + 8_000_000_000;

    // Writes continue through the restart (retrying while the server is down).
    let writer_addr = addr.clone();
    let writer = tokio::spawn(async move {
        let mut k = PRELOAD + BACKLOG;
        let mut client = connect(&writer_addr).await;
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            match client
                .append(request(events(k, LIVE_RATE / 10), false))
                .await
            {
                Ok(acks) => {
                    k += LIVE_RATE / 10;
                    if acks.into_inner().positions.iter().all(|p| p.ts_ns > until) {
                        return k;
                    }
                }
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    if let Ok(c) = RingFeedClient::connect(format!("http://{writer_addr}")).await {
                        client = c;
                    }
                }
            }
        }
    });

    let followers: Vec<_> = (0..FOLLOWERS)
        .map(|i| {
            let request = v1::SubscribeRequest {
                client_name: format!("mount-{i}"),
                client_id: if i % 2 == 0 { i as u64 + 1 } else { 0 },
                start: Some(Start::SinceNs(since)),
                until_ns: until,
                batching: true,
                chunk_mode: i % 4 < 2,
                ..Default::default()
            };
            let addr = addr.clone();
            tokio::spawn(async move {
                let mut follower = Follower::new(&addr, request, Backoff::default()).unwrap();
                let mut seen = Vec::new();
                let deadline = Instant::now() + Duration::from_secs(240);
                while let Some(e) = tokio::time::timeout_at(deadline.into(), follower.next())
                    .await
                    .unwrap_or_else(|_| panic!("follower {i} stalled after {} events", seen.len()))
                    .unwrap_or_else(|e| panic!("follower {i} failed: {e}"))
                {
                    seen.push(pack(e.shard, e.offset));
                }
                (seen, follower.stats)
            })
        })
        .collect();

    // Let everyone get going, then restart the server under them.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut peak = server.peak_rss();
    eprintln!("peak RSS before the restart: {} MiB", peak >> 20);
    let listen = addr.clone();
    server.stop();
    let restarted = Instant::now();
    let server = Server::start_on(dir.path(), 2, &listen);
    eprintln!(
        "restarted in {:?}, peak RSS after recovery {} MiB",
        restarted.elapsed(),
        server.peak_rss() >> 20
    );

    let written = writer.await.unwrap();
    let mut results = Vec::new();
    for f in followers {
        results.push(f.await.unwrap());
    }
    peak = peak.max(server.peak_rss());

    // The oracle: one plain event-by-event subscription over the same range.
    let mut oracle = Vec::new();
    let mut stream = connect(&addr)
        .await
        .subscribe(v1::SubscribeRequest {
            start: Some(Start::SinceNs(since)),
            until_ns: until,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    while let Some(response) = stream.message().await.unwrap() {
        if let Some(Item::Event(e)) = response.item {
            oracle.push(pack(e.shard, e.offset));
        }
    }
    let reconnects: u64 = results.iter().map(|(_, s)| s.reconnects).sum();
    let chunks: u64 = results.iter().map(|(_, s)| s.chunks).sum();
    eprintln!(
        "{FOLLOWERS} followers, {} events each, {reconnects} reconnects, {chunks} chunks, \
         {written} events written, server peak RSS {} MiB",
        oracle.len(),
        peak >> 20
    );
    assert!(
        oracle.len() > BACKLOG,
        "the range holds {} events",
        oracle.len()
    );
    assert!(
        reconnects >= FOLLOWERS as u64,
        "the restart did not disconnect everyone"
    );
    assert!(chunks > 0);
    let mut sorted_oracle = oracle.clone();
    sorted_oracle.sort_unstable();
    for (i, (seen, _)) in results.iter().enumerate() {
        if i % 4 < 2 {
            // Chunk mode delivers each shard in order, shards interleaved by chunk.
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            assert!(
                sorted == sorted_oracle,
                "follower {i} (chunks) is not exact: {} events vs {}",
                seen.len(),
                oracle.len()
            );
            for shard in 0..2u64 {
                let mine: Vec<_> = seen.iter().filter(|p| *p >> 48 == shard).collect();
                assert!(
                    mine.windows(2).all(|w| w[0] < w[1]),
                    "follower {i}: shard {shard} out of order"
                );
            }
        } else {
            assert!(
                *seen == oracle,
                "follower {i} is not exact: {} events vs {}",
                seen.len(),
                oracle.len()
            );
        }
    }
    assert!(peak < PEAK_RSS_BOUND, "server peak RSS {} MiB", peak >> 20);
    server.stop();
}
