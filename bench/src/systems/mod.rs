//! The systems the scenarios run against, behind one interface, so that
//! `compare` gives each the same workload: the same events (numbered, same
//! payload size), the same producers, the same subscribers.
//!
//! Every event carries its number and its send time (wall-clock ns) in the
//! first 16 bytes of its payload ([`stamp`]); a subscriber hands out
//! [`Delivered`] (number, send time), from which the scenarios check
//! exactness and measure append-to-delivery latency the same way for all.
//!
//! Each system runs on loopback with its data in the scenario's temp dir and
//! is stopped when dropped. A system whose binary is not installed is
//! *skipped* ([`System::start`] returns [`Start::Skipped`]), never faked.

#[cfg(feature = "peers")]
mod etcd;
#[cfg(feature = "peers")]
mod nats;
pub mod process;
mod ringfeed;
pub use ringfeed::{connect as ringfeed_connect, spawn_server, spawn_server_on, spawn_server_with};
#[cfg(feature = "peers")]
mod seaweedfs;

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use hdrhistogram::Histogram;
// What only the peers' adapters use (built with the `peers` feature).
#[cfg(feature = "peers")]
use anyhow::{anyhow, bail};
#[cfg(feature = "peers")]
use std::{
    collections::BTreeMap,
    future::Future,
    path::PathBuf,
    time::{Duration, Instant},
};

pub use process::Process;
/// The bench's ringfeed event (also what `metrics-cost` appends).
pub use ringfeed::event as ringfeed_event;

/// Which system.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Ringfeed,
    Seaweedfs,
    Etcd,
    Nats,
    // ringfeed in front of SeaweedFS: events created on the filer, read
    // through ringfeed's filer API (`--follow-filer`, `--filer-listen`).
    // Not in `Kind::ALL`: run with `--system ringfeed-seaweedfs`. (A doc
    // comment here would be clap's help for the value, and turn every
    // scenario's --help into the long layout.)
    RingfeedSeaweedfs,
    /// Not a system: the machine's own limits (`ceiling`).
    #[value(skip)]
    Machine,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Ringfeed, Kind::Seaweedfs, Kind::Etcd, Kind::Nats];

    /// Whether the system's acknowledged appends are synced to disk (fsync)
    /// before the ack: etcd syncs its WAL; NATS JetStream syncs periodically
    /// and the SeaweedFS filer not at all, so their acks are memory acks.
    /// `None` for ringfeed, which offers both (a row's variant says which),
    /// and for what is not a system.
    pub fn syncs_acks(self) -> Option<bool> {
        match self {
            Kind::Etcd => Some(true),
            Kind::Nats | Kind::Seaweedfs | Kind::RingfeedSeaweedfs => Some(false),
            Kind::Ringfeed | Kind::Machine => None,
        }
    }

    pub fn from_name(name: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .chain([Kind::RingfeedSeaweedfs, Kind::Machine])
            .find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Ringfeed => "ringfeed",
            Kind::Seaweedfs => "seaweedfs",
            Kind::Etcd => "etcd",
            Kind::Nats => "nats",
            Kind::RingfeedSeaweedfs => "ringfeed-seaweedfs",
            Kind::Machine => "machine",
        }
    }
}

/// Where a subscriber starts.
#[derive(Clone, Copy, Debug)]
pub enum From {
    /// The first event ever appended.
    Beginning,
    /// Only events appended after the subscription is established.
    Now,
    /// The event numbered `index`, which was appended after wall-clock
    /// `wall_ns` (taken just before it was sent): each system resumes from
    /// its native position for it (a stamp, a revision, a stream sequence).
    ///
    /// Contract: `index` is the first event of a [`System::append`] call
    /// (the scenarios append the resume window in a call of its own). etcd
    /// and NATS number events by their own counters in arrival order, which
    /// concurrent producers shuffle; what is exact is that every event of an
    /// `append` call lands after every event of the calls before it, so each
    /// call's lowest revision / stream sequence ([`ResumePoints`]) is where
    /// its first event's successors start.
    Resume {
        // Read by the peers' adapters only (ringfeed resumes by time).
        #[cfg_attr(not(feature = "peers"), allow(dead_code))]
        index: u64,
        wall_ns: i64,
    },
}

/// One event as a subscriber got it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The producer's number for the event.
    pub index: u64,
    /// When the producer built the request carrying it (wall-clock ns).
    pub sent_ns: i64,
}

