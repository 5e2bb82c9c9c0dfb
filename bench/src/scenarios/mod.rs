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

mod append;
pub(crate) mod catchup;
mod live;
mod measure;
mod storm;
mod subscribers;

use std::time::Duration;

use anyhow::{bail, Result};
use serde_json::json;

use crate::results::{Headline, Row, Run};
use crate::systems::{self, Kind, RingfeedOptions, Start, System};
use append::{append, AppendCases};
use catchup::catchup;
use live::live;
use storm::storm;

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
                    eprintln!("{}: FAILED: {why}", kind.name());
                    run.failed.push((kind, why));
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
                // Another system's failure is reported as such, in the table
                // and in the exit status (`check_complete`); the run goes on,
                // so ringfeed's figures and the others' are not lost.
                Err(e) => {
                    let why = format!("{e:#}");
                    eprintln!("{}: FAILED: {why}", kind.name());
                    run.failed.push((kind, why));
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

/// Fails if any row counted inexact subscribers: a subscriber that missed or
/// repeated an event is a failure, never a figure to shrug at.
/// Fails when a system failed to start or to run: a comparison that lost a
/// peer is not a comparison (one not installed is skipped, not failed).
pub fn check_complete(run: &Run) -> Result<()> {
    if run.failed.is_empty() {
        return Ok(());
    }
    let failed: Vec<String> = run
        .failed
        .iter()
        .map(|(kind, why)| format!("{}: {why}", kind.name()))
        .collect();
    bail!("FAILED: {}", failed.join("; "))
}

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
