//! `compare all` (every scenario on every system, one JSON result file each,
//! plus `ceiling`) and `report` (BENCHMARKS.md from those files, so anyone can
//! regenerate it from the results of their own run).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{anyhow, Context, Result};
use clap::Args;
use serde_json::Value;

use crate::cli::{AppendArgs, CatchupArgs, CeilingArgs, Common, LiveArgs, ScenarioCmd, StormArgs};
use crate::results::{format_figure, Row, Run};
use crate::scenarios::headlines;
use crate::systems::Kind;

/// The scenarios of `compare all`, in the order they run and are reported.
const SCENARIOS: [&str; 5] = ["append", "catchup", "tail", "storm", "fanout"];

#[derive(Args, Clone, Debug)]
pub struct AllArgs {
    /// Scratch directory for the systems' data (on the disk to measure, not
    /// tmpfs). Emptied first, removed afterwards.
    #[arg(long, default_value = "./bench-scratch")]
    pub dir: PathBuf,
    /// Directory for the JSON result files (SCENARIO.json) and histograms.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Quick mode: every scenario with its small sizes (seconds each).
    #[arg(long)]
    pub quick: bool,
    /// Shards of the ringfeed server the bench starts.
    #[arg(long, default_value_t = 2)]
    pub shards: u32,
}

#[derive(Args, Clone, Debug)]
pub struct ReportArgs {
    /// Directory holding the JSON result files of a `compare all` run.
    #[arg(long, default_value = "bench/results")]
    pub results: PathBuf,
    /// The file to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub output: PathBuf,
    /// Hand-written analysis (what limits ringfeed where it falls short),
    /// included verbatim if it exists.
    #[arg(long, default_value = "bench/analysis.md")]
    pub analysis: PathBuf,
}

pub fn compare_all(args: &AllArgs) -> Result<()> {
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("creating {}", args.out.display()))?;
    let common = Common {
        dir: args.dir.clone(),
        out: None,
        quick: args.quick,
        target: None,
        shards: args.shards,
        system: Kind::Ringfeed,
    };
    crate::cli::ceiling(&CeilingArgs {
        dir: args.dir.clone(),
        out: Some(args.out.join("ceiling.json")),
        quick: args.quick,
        write_mib: None,
        syncs: None,
        messages: None,
        echo_seconds: None,
    })?;
    let live = LiveArgs {
        common: common.clone(),
        rate: None,
        seconds: None,
        subscribers: None,
        event_bytes: None,
    };
    let commands = [
        ScenarioCmd::Append(AppendArgs {
            common: common.clone(),
            events: None,
            producers: None,
            batches: None,
            event_bytes: None,
            durability: None,
            pipeline: None,
        }),
        ScenarioCmd::Catchup(CatchupArgs {
            common: common.clone(),
            events: None,
            subscribers: None,
            event_bytes: None,
            time_limit: None,
        }),
        ScenarioCmd::Tail(live.clone()),
        ScenarioCmd::Storm(StormArgs {
            common: common.clone(),
            backlog: None,
            behind: None,
            subscribers: None,
            event_bytes: None,
            time_limit: None,
        }),
        ScenarioCmd::Fanout(live),
    ];
    let mut failed = Vec::new();
    for cmd in commands {
        let name = cmd.scenario().name();
        let out = args.out.join(format!("{name}.json"));
        println!();
        if let Err(e) = crate::cli::run_scenario(&cmd, &Kind::ALL, Some(&out)) {
            eprintln!("{name}: FAILED: {e:#}");
            failed.push(format!("{name}: {e:#}"));
        }
    }
    println!(
        "\nresults in {}; `ringfeed-bench report --results {}` writes BENCHMARKS.md",
        args.out.display(),
        args.out.display()
    );
    if failed.is_empty() {
        Ok(())
    } else {
        Err(anyhow!("{}", failed.join("\n")))
    }
}

/// A result file read back: the run (figures only) and the raw document.
struct Loaded {
    run: Run,
    doc: Value,
}

