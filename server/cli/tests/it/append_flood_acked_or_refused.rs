//! A flood of large appends against the real binary with a small append
//! budget: every client ends acknowledged or refused with RESOURCE_EXHAUSTED,
//! and the server holds exactly the acknowledged events (nothing of a refused
//! batch). The memory bound itself is a benchmark figure
//! (`ringfeed-bench append-flood`), not asserted here.

use crate::serve_binary::Server;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::{v1, RingFeedClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_is_acked_or_refused_and_only_acked_events_are_stored() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ringfeed.toml");
    std::fs::write(
        &config,
        "append_budget_bytes = 2097152\nappend_timeout_ms = 300\n",
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let server = Server::start_with(&dir.path().join("data"), 2, &["--config", &config]);
    let url = format!("http://{}", server.addr);
    let mut tasks = Vec::new();
    for c in 0..12 {
        let mut client = RingFeedClient::connect(url.clone()).await.unwrap();
        let events = (0..1500)
            .map(|i| v1::Event {
                directory: format!("/flood/{c}"),
                new_entry: Some(v1::Entry {
                    name: format!("f{i}"),
                    attributes: vec![b'a'; 960].into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .collect();
        let request = v1::AppendRequest {
            events,
            durability: v1::Durability::Memory as i32,
            ..Default::default()
        };
        tasks.push(tokio::spawn(async move { client.append(request).await }));
    }
    let (mut acked, mut refused) = (0u64, 0);
    for task in tasks {
        match task.await.unwrap() {
            Ok(response) => {
                let positions = response.into_inner().positions;
                assert_eq!(positions.len(), 1500);
                acked += positions.len() as u64;
            }
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                refused += 1;
            }
        }
    }
    let status = RingFeedClient::connect(url)
        .await
        .unwrap()
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let committed: u64 = status.shards.iter().map(|s| s.committed_next).sum();
    eprintln!("acked {acked} events, {refused} batches refused");
    assert_eq!(
        committed, acked,
        "the server holds exactly what it acknowledged"
    );
    server.stop();
}