/// How a system acknowledges appends, for the tables.
pub type Durability = &'static str;

/// A command-line tail as the bench runs it.
pub struct TailCli {
    pub command: std::process::Command,
    /// What ends each printed object (counted while it runs, to know when
    /// every event is out): `\n` for one object per line.
    pub terminator: &'static [u8],
    /// Keys from the root to the base64 field holding the stored payload.
    pub payload: &'static [&'static str],
}

/// The bench event number in a JSON object's base64 field at `path` (keys
/// from the root), e.g. a tail's printed payload.
pub fn json_stamp(value: &serde_json::Value, path: &[&str]) -> Option<u64> {
    use base64::Engine as _;
    let field = path.iter().try_fold(value, |v, key| v.get(key))?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(field)
        .ok()?;
    unstamp(&bytes).map(|d| d.index)
}

/// The bytes every system stores as one event's payload: `index` and
/// `sent_ns` (little-endian), then filler up to `len` (at least 16).
pub fn stamp(index: u64, sent_ns: i64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len.max(16));
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(&sent_ns.to_le_bytes());
    v.resize(len.max(16), 0x61);
    v
}

/// The number and send time of a payload made by [`stamp`].
pub fn unstamp(payload: &[u8]) -> Option<Delivered> {
    let index = u64::from_le_bytes(payload.get(..8)?.try_into().ok()?);
    let sent_ns = i64::from_le_bytes(payload.get(8..16)?.try_into().ok()?);
    Some(Delivered { index, sent_ns })
}

/// What starting a system gave.
pub enum Start {
    Running(Box<dyn System>),
    /// Not installed here (the reason, e.g. "etcd not on PATH").
    Skipped(String),
}

/// A running system: what every scenario asks of ringfeed and of each peer,
/// one implementation per system (`ringfeed.rs`, `etcd.rs`, `nats.rs`,
/// `seaweedfs.rs`). Appends go through [`closed_loop`], so every system gets
/// the same producers.
#[async_trait::async_trait]
pub trait System: Send + Sync {
    fn kind(&self) -> Kind;

    /// How acknowledged appends are kept, in words.
    fn durability(&self, durable: bool) -> Durability;

    /// The processes the bench started for this system (empty against a
    /// `--target`).
    fn processes(&self) -> &[Process];

    /// Which of [`System::processes`] serves the clients: its CPU time and
    /// memory are the "server" figures a comparison takes (a system of
    /// several processes reports the others' beside it).
    fn serving(&self) -> usize {
        0
    }

    /// Subscribers made after this catch up in chunk mode (ringfeed only;
    /// the other systems have no such mode and ignore it).
    fn set_chunk_mode(&mut self, _on: bool) {}

    /// Appends the events numbered `events`, each with a `payload`-byte
    /// payload, with `producers` concurrent producers, each sending requests
    /// of up to `batch` events in a closed loop (etcd and SeaweedFS, without
    /// batched appends, send one event per request; NATS, whose publishes are
    /// single events, pipelines `batch` of them and waits for all their acks).
    /// `durable` asks ringfeed for fdatasync'ed acks. Returns each request's
    /// (NATS: each publish's) ack latency in µs.
    async fn append(
        &self,
        events: Range<u64>,
        payload: usize,
        producers: usize,
        batch: usize,
        durable: bool,
    ) -> Result<Histogram<u64>>;

    /// Appends the events numbered `events`, one event per request, with
    /// `producers` concurrent producers, each keeping up to `window` requests
    /// in flight, each acknowledged on its own ([`pipelined_loop`]): ringfeed
    /// on `AppendStream`, NATS with async acked publishes. Returns each
    /// event's ack latency in µs; `None` for a system whose adapter does not
    /// pipeline (etcd, SeaweedFS: the case is not run for them).
    async fn append_pipelined(
        &self,
        _events: Range<u64>,
        _payload: usize,
        _producers: usize,
        _window: usize,
        _durable: bool,
    ) -> Option<Result<Histogram<u64>>> {
        None
    }

    /// fdatasyncs the system has made so far, for a system that counts them
    /// and was started by the bench (ringfeed: its metrics); `None` otherwise.
    async fn syncs(&self) -> Option<Result<u64>> {
        None
    }