fn load(path: &Path) -> Result<Option<Loaded>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let scenario = doc["scenario"]
        .as_str()
        .and_then(|s| {
            SCENARIOS
                .iter()
                .chain(["ceiling"].iter())
                .find(|x| **x == s)
        })
        .ok_or_else(|| anyhow!("{}: unknown scenario", path.display()))?;
    let mut run = Run::new(scenario, doc["params"].clone());
    run.started = doc["started_utc"].as_str().unwrap_or_default().to_owned();
    for r in doc["rows"].as_array().into_iter().flatten() {
        let kind = Kind::from_name(r["system"].as_str().unwrap_or_default())
            .ok_or_else(|| anyhow!("{}: unknown system {}", path.display(), r["system"]))?;
        let mut row = Row::new(
            kind,
            r["case"].as_str().unwrap_or_default(),
            r["variant"].as_str().unwrap_or_default(),
        );
        for (k, v) in r["figures"].as_object().into_iter().flatten() {
            row.figure(k, v.as_f64().unwrap_or(f64::NAN));
        }
        run.rows.push(row);
    }
    for s in doc["skipped"].as_array().into_iter().flatten() {
        if let Some(kind) = Kind::from_name(s["system"].as_str().unwrap_or_default()) {
            run.skipped
                .push((kind, s["reason"].as_str().unwrap_or_default().to_owned()));
        }
    }
    for s in doc["failed"].as_array().into_iter().flatten() {
        if let Some(kind) = Kind::from_name(s["system"].as_str().unwrap_or_default()) {
            run.failed
                .push((kind, s["reason"].as_str().unwrap_or_default().to_owned()));
        }
    }
    Ok(Some(Loaded { run, doc }))
}

/// The append case of issue 18's single-event goals.
const SINGLE_EVENT_CASE: &str = "8 producers × batch 1 × 200 B";

/// A ratio's bound in a goal.
#[derive(Clone, Copy)]
enum Limit {
    AtMost(f64),
    AtLeast(f64),
}

/// A goal's verdict line.
struct Goal {
    goal: String,
    measured: String,
    met: Option<bool>,
}

fn find<'a>(run: &'a Run, system: Kind, case: &str, variant: Option<&str>) -> Vec<&'a Row> {
    run.rows
        .iter()
        .filter(|r| r.system == system && r.case == case && variant.is_none_or(|v| r.variant == v))
        .collect()
}

/// The variants (configurations) of ringfeed's rows of `case`, in order.
fn variants(run: &Run, case: &str) -> Vec<String> {
    let mut variants: Vec<String> = Vec::new();
    for row in find(run, Kind::Ringfeed, case, None) {
        if !variants.contains(&row.variant) {
            variants.push(row.variant.clone());
        }
    }
    variants
}

