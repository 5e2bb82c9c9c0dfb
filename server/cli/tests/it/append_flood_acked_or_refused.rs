//! A flood of large appends against the real binary with a small append
//! budget: every client ends acknowledged or refused with RESOURCE_EXHAUSTED,
//! the server holds exactly the acknowledged events (nothing of a refused
//! batch), and its metrics count every refusal. The memory bound itself is a
//! benchmark figure (`ringfeed-bench append-flood`), not asserted here.

use crate::metrics_endpoint::scrape_until;
use crate::serve_binary::Server;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::codegen::http;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::{v1, RingFeedClient};

const BUDGET: u32 = 2 << 20;

/// A unary `Append` that declares one message of `bytes` and sends nothing
/// of its body: the server takes the budget at the length prefix and holds
/// it until the request ends (the limit `append_budget.rs` documents), so
/// whatever else waits for room is refused, deterministically.
struct BudgetHolder {
    stream: h2::SendStream<Bytes>,
    _response: h2::client::ResponseFuture,
}

impl BudgetHolder {
    async fn hold(addr: &str, bytes: u32) -> BudgetHolder {
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (client, connection) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(connection);
        let mut client = client.ready().await.unwrap();
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{addr}/ringfeed.v1.RingFeed/Append"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut stream) = client.send_request(request, false).unwrap();
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&bytes.to_be_bytes());
        stream.send_data(Bytes::from(prefix), false).unwrap();
        BudgetHolder {
            stream,
            _response: response,
        }
    }

    /// Cancels the request: the server gives its budget back.
    fn release(mut self) {
        self.stream.send_reset(h2::Reason::CANCEL);
    }
}

fn flood_request(client: usize) -> v1::AppendRequest {
    let events = (0..1500)
        .map(|i| v1::Event {
            directory: format!("/flood/{client}"),
            new_entry: Some(v1::Entry {
                name: format!("f{i}"),
                attributes: vec![b'a'; 960].into(),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    v1::AppendRequest {
        events,
        durability: v1::Durability::Memory as i32,
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_is_acked_or_refused_and_only_acked_events_are_stored() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("ringfeed.toml");
    std::fs::write(
        &config,
        format!("append_budget_bytes = {BUDGET}\nappend_timeout_ms = 300\n"),
    )
    .unwrap();
    let config = config.to_str().unwrap().to_owned();
    let server = Server::start_with(
        &dir.path().join("data"),
        2,
        &["--config", &config, "--metrics-listen", "127.0.0.1:0"],
    );
    let url = format!("http://{}", server.addr);
    let metrics = server.metrics.clone().unwrap();
    let scrape = move |what: &'static str, done: fn(f64, f64) -> bool| {
        let at = metrics.clone();
        tokio::task::spawn_blocking(move || {
            scrape_until(&at, what, |m| {
                done(
                    m.sum("ringfeed_append_budget_in_use_bytes"),
                    m.sum("ringfeed_appends_refused_budget_total"),
                )
            })
        })
    };

    // With the whole budget held, an append waits its 300 ms and is refused.
    let holder = BudgetHolder::hold(&server.addr, BUDGET).await;
    scrape("the whole budget taken", |in_use, _| {
        in_use == f64::from(BUDGET)
    })
    .await
    .unwrap();
    let mut client = RingFeedClient::connect(url.clone()).await.unwrap();
    let refused = client
        .append(flood_request(99))
        .await
        .expect_err("an append while the budget is held");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    holder.release();
    scrape("the budget given back", |in_use, refused| {
        in_use == 0.0 && refused == 1.0
    })
    .await
    .unwrap();

    // The flood: whoever takes the budget first is appended; the others
    // wait for room and are appended or refused, whole.
    let mut tasks = Vec::new();
    for c in 0..12 {
        let mut client = RingFeedClient::connect(url.clone()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            client.append(flood_request(c)).await
        }));
    }
    let (mut acked, mut refused) = (0u64, 0u64);
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
    eprintln!("flood: acked {acked} events, {refused} batches refused");
    assert!(acked >= 1500, "the first to take the budget is appended");
    let status = client
        .status(v1::StatusRequest::default())
        .await
        .unwrap()
        .into_inner();
    let committed: u64 = status.shards.iter().map(|s| s.committed_next).sum();
    assert_eq!(
        committed, acked,
        "the server holds exactly what it acknowledged"
    );
    let counted = scrape("every request's budget given back", |in_use, _| {
        in_use == 0.0
    })
    .await
    .unwrap()
    .sum("ringfeed_appends_refused_budget_total");
    assert_eq!(counted, (1 + refused) as f64, "every refusal counted");
    server.stop();
}
