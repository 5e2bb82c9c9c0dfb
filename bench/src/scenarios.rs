//! The scenarios, written once against [`System`], so `compare` runs exactly
//! the same workload on every system: the same numbered events of the same
//! size, the same producers, the same subscribers and start points.
//!
//! - `append`: producers × batch × event size × durability, and pipelined
//!   single events; events/s, MB/s, ack latency, and for a system that
//!   counts its fdatasyncs (ringfeed), acks per fdatasync.
//! - `catchup`: N events pre-loaded, then K subscribers from the beginning;
//!   events/s, MB/s, server CPU, time to caught up.
//! - `tail` and `fanout`: K live subscribers while one producer appends at a
//!   fixed rate, open loop (every tick sends, whether or not earlier appends
//!   were acknowledged, so a slow system shows up as latency, not as a lower
//!   rate); append-to-delivery latency over all subscribers, server CPU.
//! - `storm`: K subscribers resume at once, each W events behind, over a
//!   backlog; time to first event and to caught up, server peak RSS.
//!
//! Every subscriber of every scenario is checked exact: it must get each
//! event it should, once. A row's `inexact` figure counts the subscribers
//! that did not; the run fails (after printing and writing its results) if
//! any did.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hdrhistogram::Histogram;
use serde_json::json;

use crate::results::{Headline, Row, Run, Unit};
use crate::systems::{self, From, Kind, RingfeedOptions, Start, Subscriber, System};

/// How long a subscriber may wait for its next event before the scenario
/// calls it stalled (a failure, not a figure).
const STALL: Duration = Duration::from_secs(120);

/// Producers and batch size used to pre-load backlogs (not measured).
const PRELOAD_PRODUCERS: usize = 64;
const PRELOAD_BATCH: usize = 1024;

/// Where and how a scenario runs.
pub struct Setup {
    pub dir: std::path::PathBuf,
    pub ringfeed: RingfeedOptions,
}

/// A scenario with its parameters.
#[derive(Clone, Debug)]
pub enum Scenario {
    Append {
        events: u64,
        producers: Vec<usize>,
        batches: Vec<usize>,
        event_bytes: Vec<usize>,
        /// Durabilities to run ringfeed with (`true` = durable); the other
        /// systems have one, their own, and run once.
        durable: Vec<bool>,
        /// Pipelined cases: single-event requests, up to this many in flight
        /// per producer, each acked (systems whose adapter pipelines).
        pipeline: Vec<usize>,
    },
    Catchup {
        events: u64,
        subscribers: Vec<usize>,
        event_bytes: usize,
        /// Subscribers still reading then stop; the row reports what they
        /// got in that time and how many timed out.
        time_limit: Duration,
    },
    Live {
        /// "tail" or "fanout": the same measurement, different defaults.
        name: &'static str,
        rate: u64,
        seconds: f64,
        subscribers: Vec<usize>,
        event_bytes: usize,
    },
    Storm {
        backlog: u64,
        behind: u64,
        subscribers: Vec<usize>,
        event_bytes: usize,
        time_limit: Duration,
    },
}

