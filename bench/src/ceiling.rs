//! `ceiling`: the machine's own limits, measured in the same run as the
//! scenarios they bound:
//!
//! - O_DIRECT sequential write bandwidth of the data disk: 1 MiB writes, one
//!   fdatasync at the end (as `dd oflag=direct conv=fsync`), and with an
//!   fdatasync after every write (the floor of a durable ack per write);
//! - O_DIRECT sequential read bandwidth of the same file;
//! - fdatasync latency: a 4 KiB O_DIRECT write + fdatasync, repeated;
//! - memcpy bandwidth (64 MiB buffers; bytes copied, memory traffic is 2×);
//! - a bare tonic server stream of empty messages over loopback: the most
//!   messages per second gRPC carries here, with nothing of ringfeed in it;
//! - a bare tonic unary echo (a 220-byte message, about one event's append
//!   request) from 8 closed-loop producers, each on its own connection: calls
//!   per second and the server's CPU per call, the floor a unary append
//!   stands on (issue 18);
//! - the same echo served by hyper's HTTP/2 on glommio executors (two, one
//!   per core, accepting on one port with SO_REUSEPORT): issue 18's option 1
//!   spike, the floor a per-core server would stand on;
//! - a single-event unary append (memory acks) to an in-process 2-shard
//!   engine from the same 8 producers, served as `ringfeed serve` serves it
//!   (tonic on 2 tokio threads, each append crossing to its shard's thread
//!   and back) and as option 1 would (hyper's HTTP/2 on the shards' own
//!   executors, `Engine::run_on_shard`): the spike's verdict, in one run
//!   with the floors it is judged against.

use std::path::Path;
use std::time::{Duration, Instant};

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use glommio::io::DmaFile;
use hdrhistogram::Histogram;
use serde_json::json;

use ringfeed_proto::{v1, RingFeedClient, RingFeedServer};
use ringfeed_server::Service;

use crate::results::{Row, Run, Unit};
use crate::systems::Kind;

mod pb {
    tonic::include_proto!("ceiling");
}

/// Sizes of the measurements.
pub struct Sizes {
    /// Bytes written (then read) sequentially.
    pub write_bytes: u64,
    /// 4 KiB write + fdatasync repetitions.
    pub syncs: u64,
    /// memcpy repetitions of 64 MiB.
    pub copies: usize,
    /// Messages of the bare gRPC stream.
    pub messages: u64,
    /// How long the unary echo runs.
    pub echo: Duration,
}

pub fn ceiling(dir: &Path, sizes: Sizes) -> Result<Run> {
    let mut run = Run::new(
        "ceiling",
        json!({
            "write_mib": sizes.write_bytes >> 20,
            "syncs": sizes.syncs,
            "memcpy_reps": sizes.copies,
            "grpc_messages": sizes.messages,
        }),
    );
    crate::util::fresh_dir(dir)?;
    let write_bytes = sizes.write_bytes;
    let syncs = sizes.syncs;
    let path = dir.join("ceiling.dat");
    let disk =
        crate::util::on_glommio(move || async move { disk(&path, write_bytes, syncs).await })?;
    run.rows.extend(disk);
    run.rows.push(memcpy(sizes.copies));
    run.rows.push(grpc_stream(sizes.messages)?);
    run.rows.push(grpc_echo(sizes.echo)?);
    run.rows.push(grpc_echo_glommio(sizes.echo)?);
    run.rows
        .push(grpc_append_tokio(&dir.join("append-tokio"), sizes.echo)?);
    run.rows.push(grpc_append_on_shards(
        &dir.join("append-shards"),
        sizes.echo,
    )?);
    let _ = std::fs::remove_dir_all(dir);
    Ok(run)
}

fn io<T>(r: glommio::Result<T, ()>) -> Result<T> {
    r.map_err(|e| anyhow!("{e}"))
}

const BLOCK: usize = 1 << 20;

