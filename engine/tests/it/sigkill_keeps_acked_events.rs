//! A real crash: a child process appends with durable acks through the
//! O_DIRECT engine and reports each ack on stdout; the parent kills it with
//! SIGKILL at a random moment, reopens the logs, and checks that every acked
//! event is present with its stamp and payload, offsets are contiguous and
//! stamps increase. Repeated over rounds on the same data dir, so every round
//! also recovers what the previous kill left.
//!
//! `RINGFEED_CRASH_ROUNDS` sets the number of rounds (default 20);
//! `RINGFEED_SEED` replays the kill timings.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use ringfeed_engine::{Durability, Engine, EngineConfig, Limits};

const SHARDS: u32 = 2;

fn child_config(dir: &Path) -> EngineConfig {
    EngineConfig {
        data_dir: dir.to_path_buf(),
        shards: SHARDS,
        window_bytes: 16 << 10,
        ring_bytes: 1 << 20,
        max_unflushed_bytes: 128 << 10,
        segment_bytes: 128 << 10,
        limits: Limits {
            max_event_bytes: 4 << 10,
            ..Limits::default()
        },
        ..EngineConfig::default()
    }
}

/// The child: appends durably until killed (or 60 s pass), printing each ack.
#[test]
#[ignore = "run by sigkill_loses_no_acked_event as its child process"]
fn crash_child() {
    let _watchdog = ringfeed_testkit::arm();
    let (Ok(dir), Ok(round)) = (
        std::env::var("RINGFEED_CRASH_DIR"),
        std::env::var("RINGFEED_CRASH_ROUND"),
    ) else {
        return;
    };
    let round: u64 = round.parse().unwrap();
    let engine = Engine::open(child_config(Path::new(&dir))).expect("child opens the engine");
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    writeln!(out, "ready").unwrap();
    out.flush().unwrap();
    let started = Instant::now();
    let mut id = round * 1_000_000;
    while started.elapsed() < Duration::from_secs(60) {
        let batch: Vec<_> = (0..1 + id % 5)
            .map(|k| event(&format!("/crash/{}", (id + k) % 11), id + k))
            .collect();
        let ids: Vec<u64> = (id..id + batch.len() as u64).collect();
        id += batch.len() as u64;
        let positions = engine
            .append_blocking(batch, Durability::Durable)
            .expect("durable append");
        for (p, i) in positions.iter().zip(ids) {
            writeln!(out, "ack {} {} {} {}", p.shard, p.offset, p.ts, i).unwrap();
        }
        out.flush().unwrap();
    }
}

#[test]
fn sigkill_loses_no_acked_event() {
    let _watchdog = ringfeed_testkit::arm();
    let rounds: u64 = std::env::var("RINGFEED_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(20);
    let seed = seeds(1)[0];
    let mut rng = Rng::new(seed);
    let dir = tempfile::Builder::new()
        .prefix("crash-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let mut acked: BTreeMap<(u32, u64), (i64, u64)> = BTreeMap::new();
    // The child test's name as the harness knows it: its module path within
    // this test binary (whose crate name the harness leaves out).
    let child_test = format!(
        "{}::crash_child",
        module_path!().split_once("::").map_or("", |(_, path)| path)
    );
    for round in 0..rounds {
        let what = format!("round {round}, seed {seed} (replay: RINGFEED_SEED={seed})");
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                child_test.as_str(),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("RINGFEED_CRASH_DIR", dir.path())
            .env("RINGFEED_CRASH_ROUND", round.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the child");
        let (tx, rx) = flume::unbounded();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Wait for the child to be up, then let it run for a random while.
        let ready = rx.recv_timeout(Duration::from_secs(30));
        let run_for = Duration::from_millis(20 + rng.below(250));
        let deadline = Instant::now() + run_for;
        let mut lines = Vec::new();
        if ready.is_ok() {
            while let Ok(line) = rx.recv_deadline(deadline) {
                lines.push(line);
            }
        }
        child.kill().expect("SIGKILL the child");
        child.wait().unwrap();
        reader.join().unwrap();
        lines.extend(rx.drain());
        let mut this_round = 0;
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            if f.len() == 5 && f[0] == "ack" {
                let key = (f[1].parse().unwrap(), f[2].parse().unwrap());
                acked.insert(key, (f[3].parse().unwrap(), f[4].parse().unwrap()));
                this_round += 1;
            }
        }
        let logs = read_dma_logs(dir.path(), SHARDS);
        for (shard, records) in logs.iter().enumerate() {
            assert_dense_log(records, &format!("{what}: shard {shard}"));
        }
        for (&(shard, offset), &(ts, id)) in &acked {
            let r = logs[shard as usize]
                .get(offset as usize)
                .unwrap_or_else(|| panic!("{what}: acked event {id} at {shard}:{offset} lost"));
            assert_eq!(
                (r.1, r.2.as_slice()),
                (ts, format!("payload-{id}").as_bytes()),
                "{what}: {shard}:{offset}"
            );
        }
        eprintln!(
            "{what}: {this_round} acks this round, {} in all, verified",
            acked.len()
        );
    }
    assert!(
        acked.len() as u64 >= rounds,
        "the children acknowledged events before being killed"
    );
}
