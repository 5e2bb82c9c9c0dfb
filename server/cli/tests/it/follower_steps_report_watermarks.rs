//! `Follower::next_step` (issue 20: a merge of several feeds needs a quiet
//! feed's bound): with heartbeats on, a follower that has handed out every
//! event reports the watermark rising past the last one instead of waiting
//! silently; every watermark it reports is truthful (no event handed out
//! after it is stamped at or below it); and events still come through.

use std::time::{Duration, Instant};

use crate::common::*;
use ringfeed_proto::v1::{self, subscribe_request::Start};
use ringfeed_server::client::{Backoff, Follower, Step};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_feed_reports_its_watermark_and_every_report_is_truthful() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::Builder::new()
        .prefix("steps-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let server = TestServer::start(dma_engine(dir.path(), 2)).await;
    let mut client = server.client().await;
    let first: Vec<v1::Event> = (0..50)
        .map(|i| create(&format!("/d{}", i % 5), &format!("f{i}")))
        .collect();
    client.append(request(first, false)).await.unwrap();

    let request = v1::SubscribeRequest {
        start: Some(Start::Beginning(true)),
        heartbeats: true,
        heartbeat_interval_ms: 20,
        batching: true,
        ..Default::default()
    };
    let mut follower =
        Follower::new(&server.addr.to_string(), request, Backoff::default()).unwrap();
    let (mut events, mut last_ts, mut reported) = (0, i64::MIN, i64::MIN);
    let deadline = Instant::now() + Duration::from_secs(20);
    // Every event, then a watermark past the last one.
    loop {
        assert!(
            Instant::now() < deadline,
            "{events} events, watermark {reported}"
        );
        match follower.next_step().await.unwrap() {
            Step::Event(e) => {
                assert!(
                    e.ts_ns > reported,
                    "event {} at or below a reported watermark {reported}",
                    e.ts_ns
                );
                events += 1;
                last_ts = last_ts.max(e.ts_ns);
            }
            Step::Watermark(w) => {
                assert!(w > reported, "watermarks only rise");
                reported = w;
                if events == 50 && w >= last_ts {
                    break;
                }
            }
            Step::End => panic!("no until_ns: no end"),
        }
    }
    // A later event still comes, above everything reported before it.
    client
        .append(request_one(create("/late", "x")))
        .await
        .unwrap();
    loop {
        assert!(Instant::now() < deadline, "the late event never came");
        match follower.next_step().await.unwrap() {
            Step::Event(e) => {
                assert!(e.ts_ns > reported);
                break;
            }
            Step::Watermark(w) => reported = w,
            Step::End => panic!("no until_ns: no end"),
        }
    }
    server.stop().await;
}

fn request_one(event: v1::Event) -> v1::AppendRequest {
    request(vec![event], false)
}
