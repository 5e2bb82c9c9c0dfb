//! `ringfeed-bench`: programs that print figures. Never timed assertions.
//!
//! * `log-append`: durable chunk appends through the engine's log (O_DIRECT +
//!   fdatasync) against raw O_DIRECT writes + fdatasync of the same sizes on
//!   the same disk, interleaved in one run; medians and their ratio.
//! * `log-recovery`: time to open (recover) a log of a given size.
//! * `shard-append`: in-process appends through the engine's shards (no gRPC),
//!   memory and durable acks, per batch size and shard count, with the raw
//!   O_DIRECT + fdatasync figures of the same disk measured in the same run.
//! * `subscribe-catchup`: one in-process subscriber catching up from segments
//!   and from the ring, match-all and a 1% filter.
//! * `grpc`, `metrics-cost`, `page-cost`: see `grpc.rs`.
//! * `idle-wakeups`: context switches of an idle `ringfeed serve`, per thread.
//! * `profile-compare`: durable shard appends with the default configuration
//!   and with a `ringfeed tune profile --write` file, alternating; medians.
#![forbid(unsafe_code)]

mod bucket;
mod catchup;
mod ceiling;
mod cli;
mod cluster;
mod delivery;
mod event_check;
mod flood;
mod grpc;
mod hyper_glommio;
mod idle;
mod micro;
mod producer_open;
mod report;
mod results;
mod scenarios;
mod security;
mod simulate;
mod since_lookup;
mod systems;
mod util;
mod wakeups;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Parser, Subcommand};

use crate::util::{on_glommio, runtime};

/// Counts allocations, so client-side figures can say how many they make
/// per event (a few relaxed atomic adds per allocation, in every system's
/// client alike).
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

#[derive(Parser)]
#[command(
    name = "ringfeed-bench",
    about = "ringfeed benchmark programs (print figures)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum CompareCmd {
    #[command(flatten)]
    Scenario(cli::ScenarioCmd),
    /// Every scenario with its defaults (or --quick sizes), plus `ceiling`;
    /// one JSON result file per scenario in --out (then run `report`).
    All(report::AllArgs),
}