impl Scenario {
    pub fn name(&self) -> &'static str {
        match self {
            Scenario::Append { .. } => "append",
            Scenario::Catchup { .. } => "catchup",
            Scenario::Live { name, .. } => name,
            Scenario::Storm { .. } => "storm",
        }
    }

    fn params(&self) -> serde_json::Value {
        match self {
            Scenario::Append {
                events,
                producers,
                batches,
                event_bytes,
                durable,
                pipeline,
            } => json!({
                "events_per_case": events, "producers": producers, "batches": batches,
                "event_bytes": event_bytes, "pipeline": pipeline,
                "ringfeed_durability": durable.iter().map(|d| variant_of(*d)).collect::<Vec<_>>(),
            }),
            Scenario::Catchup {
                events,
                subscribers,
                event_bytes,
                time_limit,
            } => json!({"events": events, "subscribers": subscribers, "event_bytes": event_bytes,
                "time_limit_s": time_limit.as_secs_f64()}),
            Scenario::Live {
                rate,
                seconds,
                subscribers,
                event_bytes,
                ..
            } => {
                json!({"rate": rate, "seconds": seconds, "subscribers": subscribers, "event_bytes": event_bytes})
            }
            Scenario::Storm {
                backlog,
                behind,
                subscribers,
                event_bytes,
                time_limit,
            } => json!({"backlog": backlog, "behind": behind, "subscribers": subscribers,
                "event_bytes": event_bytes, "time_limit_s": time_limit.as_secs_f64()}),
        }
    }

    pub fn headlines(&self) -> &'static [Headline] {
        headlines(self.name())
    }

    /// Runs the scenario on each of `kinds` in turn, each system started
    /// fresh in its own directory under `setup.dir` and stopped after.
    pub fn run(&self, kinds: &[Kind], setup: &Setup) -> Result<Run> {
        let mut run = Run::new(self.name(), self.params());
        let runtime = crate::util::runtime()?;
        for &kind in kinds {
            let dir = setup.dir.join(kind.name());
            let started = runtime.block_on(systems::start(kind, &dir, &setup.ringfeed));
            let mut system = match started {
                Ok(Start::Running(system)) => system,
                Ok(Start::Skipped(why)) => {
                    eprintln!("{}: skipped: {why}", kind.name());
                    run.skipped.push((kind, why));
                    continue;
                }
                Err(e) if kind == Kind::Ringfeed => return Err(e.context("starting ringfeed")),
                Err(e) => {
                    let why = format!("failed to start: {e:#}");
                    eprintln!("{}: {why}", kind.name());
                    run.skipped.push((kind, why));
                    continue;
                }
            };
            eprintln!("# {}: {} ...", self.name(), kind.name());
            let rows = runtime.block_on(self.on(&mut *system));
            drop(system);
            let _ = std::fs::remove_dir_all(&dir);
            match rows {
                Ok(rows) => run.rows.extend(rows),
                Err(e) if kind == Kind::Ringfeed => return Err(e),
                // Another system's failure is reported as such (the run goes
                // on, so ringfeed's figures and the others' are not lost).
                Err(e) => {
                    let why = format!("failed: {e:#}");
                    eprintln!("{}: {why}", kind.name());
                    run.skipped.push((kind, why));
                }
            }
        }
        Ok(run)
    }

    async fn on(&self, system: &mut dyn System) -> Result<Vec<Row>> {
        match self {
            Scenario::Append {
                events,
                producers,
                batches,
                event_bytes,
                durable,
                pipeline,
            } => {
                let cases = AppendCases {
                    events: *events,
                    producers,
                    batches,
                    sizes: event_bytes,
                    durabilities: durable,
                    pipeline,
                };
                append(system, &cases).await
            }
            Scenario::Catchup {
                events,
                subscribers,
                event_bytes,
                time_limit,
            } => catchup(system, *events, subscribers, *event_bytes, *time_limit).await,
            Scenario::Live {
                rate,
                seconds,
                subscribers,
                event_bytes,
                ..
            } => live(system, *rate, *seconds, subscribers, *event_bytes).await,
            Scenario::Storm {
                backlog,
                behind,
                subscribers,
                event_bytes,
                time_limit,
            } => {
                let (backlog, behind, size) = (*backlog, *behind, *event_bytes);
                storm(system, backlog, behind, subscribers, size, *time_limit).await
            }
        }
    }
}

const fn h(key: &'static str, higher_is_better: bool) -> Headline {
    Headline {
        key,
        higher_is_better,
    }
}

