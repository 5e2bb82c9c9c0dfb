//! The suite's scenarios on the command line: each runs alone (`ringfeed-bench
//! catchup ...`, against ringfeed or any one `--system`), or side by side on
//! every system (`ringfeed-bench compare catchup ...`, `compare all`).
//!
//! Sizes are `Option`s: a value given on the command line wins, else the
//! quick-mode default with `--quick`, else the full default (both are in
//! each flag's help).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, Subcommand};

use crate::results::Run;
use crate::scenarios::{check_exact, Scenario, Setup};
use crate::systems::{Kind, RingfeedOptions};

/// Flags every scenario takes.
#[derive(Args, Clone, Debug)]
pub struct Common {
    /// Scratch directory for the systems' data: put it on the disk to
    /// measure (not tmpfs). Emptied first, removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Also write the results as JSON to FILE, and each latency histogram
    /// beside it in HdrHistogram's percentile-distribution text form
    /// (FILE-STEM.SYSTEM.ROW.NAME.hgrm).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Quick mode: small sizes that finish in seconds, to prove the scenario
    /// still works (CI runs it). Its figures mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// Run against an already running ringfeed server (HOST:PORT) instead of
    /// starting `ringfeed serve` in --dir. It should be otherwise idle: the
    /// checks expect only the bench's events. Server CPU and memory are then
    /// not measured.
    #[arg(long, value_name = "HOST:PORT")]
    pub target: Option<String>,
    /// Shards of the ringfeed server the bench starts.
    #[arg(long, default_value_t = 2)]
    pub shards: u32,
    /// The system to run the scenario on (`compare` runs it on all).
    #[arg(long, value_enum, default_value = "ringfeed")]
    pub system: Kind,
}

impl Common {
    fn setup(&self) -> Setup {
        Setup {
            dir: self.dir.clone(),
            ringfeed: RingfeedOptions {
                target: self.target.clone(),
                chunk_mode: false,
                shards: self.shards,
                // Quick mode's few events still fill windows, so its chunk
                // rows send chunks (and CI checks that they do).
                window_bytes: self.quick.then_some(128 << 10),
            },
        }
    }

    fn pick<T: Clone>(&self, given: &Option<T>, quick: T, full: T) -> T {
        given
            .clone()
            .unwrap_or(if self.quick { quick } else { full })
    }
}

#[derive(Args, Clone, Debug)]
pub struct AppendArgs {
    #[command(flatten)]
    pub common: Common,
    /// Events appended per case [default: 100000; quick: 2000].
    #[arg(long)]
    pub events: Option<u64>,
    /// Producer counts (concurrent closed-loop producers, one connection
    /// each) [default: 8; quick: 2].
    #[arg(long, value_delimiter = ',')]
    pub producers: Option<Vec<usize>>,
    /// Batch sizes (events per append request). Only ringfeed batches: the
    /// other systems run the batch-1 cases. 0 runs none (e.g. to run only
    /// the pipelined cases) [default: 1,64,1024; quick: 1,64].
    #[arg(long, value_delimiter = ',')]
    pub batches: Option<Vec<usize>>,
    /// Event payload sizes in bytes (each event also has its path, ~20 B)
    /// [default: 200,4096; quick: 200].
    #[arg(long, value_delimiter = ',')]
    pub event_bytes: Option<Vec<usize>>,
    /// ringfeed acknowledgement levels: memory (visible to subscribers) and/or
    /// durable (fdatasync'ed). The other systems run once, with their own
    /// [default: memory,durable].
    #[arg(long, value_delimiter = ',', value_parser = ["memory", "durable"])]
    pub durability: Option<Vec<String>>,
    /// Pipelined cases: single-event requests with up to N in flight per
    /// producer, each acknowledged (ringfeed on AppendStream, NATS with async
    /// acked publishes; etcd and SeaweedFS do not run them). 0 runs none
    /// [default: 1024; quick: 16].
    #[arg(long, value_name = "N", value_delimiter = ',')]
    pub pipeline: Option<Vec<usize>>,
}

#[derive(Args, Clone, Debug)]
pub struct CatchupArgs {
    #[command(flatten)]
    pub common: Common,
    /// Events pre-loaded before the subscribers start [default: 1000000;
    /// quick: 5000].
    #[arg(long)]
    pub events: Option<u64>,
    /// Subscriber counts: K subscribers read the whole log from the
    /// beginning at once; ringfeed runs each in event mode and in chunk mode
    /// [default: 1; quick: 1,4].
    #[arg(long, value_delimiter = ',')]
    pub subscribers: Option<Vec<usize>>,
    /// Event payload size in bytes [default: 200].
    #[arg(long)]
    pub event_bytes: Option<usize>,
    /// Seconds subscribers may take: any still reading then stop, and the
    /// row reports the events/s over that time and how many timed out (a
    /// system that slows down with the backlog is measured, not waited
    /// out) [default: 300; quick: 60].
    #[arg(long)]
    pub time_limit: Option<f64>,
}

