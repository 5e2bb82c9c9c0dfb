//! Every scenario's quick mode still works end to end (CI runs these; no
//! speed is asserted): the binary exits 0, prints its table, and writes a
//! JSON result file whose rows carry figures, whose subscribers were all
//! exact, and whose histograms exist beside it as percentile-distribution
//! text. Then `report` turns those files into a BENCHMARKS.md.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ringfeed-bench"))
}

/// Runs `command`, which must succeed: its stdout.
fn succeeds(command: &mut Command) -> String {
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ringfeed-bench-quick-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `args` and returns the JSON it wrote to `out`.
fn run(args: &[&str], dir: &Path, out: &Path) -> Value {
    let output = bench()
        .args(args)
        .arg("--dir")
        .arg(dir)
        .arg("--out")
        .arg(out)
        .output()
        .expect("running ringfeed-bench");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{args:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("| "),
        "{args:?} printed no table:\n{stdout}"
    );
    assert!(
        !dir.exists(),
        "{args:?} left its scratch dir {}",
        dir.display()
    );
    serde_json::from_str(&std::fs::read_to_string(out).expect("result file")).expect("JSON")
}

fn check_rows(doc: &Value, out: &Path, figure: &str) {
    let rows = doc["rows"].as_array().expect("rows");
    assert!(!rows.is_empty(), "no rows in {doc}");
    for row in rows {
        let figures = &row["figures"];
        assert!(
            figures[figure].as_f64().is_some_and(|v| v > 0.0),
            "row without a positive {figure:?}: {row}"
        );
        if let Some(inexact) = figures["inexact"].as_f64() {
            assert_eq!(inexact, 0.0, "inexact subscribers: {row}");
        }
        for (name, h) in row["histograms"].as_object().expect("histograms") {
            assert!(
                h["count"].as_u64().is_some_and(|c| c > 0),
                "empty {name}: {row}"
            );
            let file = out.with_file_name(h["file"].as_str().expect("file name"));
            let text = std::fs::read_to_string(&file).expect("hgrm file");
            assert!(
                text.contains("Percentile") && text.contains("#[Max"),
                "{text}"
            );
        }
    }
    assert!(doc["machine"]["cores"].as_u64().is_some_and(|c| c > 0));
}

#[test]
fn every_scenario_runs_in_quick_mode_and_report_writes_benchmarks_md() {
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(300));
    let results = scratch("results");
    let cases: [(&str, &[&str], &str); 6] = [
        ("ceiling", &["ceiling", "--quick"], "MB/s"),
        ("append", &["append", "--quick"], "events/s"),
        ("catchup", &["catchup", "--quick"], "events/s"),
        ("tail", &["tail", "--quick"], "latency p99 ms"),
        ("storm", &["storm", "--quick"], "all caught up s"),
        ("fanout", &["fanout", "--quick"], "latency p99 ms"),
    ];
    for (name, args, figure) in cases {
        let out = results.join(format!("{name}.json"));
        let doc = run(args, &scratch(name), &out);
        assert_eq!(doc["scenario"], name);
        if name == "ceiling" {
            assert!(
                doc["rows"].as_array().is_some_and(|r| r.len() >= 5),
                "{doc}"
            );
            continue;
        }
        check_rows(&doc, &out, figure);
        let systems: Vec<&str> = doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|r| r["system"].as_str())
            .collect();
        assert!(systems.iter().all(|s| *s == "ringfeed"), "{systems:?}");
    }
    let md = results.join("BENCHMARKS.md");
    let status = bench()
        .args(["report", "--results"])
        .arg(&results)
        .arg("--output")
        .arg(&md)
        .status()
        .unwrap();
    assert!(status.success());
    let md = std::fs::read_to_string(&md).unwrap();
    for section in [
        "## Goals",
        "## ceiling",
        "## append",
        "## catchup",
        "## tail",
        "## storm",
        "## fanout",
    ] {
        assert!(md.contains(section), "BENCHMARKS.md lacks {section}:\n{md}");
    }
    std::fs::remove_dir_all(&results).unwrap();
}

/// `compare` runs ringfeed and every other system: each either has rows or
/// is reported skipped (not installed) with its reason, and under CI=true
/// none is skipped; none is silently missing, and the comparison table has a
/// ratio column per system.
// Needs the peers' adapters: `.ci/run` runs it with `--features peers`
// (a plain `cargo test --workspace` does not build them).
#[cfg(feature = "peers")]
#[test]
fn compare_accounts_for_every_system() {
    // Starts etcd, NATS and SeaweedFS where installed (SeaweedFS alone takes
    // ~10 s to stop).
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(300));
    let results = scratch("compare");
    let out = results.join("catchup.json");
    let stdout = succeeds(
        bench()
            .args(["compare", "catchup", "--quick", "--dir"])
            .arg(scratch("compare-data"))
            .arg("--out")
            .arg(&out),
    );
    for system in ["seaweedfs", "etcd", "nats"] {
        assert!(stdout.contains(&format!("ringfeed ÷ {system}")), "{stdout}");
    }
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    check_rows(&doc, &out, "events/s");
    for system in ["ringfeed", "seaweedfs", "etcd", "nats"] {
        let has_rows = doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["system"] == system);
        let skipped =
            doc["skipped"].as_array().unwrap().iter().any(|s| {
                s["system"] == system && s["reason"].as_str().is_some_and(|r| !r.is_empty())
            });
        assert!(
            has_rows != skipped,
            "{system}: rows {has_rows}, skipped {skipped}: {doc}"
        );
    }
    // SeaweedFS's server figures are its filer's own (the process its
    // subscribers talk to); the master's and volume server's are beside
    // them, with the totals labelled as such.
    for row in doc["rows"].as_array().unwrap() {
        if row["system"] != "seaweedfs" {
            continue;
        }
        let f = &row["figures"];
        let (server, filer) = (f["server CPU s"].as_f64(), f["weed filer CPU s"].as_f64());
        assert!(server.is_some() && server == filer, "{row}");
        assert_eq!(
            f["server peak RSS MiB"], f["weed filer peak RSS MiB"],
            "{row}"
        );
        let all = f["all processes CPU s"].as_f64().unwrap();
        assert!(all >= server.unwrap(), "{row}");
        assert!(f["sum of process peaks RSS MiB"].is_number(), "{row}");
    }
    // Under CI every peer `bench/peers/install.sh` installs must be there:
    // a comparison with a peer missing would pass without comparing.
    if ringfeed_testkit::under_ci() {
        assert!(
            doc["skipped"].as_array().unwrap().is_empty(),
            "under CI=true every peer must run: {}",
            doc["skipped"]
        );
    }
    // Skipped only for not being installed: a system that is installed but
    // failed is a broken adapter (or a broken peer), not a skip.
    for s in doc["skipped"].as_array().unwrap() {
        let reason = s["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("not installed"),
            "{}: {reason}",
            s["system"]
        );
    }
    std::fs::remove_dir_all(&results).unwrap();
}