const APPEND: &[Headline] = &[
    h("events/s", true),
    h("MB/s", true),
    h("ack p99 ms", false),
    h("server CPU µs/event", false),
];
const CATCHUP: &[Headline] = &[
    h("events/s", true),
    h("all caught up s", false),
    h("server CPU s", false),
];
const LIVE: &[Headline] = &[
    h("latency p50 ms", false),
    h("latency p99 ms", false),
    h("latency p99.9 ms", false),
    h("server CPU s", false),
];
const STORM: &[Headline] = &[
    h("all caught up s", false),
    h("server peak RSS MiB", false),
    h("first event p99 ms", false),
];

/// The figures `compare` puts side by side for a scenario, by name.
pub fn headlines(scenario: &str) -> &'static [Headline] {
    match scenario {
        "append" => APPEND,
        "catchup" => CATCHUP,
        "tail" | "fanout" => LIVE,
        "storm" => STORM,
        _ => &[],
    }
}

fn variant_of(durable: bool) -> &'static str {
    if durable {
        "durable"
    } else {
        "memory"
    }
}

/// CPU seconds of the system's processes so far (0 against a `--target`).
fn cpu(system: &dyn System) -> f64 {
    system.processes().iter().map(|p| p.cpu_seconds()).sum()
}

/// Sum over the system's processes of a `/proc/PID/status` memory line, MiB.
fn memory_mib(system: &dyn System, key: &str) -> f64 {
    system
        .processes()
        .iter()
        .map(|p| p.memory(key) as f64)
        .sum::<f64>()
        / f64::from(1 << 20)
}

/// What the subscribers' side (this process: the system's client library
/// and the bench's reading of each event) has used since `now`.
struct ClientCost {
    cpu_ticks: u64,
    allocations: usize,
}

impl ClientCost {
    fn now() -> ClientCost {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        ClientCost {
            cpu_ticks: crate::util::stat_cpu_ticks(&stat),
            allocations: crate::ALLOCATOR.stats().allocations
                + crate::ALLOCATOR.stats().reallocations,
        }
    }

    /// Client CPU (µs) and allocations per event delivered.
    fn figures(&self, row: &mut Row, delivered: u64) {
        let now = ClientCost::now();
        let events = delivered.max(1) as f64;
        let cpu_s =
            (now.cpu_ticks - self.cpu_ticks) as f64 / crate::util::CLOCK_TICKS_PER_SECOND as f64;
        row.figure("client CPU µs/event", cpu_s * 1e6 / events);
        row.figure(
            "client allocs/event",
            (now.allocations - self.allocations) as f64 / events,
        );
    }
}

/// Adds the server's CPU and memory figures, when the bench started it.
fn server_figures(row: &mut Row, system: &dyn System, cpu_s: f64) {
    if !system.processes().is_empty() {
        row.figure("server CPU s", cpu_s);
        row.figure("server peak RSS MiB", memory_mib(system, "VmHWM"));
    }
}

/// The cases of an `append` run.
struct AppendCases<'a> {
    events: u64,
    producers: &'a [usize],
    batches: &'a [usize],
    sizes: &'a [usize],
    durabilities: &'a [bool],
    pipeline: &'a [usize],
}

/// How one append case sends: closed-loop requests of `batch` events, or
/// single-event requests with up to `window` in flight.
#[derive(Clone, Copy)]
enum Sending {
    Batch(usize),
    Pipeline(usize),
}

