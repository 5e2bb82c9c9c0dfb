//! The `ringfeed` command line.
//!
//! Until the gRPC server lands, `serve` starts the engine (one shard per core
//! by default), reports what recovery found, and runs until SIGINT/SIGTERM,
//! then flushes, syncs and closes. `inspect` prints the segments and chunks of
//! a data dir.

#![deny(unsafe_code)]

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use glommio::{LocalExecutorBuilder, Placement};
use ringfeed_engine::storage::DmaStorage;
use ringfeed_engine::{Engine, EngineConfig, Log, LogConfig};

#[derive(Parser)]
#[command(
    name = "ringfeed",
    version,
    about = "A thread-per-core change-feed storage engine"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Open the data dir (recovering every shard's log) and hold it until SIGINT/SIGTERM.
    ///
    /// The gRPC service is not there yet: this opens, recovers and reports.
    Serve {
        /// Where the logs live; created if missing.
        #[arg(long, default_value = "./ringfeed-data")]
        data_dir: PathBuf,
        /// Address the gRPC service will listen on (not served yet).
        #[arg(long, default_value = "127.0.0.1:7070")]
        listen: String,
        /// Number of shards; defaults to the number of cores.
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
        shards: Option<u32>,
    },
    /// Print the segments and chunk counts of every shard in a data dir (opens and recovers it).
    Inspect {
        #[arg(long, default_value = "./ringfeed-data")]
        data_dir: PathBuf,
    },
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        Command::Serve {
            data_dir,
            listen,
            shards,
        } => {
            let shards = shards.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, |n| n.get() as u32)
            });
            serve(&data_dir, &listen, shards)
        }
        Command::Inspect { data_dir } => inspect(&data_dir),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ringfeed: error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn serve(data_dir: &Path, listen: &str, shards: u32) -> Result<()> {
    let config = EngineConfig {
        data_dir: data_dir.to_path_buf(),
        shards,
        ..EngineConfig::default()
    };
    let engine =
        Engine::open(config).with_context(|| format!("opening data dir {}", data_dir.display()))?;
    for (shard, report) in engine.recovery_reports().iter().enumerate() {
        println!(
            "shard {shard}: {} segment(s), {} record(s), next offset {}{}{}",
            report.segments,
            report.records,
            report.next_offset,
            if report.clean_close {
                ", closed cleanly"
            } else {
                ""
            },
            match &report.truncated {
                Some((segment, torn)) => format!(", torn tail cut at {segment}:{}", torn.position),
                None => String::new(),
            }
        );
    }
    println!(
        "ringfeed: data dir {} open with {shards} shard(s); the gRPC service for {listen} is not implemented yet. Ctrl-C to stop.",
        data_dir.display()
    );
    let mut signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .context("installing signal handlers")?;
    signals.forever().next();
    engine.shutdown().context("shutting down")?;
    println!("ringfeed: flushed, synced and closed cleanly");
    Ok(())
}

fn inspect(data_dir: &Path) -> Result<()> {
    if !data_dir.is_dir() {
        bail!("{} is not a directory", data_dir.display());
    }
    let mut shard_dirs = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .strip_prefix("shard-")
            .and_then(|n| n.parse::<u32>().ok())
        {
            shard_dirs.push((n, entry.path()));
        }
    }
    shard_dirs.sort();
    if shard_dirs.is_empty() {
        bail!("{} holds no shard-NNN directories", data_dir.display());
    }
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            for (shard, dir) in shard_dirs {
                let storage = DmaStorage::open(&dir).map_err(|e| e.to_string())?;
                let (log, report) = Log::open(storage, LogConfig::new(shard))
                    .await
                    .map_err(|e| format!("shard {shard}: {e}"))?;
                println!(
                    "shard {shard}: next offset {}, retained {:?}",
                    report.next_offset,
                    log.retained()
                );
                for name in log.segment_names() {
                    let first: u64 =
                        ringfeed_engine::segment::parse_segment_name(&name).unwrap_or(0);
                    let chunks: Vec<_> = log.chunks().filter(|c| c.segment == first).collect();
                    let records: u64 = chunks.iter().map(|c| u64::from(c.entry.record_count)).sum();
                    println!("  {name}: {} chunk(s), {records} record(s)", chunks.len());
                }
            }
            Ok::<(), String>(())
        })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?
        .map_err(|e| anyhow::anyhow!(e))
}
