//! `metrics-cost`: the same append load against two servers over one engine,
//! one with the metrics endpoint scraped as it runs and one without,
//! alternating; medians and their ratio.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use ringfeed_engine::{Engine, EngineConfig};
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::{v1, RingFeedClient, RingFeedServer};
use ringfeed_server::metrics::Exporter;
use ringfeed_server::service::Service;

use crate::systems::ringfeed_event as event;
use crate::util::{fresh_dir, machine};

type Client = RingFeedClient<Channel>;

/// A 2-shard engine with the default configuration over `dir`.
pub(crate) fn open_engine(dir: &Path) -> Result<Arc<Engine>> {
    let config = EngineConfig {
        data_dir: dir.to_path_buf(),
        shards: 2,
        ..EngineConfig::default()
    };
    Ok(Arc::new(Engine::open(config).map_err(|e| anyhow!("{e}"))?))
}

/// Serves `engine` on a free loopback port until the runtime stops; with
/// `metrics`, also serves its metrics endpoint. Returns the gRPC URL and the
/// endpoint's address.
async fn start_server(
    engine: &Arc<Engine>,
    metrics: bool,
) -> Result<(String, Option<std::net::SocketAddr>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // The sender is dropped: the streams never see a shutdown.
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let service = Service::new(engine.clone(), stop_rx, Default::default());
    let metrics_addr = if metrics {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let at = listener.local_addr()?;
        let exporter = Exporter::new(engine.clone(), service.metrics(), service.board().clone());
        let routes = ringfeed_server::http::Routes {
            metrics: Some(Arc::new(exporter)),
            page: None,
        };
        tokio::spawn(ringfeed_server::http::serve(
            listener,
            routes,
            Default::default(),
        ));
        Some(at)
    } else {
        None
    };
    tokio::spawn(
        ringfeed_proto::tonic::transport::Server::builder()
            .add_service(RingFeedServer::new(service).max_decoding_message_size(80 << 20))
            .serve_with_incoming(ringfeed_server::incoming(listener)),
    );
    Ok((format!("http://{addr}"), metrics_addr))
}

async fn connect(url: &str) -> Result<Client> {
    RingFeedClient::connect(url.to_owned())
        .await
        .map_err(|e| anyhow!("{e}"))
}

/// `clients` clients appending `batch`-event requests in a closed loop for
/// `duration`: events appended and ack latency in µs.
async fn append_load(
    url: &str,
    batch: usize,
    clients: usize,
    duration: Duration,
    event_bytes: usize,
) -> Result<(u64, f64, Histogram<u64>)> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client: Client = connect(url).await?;
        tasks.push(tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3).unwrap();
            let mut n = 0u64;
            while started.elapsed() < duration {
                let events = (0..batch)
                    .map(|i| event(c as u64 * 1_000_000_000 + n + i as u64, event_bytes))
                    .collect();
                let t = Instant::now();
                client
                    .append(v1::AppendRequest {
                        events,
                        durability: 0,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| anyhow!("{e}"))?;
                hist.record(t.elapsed().as_micros() as u64).ok();
                n += batch as u64;
            }
            Ok::<_, anyhow::Error>((n, hist))
        }));
    }
    let mut total = 0;
    let mut hist = Histogram::<u64>::new(3)?;
    for t in tasks {
        let (n, h) = t.await??;
        total += n;
        hist.add(&h)?;
    }
    Ok((total, started.elapsed().as_secs_f64(), hist))
}

/// `median (min-max)` of runs' events/s: the spread says how much of a ratio is noise.
fn spread(runs: &[f64]) -> String {
    let min = runs.iter().copied().fold(f64::INFINITY, f64::min);
    let max = runs.iter().copied().fold(0.0, f64::max);
    format!(
        "{:.0} ({min:.0}-{max:.0})",
        crate::util::median(runs.to_vec())
    )
}

/// Append throughput through a server without and with the metrics endpoint
/// (scraped every `scrape_every`), over one engine, alternating `reps` times
/// per batch size.
pub fn metrics_cost(
    dir: &Path,
    seconds: f64,
    reps: usize,
    batches: &[usize],
    clients: usize,
    event_bytes: usize,
    scrape_every: Duration,
) -> Result<()> {
    fresh_dir(dir)?;
    let runtime = crate::util::runtime()?;
    let engine = open_engine(dir)?;
    println!(
        "# metrics-cost: {}; {clients} gRPC clients, memory acks, {event_bytes}-byte events, {seconds} s per run, {reps} alternating runs per side; scrape every {} ms",
        machine(),
        scrape_every.as_millis()
    );
    runtime.block_on(async {
        let (plain, _) = start_server(&engine, false).await?;
        let (measured, at) = start_server(&engine, true).await?;
        let at = at.expect("started with metrics");
        let duration = Duration::from_secs_f64(seconds);
        println!("| batch | events/s without: median (min-max) | events/s with: median (min-max) | ratio of medians with/without | p99 ack µs without | p99 ack µs with | scrapes | µs/scrape (median) | bytes/scrape |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &batch in batches {
            let (mut off, mut on, mut p99_off, mut p99_on) = (vec![], vec![], vec![], vec![]);
            let (mut scrape_us, mut scraped) = (Vec::new(), 0usize);
            for rep in 0..reps {
                // ABBA order, so a drift in the machine's load weighs on both sides.
                for with_metrics in [rep % 2 == 1, rep % 2 == 0] {
                    if !with_metrics {
                        let (n, secs, hist) =
                            append_load(&plain, batch, clients, duration, event_bytes).await?;
                        off.push(n as f64 / secs);
                        p99_off.push(hist.value_at_quantile(0.99) as f64);
                        continue;
                    }
                    let scraper = tokio::spawn(async move {
                        let mut every = tokio::time::interval(scrape_every);
                        let (mut took, mut bytes) = (Vec::new(), 0usize);
                        while took.len() as f64 * scrape_every.as_secs_f64() < seconds {
                            every.tick().await;
                            let t = Instant::now();
                            bytes = crate::util::scrape_metrics(at).await?.len();
                            took.push(t.elapsed().as_secs_f64() * 1e6);
                        }
                        Ok::<_, anyhow::Error>((took, bytes))
                    });
                    let (n, secs, hist) =
                        append_load(&measured, batch, clients, duration, event_bytes).await?;
                    on.push(n as f64 / secs);
                    p99_on.push(hist.value_at_quantile(0.99) as f64);
                    let (took, bytes) = scraper.await??;
                    scrape_us.extend(took);
                    scraped = bytes;
                }
            }
            println!(
                "| {batch} | {} | {} | {:.3} | {:.0} | {:.0} | {} | {:.0} | {scraped} |",
                spread(&off),
                spread(&on),
                crate::util::median(on.clone()) / crate::util::median(off.clone()),
                crate::util::median(p99_off),
                crate::util::median(p99_on),
                scrape_us.len(),
                crate::util::median(scrape_us)
            );
        }
        Ok::<(), anyhow::Error>(())
    })?;
    drop(runtime);
    if let Ok(engine) = Arc::try_unwrap(engine) {
        engine.shutdown().map_err(|e| anyhow!("{e}"))?;
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}
