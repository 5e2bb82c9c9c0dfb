//! What a scenario run produces, in one shape for every scenario and system:
//! rows of figures, printed as a table, written as a JSON result file
//! (`--out`) with each latency histogram beside it in HdrHistogram's
//! percentile-distribution text form (`.hgrm`, as `outputPercentileDistribution`
//! writes it, so HdrHistogram's plotters read it).
//!
//! A row is one system's figures for one *case* of the workload (e.g.
//! "K=1000"), in one *variant* of that system (e.g. ringfeed's "chunks" or
//! "durable"). `compare` lines up rows of the same case across systems.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde_json::{json, Map, Value};

use crate::systems::Kind;

/// A latency histogram and the unit its values were recorded in.
pub struct Hist {
    pub name: &'static str,
    pub hist: Histogram<u64>,
    /// Recorded in µs, reported in ms (`Scale::Ms`), or as recorded.
    pub unit: Unit,
}

#[derive(Clone, Copy)]
pub enum Unit {
    /// Recorded in µs, reported in ms.
    MicrosAsMs,
    /// Recorded and reported in ms.
    Ms,
    /// Recorded and reported in µs.
    Micros,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::MicrosAsMs | Unit::Ms => "ms",
            Unit::Micros => "us",
        }
    }
    /// Recorded values per reported unit.
    fn ratio(self) -> f64 {
        match self {
            Unit::MicrosAsMs => 1000.0,
            Unit::Ms | Unit::Micros => 1.0,
        }
    }
}

/// The quantiles every histogram is summarised at, with their labels.
const QUANTILES: [(f64, &str); 5] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
];

pub struct Row {
    pub system: Kind,
    pub case: String,
    pub variant: String,
    /// Figures in display order: (key, value). Keys carry their unit.
    pub figures: Vec<(String, f64)>,
    pub hists: Vec<Hist>,
}

impl Row {
    pub fn new(system: Kind, case: impl Into<String>, variant: impl Into<String>) -> Row {
        Row {
            system,
            case: case.into(),
            variant: variant.into(),
            figures: Vec::new(),
            hists: Vec::new(),
        }
    }