async fn disk(path: &Path, total: u64, syncs: u64) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    // Read and write: `DmaFile::create` opens write-only.
    let file: DmaFile = io(glommio::io::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(path)
        .await)?;
    io(file.pre_allocate(total, false).await)?;
    // Sequential write, one sync at the end.
    let started = Instant::now();
    let mut pos = 0;
    while pos < total {
        let mut buf = file.alloc_dma_buffer(BLOCK);
        buf.as_bytes_mut().fill(0x5a);
        io(file.write_at(buf, pos).await)?;
        pos += BLOCK as u64;
    }
    io(file.fdatasync().await)?;
    let secs = started.elapsed().as_secs_f64();
    let mut row = Row::new(Kind::Machine, "O_DIRECT write 1 MiB, one fdatasync", "disk");
    row.figure("MiB", (total >> 20) as f64)
        .figure("MB/s", total as f64 / secs / 1e6);
    rows.push(row);

    // Sequential read of the same file.
    let secs = direct_read(path, total)?;
    let mut row = Row::new(Kind::Machine, "O_DIRECT read 1 MiB", "disk");
    row.figure("MiB", (total >> 20) as f64)
        .figure("MB/s", total as f64 / secs / 1e6);
    rows.push(row);

    // Sequential write with an fdatasync after every 1 MiB write.
    let started = Instant::now();
    let mut pos = 0;
    let mut each = Histogram::<u64>::new(3)?;
    while pos < total {
        let mut buf = file.alloc_dma_buffer(BLOCK);
        buf.as_bytes_mut().fill(0x5b);
        let t = Instant::now();
        io(file.write_at(buf, pos).await)?;
        io(file.fdatasync().await)?;
        each.record(t.elapsed().as_micros() as u64)?;
        pos += BLOCK as u64;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut row = Row::new(
        Kind::Machine,
        "O_DIRECT write 1 MiB + fdatasync each",
        "disk",
    );
    row.figure("MiB", (total >> 20) as f64)
        .figure("MB/s", total as f64 / secs / 1e6)
        .hist_short("write+sync", each, Unit::MicrosAsMs);
    rows.push(row);

    // fdatasync latency: 4 KiB writes, each synced.
    let mut lat = Histogram::<u64>::new(3)?;
    for i in 0..syncs {
        let mut buf = file.alloc_dma_buffer(4096);
        buf.as_bytes_mut().fill(0x5c);
        let t = Instant::now();
        io(file.write_at(buf, (i * 4096) % total.max(4096)).await)?;
        io(file.fdatasync().await)?;
        lat.record(t.elapsed().as_micros() as u64)?;
    }
    let mut row = Row::new(Kind::Machine, "4 KiB O_DIRECT write + fdatasync", "disk");
    row.figure("syncs/s", 1e6 / lat.mean().max(1.0))
        .hist_short("write+sync", lat, Unit::Micros);
    rows.push(row);
    io(file.close().await)?;
    std::fs::remove_file(path)?;
    Ok(rows)
}