/// A peer that is installed but fails is a failure, not a skip: the run
/// says FAILED, writes it in the result file, and exits non-zero. (A
/// stand-in `etcd` that exits at once, first on PATH.)
#[cfg(feature = "peers")]
#[test]
fn a_failing_peer_fails_the_run() {
    use std::os::unix::fs::PermissionsExt;
    let _watchdog = ringfeed_testkit::arm_for(Duration::from_secs(120));
    let bin = scratch("failing-peer-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let etcd = bin.join("etcd");
    std::fs::write(&etcd, "#!/bin/sh\necho 'a broken etcd' >&2\nexit 1\n").unwrap();
    std::fs::set_permissions(&etcd, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::env::join_paths(std::iter::once(bin.clone()).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .unwrap();
    let out = scratch("failing-peer").join("catchup.json");
    let output = bench()
        .env("PATH", path)
        .args(["catchup", "--quick", "--system", "etcd", "--dir"])
        .arg(scratch("failing-peer-data"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
    );
    assert!(!output.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("etcd: FAILED"), "{stdout}\n{stderr}");
    assert!(stderr.contains("FAILED"), "{stderr}");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(doc["failed"][0]["system"], "etcd", "{doc}");
    assert!(doc["skipped"].as_array().unwrap().is_empty(), "{doc}");
    std::fs::remove_dir_all(&bin).unwrap();
}

/// `page-cost` in its smallest form prints its header and one row per batch
/// size, with the status pages' requests counted.
#[test]
fn page_cost_prints_a_row_per_batch_size() {
    let _watchdog = ringfeed_testkit::arm();
    let dir = scratch("page-cost");
    let stdout = succeeds(
        bench()
            .args([
                "page-cost",
                "--seconds",
                "1",
                "--reps",
                "1",
                "--batches",
                "1,8",
            ])
            .args([
                "--viewers",
                "2",
                "--subscribers",
                "3",
                "--poll-ms",
                "200",
                "--dir",
            ])
            .arg(&dir),
    );
    assert!(stdout.starts_with("# page-cost:"), "{stdout}");
    assert!(
        stdout.contains("3 subscribers") && stdout.contains("2 status page(s) open"),
        "{stdout}"
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .filter(|l| l.starts_with("| 1 |") || l.starts_with("| 8 |"))
        .map(|l| l.split('|').map(str::trim).collect())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for row in rows {
        // Two pages, every 200 ms, for 1 s: a few requests each.
        let requests: usize = row[7].parse().expect("requests");
        let bytes: usize = row[9].parse().expect("bytes");
        assert!(requests >= 2, "{row:?}");
        assert!(bytes > 0, "{row:?}");
    }
    assert!(!dir.exists(), "the scratch dir is removed");
}

#[test]
fn help_explains_every_scenario_and_flag() {
    let _watchdog = ringfeed_testkit::arm();
    let top = bench().arg("--help").output().unwrap();
    let top = String::from_utf8_lossy(&top.stdout);
    for scenario in [
        "append", "catchup", "tail", "storm", "fanout", "ceiling", "compare", "report",
    ] {
        assert!(top.contains(scenario), "--help lacks {scenario}:\n{top}");
    }
    for scenario in ["append", "catchup", "tail", "storm", "fanout", "ceiling"] {
        let help = bench().args([scenario, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for flag in ["--dir", "--out", "--quick"] {
            assert!(
                help.contains(flag),
                "{scenario} --help lacks {flag}:\n{help}"
            );
        }
    }
    let subcommands = [
        "append",
        "catchup",
        "tail",
        "storm",
        "fanout",
        "ceiling",
        "compare all",
        "compare storm",
        "report",
        "log-append",
        "shard-append",
        "shard-wakeups",
        "log-recovery",
        "subscribe-catchup",
        "metrics-cost",
        "page-cost",
        "profile-compare",
        "probe",
    ];
    for scenario in subcommands {
        let help = bench()
            .args(scenario.split(' '))
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        // Every flag has an explanation after it on its line.
        for line in help
            .lines()
            .map(str::trim_start)
            .filter(|l| l.starts_with('-'))
        {
            let text = line.split_once("  ").map_or("", |(_, t)| t.trim());
            assert!(!text.is_empty(), "{scenario}: a flag without help: {line}");
        }
    }
}
