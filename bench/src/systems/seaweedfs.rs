//! SeaweedFS (the `weed` binary, 4.48): a master, a volume server and a filer
//! as three processes on free loopback ports, so the filer's CPU and memory
//! are its own. An event is a namespace mutation: a file `f{i}` created in
//! `/bench/d{i % 64}` through the filer's `CreateEntry` gRPC, its stamped
//! payload as the entry's inline content. Subscribers are `SubscribeMetadata`
//! streams under `/bench/`, which replay the filer's metadata log (persisted
//! part and in-memory part) from a time and then follow it.
//!
//! The 64 parent directories are created before `start` returns, so they are
//! not among the counted events; subscribers skip directory events.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tonic::transport::Channel;
use tonic::Streaming;

use super::{
    closed_loop, free_ports, stamp, unstamp, wait_ready, Ack, Delivered, Durability, From, Kind,
    Process,
};
use crate::util::now_ns;

/// SeaweedFS 4.48's filer API, as ringfeed's proto crate generates it from
/// the `weed` binary's own descriptor (`proto/seaweedfs/filer.proto`).
use ringfeed_proto::filer_pb as pb;

use pb::seaweed_filer_client::SeaweedFilerClient;

/// The parent directories events are spread over.
const DIRECTORIES: u64 = 64;

/// The longest wait for the three processes to serve a create.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Go's `os.ModeDir`, which the filer keeps in `FuseAttributes.file_mode`.
const MODE_DIR: u32 = 1 << 31;

pub struct Seaweedfs {
    /// The filer's gRPC address (host:port).
    filer: String,
    /// The filer as `weed` commands name it: `host:httpPort.grpcPort`.
    filer_cli: String,
    weed: PathBuf,
    /// Master, volume server, filer (stopped in reverse order on drop).
    processes: Vec<Process>,
}

async fn connect(addr: &str) -> Result<SeaweedFilerClient<Channel>> {
    SeaweedFilerClient::connect(format!("http://{addr}"))
        .await
        .map_err(|e| anyhow!("connecting to the SeaweedFS filer at {addr}: {e}"))
}

/// Creates one entry; the filer reports some failures in the response body
/// rather than as a gRPC status.
async fn create(
    client: &mut SeaweedFilerClient<Channel>,
    request: pb::CreateEntryRequest,
) -> Result<()> {
    let path = format!(
        "{}/{}",
        request.directory,
        request.entry.as_ref().map_or("", |e| &e.name)
    );
    let response = client
        .create_entry(request)
        .await
        .map_err(|e| anyhow!("CreateEntry {path}: {e}"))?
        .into_inner();
    if !response.error.is_empty() {
        bail!("CreateEntry {path}: {}", response.error);
    }
    Ok(())
}

fn attributes(now_ns: i64, mode: u32, size: usize) -> pb::FuseAttributes {
    pb::FuseAttributes {
        file_size: size as u64,
        mtime: now_ns / 1_000_000_000,
        crtime: now_ns / 1_000_000_000,
        file_mode: mode,
        ..Default::default()
    }
}

fn directory(parent: &str, name: &str) -> pb::CreateEntryRequest {
    pb::CreateEntryRequest {
        directory: parent.to_owned(),
        entry: Some(pb::Entry {
            name: name.to_owned(),
            is_directory: true,
            attributes: Some(attributes(now_ns(), MODE_DIR | 0o755, 0)),
            ..Default::default()
        }),
        o_excl: false,
        ..Default::default()
    }
}

/// Event `index`: file `/bench/d{index % 64}/f{index}` whose inline content
/// is the stamped payload. `o_excl` makes a repeated name an error instead
/// of a silent update, so the bench can never count one event twice.
fn event(index: u64, payload: usize) -> pb::CreateEntryRequest {
    let content = stamp(index, now_ns(), payload);
    pb::CreateEntryRequest {
        directory: format!("/bench/d{}", index % DIRECTORIES),
        entry: Some(pb::Entry {
            name: format!("f{index}"),
            is_directory: false,
            attributes: Some(attributes(now_ns(), 0o644, content.len())),
            content: content.into(),
            ..Default::default()
        }),
        o_excl: true,
        ..Default::default()
    }
}

/// Whether the master lists the volume server at `volume` (host:port) among
/// its data nodes: `GET /dir/status` over a plain HTTP/1.0 connection.
async fn volume_registered(master: &str, volume: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect(master).await?;
        stream
            .write_all(b"GET /dir/status HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            .await?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await?;
        Ok::<_, std::io::Error>(body.contains(&format!("\"{volume}\"")))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(2), attempt).await,
        Ok(Ok(true))
    )
}