#[derive(Args, Clone, Debug)]
pub struct LiveArgs {
    #[command(flatten)]
    pub common: Common,
    /// Events per second the producer sends, open loop (one append per event,
    /// on schedule, whether or not earlier ones were acknowledged)
    /// [tail: 10000, fanout: 1000; quick: 1000 and 200].
    #[arg(long)]
    pub rate: Option<u64>,
    /// Seconds of producing per case [default: 10; quick: 1].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Live subscriber counts (one connection each), a case each
    /// [tail: 1, fanout: 100,1000; quick: 1 and 20].
    #[arg(long, value_delimiter = ',')]
    pub subscribers: Option<Vec<usize>>,
    /// Event payload size in bytes [default: 200].
    #[arg(long)]
    pub event_bytes: Option<usize>,
}

#[derive(Args, Clone, Debug)]
pub struct StormArgs {
    #[command(flatten)]
    pub common: Common,
    /// Events on the log before the subscribers' resume point
    /// [default: 200000; quick: 5000].
    #[arg(long)]
    pub backlog: Option<u64>,
    /// Events each subscriber is behind: appended after its resume point,
    /// i.e. the cursor's age in events [default: 10000; quick: 1000].
    #[arg(long)]
    pub behind: Option<u64>,
    /// Subscriber counts: K subscribers resume at once, one connection each;
    /// ringfeed runs each in event mode and in chunk mode
    /// [default: 1000,2000; quick: 20].
    #[arg(long, value_delimiter = ',')]
    pub subscribers: Option<Vec<usize>>,
    /// Event payload size in bytes [default: 200].
    #[arg(long)]
    pub event_bytes: Option<usize>,
    /// Seconds subscribers may take: any still reading then stop, and the
    /// row reports the events/s over that time and how many timed out
    /// [default: 300; quick: 60].
    #[arg(long)]
    pub time_limit: Option<f64>,
}

#[derive(Args, Clone, Debug)]
pub struct CeilingArgs {
    /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Also write the results as JSON to FILE (and histograms beside it).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Quick mode: small sizes, seconds; figures mean nothing.
    #[arg(long)]
    pub quick: bool,
    /// MiB written (then read) sequentially [default: 1024; quick: 32].
    #[arg(long)]
    pub write_mib: Option<u64>,
    /// 4 KiB write + fdatasync repetitions [default: 2000; quick: 100].
    #[arg(long)]
    pub syncs: Option<u64>,
    /// Messages of the bare gRPC stream [default: 2000000; quick: 20000].
    #[arg(long)]
    pub messages: Option<u64>,
    /// Seconds of the bare unary echo [default: 5; quick: 1].
    #[arg(long)]
    pub echo_seconds: Option<u64>,
}

/// The scenarios, as subcommands (top level and under `compare`).
#[derive(Subcommand, Clone, Debug)]
pub enum ScenarioCmd {
    /// Appends: producers × batch size × event size × durability; events/s,
    /// MB/s, ack latency histogram, server CPU per event.
    Append(AppendArgs),
    /// Catch-up: N events pre-loaded, then K subscribers from the beginning
    /// (ringfeed: event mode and chunk mode); events/s, MB/s, time to caught
    /// up, server CPU. Every subscriber is checked to get every event once.
    Catchup(CatchupArgs),
    /// Live tail: a fixed-rate open-loop producer and K live subscribers;
    /// append-to-delivery latency over all subscribers (p50 ... p99.99, max).
    Tail(LiveArgs),
    /// Reconnect storm: K subscribers resume at once from a cursor W events
    /// old; time to first event and to caught up, server peak RSS, server
    /// CPU. Every subscriber is checked to get every event once.
    Storm(StormArgs),
    /// Fan-out: many live subscribers at a fixed rate; delivery latency and
    /// server CPU (the tail measurement with fan-out defaults).
    Fanout(LiveArgs),
}

impl ScenarioCmd {
    pub fn common(&self) -> &Common {
        match self {
            ScenarioCmd::Append(a) => &a.common,
            ScenarioCmd::Catchup(a) => &a.common,
            ScenarioCmd::Tail(a) | ScenarioCmd::Fanout(a) => &a.common,
            ScenarioCmd::Storm(a) => &a.common,
        }
    }