fn goals(runs: &[(&str, Option<Loaded>)], ceiling: Option<&Loaded>) -> Vec<Goal> {
    let get = |name: &str| {
        runs.iter()
            .find(|(n, _)| *n == name)
            .and_then(|(_, l)| l.as_ref())
            .map(|l| &l.run)
    };
    let mut goals = Vec::new();
    // Each goal: one configuration of ringfeed against each other system's
    // figure; a goal that names none is judged for each configuration, on
    // its own line (never its best figure of one and another of another).
    let mut versus = |run: Option<&Run>,
                      (case, variant): (&str, Option<&str>),
                      key: &str,
                      higher: bool,
                      targets: &[(Kind, f64)],
                      what: &str| {
        let Some(run) = run else {
            goals.push(Goal {
                goal: what.to_owned(),
                measured: "not run".into(),
                met: None,
            });
            return;
        };
        let configurations = match variant {
            Some(v) => vec![v.to_owned()],
            // No row of ringfeed's: one line, not measured.
            None => Some(variants(run, case))
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| vec!["(no row)".to_owned()]),
        };
        for configuration in configurations {
            let ours = find(run, Kind::Ringfeed, case, Some(&configuration))
                .first()
                .and_then(|r| r.get(key));
            let what = match variant {
                Some(_) => what.to_owned(),
                None => format!("{what}, ringfeed {configuration}"),
            };
            for &(kind, need) in targets {
                let theirs = find(run, kind, case, None).first().and_then(|r| r.get(key));
                // A need of 1 means "better than": strictly above 1.
                let goal = if need == 1.0 {
                    format!("{what}: better than {}", kind.name())
                } else {
                    format!("{what}: ≥ {need}× {}", kind.name())
                };
                match (ours, theirs) {
                    (Some(mine), Some(t)) => {
                        let ratio = if higher { mine / t } else { t / mine };
                        goals.push(Goal {
                            goal,
                            measured: format!(
                                "{ratio:.2}× (ringfeed {configuration} {} vs {})",
                                format_figure(mine),
                                format_figure(t)
                            ),
                            met: Some(if need == 1.0 {
                                ratio > 1.0
                            } else {
                                ratio >= need
                            }),
                        });
                    }
                    _ => {
                        let failed = run.failed.iter().find(|(k, _)| *k == kind);
                        let why = match failed {
                            Some((_, w)) => format!("{} FAILED: {w}", kind.name()),
                            None => run
                                .skipped
                                .iter()
                                .find(|(k, _)| *k == kind)
                                .map_or("no figure".to_owned(), |(_, w)| w.clone()),
                        };
                        goals.push(Goal {
                            goal,
                            measured: format!("not measured: {why}"),
                            met: None,
                        });
                    }
                }
            }
        }
    };
    let catchup = get("catchup");
    let catch_case = catchup
        .and_then(|r| {
            r.rows
                .iter()
                .find(|row| row.get("subscribers") == Some(1.0))
        })
        .map_or("K=1".to_owned(), |r| r.case.clone());
    versus(
        catchup,
        (&catch_case, Some("chunks")),
        "events/s",
        true,
        &[
            (Kind::Seaweedfs, 20.0),
            (Kind::Etcd, 5.0),
            (Kind::Nats, 10.0),
        ],
        "catch-up events/s, one subscriber, chunk mode",
    );
    // Issue 19: in event mode too, not only in chunk mode.
    versus(
        catchup,
        (&catch_case, Some("events")),
        "events/s",
        true,
        &[(Kind::Seaweedfs, 20.0), (Kind::Nats, 10.0)],
        "catch-up events/s, one subscriber, event mode",
    );
    // Issue 19: `ringfeed tail` against `weed filer.meta.tail`, JSON to a pipe.
    versus(
        catchup,
        ("tail CLI", Some("cli")),
        "events/s",
        true,
        &[(Kind::Seaweedfs, 10.0)],
        "command-line tail from the beginning, JSON to a pipe",
    );
    let tail = get("tail");
    let tail_case = tail
        .and_then(|r| r.rows.first())
        .map_or("-".to_owned(), |r| r.case.clone());
    versus(
        tail,
        (&tail_case, None),
        "latency p99 ms",
        false,
        &[(Kind::Seaweedfs, 5.0), (Kind::Etcd, 5.0), (Kind::Nats, 5.0)],
        &format!("live append-to-delivery p99 ({tail_case}), lower"),
    );
    let storm = get("storm");
    let storm_cases: Vec<String> = storm
        .map(|r| {
            let mut cases: Vec<String> = Vec::new();
            for row in r.rows.iter().filter(|row| row.system == Kind::Ringfeed) {
                if !cases.contains(&row.case) {
                    cases.push(row.case.clone());
                }
            }
            cases
        })
        .unwrap_or_default();
    for case in &storm_cases {
        // Issue 19: at K = 2,000, a third of etcd's time and half its memory.
        let etcd = |need: f64| if case == "K=2000" { need } else { 1.0 };
        for (key, what, need) in [
            ("all caught up s", "storm time to all caught up", etcd(3.0)),
            ("server peak RSS MiB", "storm server peak RSS", etcd(2.0)),
        ] {
            versus(
                storm,
                (case, None),
                key,
                false,
                &[
                    (Kind::Seaweedfs, 1.0),
                    (Kind::Etcd, need),
                    (Kind::Nats, 1.0),
                ],
                &format!("{what} ({case}), lower"),
            );
        }
    }
    // Issue 18's append goals against the other systems: pipelined single
    // events against NATS's async acked publishes (5× the events/s at a
    // fifth of the CPU each), durable single events against etcd.
    let append = get("append");
    let pipelined = append
        .and_then(|r| r.rows.iter().find(|row| row.case.contains("pipeline")))
        .map_or("-".to_owned(), |r| r.case.clone());
    versus(
        append,
        (&pipelined, Some("memory")),
        "events/s",
        true,
        &[(Kind::Nats, 5.0)],
        &format!("pipelined single-event appends/s ({pipelined})"),
    );
    versus(
        append,
        (&pipelined, Some("memory")),
        "server CPU µs/event",
        false,
        &[(Kind::Nats, 5.0)],
        &format!("pipelined appends' server CPU per event ({pipelined}), lower"),
    );
    versus(
        append,
        (SINGLE_EVENT_CASE, Some("durable")),
        "events/s",
        true,
        &[(Kind::Etcd, 3.0)],
        &format!("durable single-event appends/s ({SINGLE_EVENT_CASE})"),
    );
    // And against the floors `ceiling` measured on the same machine.
    let floor = |case: &str, key: &str| {
        ceiling.and_then(|c| {
            c.run
                .rows
                .iter()
                .find(|r| r.case.starts_with(case))
                .and_then(|r| r.get(key))
        })
    };
    let single = |variant: &str, key: &str| {
        append
            .and_then(|run| {
                find(run, Kind::Ringfeed, SINGLE_EVENT_CASE, Some(variant))
                    .first()
                    .copied()
            })
            .and_then(|r| r.get(key))
    };
    let echo = "tonic unary echo";
    for (goal, ours, floor, limit) in [
        (
            "single-event unary append server CPU ≤ 1.3 × the bare tonic unary echo's per call",
            single("memory", "server CPU µs/event"),
            floor(echo, "server CPU us per call"),
            Limit::AtMost(1.3),
        ),
        (
            "single-event unary appends/s ≥ 0.9 × the bare tonic unary echo's calls/s",
            single("memory", "events/s"),
            floor(echo, "calls/s"),
            Limit::AtLeast(0.9),
        ),
        (
            "durable single-event ack p99 ≤ 2 × the 4 KiB write + fdatasync p99 (ceiling)",
            single("durable", "ack p99 ms"),
            floor("4 KiB O_DIRECT write + fdatasync", "write+sync p99 us").map(|us| us / 1e3),
            Limit::AtMost(2.0),
        ),
    ] {
        goals.push(match (ours, floor) {
            (Some(ours), Some(floor)) => {
                let ratio = ours / floor;
                Goal {
                    goal: goal.into(),
                    measured: format!(
                        "{ratio:.2} ({} vs {})",
                        format_figure(ours),
                        format_figure(floor)
                    ),
                    met: Some(match limit {
                        Limit::AtMost(l) => ratio <= l,
                        Limit::AtLeast(l) => ratio >= l,
                    }),
                }
            }
            _ => Goal {
                goal: goal.into(),
                measured: "not run".into(),
                met: None,
            },
        });
    }
    // Durable append MB/s against the disk's raw O_DIRECT write bandwidth.
    let raw = ceiling.and_then(|c| {
        c.run
            .rows
            .iter()
            .find(|r| r.case.starts_with("O_DIRECT write 1 MiB, one fdatasync"))
            .and_then(|r| r.get("MB/s"))
    });
    let durable = append.and_then(|run| {
        run.rows
            .iter()
            .filter(|r| r.system == Kind::Ringfeed && r.variant == "durable")
            .filter_map(|r| r.get("MB/s").map(|v| (v, r.case.clone())))
            .reduce(|a, b| if b.0 > a.0 { b } else { a })
    });
    goals.push(match (durable, raw) {
        (Some((mb, case)), Some(raw)) => Goal {
            goal: "durable append MB/s ≥ 0.85 × raw O_DIRECT write (ceiling)".into(),
            measured: format!(
                "{:.2} ({} MB/s, {case}, vs {} MB/s)",
                mb / raw,
                format_figure(mb),
                format_figure(raw)
            ),
            met: Some(mb / raw >= 0.85),
        },
        _ => Goal {
            goal: "durable append MB/s ≥ 0.85 × raw O_DIRECT write (ceiling)".into(),
            measured: "not run".into(),
            met: None,
        },
    });
    // Issue 19: 1,000 live subscribers, p99 and server CPU per delivery.
    if let Some(row) = get("fanout").and_then(|r| {
        r.rows
            .iter()
            .find(|row| row.system == Kind::Ringfeed && row.get("subscribers") == Some(1000.0))
    }) {
        if let Some(p99) = row.get("latency p99 ms") {
            goals.push(Goal {
                goal: format!("fan-out p99 ({}) ≤ 100 ms", row.case),
                measured: format!("{} ms", format_figure(p99)),
                met: Some(p99 <= 100.0),
            });
        }
        if let (Some(cpu), Some(deliveries)) = (row.get("server CPU s"), row.get("deliveries")) {
            let per = cpu * 1e6 / deliveries.max(1.0);
            goals.push(Goal {
                goal: format!("fan-out server CPU per delivery ({}) ≤ 1 µs", row.case),
                measured: format!(
                    "{per:.2} µs ({} s for {} deliveries)",
                    format_figure(cpu),
                    format_figure(deliveries)
                ),
                met: Some(per <= 1.0),
            });
        }
    }
    goals
}

