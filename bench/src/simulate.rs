//! `simulate`: the deterministic simulators over many seeds, or one seed
//! replayed. Each seed runs the shard simulation (`ringfeed_engine::sim`)
//! and then the stream simulation (`ringfeed_server::sim`: clients through
//! the server's stream code over the same simulated shards). Prints one line per failing seed
//! with its replay command, writes the failing run's trace (shrunk to the
//! fewest fault kinds that still break it) to a file, and ends with the
//! summary line `simulated N seeds x M steps: F failures`. Exits non-zero
//! on any failure.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{bail, Result};
use ringfeed_engine::sim::{self, Fault, SimConfig, SimFailure};
use ringfeed_server::sim as streams;

/// Which simulation a seed failed in.
#[derive(Clone, Copy)]
enum Layer {
    Shards,
    Streams,
}

impl Layer {
    fn run(self, seed: u64, config: &SimConfig) -> Result<(), SimFailure> {
        match self {
            Layer::Shards => sim::run(seed, config).map(drop),
            Layer::Streams => streams::run(seed, config).map(drop),
        }
    }

    fn name(self) -> &'static str {
        match self {
            Layer::Shards => "shards",
            Layer::Streams => "streams",
        }
    }
}

pub struct Args {
    pub seeds: u64,
    pub first_seed: u64,
    pub steps: u64,
    pub shards: u32,
    pub faults: Vec<Fault>,
    /// Where failing runs' traces go.
    pub trace_dir: PathBuf,
}

pub fn simulate(args: &Args) -> Result<()> {
    let config = SimConfig {
        shards: args.shards,
        steps: args.steps,
        faults: args.faults.clone(),
    };
    let started = Instant::now();
    let mut failures = 0u64;
    let mut restarts = 0u64;
    let mut durable_acks = 0u64;
    let mut stream_events = 0u64;
    let mut last_progress = Instant::now();
    for seed in args.first_seed..args.first_seed + args.seeds {
        let failed = match sim::run(seed, &config) {
            Ok(outcome) => {
                restarts += outcome.restarts;
                durable_acks += outcome.durable_acks;
                match streams::run(seed, &config) {
                    Ok(outcome) => {
                        stream_events += outcome.events;
                        None
                    }
                    Err(failure) => Some((Layer::Streams, failure)),
                }
            }
            Err(failure) => Some((Layer::Shards, failure)),
        };
        if let Some((layer, failure)) = failed {
            failures += 1;
            report(layer, &failure, &config, args)?;
        }
        if last_progress.elapsed().as_secs() >= 10 {
            last_progress = Instant::now();
            eprintln!(
                "# {} of {} seeds, {failures} failure(s), {:.0} s",
                seed - args.first_seed + 1,
                args.seeds,
                started.elapsed().as_secs_f64()
            );
        }
    }
    println!(
        "# {} shard(s), faults: {}; {restarts} restarts, {durable_acks} durable acks, {stream_events} streamed events checked; {:.1} s",
        args.shards,
        fault_names(&args.faults),
        started.elapsed().as_secs_f64()
    );
    println!(
        "simulated {} seeds x {} steps: {failures} failures",
        args.seeds, args.steps
    );
    if failures > 0 {
        bail!("{failures} seed(s) broke an invariant");
    }
    Ok(())
}

fn fault_names(faults: &[Fault]) -> String {
    if faults.is_empty() {
        return "none".into();
    }
    faults
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(",")
}

/// Prints the failure and its replay command, shrinks it to the fewest fault
/// kinds that still break an invariant, and writes that run's trace.
fn report(layer: Layer, failure: &SimFailure, config: &SimConfig, args: &Args) -> Result<()> {
    println!("FAILED ({}) {failure}", layer.name());
    let (shrunk, faults) = shrink(layer, failure, config);
    println!(
        "  replay: ringfeed-bench simulate --seed {} --steps {} --shards {} --faults {}",
        shrunk.seed,
        shrunk.step + 1,
        config.shards,
        fault_names(&faults)
    );
    std::fs::create_dir_all(&args.trace_dir)?;
    let path = args
        .trace_dir
        .join(format!("sim-seed-{}.trace", failure.seed));
    let mut text = format!(
        "# {shrunk}\n# faults: {}\n# replay: ringfeed-bench simulate --seed {} --steps {} --shards {} --faults {}\n",
        fault_names(&faults),
        shrunk.seed,
        shrunk.step + 1,
        config.shards,
        fault_names(&faults)
    );
    for line in &shrunk.trace {
        text.push_str(line);
        text.push('\n');
    }
    std::fs::write(&path, text)?;
    println!("  trace ({} steps): {}", shrunk.trace.len(), path.display());
    Ok(())
}

/// Drops fault kinds one at a time while the seed still fails (any
/// invariant), and keeps the run to its failing step: the same seed with
/// fewer kinds of fault is a shorter, plainer story.
fn shrink(layer: Layer, failure: &SimFailure, config: &SimConfig) -> (SimFailure, Vec<Fault>) {
    let mut best = failure.clone();
    let mut faults = config.faults.clone();
    let mut i = 0;
    while i < faults.len() {
        let mut fewer = faults.clone();
        fewer.remove(i);
        let trial = SimConfig {
            faults: fewer.clone(),
            steps: best.step + 1,
            ..config.clone()
        };
        match layer.run(failure.seed, &trial) {
            Err(smaller) => {
                best = smaller;
                faults = fewer;
            }
            Ok(_) => i += 1,
        }
    }
    (best, faults)
}