async fn append(system: &mut dyn System, cases: &AppendCases<'_>) -> Result<Vec<Row>> {
    let kind = system.kind();
    let events = cases.events;
    let mut rows = Vec::new();
    let mut next = 0u64;
    for &p in cases.producers {
        let sendings = cases
            .batches
            .iter()
            .map(|&b| Sending::Batch(b))
            .chain(cases.pipeline.iter().map(|&w| Sending::Pipeline(w)));
        for sending in sendings {
            // Only ringfeed appends batches; the others run the batch-1 case.
            if kind != Kind::Ringfeed && matches!(sending, Sending::Batch(b) if b != 1) {
                continue;
            }
            for &size in cases.sizes {
                for &durable in cases.durabilities {
                    if kind != Kind::Ringfeed && !durable {
                        continue;
                    }
                    // Counted for durable cases only (see below).
                    let syncs0 = if durable {
                        system.syncs().await.transpose()?
                    } else {
                        None
                    };
                    let cpu0 = cpu(system);
                    let started = Instant::now();
                    let range = next..next + events;
                    let (acks, case) = match sending {
                        Sending::Batch(batch) => (
                            system.append(range, size, p, batch, durable).await?,
                            format!("{p} producers × batch {batch} × {size} B"),
                        ),
                        Sending::Pipeline(window) => {
                            match system
                                .append_pipelined(range, size, p, window, durable)
                                .await
                            {
                                Some(acks) => (
                                    acks?,
                                    format!("{p} producers × pipeline {window} × {size} B"),
                                ),
                                None => continue,
                            }
                        }
                    };
                    let secs = started.elapsed().as_secs_f64();
                    let cpu_s = cpu(system) - cpu0;
                    next += events;
                    let variant = if kind == Kind::Ringfeed {
                        variant_of(durable).to_owned()
                    } else {
                        system.durability(true).to_owned()
                    };
                    let mut row = Row::new(kind, case, variant);
                    row.figure("events", events as f64)
                        .figure("s", secs)
                        .figure("events/s", events as f64 / secs)
                        .figure("MB/s", events as f64 * size as f64 / secs / 1e6)
                        .hist("ack", acks, Unit::MicrosAsMs);
                    if !system.processes().is_empty() {
                        row.figure("server CPU µs/event", cpu_s * 1e6 / events as f64);
                    }
                    // Group commit: the acknowledgements each fdatasync served.
                    // Every shard syncs its own log, so a request spanning both
                    // shards waits for two: below 1 is possible.
                    if let Some(before) = syncs0 {
                        let syncs = system.syncs().await.transpose()?.unwrap_or(before) - before;
                        let acks = match sending {
                            Sending::Batch(batch) => events.div_ceil(batch as u64),
                            Sending::Pipeline(_) => events,
                        };
                        if syncs > 0 {
                            row.figure("acks per fdatasync", acks as f64 / syncs as f64);
                        }
                    }
                    server_figures(&mut row, system, cpu_s);
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}

/// The ringfeed variants a subscriber scenario runs (event mode and chunk
/// mode); the other systems run one, named by how they are read.
fn subscriber_variants(kind: Kind) -> Vec<(&'static str, bool)> {
    if kind == Kind::Ringfeed {
        vec![("events", false), ("chunks", true)]
    } else {
        vec![("consumer", false)]
    }
}

/// What one subscriber saw.
struct Followed {
    /// Since the subscribers were started.
    first: Duration,
    done: Duration,
    /// Events received.
    got: u64,
    /// Stopped at the time limit before getting every event.
    timed_out: bool,
    /// Got each event it should, once. A subscriber stopped at the time
    /// limit is judged on what it got: no repeats, nothing unasked-for.
    exact: bool,
    /// Append-to-delivery latencies, µs (live scenarios only).
    latency: Option<Histogram<u64>>,
}

/// Which of the event numbers `want` a subscriber got: exact while each came
/// at most once and none came from outside `want`.
struct Tally {
    start: u64,
    seen: Vec<bool>,
    got: u64,
    exact: bool,
}

impl Tally {
    fn new(want: std::ops::Range<u64>) -> Tally {
        Tally {
            start: want.start,
            seen: vec![false; (want.end - want.start) as usize],
            got: 0,
            exact: true,
        }
    }

    fn record(&mut self, index: u64) {
        self.got += 1;
        match index.checked_sub(self.start).map(|i| i as usize) {
            Some(i) if i < self.seen.len() && !self.seen[i] => self.seen[i] = true,
            _ => self.exact = false,
        }
    }
}

/// Reads `want` events from `sub` and checks it got each of `want` exactly
/// once (in any order across ringfeed's shards).
async fn follow(
    mut sub: Box<dyn Subscriber>,
    want: std::ops::Range<u64>,
    t0: Instant,
    measure_latency: bool,
    deadline: Option<Instant>,
) -> Result<Followed> {
    let n = want.end - want.start;
    let mut tally = Tally::new(want);
    let mut first = None;
    let mut latency = measure_latency
        .then(|| Histogram::<u64>::new(3))
        .transpose()?;
    let mut timed_out = false;
    while tally.got < n {
        // Under a time limit only the limit ends the wait: a subscriber that
        // gets nothing before it is measured as timed out, not failed.
        let wait = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => STALL,
        };
        let d = match tokio::time::timeout(wait, sub.next()).await {
            Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                timed_out = true;
                break;
            }
            Ok(Ok(Some(d))) => d,
            Ok(Ok(None)) => bail!("the subscription ended after {} of {n} events", tally.got),
            Ok(Err(e)) => return Err(e.context(format!("after {} of {n} events", tally.got))),
            Err(_) => bail!("no event for {STALL:?} after {} of {n}", tally.got),
        };
        if let Some(h) = latency.as_mut() {
            h.record(((crate::util::now_ns() - d.sent_ns).max(0) / 1000) as u64)?;
        }
        first.get_or_insert_with(|| t0.elapsed());
        tally.record(d.index);
    }
    Ok(Followed {
        first: first.unwrap_or_default(),
        done: t0.elapsed(),
        got: tally.got,
        timed_out,
        exact: tally.exact,
        latency,
    })
}

/// Starts `k` subscribers from `from` at once, each following `want`.
async fn subscribers(
    system: &dyn System,
    k: usize,
    from: From,
    want: std::ops::Range<u64>,
    measure_latency: bool,
    time_limit: Option<Duration>,
) -> Result<(Vec<tokio::task::JoinHandle<Result<Followed>>>, Instant)> {
    let t0 = Instant::now();
    // Subscribe concurrently, so a storm really is one.
    let subs: Vec<Box<dyn Subscriber>> =
        futures_util::future::try_join_all((0..k).map(|_| system.subscribe(from))).await?;
    let tasks = subs
        .into_iter()
        .map(|s| {
            let deadline = time_limit.map(|l| t0 + l);
            tokio::spawn(follow(s, want.clone(), t0, measure_latency, deadline))
        })
        .collect();
    Ok((tasks, t0))
}

async fn catchup(
    system: &mut dyn System,
    events: u64,
    ks: &[usize],
    size: usize,
    time_limit: Duration,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let loaded = Instant::now();
    system
        .append(0..events, size, PRELOAD_PRODUCERS, PRELOAD_BATCH, false)
        .await?;
    eprintln!(
        "  pre-loaded {events} events in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );
    let mut rows = Vec::new();
    for (variant, chunk_mode) in subscriber_variants(kind) {
        system.set_chunk_mode(chunk_mode);
        for &k in ks {
            let cpu0 = cpu(system);
            let client0 = ClientCost::now();
            let (tasks, _) = subscribers(
                system,
                k,
                From::Beginning,
                0..events,
                false,
                Some(time_limit),
            )
            .await?;
            let mut row = Row::new(kind, format!("K={k}"), variant);
            let collected = collect(tasks, &mut row).await?;
            row.figures.insert(0, ("subscribers".into(), k as f64));
            row.figures.insert(1, ("events each".into(), events as f64));
            catch_up_figures(&mut row, &collected, size);
            client0.figures(&mut row, collected.delivered);
            server_figures(&mut row, system, cpu(system) - cpu0);
            rows.push(row);
        }
    }
    if let Some(cli) = system.tail_cli() {
        let cpu0 = cpu(system);
        let mut row = cli_catch_up(kind, cli, events, size, time_limit).await?;
        server_figures(&mut row, system, cpu(system) - cpu0);
        rows.push(row);
    }
    Ok(rows)
}

/// The system's command-line tail from the beginning, its JSON read from a
/// pipe (kept in memory, parsed after the clock stops): events/s until it
/// printed every pre-loaded event, and the tail process's own CPU per event.
/// Exact when every event number appears once.
async fn cli_catch_up(
    kind: Kind,
    cli: systems::TailCli,
    events: u64,
    size: usize,
    time_limit: Duration,
) -> Result<Row> {
    use std::io::Read;
    let systems::TailCli {
        mut command,
        terminator,
        payload,
    } = cli;
    let program = command.get_program().to_string_lossy().into_owned();
    // The output is kept to be checked after the clock stops. Its pages are
    // touched now: faulting them in while the tail runs cost this process
    // about as much CPU as the tail's own on the two cores they share, and
    // `| wc -l` or `| jq` pays nothing like it.
    // Written once to fault its pages in before the clock starts, then
    // emptied: `vec![0; n]` would leave them untouched (calloc).
    #[allow(clippy::slow_vector_initialization)]
    let mut out = Vec::with_capacity(events as usize * 1024);
    out.resize(out.capacity(), 0u8);
    out.clear();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow!("starting {program}: {e}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("piped");
    let started = Instant::now();
    // A thread reads until the expected number of lines or the time limit
    // (the pipe's reader, like `| wc -l`, does nothing else meanwhile).
    let reader = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 1 << 20];
        let (mut lines, mut cpu_ticks) = (0u64, 0);
        let timed_out = loop {
            if lines >= events {
                break false;
            }
            if started.elapsed() > time_limit {
                break true;
            }
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break lines < events,
                Ok(n) => {
                    // Terminators may straddle reads: look again at the
                    // last few bytes already read.
                    let from = out.len().saturating_sub(terminator.len() - 1);
                    out.extend_from_slice(&buf[..n]);
                    lines += count(&out[from..], terminator);
                    if lines >= events {
                        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .unwrap_or_default();
                        cpu_ticks = crate::util::stat_cpu_ticks(&stat);
                    }
                }
            }
        };
        (out, started.elapsed(), timed_out, cpu_ticks)
    });
    let (out, elapsed, timed_out, cpu_ticks) = reader.await?;
    let _ = child.kill();
    let _ = child.wait();
    let mut tally = Tally::new(0..events);
    let objects = serde_json::Deserializer::from_slice(&out).into_iter::<serde_json::Value>();
    for value in objects.map_while(Result::ok) {
        if let Some(index) = systems::json_stamp(&value, payload) {
            tally.record(index);
        }
    }
    // Every pre-loaded event, once (a tail stopped at the time limit missed
    // some: inexact too).
    let exact = tally.exact && tally.got == events;
    let got = tally.got;
    let secs = elapsed.as_secs_f64();
    let mut row = Row::new(kind, "tail CLI", "cli");
    row.figure("subscribers", 1.0)
        .figure("events each", events as f64);
    catch_up_figures(
        &mut row,
        &Collected {
            last: elapsed,
            delivered: got,
            inexact: usize::from(!exact),
            timed_out: usize::from(timed_out),
        },
        size,
    );
    if cpu_ticks > 0 {
        let cpu_s = cpu_ticks as f64 / crate::util::CLOCK_TICKS_PER_SECOND as f64;
        row.figure("client CPU µs/event", cpu_s * 1e6 / got.max(1) as f64);
    }
    eprintln!(
        "  {program} tail: {got} bench events in {secs:.2} s{}",
        if exact { "" } else { ", NOT exact" }
    );
    if !exact {
        let head = String::from_utf8_lossy(&out[..out.len().min(600)]).into_owned();
        eprintln!("  its output began: {head:?}");
    }
    Ok(row)
}