    /// Chunk-mode responses the server has sent so far, and the backlog in
    /// bytes past which a chunk-mode catch-up must get chunks (what the
    /// server's open windows cannot hold), for a server the bench started
    /// (ringfeed: its metrics); `None` otherwise.
    async fn chunks_sent(&self) -> Option<Result<(u64, u64)>> {
        None
    }

    /// The system's own command-line tail, following everything from the
    /// beginning and printing one JSON object per event (ringfeed: `ringfeed
    /// tail --beginning`, one per line; SeaweedFS: `weed
    /// filer.meta.tail`, pretty-printed), or `None` for a system without one
    /// the bench runs.
    fn tail_cli(&self) -> Option<TailCli> {
        None
    }

    /// A cheap, shareable handle appending single events (open-loop producers).
    fn appender(&self) -> Arc<dyn Appender>;

    /// A subscription from `from`. It is established (the system has
    /// accepted it) when this returns, so a `From::Now` subscriber sees every
    /// event appended afterwards.
    async fn subscribe(&self, from: From) -> Result<Box<dyn Subscriber>>;

    /// Waits until `k` subscribers just started (`From::Now`, none sent an
    /// event yet) wait at the live edge, as far as the system shows it, so
    /// a live measurement does not time their connecting; fails after
    /// `limit`. A system whose `subscribe` returns with the subscription
    /// waiting at the edge (etcd's watch once `created`, NATS's consumer,
    /// SeaweedFS's stream once opened) has nothing to wait for.
    async fn at_live_edge(&self, _k: usize, _limit: std::time::Duration) -> Result<()> {
        Ok(())
    }
}

/// Appends single events: call it from spawned tasks.
#[async_trait::async_trait]
pub trait Appender: Send + Sync {
    /// Appends event `index` with a `payload`-byte payload stamped with the
    /// current time; returns when acknowledged.
    async fn append_one(&self, index: u64, payload: usize) -> Result<()>;
}

/// A subscription on a running system.
#[async_trait::async_trait]
pub trait Subscriber: Send {
    /// The next event, waiting for it; `None` if the system ended the
    /// subscription cleanly.
    async fn next(&mut self) -> Result<Option<Delivered>>;

    /// The events at hand into `out` (cleared first), waiting for at least
    /// one: as many as the system's client hands out together (a
    /// response's), one where it hands out events one by one. `Ok(false)`
    /// if the system ended the subscription cleanly. What the scenarios
    /// read with: one wait (and one boxed future) per batch, not per event.
    async fn next_batch(&mut self, out: &mut Vec<Delivered>) -> Result<bool> {
        out.clear();
        match self.next().await? {
            Some(delivered) => {
                out.push(delivered);
                Ok(true)
            }
            None => Ok(false),
        }
    }
}

/// Options of a ringfeed-side run; the other systems have no equivalent and
/// ignore them.
#[derive(Clone, Debug, Default)]
pub struct RingfeedOptions {
    /// An already running server ("host:port"); otherwise the bench starts
    /// `ringfeed serve` (the binary next to the bench's) in the temp dir.
    pub target: Option<String>,
    /// Subscribers catch up in chunk mode.
    pub chunk_mode: bool,
    /// Shards of the server the bench starts.
    pub shards: u32,
    /// Its `window_bytes`, when not the server's default.
    pub window_bytes: Option<usize>,
}

/// Starts `kind` on loopback with its data under `dir` (created empty),
/// and waits until it accepts appends.
pub async fn start(kind: Kind, dir: &Path, options: &RingfeedOptions) -> Result<Start> {
    crate::util::fresh_dir(dir)?;
    let system: Box<dyn System> = match kind {
        Kind::Ringfeed => Box::new(ringfeed::Ringfeed::start(dir, options).await?),
        Kind::Machine => anyhow::bail!("the machine is not a system to start"),
        #[cfg(not(feature = "peers"))]
        Kind::Etcd | Kind::Nats | Kind::Seaweedfs | Kind::RingfeedSeaweedfs => {
            return Ok(Start::Skipped(format!(
                "{} not built in (the bench was built without its `peers` feature: \
                 cargo build --release -p ringfeed-bench --features peers)",
                kind.name()
            )))
        }
        #[cfg(feature = "peers")]
        Kind::Etcd => match find_binary("etcd") {
            Some(binary) => Box::new(etcd::Etcd::start(&binary, dir).await?),
            None => return Ok(Start::Skipped(not_installed("etcd"))),
        },
        #[cfg(feature = "peers")]
        Kind::Nats => match find_binary("nats-server") {
            Some(binary) => Box::new(nats::Nats::start(&binary, dir).await?),
            None => return Ok(Start::Skipped(not_installed("nats-server"))),
        },
        #[cfg(feature = "peers")]
        Kind::Seaweedfs => match find_binary("weed") {
            Some(weed) => Box::new(seaweedfs::Seaweedfs::start(&weed, dir).await?),
            None => return Ok(Start::Skipped(not_installed("weed"))),
        },
        #[cfg(feature = "peers")]
        Kind::RingfeedSeaweedfs => match find_binary("weed") {
            Some(weed) => Box::new(seaweedfs::Fronted::start(&weed, dir).await?),
            None => return Ok(Start::Skipped(not_installed("weed"))),
        },
    };
    Ok(Start::Running(system))
}