pub fn report(args: &ReportArgs) -> Result<()> {
    let ceiling = load(&args.results.join("ceiling.json"))?;
    let runs: Vec<(&str, Option<Loaded>)> = SCENARIOS
        .iter()
        .map(|s| Ok((*s, load(&args.results.join(format!("{s}.json")))?)))
        .collect::<Result<_>>()?;
    if ceiling.is_none() && runs.iter().all(|(_, l)| l.is_none()) {
        return Err(anyhow!(
            "no result files in {}: run `ringfeed-bench compare all --out {}` first",
            args.results.display(),
            args.results.display()
        ));
    }
    let any = ceiling
        .as_ref()
        .or_else(|| runs.iter().find_map(|(_, l)| l.as_ref()))
        .expect("checked above");
    let machine = &any.doc["machine"];
    let mut md = String::new();
    let _ = writeln!(md, "# ringfeed benchmarks\n");
    let _ = writeln!(
        md,
        "Generated by `ringfeed-bench report --results {}` from the JSON result files there \
         (each names the command that produced it and when; `compare all` writes them all); \
         do not edit by hand (the analysis comes from `{}`). In each scenario every system ran \
         on this machine, on loopback, with its data on the same disk, one after another with \
         the same workload.\n",
        args.results.display(),
        args.analysis.display()
    );
    let _ = writeln!(md, "## Machine\n");
    let _ = writeln!(
        md,
        "{} cores ({}), {} GiB, kernel {}, data disk {}.\n",
        machine["cores"],
        machine["cpu"].as_str().unwrap_or("?"),
        machine["memory_gib"],
        machine["kernel"].as_str().unwrap_or("?"),
        machine["disk"].as_str().unwrap_or("?")
    );
    let _ = writeln!(md, "## How to reproduce\n");
    let _ = writeln!(md, "```sh");
    let _ = writeln!(
        md,
        "bench/peers/install.sh          # etcd, NATS, SeaweedFS"
    );
    let _ = writeln!(
        md,
        "cargo build --release -p ringfeed-cli -p ringfeed-bench"
    );
    let _ = writeln!(
        md,
        "target/release/ringfeed-bench compare all --out bench/results"
    );
    let _ = writeln!(
        md,
        "target/release/ringfeed-bench report --results bench/results"
    );
    let _ = writeln!(md, "```\n");
    let _ = writeln!(md, "{METHOD}");
    let _ = writeln!(md, "## Goals\n");
    let _ = writeln!(md, "| goal | measured | verdict |");
    let _ = writeln!(md, "|---|---|---|");
    for g in goals(&runs, ceiling.as_ref()) {
        let verdict = match g.met {
            Some(true) => "met",
            Some(false) => "**not met**",
            None => "not measured",
        };
        let _ = writeln!(md, "| {} | {} | {verdict} |", g.goal, g.measured);
    }
    let _ = writeln!(md);
    if let Ok(analysis) = std::fs::read_to_string(&args.analysis) {
        let _ = writeln!(md, "{}\n", analysis.trim_end());
    }
    if let Some(c) = &ceiling {
        let _ = writeln!(md, "## ceiling: the machine's limits\n");
        let _ = writeln!(
            md,
            "`{}` ({})\n",
            c.doc["command"].as_str().unwrap_or(""),
            c.run.started
        );
        let _ = writeln!(md, "{}", c.run.table());
    }
    for (name, loaded) in &runs {
        let Some(l) = loaded else {
            let _ = writeln!(md, "## {name}\n\nNot run.\n");
            continue;
        };
        let _ = writeln!(md, "## {name}\n");
        let _ = writeln!(
            md,
            "`{}` ({}); parameters: `{}`\n",
            l.doc["command"].as_str().unwrap_or(""),
            l.run.started,
            l.doc["params"]
        );
        let _ = writeln!(
            md,
            "Side by side (ratio = how many times better ringfeed is; above 1 is better):\n"
        );
        let _ = writeln!(md, "{}", l.run.comparison(headlines(name)));
        for (kind, why) in &l.run.skipped {
            let _ = writeln!(md, "- {}: {why}", kind.name());
        }
        for (kind, why) in &l.run.failed {
            let _ = writeln!(md, "- **{} FAILED**: {why}", kind.name());
        }
        if !l.run.skipped.is_empty() || !l.run.failed.is_empty() {
            let _ = writeln!(md);
        }
        let _ = writeln!(md, "<details><summary>All figures</summary>\n");
        let _ = writeln!(md, "{}", l.run.table());
        let _ = writeln!(md, "</details>\n");
    }
    std::fs::write(&args.output, md)
        .with_context(|| format!("writing {}", args.output.display()))?;
    println!("wrote {}", args.output.display());
    Ok(())
}