    /// The scenario with every size resolved (given, quick or full default).
    pub fn scenario(&self) -> Scenario {
        match self {
            ScenarioCmd::Append(a) => {
                let c = &a.common;
                Scenario::Append {
                    events: c.pick(&a.events, 2_000, 100_000),
                    producers: c.pick(&a.producers, vec![2], vec![8]),
                    batches: c
                        .pick(&a.batches, vec![1, 64], vec![1, 64, 1024])
                        .into_iter()
                        .filter(|&n| n > 0)
                        .collect(),
                    event_bytes: c.pick(&a.event_bytes, vec![200], vec![200, 4096]),
                    durable: c
                        .pick(
                            &a.durability,
                            vec!["memory".into(), "durable".into()],
                            vec!["memory".into(), "durable".into()],
                        )
                        .iter()
                        .map(|d| d == "durable")
                        .collect(),
                    pipeline: c
                        .pick(&a.pipeline, vec![16], vec![1024])
                        .into_iter()
                        .filter(|&n| n > 0)
                        .collect(),
                }
            }
            ScenarioCmd::Catchup(a) => {
                let c = &a.common;
                Scenario::Catchup {
                    events: c.pick(&a.events, 5_000, 1_000_000),
                    subscribers: c.pick(&a.subscribers, vec![1, 4], vec![1]),
                    event_bytes: c.pick(&a.event_bytes, 200, 200),
                    time_limit: seconds(c.pick(&a.time_limit, 60.0, 300.0)),
                }
            }
            ScenarioCmd::Tail(a) => live("tail", a, (1_000, 10_000), (vec![1], vec![1])),
            ScenarioCmd::Fanout(a) => live("fanout", a, (200, 1_000), (vec![20], vec![100, 1_000])),
            ScenarioCmd::Storm(a) => {
                let c = &a.common;
                Scenario::Storm {
                    backlog: c.pick(&a.backlog, 5_000, 200_000),
                    behind: c.pick(&a.behind, 1_000, 10_000),
                    subscribers: c.pick(&a.subscribers, vec![20], vec![1_000, 2_000]),
                    event_bytes: c.pick(&a.event_bytes, 200, 200),
                    time_limit: seconds(c.pick(&a.time_limit, 60.0, 300.0)),
                }
            }
        }
    }
}

/// A duration from seconds given on the command line; not positive or not
/// finite becomes zero, which `validate` refuses.
fn seconds(s: f64) -> Duration {
    Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO)
}

fn live(
    name: &'static str,
    a: &LiveArgs,
    rate: (u64, u64),
    subscribers: (Vec<usize>, Vec<usize>),
) -> Scenario {
    let c = &a.common;
    Scenario::Live {
        name,
        rate: c.pick(&a.rate, rate.0, rate.1),
        seconds: c.pick(&a.seconds, 1.0, 10.0),
        subscribers: c.pick(&a.subscribers, subscribers.0, subscribers.1),
        event_bytes: c.pick(&a.event_bytes, 200, 200),
    }
}

/// Checks a scenario's sizes make sense before anything starts.
fn validate(s: &Scenario) -> Result<()> {
    let positive = match s {
        Scenario::Append {
            events,
            producers,
            batches,
            event_bytes,
            durable,
            pipeline,
        } => {
            *events > 0
                && !producers.is_empty()
                && !producers.contains(&0)
                && (!batches.is_empty() || !pipeline.is_empty())
                && !event_bytes.is_empty()
                && !durable.is_empty()
        }
        Scenario::Catchup {
            events,
            subscribers,
            time_limit,
            ..
        } => {
            *events > 0
                && !subscribers.is_empty()
                && !subscribers.contains(&0)
                && !time_limit.is_zero()
        }
        Scenario::Live {
            rate,
            seconds,
            subscribers,
            ..
        } => *rate > 0 && *seconds > 0.0 && !subscribers.is_empty() && !subscribers.contains(&0),
        Scenario::Storm {
            behind,
            subscribers,
            time_limit,
            ..
        } => {
            *behind > 0
                && !subscribers.is_empty()
                && !subscribers.contains(&0)
                && !time_limit.is_zero()
        }
    };
    if !positive {
        bail!(
            "{}: counts, sizes and rates must be positive and lists non-empty",
            s.name()
        );
    }
    Ok(())
}

/// Runs one scenario on `kinds`; prints its table (and, with several
/// systems, the side-by-side comparison); writes `out`; fails if any
/// subscriber was inexact.
pub fn run_scenario(cmd: &ScenarioCmd, kinds: &[Kind], out: Option<&Path>) -> Result<Run> {
    let scenario = cmd.scenario();
    validate(&scenario)?;
    let common = cmd.common();
    let result = scenario.run(kinds, &common.setup());
    let _ = std::fs::remove_dir_all(&common.dir);
    let run = result?;
    println!("# {} ({})", scenario.name(), crate::util::machine());
    run.print_table();
    if kinds.len() > 1 {
        println!();
        print!("{}", run.comparison(scenario.headlines()));
    }
    if let Some(out) = out {
        run.write(out)?;
    }
    check_exact(&run)?;
    crate::scenarios::check_complete(&run)?;
    Ok(run)
}

pub fn ceiling(args: &CeilingArgs) -> Result<Run> {
    let pick = |given: Option<u64>, quick: u64, full: u64| {
        given.unwrap_or(if args.quick { quick } else { full })
    };
    let write_mib = pick(args.write_mib, 32, 1024);
    if write_mib == 0 {
        bail!("--write-mib must be positive");
    }
    let run = crate::ceiling::ceiling(
        &args.dir,
        crate::ceiling::Sizes {
            write_bytes: write_mib << 20,
            syncs: pick(args.syncs, 100, 2_000).max(1),
            copies: if args.quick { 3 } else { 20 },
            messages: pick(args.messages, 20_000, 2_000_000).max(1),
            echo: Duration::from_secs(pick(args.echo_seconds, 1, 5).max(1)),
        },
    )?;
    println!("# ceiling ({})", crate::util::machine());
    run.print_table();
    if let Some(out) = &args.out {
        run.write(out)?;
    }
    Ok(run)
}