/// Reads `total` bytes of `path` with 1 MiB O_DIRECT `pread`s; seconds taken.
///
/// Not through glommio: its DMA reads go to the io_uring poll ring, and on
/// this machine's virtio disk (no polled queues) every one fails with
/// EOPNOTSUPP (os error 95). Writes take the main ring and work.
fn direct_read(path: &Path, total: u64) -> Result<f64> {
    use std::os::unix::fs::{FileExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .with_context(|| format!("opening {} with O_DIRECT", path.display()))?;
    // O_DIRECT wants an aligned buffer: an anonymous mapping is page-aligned.
    let mut buf = memmap2::MmapMut::map_anon(BLOCK).context("mapping an aligned buffer")?;
    let started = Instant::now();
    let mut pos = 0;
    let result = loop {
        if pos >= total {
            break Ok(started.elapsed().as_secs_f64());
        }
        match file.read_at(&mut buf, pos) {
            Ok(0) => break Err(anyhow!("{} ended at {pos}", path.display())),
            Ok(n) => pos += n as u64,
            Err(e) => break Err(anyhow!("O_DIRECT read of {}: {e}", path.display())),
        }
    };
    result
}

fn memcpy(reps: usize) -> Row {
    const SIZE: usize = 64 << 20;
    let src = vec![0x5du8; SIZE];
    let mut dst = vec![0u8; SIZE];
    dst.copy_from_slice(&src); // fault the pages in before timing
    let mut rates = Vec::new();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
        rates.push(SIZE as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    let best = rates.iter().copied().fold(0.0, f64::max);
    let mut row = Row::new(Kind::Machine, "memcpy 64 MiB", "memory");
    row.figure("GB/s median", crate::util::median(rates))
        .figure("GB/s best", best);
    row
}

struct Streamer;

#[tonic::async_trait]
impl pb::ceiling_server::Ceiling for Streamer {
    async fn echo(
        &self,
        request: tonic::Request<pb::Blob>,
    ) -> Result<tonic::Response<pb::Blob>, tonic::Status> {
        Ok(tonic::Response::new(request.into_inner()))
    }

    type StreamStream = tokio_stream::Iter<std::iter::RepeatN<Result<pb::Empty, tonic::Status>>>;

    async fn stream(
        &self,
        request: tonic::Request<pb::Count>,
    ) -> Result<tonic::Response<Self::StreamStream>, tonic::Status> {
        let n = request.into_inner().messages as usize;
        Ok(tonic::Response::new(tokio_stream::iter(
            std::iter::repeat_n(Ok(pb::Empty {}), n),
        )))
    }
}

/// Producers of the unary echo, each with its own connection.
const ECHO_PRODUCERS: usize = 8;
/// The echo's message: about one 200-byte event's append request.
const ECHO_BYTES: usize = 220;
/// The echo server's threads, by name, for their CPU time.
const ECHO_SERVER_THREAD: &str = "echo-server";

/// The bare unary floor: a tonic server answering each message with itself,
/// on its own 2-thread runtime (as `ringfeed serve`'s network threads), and 8
/// closed-loop producers on another, over loopback with Nagle off on both
/// sides. Server CPU is the server runtime's threads' own (user + system),
/// from /proc, over the measured seconds.
fn grpc_echo(seconds: Duration) -> Result<Row> {
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(ECHO_SERVER_THREAD)
        .enable_all()
        .build()?;
    let listener = server.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    server.spawn(
        tonic::transport::Server::builder()
            .tcp_nodelay(true)
            .add_service(pb::ceiling_server::CeilingServer::new(Streamer))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let load = closed_loop(addr, seconds, &[ECHO_SERVER_THREAD], echo_call())?;
    drop(server);
    Ok(load.row("tonic unary echo, 220-byte message, 8 producers"))
}

/// The glommio echo's executors, by thread name prefix.
const ECHO_GLOMMIO_THREAD: &str = "echo-glommio";

/// The same echo on hyper's HTTP/2 and tonic's generated service, served by
/// two glommio executors (one per core, unpinned) that accept on one port
/// (glommio binds with SO_REUSEPORT, so the kernel spreads connections).
fn grpc_echo_glommio(seconds: Duration) -> Result<Row> {
    let stop = Arc::new(AtomicBool::new(false));
    let (port_tx, port_rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut executors = Vec::new();
    let mut port = 0;
    for _ in 0..2 {
        let (stop, port_tx, done_tx) = (stop.clone(), port_tx.clone(), done_tx.clone());
        let executor = glommio::LocalExecutorBuilder::new(glommio::Placement::Unbound)
            .name(ECHO_GLOMMIO_THREAD)
            .spawn(move || async move {
                let service = pb::ceiling_server::CeilingServer::new(Streamer);
                crate::hyper_glommio::serve(port, service, stop, port_tx, done_tx).await;
            })
            .map_err(|e| anyhow!("starting a glommio executor: {e}"))?;
        executors.push(executor);
        port = bound_port(&port_rx, "the glommio echo")?;
    }
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let load = closed_loop(addr, seconds, &[ECHO_GLOMMIO_THREAD], echo_call());
    stop_accepting(addr, &stop, &done_rx, executors.len())?;
    for executor in executors {
        executor
            .join()
            .map_err(|e| anyhow!("a glommio executor: {e}"))?;
    }
    Ok(load?.row("hyper HTTP/2 on glommio, unary echo, 220-byte message, 8 producers"))
}

/// The engine's shard threads, by name prefix.
const SHARD_THREAD: &str = "ringfeed-shard";
/// The tokio threads serving the in-process engine.
const APPEND_TOKIO_THREAD: &str = "append-tokio";
/// The appended event's payload.
const APPEND_EVENT_BYTES: usize = 200;

/// One single-event unary append (memory acks) of a 200-byte event, its
/// directory one of 64, so the producers' events spread over the shards.
fn append_call() -> Call {
    Arc::new(|channel, n| {
        Box::pin(async move {
            let request = v1::AppendRequest {
                events: vec![crate::systems::ringfeed_event(n, APPEND_EVENT_BYTES)],
                ..Default::default()
            };
            let answer = RingFeedClient::new(channel)
                .append(request)
                .await?
                .into_inner();
            if answer.positions.len() != 1 {
                bail!("an append answered {} positions", answer.positions.len());
            }
            Ok(())
        })
    })
}

/// Today's layout, in this process: a 2-shard engine over `dir` served by
/// tonic on a 2-thread tokio runtime (as `ringfeed serve`), so each append
/// crosses from a tokio thread to its shard's and back. Server CPU is the
/// tokio and shard threads'.
fn grpc_append_tokio(dir: &Path, seconds: Duration) -> Result<Row> {
    crate::util::fresh_dir(dir)?;
    let engine = crate::grpc::open_engine(dir)?;
    let server = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(APPEND_TOKIO_THREAD)
        .enable_all()
        .build()?;
    let listener = server.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let (_stop, stop_rx) = tokio::sync::watch::channel(false);
    let service = Service::new(engine.clone(), stop_rx, Default::default());
    server.spawn(
        tonic::transport::Server::builder()
            .add_service(RingFeedServer::new(service))
            .serve_with_incoming(ringfeed_server::incoming(listener)),
    );
    let load = closed_loop(
        addr,
        seconds,
        &[APPEND_TOKIO_THREAD, SHARD_THREAD],
        append_call(),
    )?;
    drop(server);
    Ok(load.row("ringfeed unary append, 200-byte event, memory acks, 8 producers: tonic on 2 tokio threads, 2 shards"))
}

/// Issue 18's option 1 spike: the same engine and service, served by hyper's
/// HTTP/2 on the shards' own glommio executors (one listener per shard, one
/// port, SO_REUSEPORT), so an append for the shard that accepted its
/// connection never leaves that thread, and one for another shard crosses
/// once each way. Server CPU is the shard threads'.
fn grpc_append_on_shards(dir: &Path, seconds: Duration) -> Result<Row> {
    crate::util::fresh_dir(dir)?;
    let engine = crate::grpc::open_engine(dir)?;
    let stop = Arc::new(AtomicBool::new(false));
    let (_stop_streams, stop_rx) = tokio::sync::watch::channel(false);
    let (port_tx, port_rx) = std::sync::mpsc::channel::<Result<u16, String>>();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mut port = 0;
    for shard in 0..engine.shard_count() {
        let service = RingFeedServer::new(Service::new(
            engine.clone(),
            stop_rx.clone(),
            Default::default(),
        ));
        let (stop, port_tx, done_tx) = (stop.clone(), port_tx.clone(), done_tx.clone());
        engine
            .run_on_shard(shard, move || {
                glommio::spawn_local(crate::hyper_glommio::serve(
                    port, service, stop, port_tx, done_tx,
                ))
                .detach();
            })
            .map_err(|e| anyhow!("starting the server on shard {shard}: {e}"))?;
        port = bound_port(&port_rx, &format!("the server on shard {shard}"))?;
    }
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let load = closed_loop(addr, seconds, &[SHARD_THREAD], append_call());
    stop_accepting(addr, &stop, &done_rx, engine.shard_count() as usize)?;
    // The connections' tasks hold the service, and so the engine, until their
    // clients hang up (the producers have, with their runtime); the engine's
    // last reference must go here: dropped on a shard, it would join that
    // shard's thread from itself.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&engine) > 1 {
        if Instant::now() > deadline {
            bail!("the shard servers' connections still hold the engine after 10 s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(load?.row("ringfeed unary append, 200-byte event, memory acks, 8 producers: hyper HTTP/2 on the 2 shards' glommio executors (spike)"))
}

/// The port a [`crate::hyper_glommio::serve`] reported on `bound` (`who`
/// names it in errors), waiting at most 10 s.
fn bound_port(bound: &std::sync::mpsc::Receiver<Result<u16, String>>, who: &str) -> Result<u16> {
    bound
        .recv_timeout(Duration::from_secs(10))
        .with_context(|| format!("{who} did not report its listener"))?
        .map_err(|e| anyhow!("{who}: listening: {e}"))
}

/// Stops `servers` accept loops of [`crate::hyper_glommio::serve`] on `addr`
/// sharing `stop`, each of which sends on `done` when it ends: each sees the
/// flag at its next connection, and the kernel picks the listener of each
/// connection by its addresses, so this connects until all have seen one.
fn stop_accepting(
    addr: std::net::SocketAddr,
    stop: &AtomicBool,
    done: &std::sync::mpsc::Receiver<()>,
    servers: usize,
) -> Result<()> {
    stop.store(true, std::sync::atomic::Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut stopped = 0;
    while stopped < servers {
        stopped += done.try_iter().count();
        if Instant::now() > deadline {
            bail!("the glommio servers' accept loops did not stop within 10 s");
        }
        if stopped < servers {
            let _ = std::net::TcpStream::connect(addr);
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    Ok(())
}

/// What an echo load measured.
struct EchoLoad {
    calls: u64,
    server_cpu: Duration,
    elapsed: Duration,
}

impl EchoLoad {
    fn row(&self, name: &str) -> Row {
        let mut row = Row::new(Kind::Machine, name, "loopback");
        row.figure("calls/s", self.calls as f64 / self.elapsed.as_secs_f64())
            .figure(
                "server CPU us per call",
                self.server_cpu.as_secs_f64() * 1e6 / self.calls.max(1) as f64,
            );
        row
    }
}

/// One call of a closed-loop producer over its channel (`n`: the calls it
/// made before this one).
type Call = Arc<
    dyn Fn(tonic::transport::Channel, u64) -> futures_util::future::BoxFuture<'static, Result<()>>
        + Send
        + Sync,
>;

/// The echo's call: 220 bytes out, the same back.
fn echo_call() -> Call {
    Arc::new(|channel, _| {
        Box::pin(async move {
            let blob = pb::Blob {
                data: vec![7; ECHO_BYTES],
            };
            let answer = pb::ceiling_client::CeilingClient::new(channel)
                .echo(blob)
                .await?
                .into_inner();
            if answer.data.len() != ECHO_BYTES {
                bail!("the echo answered {} bytes", answer.data.len());
            }
            Ok(())
        })
    })
}

/// 8 closed-loop producers, each on its own connection (Nagle off), make
/// `call` at `addr` for `seconds`; the server's CPU is that of this process's
/// threads whose names start with any of `server_threads`.
fn closed_loop(
    addr: std::net::SocketAddr,
    seconds: Duration,
    server_threads: &[&str],
    call: Call,
) -> Result<EchoLoad> {
    let clients = crate::util::runtime()?;
    clients.block_on(async {
        let mut producers = Vec::new();
        for _ in 0..ECHO_PRODUCERS {
            let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await?;
            producers.push(channel);
        }
        // Warm up every connection, then measure.
        for channel in &producers {
            call(channel.clone(), 0).await?;
        }
        let cpu_before = threads_cpu(server_threads)?;
        let started = Instant::now();
        let deadline = started + seconds;
        let tasks: Vec<_> = producers
            .into_iter()
            .map(|channel| {
                let call = call.clone();
                tokio::spawn(async move {
                    let mut calls = 0u64;
                    while Instant::now() < deadline {
                        call(channel.clone(), calls + 1).await?;
                        calls += 1;
                    }
                    Ok::<u64, anyhow::Error>(calls)
                })
            })
            .collect();
        let mut calls = 0;
        for task in tasks {
            calls += task.await??;
        }
        let elapsed = started.elapsed();
        let server_cpu = threads_cpu(server_threads)? - cpu_before;
        Ok(EchoLoad {
            calls,
            server_cpu,
            elapsed,
        })
    })
}

/// CPU time (user + system) of this process's threads whose names start
/// with any of `names`.
fn threads_cpu(names: &[&str]) -> Result<Duration> {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task")? {
        let path = task?.path();
        let comm = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        if names.iter().any(|name| comm.starts_with(name)) {
            let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
            ticks += crate::util::stat_cpu_ticks(&stat);
        }
    }
    Ok(Duration::from_millis(
        ticks * 1000 / crate::util::CLOCK_TICKS_PER_SECOND,
    ))
}

fn grpc_stream(messages: u64) -> Result<Row> {
    crate::util::runtime()?.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(pb::ceiling_server::CeilingServer::new(Streamer))
                .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
        );
        let mut client = pb::ceiling_client::CeilingClient::connect(format!("http://{addr}"))
            .await
            .map_err(|e| anyhow!("{e}"))?;
        let mut rates = Vec::new();
        for _ in 0..3 {
            let started = Instant::now();
            let mut stream = client
                .stream(pb::Count { messages })
                .await
                .map_err(|e| anyhow!("{e}"))?
                .into_inner();
            let mut n = 0u64;
            while let Some(_m) = tokio::time::timeout(Duration::from_secs(30), stream.message())
                .await
                .map_err(|_| anyhow!("the bare stream stalled"))?
                .map_err(|e| anyhow!("{e}"))?
            {
                n += 1;
            }
            if n != messages {
                return Err(anyhow!("the bare stream gave {n} of {messages} messages"));
            }
            rates.push(n as f64 / started.elapsed().as_secs_f64());
        }
        let mut row = Row::new(
            Kind::Machine,
            "tonic server stream, empty messages",
            "loopback",
        );
        row.figure("messages", messages as f64)
            .figure("messages/s median of 3", crate::util::median(rates));
        Ok(row)
    })
}