#[cfg(feature = "peers")]
/// Where a peer's binary is: on PATH, else in /usr/sbin, where Debian's
/// nats-server package puts it (not on an ordinary user's PATH).
fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin")])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(feature = "peers")]
fn not_installed(binary: &str) -> String {
    format!("{binary} not installed (bench/peers/install.sh installs it)")
}

/// `n` distinct loopback ports that were free a moment ago (all bound at
/// once, so none repeats, then released), for peers (and ringfeed nodes)
/// that must be told their ports. Another process could take one before the
/// peer binds it; the peer then fails to start and says so in its log.
pub(crate) fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

#[cfg(feature = "peers")]
/// How long a started peer may take to accept its first request.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(feature = "peers")]
/// Retries `attempt` every 100 ms until it succeeds, for at most `timeout`,
/// and gives up at once if one of `processes` exits: a peer has started when
/// it answers a real request, not when its port opens. `logs` names where
/// to look when it does not.
async fn wait_ready<T, F, Fut>(
    processes: &mut [Process],
    logs: &str,
    timeout: Duration,
    mut attempt: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match tokio::time::timeout(Duration::from_secs(5), attempt()).await {
            Ok(Ok(ready)) => return Ok(ready),
            Ok(Err(e)) => e,
            Err(_) => anyhow!("no answer within 5 s"),
        };
        if let Some(p) = processes
            .iter_mut()
            .find_map(|p| (!p.running()).then_some(p))
        {
            bail!("{} exited during start; see {logs}", p.name);
        }
        if Instant::now() >= deadline {
            let names: Vec<&str> = processes.iter().map(|p| p.name.as_str()).collect();
            bail!(
                "{} not ready within {timeout:?} ({last:#}); see {logs}",
                names.join(", ")
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The events producer `p` of `producers` sends when `events` are cut into
/// requests of `batch` events dealt round-robin: requests p, p + producers, …
fn producer_batches(
    events: Range<u64>,
    producers: u64,
    batch: u64,
    p: u64,
) -> impl Iterator<Item = Range<u64>> {
    let (batch, producers) = (batch.max(1), producers.max(1));
    (events.start + p * batch..events.end)
        .step_by((batch * producers) as usize)
        .map(move |first| first..(first + batch).min(events.end))
}

/// One acknowledgement a producer got: its latency from the request's send,
/// and the position the system gave the event if it numbers events itself
/// (etcd's revision, a JetStream stream sequence).
pub(super) struct Ack {
    pub latency: std::time::Duration,
    pub position: Option<u64>,
}

impl Ack {
    /// The ack of a request sent at `sent`, arriving now.
    pub fn since(sent: std::time::Instant, position: Option<u64>) -> Ack {
        Ack {
            latency: sent.elapsed(),
            position,
        }
    }
}

/// The closed loop every system's `append` runs, so `compare` gives each the
/// same producers: `producers` tasks, each with a client of its own from
/// `connect`, sending its share of `events` (requests of `batch` events dealt
/// round-robin, [`producer_batches`]) one request at a time. `send` takes the
/// client, the request's events and when it was sent, and gives the client
/// back with the acknowledgements it got (one per request, or one per event
/// for a system whose requests are single events pipelined). Returns every
/// ack's latency (µs) and the lowest position any ack carried.
pub(super) async fn closed_loop<C, Conn, ConnFut, Send, SendFut>(
    events: Range<u64>,
    producers: usize,
    batch: usize,
    mut connect: Conn,
    send: Send,
) -> Result<(Histogram<u64>, Option<u64>)>
where
    C: std::marker::Send + 'static,
    Conn: FnMut() -> ConnFut,
    ConnFut: std::future::Future<Output = Result<C>>,
    Send: Fn(C, Range<u64>, std::time::Instant) -> SendFut + Clone + std::marker::Send + 'static,
    SendFut: std::future::Future<Output = Result<(C, Vec<Ack>)>> + std::marker::Send,
{
    let producers = producers.max(1) as u64;
    let mut tasks = Vec::new();
    for p in 0..producers {
        let mut client = connect().await?;
        let mine = producer_batches(events.clone(), producers, batch.max(1) as u64, p);
        let send = send.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new(3)?;
            let mut lowest: Option<u64> = None;
            for request in mine {
                let (back, acks) = send(client, request, std::time::Instant::now()).await?;
                client = back;
                for ack in acks {
                    latencies.record(ack.latency.as_micros() as u64)?;
                    if let Some(position) = ack.position {
                        lowest = Some(lowest.map_or(position, |l| l.min(position)));
                    }
                }
            }
            Ok::<_, anyhow::Error>((latencies, lowest))
        }));
    }
    join_producers(tasks).await
}

