//! A filer's own log pruned past the last event ringfeed stored from it
//! (while ringfeed was not following): the filer would answer from its
//! oldest file on, silently. ringfeed finds the gap before it opens the
//! stream: an error in `status` and on `/metrics`, nothing followed, until
//! it is restarted with `--follow-skip-gap`, which goes on and counts it.

use crate::fake_filer::{first_filer_until, FakeFiler, Sent, Then};
use crate::metrics_endpoint::Scrape;
use crate::serve_binary::Server;

/// 2026-12-06T10:00:00Z in ns.
const TEN: i64 = 1_796_551_200_000_000_000;
const MINUTE: i64 = 60_000_000_000;

fn create(ts_ns: i64, name: &str) -> Sent {
    Sent::Create {
        ts_ns,
        directory: "/g".into(),
        name: name.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_filer_log_is_a_gap_not_a_silent_jump() {
    let _watchdog = ringfeed_testkit::arm();
    let filer = FakeFiler::start(vec![create(TEN + 30_000_000_000, "one")], Then::Heartbeats).await;
    filer.set_log_files(&["2026-12-05/23-59.0000000a", "2026-12-06/10-00.0000000a"]);
    let dir = tempfile::tempdir().unwrap();
    let follow = ["--follow-filer", filer.address.as_str()];
    let metrics = ["--metrics-listen", "127.0.0.1:0"];
    let server = Server::start_with(dir.path(), 1, &follow);
    first_filer_until(&server, |f| f.events == 1).await;
    server.stop();

    // Restarted with the log intact (its oldest file is older): no gap.
    let server = Server::start_with(dir.path(), 1, &follow);
    // (a heartbeat after the event: the stream is open past the check)
    let (row, _) = first_filer_until(&server, |f| {
        f.connected && f.seen_ts_ns > TEN + 30_000_000_000
    })
    .await;
    assert!(!row.log_gap && row.error.is_empty(), "{row:?}");
    server.stop();

    // Pruned while ringfeed is down: the oldest file left starts at 10:07,
    // after the event at 10:00:30 ringfeed stored last.
    filer.push(create(TEN + 7 * MINUTE + 10_000_000_000, "two"));
    filer.set_log_files(&["2026-12-06/10-07.0000000a"]);
    let server = Server::start_with(dir.path(), 1, &[&follow[..], &metrics[..]].concat());
    let (row, committed) = first_filer_until(&server, |f| f.log_gap && !f.error.is_empty()).await;
    eprintln!("{}", row.error);
    assert!(row.error.contains("2026-12-06T10:07:00"), "{}", row.error);
    assert!(row
        .error
        .contains("/topics/.system/log/2026-12-06/10-07.0000000a"));
    assert!(row.error.contains("--follow-skip-gap"));
    assert_eq!(
        (row.events, committed),
        (0, 1),
        "nothing past the gap is stored"
    );
    let at = server.metrics.clone().unwrap();
    let scrape = tokio::task::spawn_blocking(move || Scrape::get(&at))
        .await
        .unwrap();
    assert_eq!(scrape.sum("ringfeed_filer_log_gap"), 1.0);
    assert_eq!(scrape.sum("ringfeed_filer_gaps_skipped_total"), 0.0);
    server.stop();

    // The operator accepts the loss: it goes on from the filer's oldest.
    let skip = ["--follow-skip-gap"];
    let server = Server::start_with(
        dir.path(),
        1,
        &[&follow[..], &metrics[..], &skip[..]].concat(),
    );
    let (row, committed) = first_filer_until(&server, |f| f.events == 1).await;
    assert!(!row.log_gap && row.gaps_skipped == 1, "{row:?}");
    assert_eq!(committed, 2);
    let at = server.metrics.clone().unwrap();
    let scrape = tokio::task::spawn_blocking(move || Scrape::get(&at))
        .await
        .unwrap();
    assert_eq!(scrape.sum("ringfeed_filer_log_gap"), 0.0);
    assert_eq!(scrape.sum("ringfeed_filer_gaps_skipped_total"), 1.0);
    server.stop();
}