impl Seaweedfs {
    pub async fn start(weed: &Path, dir: &Path) -> Result<Seaweedfs> {
        let ports = free_ports(6)?;
        let (master_port, master_grpc) = (ports[0], ports[1]);
        let (volume_port, volume_grpc) = (ports[2], ports[3]);
        let (filer_port, filer_grpc) = (ports[4], ports[5]);
        // weed derives a server's gRPC port as its HTTP port + 10000 unless
        // told otherwise: each process gets `-port.grpc`, and peers are
        // named `host:port.grpcPort` so they dial the right one.
        let master = format!("127.0.0.1:{master_port}.{master_grpc}");
        let logs: Vec<PathBuf> = ["master", "volume", "filer"]
            .iter()
            .map(|n| dir.join(format!("{n}.log")))
            .collect();
        let mut processes = Vec::new();
        let mut spawn = |name: &str, args: Vec<String>, log: &Path| -> Result<()> {
            let data = dir.join(name);
            std::fs::create_dir_all(&data)
                .with_context(|| format!("creating {}", data.display()))?;
            let mut command = Command::new(weed);
            // weed reads filer.toml / master.toml from the working directory
            // first: run in the temp dir so no stray config applies. Logs go
            // to stderr (our log file) instead of weed's default files in /tmp.
            command
                .current_dir(dir)
                .arg("-logtostderr")
                .arg(name)
                .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
                .args(args);
            processes.push(Process::spawn(&format!("weed {name}"), command, log)?);
            Ok(())
        };
        spawn(
            "master",
            vec![
                format!("-port={master_port}"),
                format!("-port.grpc={master_grpc}"),
                format!("-mdir={}", dir.join("master").display()),
                "-telemetry=false".into(),
                "-volumeSizeLimitMB=1024".into(),
            ],
            &logs[0],
        )?;
        spawn(
            "volume",
            vec![
                format!("-port={volume_port}"),
                format!("-port.grpc={volume_grpc}"),
                format!("-dir={}", dir.join("volume").display()),
                "-max=20".into(),
                format!("-master={master}"),
                // By default a stopping volume server keeps serving 10 s
                // after it stops heartbeating (for a load balancer to notice);
                // nothing here needs that, and it made every teardown 10 s.
                "-preStopSeconds=0".into(),
            ],
            &logs[1],
        )?;
        let mut filer_args = vec![
            format!("-port={filer_port}"),
            format!("-port.grpc={filer_grpc}"),
            format!("-master={master}"),
            format!("-defaultStoreDir={}", dir.join("filer").display()),
            "-s3=false".into(),
            "-webdav=false".into(),
            "-sftp=false".into(),
            "-iam=false".into(),
        ];
        // The filer also listens on a unix socket, by default
        // /tmp/seaweedfs-filer-<port>.sock; keep it in the temp dir when the
        // path fits a sockaddr_un (108 bytes).
        let socket = dir.join("filer.sock");
        if socket.as_os_str().len() < 100 {
            filer_args.push(format!("-localSocket={}", socket.display()));
        }
        spawn("filer", filer_args, &logs[2])?;
        let mut system = Seaweedfs {
            filer: format!("127.0.0.1:{filer_grpc}"),
            filer_cli: format!("127.0.0.1:{filer_port}.{filer_grpc}"),
            weed: weed.to_path_buf(),
            processes,
        };

        // Ready when the volume server has registered with the master (the
        // filer flushes its metadata log to it) and the filer accepts a
        // create; the first directory created is the events' root.
        let master_http = format!("127.0.0.1:{master_port}");
        let volume_http = format!("127.0.0.1:{volume_port}");
        let filer = system.filer.clone();
        wait_ready(
            &mut system.processes,
            &list(&logs),
            START_TIMEOUT,
            || async {
                if !volume_registered(&master_http, &volume_http).await {
                    bail!("the master does not list the volume server {volume_http}");
                }
                let mut client = connect(&filer).await?;
                create(&mut client, directory("/", "bench")).await
            },
        )
        .await?;
        let mut client = connect(&system.filer).await?;
        for d in 0..DIRECTORIES {
            create(&mut client, directory("/bench", &format!("d{d}"))).await?;
        }
        Ok(system)
    }
}

#[async_trait::async_trait]
impl super::System for Seaweedfs {
    fn kind(&self) -> Kind {
        Kind::Seaweedfs
    }