/// The pipelined loop of every system's `append_pipelined`: `producers`
/// tasks, each with a client of its own from `connect`, sending its share of
/// `events` (dealt round-robin, one event per request) with up to `window`
/// requests in flight. `send` sends event `index`'s request and returns its
/// ack, a future that completes when the system acknowledges it (with the
/// event's position, for a system that numbers events). Acks are awaited in
/// send order, each once the window is full, so a latency (from the request's
/// send) includes at most the time to send one more request past its
/// arrival. Returns every ack's latency (µs) and the lowest position.
pub(super) async fn pipelined_loop<C, Conn, ConnFut, Send, SendFut, AckFut>(
    events: Range<u64>,
    producers: usize,
    window: usize,
    mut connect: Conn,
    send: Send,
) -> Result<(Histogram<u64>, Option<u64>)>
where
    C: std::marker::Send + 'static,
    Conn: FnMut() -> ConnFut,
    ConnFut: std::future::Future<Output = Result<C>>,
    Send: Fn(&C, u64) -> SendFut + Clone + std::marker::Send + 'static,
    SendFut: std::future::Future<Output = Result<AckFut>> + std::marker::Send,
    AckFut: std::future::Future<Output = Result<Option<u64>>> + std::marker::Send + 'static,
{
    let producers = producers.max(1) as u64;
    let window = window.max(1);
    let mut tasks = Vec::new();
    for p in 0..producers {
        let client = connect().await?;
        let mine = producer_batches(events.clone(), producers, 1, p);
        let send = send.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Histogram::<u64>::new(3)?;
            let mut lowest: Option<u64> = None;
            let mut in_flight = std::collections::VecDeque::with_capacity(window);
            let mut settle = |sent: std::time::Instant, position: Option<u64>| {
                if let Some(position) = position {
                    lowest = Some(lowest.map_or(position, |l| l.min(position)));
                }
                latencies.record(sent.elapsed().as_micros() as u64)
            };
            for request in mine {
                if in_flight.len() >= window {
                    let (sent, ack): (std::time::Instant, AckFut) =
                        in_flight.pop_front().expect("the window is full");
                    settle(sent, ack.await?)?;
                }
                let sent = std::time::Instant::now();
                in_flight.push_back((sent, send(&client, request.start).await?));
            }
            while let Some((sent, ack)) = in_flight.pop_front() {
                settle(sent, ack.await?)?;
            }
            Ok::<_, anyhow::Error>((latencies, lowest))
        }));
    }
    join_producers(tasks).await
}

/// One producer task's ack latencies and the lowest position its acks carried.
type ProducerAcks = tokio::task::JoinHandle<Result<(Histogram<u64>, Option<u64>)>>;

/// Every producer's latencies together, and the lowest position of all.
async fn join_producers(tasks: Vec<ProducerAcks>) -> Result<(Histogram<u64>, Option<u64>)> {
    let mut all = Histogram::<u64>::new(3)?;
    let mut lowest: Option<u64> = None;
    for task in tasks {
        let (latencies, low) = task.await??;
        all.add(&latencies)?;
        if let Some(l) = low {
            lowest = Some(lowest.map_or(l, |a| a.min(l)));
        }
    }
    Ok((all, lowest))
}