/// Occurrences of `terminator` in `bytes`. The reader shares two cores
/// with the tail it measures: a byte-by-byte `windows` scan cost it a core
/// for most of a ringfeed tail's run, so the usual one-byte case is counted
/// in a loop the compiler vectorizes, and a longer one is looked for only
/// where its last byte is.
fn count(bytes: &[u8], terminator: &[u8]) -> u64 {
    let Some((&last, head)) = terminator.split_last() else {
        return 0;
    };
    if head.is_empty() {
        return bytes.iter().filter(|&&b| b == last).count() as u64;
    }
    bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == last && i >= head.len() && bytes[i - head.len()..i] == *head)
        .count() as u64
}

/// What a group of subscribers did, together.
struct Collected {
    /// When the last one finished (caught up, or stopped at the time limit).
    last: Duration,
    /// Events received, over all of them.
    delivered: u64,
    inexact: usize,
    timed_out: usize,
}

/// Waits for every subscriber; adds their first-event and caught-up
/// histograms (ms; caught up counts only those that did) to `row`.
async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<Followed>>>,
    row: &mut Row,
) -> Result<Collected> {
    let (mut first, mut done) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
    let mut latency = Histogram::<u64>::new(3)?;
    let mut all = Collected {
        last: Duration::ZERO,
        delivered: 0,
        inexact: 0,
        timed_out: 0,
    };
    for t in tasks {
        let f = t.await.map_err(|e| anyhow!("subscriber task: {e}"))??;
        if f.got > 0 {
            first.record(f.first.as_millis() as u64)?;
        }
        if !f.timed_out {
            done.record(f.done.as_millis() as u64)?;
        }
        all.last = all.last.max(f.done);
        all.delivered += f.got;
        all.inexact += usize::from(!f.exact);
        all.timed_out += usize::from(f.timed_out);
        if let Some(h) = f.latency {
            latency.add(&h)?;
        }
    }
    if !latency.is_empty() {
        row.hist("latency", latency, Unit::MicrosAsMs);
    }
    if !first.is_empty() {
        row.hist_short("first event", first, Unit::Ms);
    }
    if !done.is_empty() {
        row.hist_short("caught up", done, Unit::Ms);
    }
    Ok(all)
}