    pub fn figure(&mut self, key: &str, value: f64) -> &mut Row {
        self.figures.push((key.to_owned(), value));
        self
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.figures.iter().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Adds `hist` and its summary figures (`NAME pXX UNIT` at p50, p90,
    /// p99, p99.9, p99.99, and `NAME max UNIT`).
    pub fn hist(&mut self, name: &'static str, hist: Histogram<u64>, unit: Unit) -> &mut Row {
        self.summarised(name, hist, unit, &QUANTILES)
    }

    /// Adds `hist` with a short summary: p50, p99 and max.
    pub fn hist_short(&mut self, name: &'static str, hist: Histogram<u64>, unit: Unit) -> &mut Row {
        self.summarised(name, hist, unit, &[QUANTILES[0], QUANTILES[2]])
    }

    fn summarised(
        &mut self,
        name: &'static str,
        hist: Histogram<u64>,
        unit: Unit,
        quantiles: &[(f64, &str)],
    ) -> &mut Row {
        let r = unit.ratio();
        for &(q, label) in quantiles {
            self.figure(
                &format!("{name} {label} {}", unit.label()),
                hist.value_at_quantile(q) as f64 / r,
            );
        }
        self.figure(
            &format!("{name} max {}", unit.label()),
            hist.max() as f64 / r,
        );
        self.hists.push(Hist { name, hist, unit });
        self
    }
}

/// One scenario run: its parameters, rows, the systems skipped (not
/// installed) and those that failed.
pub struct Run {
    pub scenario: &'static str,
    pub params: Value,
    pub rows: Vec<Row>,
    pub skipped: Vec<(Kind, String)>,
    /// Systems that failed to start or to run: a failure, in the table and
    /// in the exit status.
    pub failed: Vec<(Kind, String)>,
    pub started: String,
}

/// A figure `compare` puts side by side, and which way is better.
pub struct Headline {
    pub key: &'static str,
    pub higher_is_better: bool,
}

impl Run {
    pub fn new(scenario: &'static str, params: Value) -> Run {
        Run {
            scenario,
            params,
            rows: Vec::new(),
            skipped: Vec::new(),
            failed: Vec::new(),
            started: utc_now(),
        }
    }

    /// Prints every row: case, system, variant and all figures.
    pub fn print_table(&self) {
        print!("{}", self.table());
        for (kind, why) in &self.skipped {
            println!("{}: skipped: {why}", kind.name());
        }
        for (kind, why) in &self.failed {
            println!("{}: FAILED: {why}", kind.name());
        }
    }

    /// The rows as a markdown table; the columns are the union of the rows'
    /// figure keys, in first-seen order.
    pub fn table(&self) -> String {
        if self.scenario == "ceiling" {
            return self.list();
        }
        let mut keys: Vec<&str> = Vec::new();
        for row in &self.rows {
            for (k, _) in &row.figures {
                if !keys.contains(&k.as_str()) {
                    keys.push(k);
                }
            }
        }
        let mut s = String::new();
        let _ = writeln!(s, "| case | system | variant | {} |", keys.join(" | "));
        let _ = writeln!(s, "|---|---|---|{}", "---:|".repeat(keys.len()));
        for row in &self.rows {
            let cells: Vec<String> = keys
                .iter()
                .map(|k| row.get(k).map_or_else(|| "-".to_owned(), format_figure))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                row.case,
                row.system.name(),
                row.variant,
                cells.join(" | ")
            );
        }
        s
    }

    /// One line per figure: for rows that share few columns (`ceiling`).
    fn list(&self) -> String {
        let mut s = String::from("| measurement | figure | value |\n|---|---|---:|\n");
        for row in &self.rows {
            for (k, v) in &row.figures {
                let _ = writeln!(s, "| {} | {k} | {} |", row.case, format_figure(*v));
            }
        }
        s
    }

    /// ringfeed beside every other system, per case and ringfeed variant:
    /// each headline figure and the ratio (how many times better ringfeed
    /// is: above 1 it is better, below 1 worse).
    pub fn comparison(&self, headlines: &[Headline]) -> String {
        let others: Vec<Kind> = Kind::ALL
            .into_iter()
            .filter(|k| *k != Kind::Ringfeed)
            .collect();
        let mut s = String::new();
        let head: Vec<String> = others
            .iter()
            .map(|k| {
                let acks = match k.syncs_acks() {
                    Some(true) => " (fsync'd acks)",
                    Some(false) => " (memory acks)",
                    None => "",
                };
                format!("{0}{acks} | ringfeed ÷ {0}", k.name())
            })
            .collect();
        let _ = writeln!(s, "| case | figure | ringfeed | {} |", head.join(" | "));
        let _ = writeln!(s, "|---|---|---:|{}", "---:|---:|".repeat(others.len()));
        // Cases only ringfeed runs (e.g. batched appends) have nothing to
        // compare: leave them to the full table, unless no other system ran.
        let others_ran = self.rows.iter().any(|r| r.system != Kind::Ringfeed);
        let compared = |case: &str| {
            !others_ran
                || self
                    .rows
                    .iter()
                    .any(|r| r.system != Kind::Ringfeed && r.case == case)
        };
        for ours in self
            .rows
            .iter()
            .filter(|r| r.system == Kind::Ringfeed && compared(&r.case))
        {
            for h in headlines {
                let Some(mine) = ours.get(h.key) else {
                    continue;
                };
                let mut cells = Vec::new();
                for other in &others {
                    // Like with like: ringfeed's memory acks against a peer's
                    // memory acks, its durable acks against fsync'd ones.
                    let durable = match ours.variant.as_str() {
                        "durable" => Some(true),
                        "memory" => Some(false),
                        _ => None,
                    };
                    if let (Some(ours), Some(theirs)) = (durable, other.syncs_acks()) {
                        if ours != theirs {
                            let only = if theirs {
                                "fsync'd only"
                            } else {
                                "memory only"
                            };
                            cells.push(format!("{only} | -"));
                            continue;
                        }
                    }
                    let theirs = self
                        .rows
                        .iter()
                        .find(|r| r.system == *other && r.case == ours.case)
                        .and_then(|r| r.get(h.key));
                    match theirs {
                        Some(t) => {
                            let ratio = if h.higher_is_better {
                                mine / t
                            } else {
                                t / mine
                            };
                            cells.push(format!("{} | {}", format_figure(t), format_ratio(ratio)));
                        }
                        None => {
                            let why = if self.failed.iter().any(|(k, _)| k == other) {
                                "FAILED"
                            } else if self.skipped.iter().any(|(k, _)| k == other) {
                                "skipped"
                            } else {
                                "-"
                            };
                            cells.push(format!("{why} | -"));
                        }
                    }
                }
                let _ = writeln!(
                    s,
                    "| {} | {} ({}) | {} | {} |",
                    ours.case,
                    h.key,
                    ours.variant,
                    format_figure(mine),
                    cells.join(" | ")
                );
            }
        }
        s
    }

    /// Writes the JSON result file `out` and one `.hgrm` file per histogram
    /// beside it (`OUT-STEM.SYSTEM.ROW.NAME.hgrm`).
    pub fn write(&self, out: &Path) -> Result<()> {
        if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        let stem = out
            .file_stem()
            .map_or_else(|| "result".into(), |s| s.to_string_lossy().into_owned());
        remove_histograms(out, &stem)?;
        let mut rows = Vec::new();
        for (i, row) in self.rows.iter().enumerate() {
            let mut figures = Map::new();
            for (k, v) in &row.figures {
                figures.insert(k.clone(), json!(v));
            }
            let mut hists = Map::new();
            for h in &row.hists {
                let file: PathBuf = out.with_file_name(format!(
                    "{stem}.{}.{i}.{}.hgrm",
                    row.system.name(),
                    h.name.replace(' ', "-")
                ));
                std::fs::write(&file, percentile_distribution(&h.hist, h.unit))
                    .with_context(|| format!("writing {}", file.display()))?;
                hists.insert(
                    h.name.to_owned(),
                    json!({
                        "unit": h.unit.label(),
                        "count": h.hist.len(),
                        "file": file.file_name().map(|f| f.to_string_lossy().into_owned()),
                    }),
                );
            }
            rows.push(json!({
                "system": row.system.name(),
                "case": row.case,
                "variant": row.variant,
                "figures": figures,
                "histograms": hists,
            }));
        }
        let skipped: Vec<Value> = self
            .skipped
            .iter()
            .map(|(k, why)| json!({"system": k.name(), "reason": why}))
            .collect();
        let failed: Vec<Value> = self
            .failed
            .iter()
            .map(|(k, why)| json!({"system": k.name(), "reason": why}))
            .collect();
        let doc = json!({
            "scenario": self.scenario,
            "started_utc": self.started,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "machine": machine_json(),
            "params": self.params,
            "rows": rows,
            "skipped": skipped,
            "failed": failed,
        });
        std::fs::write(out, serde_json::to_string_pretty(&doc)? + "\n")
            .with_context(|| format!("writing {}", out.display()))?;
        println!("wrote {}", out.display());
        Ok(())
    }
}

/// Removes the `.hgrm` files an earlier run wrote beside `out`
/// (`STEM.*.hgrm`): a file no result names must not outlive its run.
fn remove_histograms(out: &Path, stem: &str) -> Result<()> {
    let dir = match out.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.to_owned(),
        None => PathBuf::from("."),
    };
    let prefix = format!("{stem}.");
    for entry in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".hgrm")) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

