//! A filter of thousands of paths costs its subscriber a lookup per path
//! component, not a scan of the filter; past `MAX_FILTER_PATH_BYTES` a
//! request is refused with INVALID_ARGUMENT (natively and through the filer
//! API), and the filters of all connected subscribers together stay within
//! `filter_budget_bytes` (RESOURCE_EXHAUSTED past it, room again once a
//! subscriber leaves), the filer API's subscribers counted with the native
//! ones.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::common::*;
use ringfeed_engine::MAX_FILTER_PATH_BYTES;
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_server::SubscriberLimits;

/// `count` directories `/d/0` .. as prefixes.
fn prefixes(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("/d/{i}")).collect()
}

fn from_beginning(path_prefixes: Vec<String>) -> v1::SubscribeRequest {
    v1::SubscribeRequest {
        start: Some(Start::Beginning(true)),
        path_prefixes,
        batching: true,
        ..Default::default()
    }
}

/// What a native filter of `paths` (as prefixes) holds of the budget.
fn native_filter_bytes(paths: &[String]) -> usize {
    ringfeed_server::filter_bytes(&ringfeed_engine::Filter {
        prefixes: paths.to_vec(),
        ..Default::default()
    })
}

/// Subscribes to `paths` from the beginning once the filter budget has room
/// for them again: a stream that left gives its filter back when the server
/// sees it cancelled. Panics, naming `whose` filter it waited for, if that
/// takes more than 10 s.
async fn subscribe_when_room(
    client: &mut ringfeed_proto::RingFeedClient<ringfeed_proto::tonic::transport::Channel>,
    paths: &[String],
    whose: &str,
) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.subscribe(from_beginning(paths.to_vec())).await {
            Ok(_) => return,
            Err(e) if e.code() == Code::ResourceExhausted && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            Err(e) => panic!("{whose} filter was never given back: {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_prefixes_select_exactly_and_large_filters_are_bounded() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    let wanted = prefixes(6_000);
    let one = native_filter_bytes(&wanted);
    // Room for one such filter and a few small ones, not two large ones.
    let limits = SubscriberLimits {
        filter_budget_bytes: one + one / 2,
        ..SubscriberLimits::default()
    };
    let server = TestServer::start_with(dma_engine(dir.path(), 2), limits).await;
    let mut client = server.client().await;

    // Events in /d/0 .. /d/11999 (half of them wanted), and under a
    // sibling whose name extends a wanted one (/d/1x: not under /d/1).
    let mut events = Vec::new();
    for i in 0..12_000 {
        events.push(create(&format!("/d/{i}"), "f"));
        if i % 1000 == 1 {
            events.push(create(&format!("/d/{i}x"), "g"));
        }
    }
    for batch in events.chunks(1000) {
        client.append(request(batch.to_vec(), false)).await.unwrap();
    }
    let started = Instant::now();
    let mut stream = client
        .subscribe(from_beginning(wanted.clone()))
        .await
        .unwrap()
        .into_inner();
    let mut cursor = Vec::new();
    let got = read_events(&mut stream, 6_000, &mut cursor).await;
    let dirs: BTreeSet<String> = got.iter().map(|g| g.3.directory.clone()).collect();
    let want: BTreeSet<String> = wanted.iter().cloned().collect();
    assert_eq!(got.len(), 6_000, "one event per wanted directory");
    assert_eq!(dirs, want);
    println!(
        "6,000 of 12,012 events through a filter of 6,000 prefixes in {:?}",
        started.elapsed()
    );

    // A second filter as large does not fit the budget beside the first...
    let err = client
        .subscribe(from_beginning(wanted.clone()))
        .await
        .expect_err("past filter_budget_bytes");
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("filter_budget_bytes"),
        "{}",
        err.message()
    );
    // ... a small one does ...
    let small = client
        .subscribe(from_beginning(vec!["/d/7".into()]))
        .await
        .unwrap();
    drop(small);
    // ... and once the first leaves, the large one fits again (its stream
    // gives its filter back when the server sees it cancelled).
    drop(stream);
    subscribe_when_room(&mut client, &wanted, "the first stream's").await;

    // Past the bound on one filter: refused whole, the bound named.
    let too_many = prefixes(20_000);
    let bytes: usize = too_many.iter().map(String::len).sum();
    assert!(bytes > MAX_FILTER_PATH_BYTES);
    let err = client
        .subscribe(from_beginning(too_many))
        .await
        .expect_err("past MAX_FILTER_PATH_BYTES");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    assert!(
        err.message()
            .contains(&format!("more than the {MAX_FILTER_PATH_BYTES}")),
        "{}",
        err.message()
    );
    server.stop().await;
}

/// The filer API's streams count their filters against the same
/// `filter_budget_bytes` as native streams: a SeaweedFS subscriber of
/// thousands of paths holds its share while it is connected, a native one
/// past what is left is refused, and the share comes back when it leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filer_api_filters_count_against_the_filter_budget() {
    use ringfeed_proto::filer_pb;
    let _watchdog = ringfeed_testkit::arm();
    let dir = tempfile::tempdir().unwrap();
    // 3,000 short paths: about 230 KB as the filer API counts them, and
    // about 360 KB as a native filter (a tree of path components); room
    // for one filer stream of them, not two, nor one beside a native one.
    let wanted = prefixes(3_000);
    let native = native_filter_bytes(&wanted);
    let budget = 400_000;
    assert!(
        native < budget,
        "a native filter of 3,000 paths is {native} bytes"
    );
    let config = dir.path().join("ringfeed.toml");
    std::fs::write(&config, format!("filter_budget_bytes = {budget}\n")).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let server = crate::serve_binary::Server::start_with(
        &dir.path().join("data"),
        1,
        &["--filer-listen", "127.0.0.1:0", "--config", &config],
    );
    let mut filer = crate::filer_api_weed_clients::filer_api_client(&server).await;
    let subscribe = |name: &str| filer_pb::SubscribeMetadataRequest {
        client_name: name.into(),
        path_prefixes: wanted.clone(),
        ..Default::default()
    };
    let first = filer
        .subscribe_metadata(subscribe("first"))
        .await
        .expect("one filer stream of 3,000 paths fits")
        .into_inner();
    let second = filer
        .subscribe_metadata(subscribe("second"))
        .await
        .expect_err("a second one is past filter_budget_bytes");
    assert_eq!(second.code(), Code::ResourceExhausted, "{second:?}");
    assert!(
        second.message().contains("filter_budget_bytes"),
        "{}",
        second.message()
    );
    let mut client = ringfeed_proto::RingFeedClient::connect(format!("http://{}", server.addr))
        .await
        .unwrap();
    let beside = client
        .subscribe(from_beginning(wanted.clone()))
        .await
        .expect_err("a native stream past what the filer stream left");
    assert_eq!(beside.code(), Code::ResourceExhausted, "{beside:?}");
    // Once the filer stream is gone, its share is given back.
    drop(first);
    subscribe_when_room(&mut client, &wanted, "the filer stream's").await;
    server.stop();
}