/// The figures of a catch-up (`catchup`, `storm`): throughput over the run,
/// and the time until all were caught up when none hit the time limit.
fn catch_up_figures(row: &mut Row, c: &Collected, size: usize) {
    let secs = c.last.as_secs_f64();
    if c.timed_out == 0 {
        row.figure("all caught up s", secs);
    }
    row.figure("events/s", c.delivered as f64 / secs)
        .figure("MB/s", c.delivered as f64 * size as f64 / secs / 1e6)
        .figure("timed out", c.timed_out as f64)
        .figure("inexact", c.inexact as f64);
}

/// How long live subscribers may take to reach the live edge.
const LIVE_EDGE_LIMIT: Duration = Duration::from_secs(120);

async fn live(
    system: &mut dyn System,
    rate: u64,
    seconds: f64,
    ks: &[usize],
    size: usize,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let total = (rate as f64 * seconds).round().max(1.0) as u64;
    let mut rows = Vec::new();
    let mut next = 0u64;
    for &k in ks {
        let want = next..next + total;
        next += total;
        let (tasks, t0) = subscribers(system, k, From::Now, want.clone(), true, None).await?;
        // Every subscriber connected and waiting at the live edge first.
        system.at_live_edge(k, LIVE_EDGE_LIMIT).await?;
        eprintln!(
            "  {k} subscribers at the live edge after {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let cpu0 = cpu(system);
        let appender = system.appender();
        let period = Duration::from_secs_f64(1.0 / rate as f64);
        let started = Instant::now();
        let mut acks = Vec::with_capacity(total as usize);
        for i in want.clone() {
            // Open loop: send on schedule, never wait for earlier acks.
            let due = started + period.mul_f64((i - want.start) as f64);
            tokio::time::sleep_until(due.into()).await;
            let appender = appender.clone();
            acks.push(tokio::spawn(
                async move { appender.append_one(i, size).await },
            ));
        }
        let produced = started.elapsed().as_secs_f64();
        for a in acks {
            a.await.map_err(|e| anyhow!("append task: {e}"))??;
        }
        let mut row = Row::new(kind, format!("K={k} at {rate}/s"), "live");
        let inexact = collect(tasks, &mut row).await?.inexact;
        // The time histograms of a live run say nothing; keep latency only.
        row.hists.retain(|h| h.name == "latency");
        row.figures.retain(|(key, _)| key.starts_with("latency"));
        row.figures.insert(0, ("subscribers".into(), k as f64));
        row.figures
            .insert(1, ("sent events/s".into(), total as f64 / produced));
        row.figures
            .insert(2, ("deliveries".into(), total as f64 * k as f64));
        row.figure("inexact", inexact as f64);
        server_figures(&mut row, system, cpu(system) - cpu0);
        rows.push(row);
    }
    Ok(rows)
}

async fn storm(
    system: &mut dyn System,
    backlog: u64,
    behind: u64,
    ks: &[usize],
    size: usize,
    time_limit: Duration,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let loaded = Instant::now();
    if backlog > 0 {
        system
            .append(0..backlog, size, PRELOAD_PRODUCERS, PRELOAD_BATCH, false)
            .await?;
    }
    // The resume window: one producer, so the event numbered `backlog` is
    // the first of it on every system (see `From::Resume`).
    let wall_ns = crate::util::now_ns();
    system
        .append(backlog..backlog + behind, size, 1, PRELOAD_BATCH, false)
        .await?;
    eprintln!(
        "  pre-loaded {} events in {:.1} s",
        backlog + behind,
        loaded.elapsed().as_secs_f64()
    );
    let from = From::Resume {
        index: backlog,
        wall_ns,
    };
    let mut rows = Vec::new();
    for (variant, chunk_mode) in subscriber_variants(kind) {
        system.set_chunk_mode(chunk_mode);
        for &k in ks {
            for p in system.processes() {
                p.reset_peak();
            }
            let rss_before = memory_mib(system, "VmRSS");
            let cpu0 = cpu(system);
            let want = backlog..backlog + behind;
            let (tasks, _) = subscribers(system, k, from, want, false, Some(time_limit)).await?;
            let mut row = Row::new(kind, format!("K={k}"), variant);
            let collected = collect(tasks, &mut row).await?;
            row.figures.insert(0, ("subscribers".into(), k as f64));
            row.figures.insert(1, ("events each".into(), behind as f64));
            catch_up_figures(&mut row, &collected, size);
            if !system.processes().is_empty() {
                row.figure("server RSS before MiB", rss_before);
            }
            server_figures(&mut row, system, cpu(system) - cpu0);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Fails if any row counted inexact subscribers: a subscriber that missed or
/// repeated an event is a failure, never a figure to shrug at.
pub fn check_exact(run: &Run) -> Result<()> {
    let bad: Vec<String> = run
        .rows
        .iter()
        .filter(|r| r.get("inexact").is_some_and(|n| n > 0.0))
        .map(|r| {
            format!(
                "{} {} {}: {} subscribers missed or repeated events",
                r.system.name(),
                r.case,
                r.variant,
                r.get("inexact").unwrap_or(0.0)
            )
        })
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        bail!("NOT EXACT: {}", bad.join("; "))
    }
}

#[cfg(test)]
mod count_tests {
    use super::count;

    #[test]
    fn counts_terminators_as_a_window_scan_does() {
        for (bytes, terminator) in [
            (&b"a\nb\n\nc"[..], &b"\n"[..]),
            (b"{\n}\n{\n}\n}\n", b"\n}\n"),
            (b"\n}\n}\n", b"\n}\n"),
            (b"", b"\n"),
            (b"}\n", b"\n}\n"),
        ] {
            let windows = bytes
                .windows(terminator.len())
                .filter(|w| *w == terminator)
                .count();
            assert_eq!(count(bytes, terminator), windows as u64, "{bytes:?}");
        }
    }
}
