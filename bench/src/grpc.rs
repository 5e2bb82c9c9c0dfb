//! `metrics-cost` and `page-cost`: the same append load against two servers
//! over one engine, one with an HTTP endpoint read as it runs (the metrics
//! scraped, or status pages open, each fetching `/api/status` as the page's
//! script does) and one without, alternating; medians and their ratio.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use hdrhistogram::Histogram;
use ringfeed_engine::{Engine, EngineConfig};
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::{v1, RingFeedClient, RingFeedServer};
use ringfeed_server::Exporter;
use ringfeed_server::Routes;
use ringfeed_server::Service;

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

/// What the measured server serves over HTTP besides gRPC, and how it is
/// read while the load runs.
#[derive(Clone, Copy, Debug)]
pub enum Watched {
    /// `GET /metrics` every `every`.
    Metrics { every: Duration },
    /// `viewers` status pages open, each fetching `/api/status` every
    /// `every` (the page's script polls once a second).
    Page { every: Duration, viewers: usize },
}

impl Watched {
    fn every(self) -> Duration {
        match self {
            Watched::Metrics { every } | Watched::Page { every, .. } => every,
        }
    }

    /// Concurrent readers.
    fn readers(self) -> usize {
        match self {
            Watched::Metrics { .. } => 1,
            Watched::Page { viewers, .. } => viewers,
        }
    }

    fn path(self) -> &'static str {
        match self {
            Watched::Metrics { .. } => "/metrics",
            Watched::Page { .. } => "/api/status",
        }
    }
}