#[cfg(feature = "peers")]
/// For peers that number events by their own counter (etcd's revision,
/// a JetStream stream sequence): the lowest position each `append` call got,
/// keyed by the call's first event, which is where [`From::Resume`] at that
/// event starts (see its contract).
#[derive(Default)]
struct ResumePoints(std::sync::Mutex<BTreeMap<u64, u64>>);

#[cfg(feature = "peers")]
impl ResumePoints {
    fn record(&self, first_event: u64, position: u64) {
        self.0
            .lock()
            .expect("resume points poisoned")
            .insert(first_event, position);
    }

    fn get(&self, system: &str, index: u64) -> Result<u64> {
        let points = self.0.lock().expect("resume points poisoned");
        points.get(&index).copied().ok_or_else(|| {
            anyhow!(
                "{system} cannot resume at event {index}: it is not the first event of an \
                 append call (those are {:?}), the only events whose {system} position is known",
                points.keys().collect::<Vec<_>>()
            )
        })
    }
}

/// `probe`: a quick end-to-end check of one system's adapter: append
/// `events`, read them all back from the beginning (exactly once, in
/// order), resume from the middle, and receive live events. Prints what it
/// saw; fails loudly on any difference.
pub async fn probe(kind: Kind, dir: &Path, events: u64, payload: usize) -> Result<()> {
    use anyhow::bail;
    use std::time::{Duration, Instant};
    let system = match start(kind, dir, &RingfeedOptions::default()).await? {
        Start::Running(s) => s,
        Start::Skipped(why) => {
            println!("{}: skipped: {why}", kind.name());
            return Ok(());
        }
    };
    let t = Instant::now();
    let acks = system.append(0..events, payload, 4, 64, false).await?;
    println!(
        "{}: appended {events} events in {:.3} s (p50 ack {} µs)",
        kind.name(),
        t.elapsed().as_secs_f64(),
        acks.value_at_quantile(0.5)
    );
    let mid = crate::util::now_ns();
    system
        .append(events..2 * events, payload, 1, 1, false)
        .await?;
    let check = |name: &str, got: Vec<u64>, want: Range<u64>| -> Result<()> {
        if got != want.clone().collect::<Vec<_>>() {
            bail!(
                "{name}: got {} events ({:?}..), want {want:?}",
                got.len(),
                got.first()
            );
        }
        Ok(())
    };
    let read = |mut sub: Box<dyn Subscriber>, n: u64| async move {
        let mut got = Vec::new();
        while (got.len() as u64) < n {
            match tokio::time::timeout(Duration::from_secs(30), sub.next()).await {
                Ok(Ok(Some(d))) => got.push(d.index),
                Ok(Ok(None)) => break,
                Ok(Err(e)) => return Err(e),
                Err(_) => bail!("no event within 30 s after {}", got.len()),
            }
        }
        Ok::<_, anyhow::Error>(got)
    };
    let t = Instant::now();
    let got = read(system.subscribe(From::Beginning).await?, 2 * events).await?;
    let secs = t.elapsed().as_secs_f64();
    // ringfeed's merged order interleaves shards by stamp: compare as sets there.
    let mut sorted = got.clone();
    sorted.sort_unstable();
    check("from the beginning", sorted, 0..2 * events)?;
    println!(
        "{}: read {} events from the beginning in {secs:.3} s",
        kind.name(),
        got.len()
    );
    let got = read(
        system
            .subscribe(From::Resume {
                index: events,
                wall_ns: mid,
            })
            .await?,
        events,
    )
    .await?;
    check("resumed at the middle", got, events..2 * events)?;
    println!("{}: resumed at event {events}: exact", kind.name());
    let live = system.subscribe(From::Now).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let appender = system.appender();
    let reader = tokio::spawn(read(live, 10));
    for i in 2 * events..2 * events + 10 {
        appender.append_one(i, payload).await?;
    }
    let got = reader.await??;
    check("live", got, 2 * events..2 * events + 10)?;
    println!("{}: live: 10 of 10 events", kind.name());
    for p in system.processes() {
        println!(
            "{}: process {} (pid {}): {:.2} CPU s, peak RSS {} MiB",
            kind.name(),
            p.name,
            p.pid(),
            p.cpu_seconds(),
            p.memory("VmHWM") >> 20
        );
    }
    Ok(())
}
