//! ringfeed: `ringfeed serve` (the binary next to the bench's) or a running
//! server (`--target`); subscribers are the client library's `Follower`.

use std::ops::Range;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use hdrhistogram::Histogram;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::{v1, RingFeedClient};
use ringfeed_server::client::{Backoff, FollowedEvent, Follower};

use super::{
    closed_loop, pipelined_loop, stamp, unstamp, Ack, Delivered, Durability, From, Kind, Process,
    RingfeedOptions,
};
use crate::util::now_ns;

pub struct Ringfeed {
    pub addr: String,
    pub chunk_mode: bool,
    /// Shards and `window_bytes` of the server the bench started.
    shards: u32,
    window_bytes: usize,
    /// Against a `--target`, "the beginning" is when the bench connected:
    /// the server may hold older events that are not the bench's.
    beginning_ns: Option<i64>,
    processes: Vec<Process>,
    /// The metrics endpoint of the server the bench started.
    metrics: Option<std::net::SocketAddr>,
}

/// The request's durability field for memory and durable acks.
fn durability(durable: bool) -> i32 {
    if durable {
        v1::Durability::Durable as i32
    } else {
        v1::Durability::Memory as i32
    }
}

/// A create event numbered `index` under a path namespace
/// (`/bench/dNN/fINDEX`) whose attributes are the stamped payload.
pub fn event(index: u64, payload: usize) -> v1::Event {
    v1::Event {
        directory: format!("/bench/d{}", index % 64),
        new_entry: Some(v1::Entry {
            name: format!("f{index}"),
            attributes: stamp(index, now_ns(), payload).into(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub async fn connect(addr: &str) -> Result<RingFeedClient<Channel>> {
    RingFeedClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| anyhow!("connecting to {addr}: {e}"))
}

/// The `window_bytes` of the server `options` describe.
fn window_bytes(options: &RingfeedOptions) -> usize {
    options
        .window_bytes
        .unwrap_or_else(|| ringfeed_engine::EngineConfig::default().window_bytes)
}

impl Ringfeed {
    pub async fn start(dir: &Path, options: &RingfeedOptions) -> Result<Ringfeed> {
        if let Some(addr) = &options.target {
            // Check it answers before a scenario depends on it.
            connect(addr).await?;
            return Ok(Ringfeed {
                addr: addr.clone(),
                chunk_mode: options.chunk_mode,
                shards: options.shards,
                window_bytes: window_bytes(options),
                beginning_ns: Some(now_ns()),
                processes: Vec::new(),
                metrics: None,
            });
        }
        // A port that was free a moment ago: another process could take it
        // first, and the server then fails to start and says so.
        let metrics = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        // As many connections as the open files limit lets the server take
        // (the default stops at 10,000, which fan-out at K = 10,000 passes
        // with a connection per subscriber); NATS and etcd have no lower cap.
        let config = dir.join("serve.toml");
        let most = ringfeed_server::ConnectionLimits::most_connections();
        std::fs::create_dir_all(dir)?;
        // RINGFEED_BENCH_SERVE_TOML: more config lines for the server, to
        // set one binary's runs side by side with different settings.
        let extra = std::env::var("RINGFEED_BENCH_SERVE_TOML").unwrap_or_default();
        let window = options
            .window_bytes
            // An event may fill at most a quarter of a window.
            .map(|w| format!("window_bytes = {w}\nmax_event_bytes = {}\n", w / 4))
            .unwrap_or_default();
        std::fs::write(
            &config,
            format!("max_connections = {most}\n{window}{extra}\n"),
        )?;
        let (process, addr) = spawn_server_with(
            &dir.join("data"),
            options.shards.max(1),
            &[
                "--metrics-listen",
                &metrics.to_string(),
                "--config",
                &config.to_string_lossy(),
            ],
        )?;
        Ok(Ringfeed {
            addr,
            chunk_mode: options.chunk_mode,
            shards: options.shards.max(1),
            window_bytes: window_bytes(options),
            beginning_ns: None,
            processes: vec![process],
            metrics: Some(metrics),
        })
    }
}

#[async_trait::async_trait]
impl super::System for Ringfeed {
    fn kind(&self) -> Kind {
        Kind::Ringfeed
    }

    fn durability(&self, durable: bool) -> Durability {
        if durable {
            "fdatasync before the ack"
        } else {
            "in memory (visible to subscribers) before the ack"
        }
    }

    fn processes(&self) -> &[Process] {
        &self.processes
    }

    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        batch: usize,
        durable: bool,
    ) -> Result<Histogram<u64>> {
        let addr = self.addr.clone();
        let (acks, _) = closed_loop(
            events,
            producers,
            batch,
            || connect(&addr),
            move |mut client, request, sent| async move {
                let request = v1::AppendRequest {
                    events: request.map(|i| event(i, payload)).collect(),
                    durability: durability(durable),
                    ..Default::default()
                };
                client
                    .append(request)
                    .await
                    .map_err(|e| anyhow!("append: {e}"))?;
                let ack = Ack::since(sent, None);
                Ok((client, vec![ack]))
            },
        )
        .await?;
        Ok(acks)
    }

    fn set_chunk_mode(&mut self, on: bool) {
        self.chunk_mode = on;
    }

    async fn chunks_sent(&self) -> Option<Result<(u64, u64)>> {
        let at = self.metrics?;
        // Two windows a shard: only the open one is never shipped as chunks.
        let past = 2 * u64::from(self.shards) * self.window_bytes as u64;
        Some(crate::util::scrape_metrics(at).await.map(|m| {
            let sent = crate::util::metric_sum(&m, "ringfeed_subscriber_chunks_sent_total");
            (sent as u64, past)
        }))
    }

    async fn syncs(&self) -> Option<Result<u64>> {
        let at = self.metrics?;
        Some(
            crate::util::scrape_metrics(at)
                .await
                .map(|m| crate::util::metric_sum(&m, "ringfeed_shard_fsync_seconds_count") as u64),
        )
    }

    async fn append_pipelined(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        window: usize,
        durable: bool,
    ) -> Option<Result<Histogram<u64>>> {
        let addr = self.addr.clone();
        let acks = pipelined_loop(
            events,
            producers,
            window,
            || open_append_stream(&addr),
            move |stream: &AppendStream, index| {
                let acked = send_one(stream, index, payload, durable);
                async move {
                    let acked = acked?;
                    Ok(async move { acked.await.map(|()| None) })
                }
            },
        )
        .await;
        Some(acks.map(|(acks, _)| acks))
    }

    fn appender(&self) -> Arc<dyn super::Appender> {
        Arc::new(Appender {
            addr: self.addr.clone(),
            stream: std::sync::Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    fn tail_cli(&self) -> Option<super::TailCli> {
        let binary = std::env::current_exe().ok()?.with_file_name("ringfeed");
        let mut command = std::process::Command::new(binary);
        // The default tail, as users run it (batches since issue 35).
        command.args(["tail", "--server", &self.addr]);
        match self.beginning_ns {
            Some(ns) => command.args(["--since-ns", &ns.to_string()]),
            None => command.arg("--beginning"),
        };
        Some(super::TailCli {
            command,
            terminator: b"\n",
            payload: &["event", "newEntry", "attributes"],
        })
    }

    /// The subscribers are followers that connect when first read: waits
    /// until the server lists `k` streams that sent nothing yet and wait
    /// caught up (lag 0).
    async fn at_live_edge(&self, k: usize, limit: Duration) -> Result<()> {
        // Ten thousand subscribers list in a few MB, past tonic's 4 MiB default.
        let mut client = connect(&self.addr)
            .await?
            .max_decoding_message_size(256 << 20);
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let listed = client
                .list_subscribers(v1::ListSubscribersRequest {})
                .await
                .map_err(|s| anyhow!("ListSubscribers: {s}"))?
                .into_inner()
                .subscribers;
            let ready = listed
                .iter()
                .filter(|s| s.events_sent == 0 && s.lag_events == 0)
                .count();
            if ready >= k {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "only {ready} of {k} subscribers were at the live edge after {limit:?} \
                     ({} listed)",
                    listed.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        let start = match from {
            From::Beginning => match self.beginning_ns {
                Some(ns) => Start::SinceNs(ns),
                None => Start::Beginning(true),
            },
            // Stamps are wall-clock ns and only grow, so every event appended
            // after this point is stamped above it: established at once.
            From::Now => Start::SinceNs(now_ns()),
            From::Resume { wall_ns, .. } => Start::SinceNs(wall_ns),
        };
        let request = v1::SubscribeRequest {
            start: Some(start),
            batching: true,
            chunk_mode: self.chunk_mode,
            ..Default::default()
        };
        Ok(Box::new(Subscriber {
            follower: Box::new(Follower::new(&self.addr, request, Backoff::default())?),
            batch: Vec::new(),
        }))
    }
}

/// Appends single events, each as its own request on one `AppendStream`
/// (ringfeed's pipelined producer stream: one response per request, in
/// order), as a steady producer would; opened on first use.
#[derive(Clone)]
pub struct Appender {
    addr: String,
    stream: std::sync::Arc<tokio::sync::OnceCell<AppendStream>>,
}

/// The sending half of an open `AppendStream`: requests go out in the order
/// they are queued, each with where its ack goes (`Err` if the server stored
/// it only in part: the response's failure).
type AppendStream = tokio::sync::mpsc::UnboundedSender<(v1::AppendRequest, AckSender)>;
type AckSender = tokio::sync::oneshot::Sender<Result<()>>;

/// Queues event `index` (a `payload`-byte one) as a request of its own on
/// `stream`; the future it returns completes with the request's ack.
fn send_one(
    stream: &AppendStream,
    index: u64,
    payload: usize,
    durable: bool,
) -> Result<impl std::future::Future<Output = Result<()>> + Send + 'static> {
    let (ack, acked) = tokio::sync::oneshot::channel();
    let request = v1::AppendRequest {
        events: vec![event(index, payload)],
        durability: durability(durable),
        ..Default::default()
    };
    stream
        .send((request, ack))
        .map_err(|_| anyhow!("the append stream has ended"))?;
    Ok(async move {
        acked
            .await
            .map_err(|_| anyhow!("the append stream ended before event {index} was acknowledged"))?
    })
}

async fn open_append_stream(addr: &str) -> Result<AppendStream> {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};
    let mut client = connect(addr).await?;
    let (queue, mut queued) =
        tokio::sync::mpsc::unbounded_channel::<(v1::AppendRequest, AckSender)>();
    let (requests, outgoing) = tokio::sync::mpsc::unbounded_channel();
    // Acks come back in request order: each pops the oldest waiting sender.
    let waiting: Arc<Mutex<VecDeque<AckSender>>> = Arc::default();
    let forward = waiting.clone();
    tokio::spawn(async move {
        while let Some((request, ack)) = queued.recv().await {
            forward.lock().expect("ack queue").push_back(ack);
            if requests.send(request).is_err() {
                return;
            }
        }
    });
    let mut responses = client
        .append_stream(tokio_stream::wrappers::UnboundedReceiverStream::new(
            outgoing,
        ))
        .await
        .map_err(|e| anyhow!("append stream: {e}"))?
        .into_inner();
    tokio::spawn(async move {
        // A failed stream drops the waiting senders: their appends then fail.
        while let Ok(Some(response)) = responses.message().await {
            let ack = waiting.lock().expect("ack queue").pop_front();
            if let Some(ack) = ack {
                let _ = ack.send(match response.failure {
                    None => Ok(()),
                    Some(f) => Err(anyhow!("stored in part: {}", f.message)),
                });
            }
        }
        waiting.lock().expect("ack queue").clear();
    });
    Ok(queue)
}

#[async_trait::async_trait]
impl super::Appender for Appender {
    async fn append_one(&self, index: u64, payload: usize) -> Result<()> {
        let stream = self
            .stream
            .get_or_try_init(|| open_append_stream(&self.addr))
            .await?;
        send_one(stream, index, payload, false)?.await
    }
}

pub struct Subscriber {
    /// Boxed: a `Follower` is over a KiB, and `systems::Subscriber` holds this.
    follower: Box<Follower>,
    /// A batch's events, reused.
    batch: Vec<FollowedEvent>,
}

#[async_trait::async_trait]
impl super::Subscriber for Subscriber {
    async fn next(&mut self) -> Result<Option<Delivered>> {
        match self.follower.next().await? {
            Some(e) => delivered(&e).map(Some),
            None => Ok(None),
        }
    }

    /// The client library's batch at a time: every event of the responses
    /// at hand, with no future per event.
    async fn next_batch(&mut self, out: &mut Vec<Delivered>) -> Result<bool> {
        out.clear();
        if !self.follower.next_batch(&mut self.batch).await? {
            return Ok(false);
        }
        for e in &self.batch {
            out.push(delivered(e)?);
        }
        Ok(true)
    }
}

/// The bench's stamp in an event whose fields are read in place, as a
/// client of the library reads them: its directory and entry name, and the
/// stamp in the entry's attributes.
fn delivered(e: &FollowedEvent) -> Result<Delivered> {
    let parts = e.view().parts()?;
    let directory = parts.directory;
    let name = parts.new_entry.map(|entry| entry.name);
    let attributes = parts.new_entry.map_or(&[][..], |entry| entry.attributes);
    match (directory.is_empty(), name, unstamp(attributes)) {
        (false, Some(name), Some(delivered)) if !name.is_empty() => Ok(delivered),
        _ => Err(anyhow!(
            "an event without the bench's directory, name and stamp at {}:{}",
            e.shard,
            e.offset
        )),
    }
}

/// Starts `ringfeed serve` (the binary next to the bench's own) on a free
/// loopback port over `data_dir`; returns it and its HOST:PORT once it listens.
pub fn spawn_server(data_dir: &Path, shards: u32) -> Result<(Process, String)> {
    spawn_server_with(data_dir, shards, &[])
}

/// [`spawn_server`] with more `serve` flags (a `--config FILE`, say).
pub fn spawn_server_with(
    data_dir: &Path,
    shards: u32,
    flags: &[&str],
) -> Result<(Process, String)> {
    spawn_server_on(data_dir, shards, "127.0.0.1:0", flags)
}

/// [`spawn_server_with`] listening on `listen`.
pub fn spawn_server_on(
    data_dir: &Path,
    shards: u32,
    listen: &str,
    flags: &[&str],
) -> Result<(Process, String)> {
    let binary = std::env::current_exe()?.with_file_name("ringfeed");
    if !binary.exists() {
        bail!(
            "{} not found: build it with `cargo build --release -p ringfeed-cli`",
            binary.display()
        );
    }
    let mut command = Command::new(&binary);
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--listen", listen, "--log-level", "warn"])
        .args(["--shards", &shards.to_string()])
        .args(flags);
    Process::spawn_until_line(
        "ringfeed serve",
        command,
        "listening on ",
        Duration::from_secs(120),
    )
}