const METHOD: &str = "## Method

- Each scenario starts each system fresh on loopback with its data in a temp
  dir on the data disk, runs the same workload, and stops it. Clients run in
  the bench process, on the same 2 cores as the server.
- Every event is a namespace mutation carrying its number and send time in
  the first 16 bytes of its payload: a ringfeed create event under
  `/bench/dNN/`, a SeaweedFS filer entry created under `/bench/dNN/`, an etcd
  Put of `/bench/dNN/fN`, a NATS JetStream publish to `bench.dNN`.
- Subscribers: ringfeed's client library (`Follower`, event mode with
  batching, and chunk mode); SeaweedFS's `SubscribeMetadata` gRPC stream;
  etcd Watch from a revision; a NATS JetStream push consumer per subscriber.
- Every subscriber is checked exact: it must get each event it should, once.
- Durability differs by system and is named in each row's variant: ringfeed
  runs both memory acks (visible to subscribers) and durable acks
  (fdatasync'ed); etcd fsyncs its WAL; NATS syncs periodically; the SeaweedFS
  filer does not sync.
- \"Server CPU\" and \"server peak RSS\" are the serving process's own: for
  SeaweedFS the filer (its master and volume server are reported beside it,
  with `all processes CPU s` and `sum of process peaks RSS MiB`, peaks
  reached at different moments, added). Each row's peak is its own: reset
  before the row, after any pre-load.
- Latency is append-to-delivery: from when the producer built the request to
  when the subscriber had the event, the same wall clock on both ends.
  Producers of `tail` and `fanout` are open loop.
- Latency histograms are HdrHistogram's (3 significant digits), written
  beside each JSON file in its percentile-distribution text form (`.hgrm`).
- Figures are from one run on a shared machine; expect ±20% between runs.
";