pub fn format_figure(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn format_ratio(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}×")
    } else {
        "-".to_owned()
    }
}

/// HdrHistogram's percentile-distribution text (as Java's
/// `outputPercentileDistribution(out, 5, scale)` prints it).
pub fn percentile_distribution(hist: &Histogram<u64>, unit: Unit) -> String {
    let r = unit.ratio();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:>12} {:>14} {:>10} {:>14}\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    for v in hist.iter_quantiles(5) {
        total += v.count_since_last_iteration();
        let q = v.quantile_iterated_to();
        let value = v.value_iterated_to() as f64 / r;
        if q < 1.0 {
            let _ = writeln!(
                s,
                "{value:>12.3} {q:>2.12} {total:>10} {:>14.2}",
                1.0 / (1.0 - q)
            );
        } else {
            let _ = writeln!(s, "{value:>12.3} {q:>2.12} {total:>10}");
        }
    }
    let _ = writeln!(
        s,
        "#[Mean    = {:>12.3}, StdDeviation   = {:>12.3}]",
        hist.mean() / r,
        hist.stdev() / r
    );
    let _ = writeln!(
        s,
        "#[Max     = {:>12.3}, Total count    = {:>12}]",
        hist.max() as f64 / r,
        hist.len()
    );
    let _ = writeln!(
        s,
        "#[Buckets = {:>12}, SubBuckets     = {:>12}]",
        hist.buckets(),
        (2 * 10u64.pow(u32::from(hist.sigfig()))).next_power_of_two()
    );
    s
}