    /// `weed filer.meta.tail`: the filer's metadata log from the start (a
    /// decade ago: the filer is fresh), files under /bench only (`f*`; the
    /// directory creates are not bench events), each printed as indented
    /// protojson ending with a `}` alone on its line.
    fn tail_cli(&self) -> Option<super::TailCli> {
        let mut command = std::process::Command::new(&self.weed);
        command.args([
            "filer.meta.tail",
            &format!("-filer={}", self.filer_cli),
            "-pathPrefix=/bench/",
            "-pattern=f*",
            "-timeAgo=87600h",
        ]);
        Some(super::TailCli {
            command,
            terminator: b"\n}\n",
            payload: &["eventNotification", "newEntry", "content"],
        })
    }

    fn durability(&self, durable: bool) -> Durability {
        let _ = durable;
        "filer store write, no fsync; metadata log flushed to the volume server about once a minute"
    }

    fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// The server the subscribers talk to: the filer (after the master and the volume server).
    fn serving(&self) -> usize {
        2
    }

    /// SeaweedFS has no batched create: one event per request, `batch`
    /// ignored.
    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        _batch: usize,
        _durable: bool,
    ) -> Result<Histogram<u64>> {
        let filer = self.filer.clone();
        let (acks, _) = closed_loop(
            events,
            producers,
            1, // CreateEntry takes one entry
            || connect(&filer),
            move |mut client, request, sent| async move {
                create(&mut client, event(request.start, payload)).await?;
                let ack = Ack::since(sent, None);
                Ok((client, vec![ack]))
            },
        )
        .await?;
        Ok(acks)
    }

    fn appender(&self) -> Arc<dyn super::Appender> {
        Arc::new(Appender {
            addr: self.filer.clone(),
            client: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        subscribe_at(&self.filer, from).await
    }
}

/// A `SubscribeMetadata` stream under `/bench/` on the filer API at `addr`.
async fn subscribe_at(addr: &str, from: From) -> Result<Box<dyn super::Subscriber>> {
    // The filer's log is keyed by its own wall-clock ns (same host, same
    // clock as ours), and it replays entries stamped after `since_ns`.
    let since_ns = match from {
        From::Beginning => 0,
        From::Now => now_ns(),
        From::Resume { wall_ns, .. } => wall_ns,
    };
    // The filer keys subscribers by (client_name, client_id): each
    // subscription gets its own so none replaces another.
    static NEXT: AtomicI32 = AtomicI32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let client_id = (std::process::id() as i32).wrapping_mul(1 << 12) ^ n;
    let request = pb::SubscribeMetadataRequest {
        client_name: format!("ringfeed-bench-{}-{n}", std::process::id()),
        path_prefix: "/bench/".into(),
        since_ns,
        client_id,
        client_epoch: 1,
        ..Default::default()
    };
    let mut client = connect(addr).await?;
    // The position is fixed by `since_ns`, so the subscription is
    // established now whatever the stream does; the call is not awaited
    // here because the Go server may hold back the response headers
    // until it has a first event to send.
    let opening = tokio::spawn(async move {
        Ok(client
            .subscribe_metadata(request)
            .await
            .map_err(|e| anyhow!("SubscribeMetadata: {e}"))?
            .into_inner())
    });
    Ok(Box::new(Subscriber {
        opening: Some(opening),
        stream: None,
        pending: VecDeque::new(),
    }))
}

impl Drop for Seaweedfs {
    /// Filer first, so it can still flush its log to the volume server, and
    /// the master last. The filer does not stop on SIGTERM in practice: its
    /// gRPC graceful stop waits (up to 15 s, then forces) for its own
    /// metadata aggregator, which subscribes to the filer's local log and
    /// never ends, so `Process`'s 10 s grace runs out and it is SIGKILLed.
    fn drop(&mut self) {
        while let Some(p) = self.processes.pop() {
            drop(p);
        }
    }
}

fn list(logs: &[PathBuf]) -> String {
    logs.iter()
        .map(|l| l.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Creates single events over one shared connection.
#[derive(Clone)]
pub struct Appender {
    addr: String,
    client: Arc<tokio::sync::OnceCell<SeaweedFilerClient<Channel>>>,
}

#[async_trait::async_trait]
impl super::Appender for Appender {
    async fn append_one(&self, index: u64, payload: usize) -> Result<()> {
        let mut client = self
            .client
            .get_or_try_init(|| connect(&self.addr))
            .await?
            .clone();
        create(&mut client, event(index, payload)).await
    }
}

type Opening = JoinHandle<Result<Streaming<pb::SubscribeMetadataResponse>>>;

pub struct Subscriber {
    opening: Option<Opening>,
    stream: Option<Streaming<pb::SubscribeMetadataResponse>>,
    /// Events of a batched response not handed out yet.
    pending: VecDeque<pb::SubscribeMetadataResponse>,
}

#[async_trait::async_trait]
impl super::Subscriber for Subscriber {
    async fn next(&mut self) -> Result<Option<Delivered>> {
        if let Some(opening) = self.opening.take() {
            self.stream = Some(opening.await??);
        }
        let Some(stream) = self.stream.as_mut() else {
            bail!("the SubscribeMetadata stream failed to open earlier");
        };
        loop {
            let response = match self.pending.pop_front() {
                Some(response) => response,
                None => {
                    let Some(mut response) = stream
                        .message()
                        .await
                        .map_err(|e| anyhow!("SubscribeMetadata: {e}"))?
                    else {
                        return Ok(None);
                    };
                    self.pending.extend(std::mem::take(&mut response.events));
                    response
                }
            };
            if let Some(delivered) = delivered(&response)? {
                return Ok(Some(delivered));
            }
        }
    }

    /// A batched response's events together.
    async fn next_batch(&mut self, out: &mut Vec<Delivered>) -> Result<bool> {
        out.clear();
        let Some(first) = self.next().await? else {
            return Ok(false);
        };
        out.push(first);
        while let Some(response) = self.pending.pop_front() {
            if let Some(delivered) = delivered(&response)? {
                out.push(delivered);
            }
        }
        Ok(true)
    }
}

/// The bench's stamp in a file event; `None` for a directory's.
fn delivered(response: &pb::SubscribeMetadataResponse) -> Result<Option<Delivered>> {
    let path = || {
        let name = response
            .event_notification
            .as_ref()
            .and_then(|n| n.new_entry.as_ref().or(n.old_entry.as_ref()))
            .map_or("?", |e| e.name.as_str());
        format!("{}/{name} (ts_ns {})", response.directory, response.ts_ns)
    };
    let Some(entry) = response
        .event_notification
        .as_ref()
        .and_then(|n| n.new_entry.as_ref())
    else {
        bail!("an event without a new entry (a delete?) at {}", path());
    };
    if entry.is_directory {
        return Ok(None);
    }
    unstamp(&entry.content)
        .map(Some)
        .ok_or_else(|| anyhow!("a file event without the bench's stamp at {}", path()))
}

/// ringfeed in front of SeaweedFS: the same master, volume server and filer
/// (events created on the filer, as for [`Seaweedfs`]), and a ringfeed
/// server that follows the filer (`--follow-filer`) and serves its feed
/// (`--filer-listen`): subscribers' `SubscribeMetadata` streams go to
/// ringfeed, and the filer serves one stream, ringfeed's.
pub struct Fronted {
    weed: Seaweedfs,
    /// ringfeed's filer API, host:port.
    api: String,
    /// The filer's three, then ringfeed (stopped first).
    processes: Vec<Process>,
}

impl Fronted {
    pub async fn start(weed: &Path, dir: &Path) -> Result<Fronted> {
        let mut seaweedfs = Seaweedfs::start(weed, &dir.join("weed")).await?;
        let api = format!("127.0.0.1:{}", free_ports(1)?[0]);
        let (ringfeed, _) = super::ringfeed::spawn_server_with(
            &dir.join("ringfeed"),
            2,
            &[
                "--follow-filer",
                &seaweedfs.filer_cli,
                "--filer-listen",
                &api,
            ],
        )?;
        let mut processes = std::mem::take(&mut seaweedfs.processes);
        processes.push(ringfeed);
        Ok(Fronted {
            weed: seaweedfs,
            api,
            processes,
        })
    }
}

#[async_trait::async_trait]
impl super::System for Fronted {
    fn kind(&self) -> Kind {
        Kind::RingfeedSeaweedfs
    }

    fn durability(&self, durable: bool) -> Durability {
        let _ = durable;
        "filer store write, no fsync (as SeaweedFS); ringfeed stores each event with fdatasync before it reads on"
    }

    fn processes(&self) -> &[Process] {
        &self.processes
    }

    /// The server the subscribers talk to: ringfeed (after weed's three).
    fn serving(&self) -> usize {
        3
    }

    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        batch: usize,
        durable: bool,
    ) -> Result<Histogram<u64>> {
        super::System::append(&self.weed, events, payload, producers, batch, durable).await
    }

    fn appender(&self) -> Arc<dyn super::Appender> {
        super::System::appender(&self.weed)
    }

    async fn subscribe(&self, from: From) -> Result<Box<dyn super::Subscriber>> {
        subscribe_at(&self.api, from).await
    }
}

impl Drop for Fronted {
    /// ringfeed first, then the filer, the volume server and the master.
    fn drop(&mut self) {
        while let Some(p) = self.processes.pop() {
            drop(p);
        }
    }
}