/// Serves `engine` on a free loopback port until the runtime stops, with
/// the status board's one-second sampler running (as `serve` runs it);
/// with `http`, also serves that endpoint. Returns the gRPC URL and the
/// endpoint's address.
async fn start_server(
    engine: &Arc<Engine>,
    http: Option<Watched>,
) -> Result<(String, Option<std::net::SocketAddr>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    // The sender is dropped: the streams never see a shutdown.
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    std::mem::forget(stop);
    let service = Service::new(engine.clone(), stop_rx.clone(), Default::default());
    let board = service.board().clone();
    tokio::spawn(board.clone().sample_every_second(stop_rx));
    let http_addr = match http {
        Some(watched) => {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
            let at = listener.local_addr()?;
            let routes = match watched {
                Watched::Metrics { .. } => Routes {
                    metrics: Some(Arc::new(Exporter::new(
                        engine.clone(),
                        service.metrics(),
                        board,
                    ))),
                    page: None,
                },
                Watched::Page { .. } => Routes {
                    metrics: None,
                    page: Some(board),
                },
            };
            tokio::spawn(ringfeed_server::serve_http(
                listener,
                routes,
                Default::default(),
            ));
            Some(at)
        }
        None => None,
    };
    tokio::spawn(
        ringfeed_proto::tonic::transport::Server::builder()
            .add_service(RingFeedServer::new(service).max_decoding_message_size(80 << 20))
            .serve_with_incoming(ringfeed_server::incoming(listener)),
    );
    Ok((format!("http://{addr}"), http_addr))
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

/// The append load of an endpoint-cost run, the same on both sides.
#[derive(clap::Args, Debug, Clone)]
pub struct CostLoad {
    /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: std::path::PathBuf,
    /// Seconds per run.
    #[arg(long, default_value_t = 3.0)]
    pub seconds: f64,
    /// Runs per side and batch size.
    #[arg(long, default_value_t = 5)]
    pub reps: usize,
    /// Batch sizes (events per append).
    #[arg(long, value_delimiter = ',', default_value = "1,64")]
    pub batches: Vec<usize>,
    /// Concurrent gRPC clients appending in a closed loop.
    #[arg(long, default_value_t = 8)]
    pub clients: usize,
    /// Payload bytes per event.
    #[arg(long, default_value_t = 200)]
    pub event_bytes: usize,
}

/// Append throughput through a server without and with the endpoint
/// `watched` (read as it says while the load runs), over one engine,
/// alternating `load.reps` times per batch size; each server has
/// `subscribers` live subscribers connected (their filter matches nothing
/// the load appends: they are listed, not fed).
pub fn endpoint_cost(load: &CostLoad, watched: Watched, subscribers: usize) -> Result<()> {
    let CostLoad {
        dir,
        seconds,
        reps,
        batches,
        clients,
        event_bytes,
    } = load;
    let (seconds, reps, clients, event_bytes) = (*seconds, *reps, *clients, *event_bytes);
    if seconds <= 0.0 || reps == 0 || batches.contains(&0) || clients == 0 {
        anyhow::bail!("seconds, reps, batches and clients must be positive");
    }
    fresh_dir(dir)?;
    let runtime = crate::util::runtime()?;
    let engine = open_engine(dir)?;
    let (name, reading) = match watched {
        Watched::Metrics { every } => (
            "metrics-cost",
            format!("scrape every {} ms", every.as_millis()),
        ),
        Watched::Page { every, viewers } => (
            "page-cost",
            format!(
                "{viewers} status page(s) open, each fetching /api/status every {} ms",
                every.as_millis()
            ),
        ),
    };
    println!(
        "# {name}: {}; {clients} gRPC clients, memory acks, {event_bytes}-byte events, {subscribers} subscribers, {seconds} s per run, {reps} alternating runs per side; {reading}",
        machine(),
    );
    runtime.block_on(async {
        let (plain, _) = start_server(&engine, None).await?;
        let (measured, at) = start_server(&engine, Some(watched)).await?;
        let at = at.expect("started with the endpoint");
        let _listed = [
            connect_idle_subscribers(&plain, subscribers).await?,
            connect_idle_subscribers(&measured, subscribers).await?,
        ];
        let duration = Duration::from_secs_f64(seconds);
        println!("| batch | events/s without: median (min-max) | events/s with: median (min-max) | ratio of medians with/without | p99 ack µs without | p99 ack µs with | requests | µs/request (median) | bytes/response |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for &batch in batches {
            let (mut off, mut on, mut p99_off, mut p99_on) = (vec![], vec![], vec![], vec![]);
            let (mut request_us, mut response_bytes) = (Vec::new(), 0usize);
            for rep in 0..reps {
                // ABBA order, so a drift in the machine's load weighs on both sides.
                for with_endpoint in [rep % 2 == 1, rep % 2 == 0] {
                    if !with_endpoint {
                        let (n, secs, hist) =
                            append_load(&plain, batch, clients, duration, event_bytes).await?;
                        off.push(n as f64 / secs);
                        p99_off.push(hist.value_at_quantile(0.99) as f64);
                        continue;
                    }
                    let readers: Vec<_> = (0..watched.readers())
                        .map(|_| tokio::spawn(read_endpoint(at, watched, duration)))
                        .collect();
                    let (n, secs, hist) =
                        append_load(&measured, batch, clients, duration, event_bytes).await?;
                    on.push(n as f64 / secs);
                    p99_on.push(hist.value_at_quantile(0.99) as f64);
                    for reader in readers {
                        let (took, bytes) = reader.await??;
                        request_us.extend(took);
                        response_bytes = bytes;
                    }
                }
            }
            println!(
                "| {batch} | {} | {} | {:.3} | {:.0} | {:.0} | {} | {:.0} | {response_bytes} |",
                spread(&off),
                spread(&on),
                crate::util::median(on.clone()) / crate::util::median(off.clone()),
                crate::util::median(p99_off),
                crate::util::median(p99_on),
                request_us.len(),
                crate::util::median(request_us)
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

/// Reads `watched`'s endpoint at `at` every `watched.every()` for
/// `duration`: each request's µs, and the last response's bytes.
async fn read_endpoint(
    at: std::net::SocketAddr,
    watched: Watched,
    duration: Duration,
) -> Result<(Vec<f64>, usize)> {
    let mut every = tokio::time::interval(watched.every());
    let started = Instant::now();
    let (mut took, mut bytes) = (Vec::new(), 0usize);
    while started.elapsed() < duration {
        every.tick().await;
        let t = Instant::now();
        bytes = crate::util::http_get(at, watched.path()).await?.len();
        took.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok((took, bytes))
}

/// `count` subscriptions to `url` from now, under a prefix nothing is
/// appended to, each named and drained in a task of its own.
async fn connect_idle_subscribers(
    url: &str,
    count: usize,
) -> Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut client = connect(url).await?;
    let mut tasks = Vec::with_capacity(count);
    for i in 0..count {
        let mut stream = client
            .subscribe(v1::SubscribeRequest {
                path_prefix: "/not-appended-to".into(),
                client_name: format!("bench subscriber {i}"),
                heartbeats: true,
                heartbeat_interval_ms: 1000,
                ..Default::default()
            })
            .await
            .map_err(|e| anyhow!("{e}"))?
            .into_inner();
        tasks.push(tokio::spawn(async move {
            while let Ok(Some(_)) = stream.message().await {}
        }));
    }
    Ok(tasks)
}