/// The machine, for the result file: cores, CPU model, memory, kernel, and
/// the disk under the current directory.
pub fn machine_json() -> Value {
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    let cpu = read("/proc/cpuinfo")
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        .unwrap_or_default();
    let mem_kib: u64 = read("/proc/meminfo")
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0);
    json!({
        "cores": std::thread::available_parallelism().map_or(0, |n| n.get()),
        "cpu": cpu,
        "memory_gib": (mem_kib as f64 / (1u64 << 20) as f64 * 10.0).round() / 10.0,
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
        "disk": disk_of(Path::new(".")),
    })
}

/// The device and file system the path lives on (from /proc/self/mountinfo),
/// and whether the kernel calls it rotational.
fn disk_of(path: &Path) -> String {
    let Ok(path) = path.canonicalize() else {
        return String::new();
    };
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // Longest mount point that is a prefix of the path.
    let best = info
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let dash = f.iter().position(|x| *x == "-")?;
            let mount = *f.get(4)?;
            if !path.starts_with(mount) {
                return None;
            }
            Some((
                mount.len(),
                f.get(dash + 1)?.to_string(),
                f.get(dash + 2)?.to_string(),
            ))
        })
        .max_by_key(|(len, _, _)| *len);
    let Some((_, fs, dev)) = best else {
        return String::new();
    };
    let name = dev.trim_start_matches("/dev/");
    let rotational = std::fs::read_to_string(format!("/sys/class/block/{name}/queue/rotational"))
        .map(|r| {
            if r.trim() == "1" {
                "rotational"
            } else {
                "non-rotational"
            }
        })
        .unwrap_or("unknown");
    format!("{dev} ({fs}, {rotational})")
}

/// Now as RFC 3339 UTC, to the second.
pub fn utc_now() -> String {
    humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_comparison_sets_like_acks_against_like() {
        let mut run = Run::new("append", json!({}));
        for (system, variant, rate) in [
            (Kind::Ringfeed, "memory", 100.0),
            (Kind::Ringfeed, "durable", 10.0),
            (Kind::Etcd, "fsync", 5.0),
            (Kind::Nats, "no fsync", 50.0),
        ] {
            let mut row = Row::new(system, "case", variant);
            row.figure("events/s", rate);
            run.rows.push(row);
        }
        let headlines = [Headline {
            key: "events/s",
            higher_is_better: true,
        }];
        let table = run.comparison(&headlines);
        let line = |variant: &str| {
            table
                .lines()
                .find(|l| l.contains(&format!("({variant})")))
                .unwrap_or_else(|| panic!("{table}"))
                .to_owned()
        };
        // Columns: seaweedfs, etcd, nats (each: figure | ratio).
        let memory = line("memory");
        assert!(memory.contains("fsync'd only | -"), "{memory}");
        assert!(memory.contains("| 50 | 2.00×"), "{memory}");
        let durable = line("durable");
        assert!(durable.contains("| 5 | 2.00×"), "{durable}");
        assert!(durable.contains("memory only | -"), "{durable}");
        assert!(table.contains("etcd (fsync'd acks)"), "{table}");
    }

    #[test]
    fn a_run_removes_the_histogram_files_of_an_earlier_run_of_its_stem() {
        let dir =
            std::env::temp_dir().join(format!("ringfeed-bench-results-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let stale = dir.join("catchup.etcd.3.first-event.hgrm");
        let other_stem = dir.join("catchup-k100.etcd.0.first-event.hgrm");
        std::fs::write(&stale, "old").unwrap();
        std::fs::write(&other_stem, "another run's").unwrap();
        let mut run = Run::new("catchup", json!({}));
        let mut row = Row::new(Kind::Ringfeed, "K=1", "events");
        let mut hist = Histogram::<u64>::new(3).unwrap();
        hist.record(5).unwrap();
        row.hist("first event", hist, Unit::Ms);
        run.rows.push(row);
        run.write(&dir.join("catchup.json")).unwrap();
        assert!(!stale.exists(), "a file no result names");
        assert!(
            other_stem.exists(),
            "another stem's files are not this run's"
        );
        assert!(dir.join("catchup.ringfeed.0.first-event.hgrm").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