#[derive(Subcommand)]
enum Command {
    /// Durable chunk append throughput vs raw O_DIRECT + fdatasync, per chunk size.
    LogAppend {
        /// Scratch directory on the disk to measure (not tmpfs). Removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Chunk (write) sizes in KiB.
        #[arg(long, value_delimiter = ',', default_value = "64,256,1024,4096")]
        sizes_kib: Vec<usize>,
        /// Bytes written per size and repetition, in MiB.
        #[arg(long, default_value_t = 256)]
        mib: u64,
        /// Repetitions (raw and framed interleaved); medians are reported.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Size of each event's payload in bytes (records are framed around it).
        #[arg(long, default_value_t = 200)]
        event_bytes: usize,
    },
    /// In-process appends through the shards: events/s and ack latency, memory and durable.
    ShardAppend {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Batch sizes (events per append).
        #[arg(long, value_delimiter = ',', default_value = "1,64,1024")]
        batches: Vec<usize>,
        /// Shard counts to run.
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        shards: Vec<u32>,
        /// Producer threads, each appending in a closed loop.
        #[arg(long, default_value_t = 4)]
        producers: usize,
        /// Seconds per configuration.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Payload bytes per event.
        #[arg(long, default_value_t = 200)]
        event_bytes: usize,
    },
    /// Time to open (recover) a log holding the given amount of data.
    LogRecovery {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Log size in MiB.
        #[arg(long, default_value_t = 1024)]
        mib: u64,
        /// Segment size in MiB.
        #[arg(long, default_value_t = 256)]
        segment_mib: u64,
        /// Times the log is reopened; the median is reported.
        #[arg(long, default_value_t = 3)]
        reps: usize,
    },
    /// One subscriber catching up over a pre-loaded log (in process, no gRPC):
    /// from segments (ring cold) and from the ring, match-all and a 1% filter.
    SubscribeCatchup {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Events to pre-load (2 shards).
        #[arg(long, default_value_t = 2_000_000)]
        events: u64,
        /// Payload bytes per event.
        #[arg(long, default_value_t = 200)]
        event_bytes: usize,
        /// Passes per configuration; medians are reported.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Also measure segment catch-up after dropping the page cache (needs root).
        #[arg(long)]
        drop_caches: bool,
    },
    /// Many clients each send one large append batch to a real `ringfeed
    /// serve` at once: the server's peak RSS, how each client ended (acked or
    /// refused), and that exactly the acked events were committed.
    AppendFlood {
        /// Scratch directory for the server's data dir; removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Clients, each with its own connection and one batch.
        #[arg(long, default_value_t = 100)]
        clients: usize,
        /// Size of each client's batch in MiB (1,000-byte events).
        #[arg(long, default_value_t = 24)]
        batch_mib: usize,
        /// Shards the server runs.
        #[arg(long, default_value_t = 2)]
        shards: u32,
        /// The server's append_budget_bytes in MiB (default: the server's default).
        #[arg(long)]
        budget_mib: Option<usize>,
    },
    /// Live delivery latency of a default subscriber and a durable-only one
    /// side by side (in process, no gRPC), with memory and durable appends:
    /// what delivering only flushed events costs.
    DeliveryLatency {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Events per second the open-loop producer appends.
        #[arg(long, default_value_t = 10_000)]
        rate: u64,
        /// Seconds per run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Shards.
        #[arg(long, default_value_t = 2)]
        shards: u32,
        /// The shards' flush interval in ms (the server's default is 10).
        #[arg(long, default_value_t = 10)]
        flush_interval_ms: u64,
    },
    /// Several real nodes (static peers) and one cluster subscription on node 1:
    /// catch-up events/s, CPU per event (node 1 and all nodes) and live
    /// latency p50/p99, side by side with a single node read in node scope.
    Cluster(cluster::Args),
    /// A catch-up from the beginning read from the object store against the
    /// same from the local log (issue 40), 1 and K subscribers at once:
    /// events/s, server CPU per event, peak RSS, bytes fetched.
    BucketCatchup(bucket::Args),
    /// What TLS and tokens cost: a plain server and one with TLS and a token file,
    /// interleaved passes of appends and of a catch-up from the beginning (events/s),
    /// medians and the ratio.
    Security(security::Args),
    /// What waiting subscribers cost a shard's append: K live subscribers
    /// parked in next() (tokio tasks) and one producer appending single-event
    /// batches at a fixed rate; the shard's stamp-and-publish time per batch,
    /// which wakes them (issue 19: it should not grow with K).
    ShardWakeups {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Shards.
        #[arg(long, default_value_t = 2)]
        shards: u32,
        /// Live subscriber counts, a row each.
        #[arg(long, value_delimiter = ',', default_value = "0,100,1000")]
        subscribers: Vec<usize>,
        /// Single-event batches per second.
        #[arg(long, default_value_t = 2_000)]
        rate: u64,
        /// Seconds per row.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
    },
    /// What idempotent producers cost at open: the same events with and
    /// without producer stamps, median reopen time of each and the time spent
    /// rebuilding the producer table.
    ProducerOpen {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        #[arg(long, default_value_t = 1_000_000)]
        events: u64,
        /// Idempotent producers taking turns, one 1000-event batch each.
        #[arg(long, default_value_t = 100)]
        producers: u64,
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// The deterministic simulators: shards, producers and faults (crashes,
    /// power loss, failed and torn writes, failed and stalled syncs, clock
    /// steps, producer retries, cancelled appends) driven on one thread from
    /// each seed, then clients following them through the server's stream
    /// code (slow, stalled, superseded, shut down), every invariant checked
    /// after every step. Prints `simulated N seeds x M steps: F failures`; a
    /// failing seed prints its replay command and writes its trace; exits
    /// non-zero on any failure.
    Simulate {
        /// Seeds to run, from --seed.
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// Steps per seed.
        #[arg(long, default_value_t = 3000)]
        steps: u64,
        /// The first seed; with --seeds 1 (the default when given), replays it.
        #[arg(long)]
        seed: Option<u64>,
        #[arg(long, default_value_t = 3)]
        shards: u32,
        /// Which faults: all, none, or a comma-separated list of crash,
        /// power-loss, write-error, sync-error, torn-write, clock-step, retry,
        /// stalled-sync, cancel, disk-full. (The stream simulation leaves out
        /// the restarts, the I/O failures that lead to them, and a full disk.)
        #[arg(long, default_value = "all")]
        faults: String,
        /// Where a failing seed's trace is written.
        #[arg(long, default_value = ".")]
        trace_dir: PathBuf,
    },
    /// The cost of a since_ns start's chunk look-up as the log grows: the
    /// chunk index's binary search beside a linear walk of the same chunks
    /// (in memory, the search alone).
    SinceLookup {
        /// Log sizes to measure, in segments.
        #[arg(long, value_delimiter = ',', default_value = "100,1000")]
        segments: Vec<u64>,
        /// Chunks per segment.
        #[arg(long, default_value_t = 256)]
        chunks: u64,
        #[arg(long, default_value_t = 2000)]
        lookups: u64,
        #[arg(long, default_value_t = 5)]
        reps: usize,
    },
    /// What checking an appended event costs: prost's decode alone (before),
    /// the strict wire check and the decode (what the server does), and the
    /// decode with a canonical re-encode (the alternative), over the same
    /// events, in turn per round; median ns per event and ratios.
    EventCheck {
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        #[arg(long, default_value_t = 15)]
        rounds: usize,
    },
    #[command(flatten)]
    Scenario(cli::ScenarioCmd),
    /// The machine's limits in the same run: O_DIRECT write and read
    /// bandwidth and fdatasync latency of the data disk, memcpy bandwidth, and
    /// a bare tonic server stream over loopback.
    Ceiling(cli::CeilingArgs),
    /// Runs a scenario (or `all`) with the same workload on ringfeed and on
    /// every other system installed here (SeaweedFS, etcd, NATS JetStream:
    /// `bench/peers/install.sh` installs them; one that is not installed is
    /// reported as skipped), and prints each figure with ratios.
    Compare {
        #[command(subcommand)]
        what: CompareCmd,
    },
    /// Writes BENCHMARKS.md from the JSON results of a `compare all` run.
    Report(report::ReportArgs),
    /// Append throughput over gRPC without and with the metrics endpoint (scraped
    /// while it runs), alternating; medians and their ratio.
    MetricsCost {
        #[command(flatten)]
        load: grpc::CostLoad,
        /// Milliseconds between scrapes (Prometheus's default is 15000).
        #[arg(long, default_value_t = 100)]
        scrape_ms: u64,
    },
    /// Append throughput over gRPC without and with status pages open (each
    /// fetching /api/status as the page's script does, once a second),
    /// alternating; medians and their ratio.
    PageCost {
        #[command(flatten)]
        load: grpc::CostLoad,
        /// Status pages open; a run is made for each count given.
        #[arg(long, value_delimiter = ',', default_value = "1,10")]
        viewers: Vec<usize>,
        /// Milliseconds between each page's fetches (the page polls every 1000).
        #[arg(long, default_value_t = 1000)]
        poll_ms: u64,
        /// Subscribers connected to each server (listed on the page; their
        /// filter matches nothing appended).
        #[arg(long, default_value_t = 100)]
        subscribers: usize,
    },
    /// Checks one system's adapter end to end: append, read back from the
    /// beginning, resume from the middle, receive live events (exactness only).
    Probe {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// The system to probe (started on loopback in --dir).
        #[arg(long, value_enum)]
        system: systems::Kind,
        /// Events appended (then as many again, one per request).
        #[arg(long, default_value_t = 1000)]
        events: u64,
        /// Payload bytes per event.
        #[arg(long, default_value_t = 200)]
        event_bytes: usize,
    },
    /// Wake-ups per second of an idle `ringfeed serve` (the binary next to this
    /// one), per thread: context switches over a quiet window.
    IdleWakeups {
        /// Scratch directory for the server's data dir; removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// Shards the server runs.
        #[arg(long, default_value_t = 2)]
        shards: u32,
        /// Seconds to let the server settle after it starts listening.
        #[arg(long, default_value_t = 2.0)]
        settle: f64,
        /// Seconds of the quiet window measured.
        #[arg(long, default_value_t = 10.0)]
        seconds: f64,
    },
    /// Durable in-process appends with the default `serve` configuration and with
    /// a config file (as `ringfeed tune profile --write` makes), alternating.
    ProfileCompare {
        /// Scratch directory on the disk to measure (not tmpfs); removed afterwards.
        #[arg(long, default_value = "./bench-scratch")]
        dir: PathBuf,
        /// The profile to compare with the defaults; its data_dir is replaced by --dir.
        #[arg(long)]
        config: PathBuf,
        /// Batch sizes (events per append).
        #[arg(long, value_delimiter = ',', default_value = "1,64")]
        batches: Vec<usize>,
        /// Producer threads, each appending in a closed loop.
        #[arg(long, default_value_t = 4)]
        producers: usize,
        /// Seconds per run.
        #[arg(long, default_value_t = 3.0)]
        seconds: f64,
        /// Runs per configuration and batch size.
        #[arg(long, default_value_t = 3)]
        reps: usize,
        /// Payload bytes per event.
        #[arg(long, default_value_t = 200)]
        event_bytes: usize,
    },
}

fn main() -> Result<()> {
    match Cli::parse().command {
        Command::LogAppend {
            dir,
            sizes_kib,
            mib,
            reps,
            event_bytes,
        } => {
            if sizes_kib.iter().any(|&k| k == 0 || k % 4 != 0) || reps == 0 {
                bail!("sizes must be positive multiples of 4 KiB and reps at least 1");
            }
            on_glommio(move || async move {
                micro::log_append(&dir, &sizes_kib, mib << 20, reps, event_bytes).await
            })
        }
        Command::ShardAppend {
            dir,
            batches,
            shards,
            producers,
            seconds,
            event_bytes,
        } => {
            if batches.contains(&0) || shards.contains(&0) || producers == 0 || seconds <= 0.0 {
                bail!("batches, shards, producers and seconds must be positive");
            }
            micro::shard_append(
                &dir,
                &batches,
                &shards,
                producers,
                Duration::from_secs_f64(seconds),
                event_bytes,
            )
        }
        Command::IdleWakeups {
            dir,
            shards,
            settle,
            seconds,
        } => {
            if shards == 0 || settle < 0.0 || seconds <= 0.0 {
                bail!("shards and seconds must be positive, settle not negative");
            }
            idle::run(
                &dir,
                shards,
                Duration::from_secs_f64(settle),
                Duration::from_secs_f64(seconds),
            )
        }
        Command::LogRecovery {
            dir,
            mib,
            segment_mib,
            reps,
        } => on_glommio(move || async move {
            micro::log_recovery(&dir, mib << 20, segment_mib << 20, reps).await
        }),
        Command::SubscribeCatchup {
            dir,
            events,
            event_bytes,
            reps,
            drop_caches,
        } => {
            if events == 0 || reps == 0 {
                bail!("events and reps must be positive");
            }
            catchup::subscribe_catchup(&dir, events, event_bytes, reps, drop_caches)
        }
        Command::AppendFlood {
            dir,
            clients,
            batch_mib,
            shards,
            budget_mib,
        } => flood::append_flood(&flood::Args {
            dir: &dir,
            clients,
            batch_mib,
            shards,
            budget_mib,
        }),
        Command::DeliveryLatency {
            dir,
            rate,
            seconds,
            shards,
            flush_interval_ms,
        } => delivery::delivery_latency(&delivery::Args {
            dir: &dir,
            rate,
            seconds,
            shards,
            flush_interval_ms,
        }),
        Command::Cluster(args) => cluster::run(&args),
        Command::BucketCatchup(args) => bucket::run(&args),
        Command::Security(args) => security::run(&args),
        Command::ShardWakeups {
            dir,
            shards,
            subscribers,
            rate,
            seconds,
        } => wakeups::run(&wakeups::Args {
            dir: &dir,
            shards,
            subscribers: &subscribers,
            rate,
            seconds,
        }),
        Command::ProducerOpen {
            dir,
            events,
            producers,
            reps,
        } => {
            if reps == 0 || producers == 0 {
                bail!("reps and producers must be positive");
            }
            producer_open::producer_open(&producer_open::Args {
                dir: &dir,
                events,
                producers,
                reps,
            })
        }
        Command::EventCheck { events, rounds } => {
            if events == 0 || rounds == 0 {
                bail!("events and rounds must be positive");
            }
            event_check::event_check(&event_check::Args { events, rounds })
        }
        Command::SinceLookup {
            segments,
            chunks,
            lookups,
            reps,
        } => {
            if segments.contains(&0) || chunks == 0 || lookups == 0 || reps == 0 {
                bail!("segments, chunks, lookups and reps must be positive");
            }
            since_lookup::since_lookup(&since_lookup::Args {
                segments,
                chunks,
                lookups,
                reps,
            })
        }
        Command::Simulate {
            seeds,
            steps,
            seed,
            shards,
            faults,
            trace_dir,
        } => {
            let faults = ringfeed_engine::sim::Fault::parse_list(&faults)
                .map_err(|e| anyhow::anyhow!("--faults: {e}"))?;
            if steps == 0 || shards == 0 || seeds == 0 {
                bail!("seeds, steps and shards must be positive");
            }
            // --seed S alone replays that seed; with --seeds N it is the first of N.
            let seeds_given = std::env::args().any(|a| a == "--seeds" || a.starts_with("--seeds="));
            let seeds = if seed.is_some() && !seeds_given {
                1
            } else {
                seeds
            };
            simulate::simulate(&simulate::Args {
                seeds,
                first_seed: seed.unwrap_or(0),
                steps,
                shards,
                faults,
                trace_dir,
            })
        }
        Command::Scenario(cmd) => {
            let kinds = [cmd.common().system];
            cli::run_scenario(&cmd, &kinds, cmd.common().out.as_deref()).map(drop)
        }
        Command::Ceiling(args) => cli::ceiling(&args).map(drop),
        Command::Compare { what } => match what {
            CompareCmd::Scenario(cmd) => {
                cli::run_scenario(&cmd, &systems::Kind::ALL, cmd.common().out.as_deref()).map(drop)
            }
            CompareCmd::All(args) => report::compare_all(&args),
        },
        Command::Report(args) => report::report(&args),
        Command::MetricsCost { load, scrape_ms } => {
            if scrape_ms == 0 {
                bail!("scrape-ms must be positive");
            }
            let every = Duration::from_millis(scrape_ms);
            grpc::endpoint_cost(&load, grpc::Watched::Metrics { every }, 0)
        }
        Command::PageCost {
            load,
            viewers,
            poll_ms,
            subscribers,
        } => {
            if poll_ms == 0 || viewers.contains(&0) {
                bail!("viewers and poll-ms must be positive");
            }
            for viewers in viewers {
                let every = Duration::from_millis(poll_ms);
                grpc::endpoint_cost(&load, grpc::Watched::Page { every, viewers }, subscribers)?;
            }
            Ok(())
        }
        Command::Probe {
            dir,
            system,
            events,
            event_bytes,
        } => {
            let result = runtime()?.block_on(systems::probe(system, &dir, events, event_bytes));
            let _ = std::fs::remove_dir_all(&dir);
            result
        }
        Command::ProfileCompare {
            dir,
            config,
            batches,
            producers,
            seconds,
            reps,
            event_bytes,
        } => {
            if batches.contains(&0) || producers == 0 || seconds <= 0.0 || reps == 0 {
                bail!("batches, producers, seconds and reps must be positive");
            }
            micro::profile_compare(
                &dir,
                &config,
                &batches,
                producers,
                Duration::from_secs_f64(seconds),
                reps,
                event_bytes,
            )
        }
    }
}
