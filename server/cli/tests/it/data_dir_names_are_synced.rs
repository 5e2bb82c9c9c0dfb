//! Every name acknowledged data depends on is durable before anything is
//! acknowledged (issue 15): opening a data dir fsyncs the data dir itself
//! (which holds the new `shard-NNN` directories and `ringfeed.meta`), its
//! parent (which holds the data dir's own name) and each shard's segment
//! directory. Before the fix the data dir and its parent were never synced,
//! so a power loss could take away a shard directory holding durable
//! acknowledged events.
//!
//! Seen from outside with the real binary under `strace` (`.ci/run`
//! installs it): `ringfeed serve` starts, says it is listening (so the data
//! dir is open), and is stopped with SIGTERM.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn opening_a_data_dir_fsyncs_it_its_parent_and_each_shard_dir() {
    let _watchdog = ringfeed_testkit::arm();
    if Command::new("strace").arg("-V").output().is_err() {
        assert!(
            !ringfeed_testkit::under_ci(),
            "strace is missing: .ci/run installs it, so CI must have it"
        );
        eprintln!("strace not installed: skipped (CI installs it)");
        return;
    }
    let root = tempfile::tempdir().expect("temp dir");
    let parent = root.path().join("parent");
    let data = parent.join("data");
    // One file per thread (`-ff`): with one file, a thread's openat could be
    // split into "<unfinished ...>" and "<... resumed> = FD" lines around
    // another thread's calls (the shards open concurrently), and its fd missed.
    let traces = root.path().join("traces");
    std::fs::create_dir(&traces).unwrap();
    let trace = traces.join("t");
    let mut strace = Command::new("strace")
        .args([
            "-f",
            "-ff",
            "-qq",
            "-e",
            "trace=openat,fsync,fdatasync",
            "-o",
        ])
        .arg(&trace)
        .arg(env!("CARGO_BIN_EXE_ringfeed"))
        .args([
            "serve",
            "--shards",
            "2",
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
        ])
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting strace");
    let _watched = ringfeed_testkit::watch_child(strace.id());
    let stdout = strace.stdout.take().expect("stdout");
    let (listening_tx, listening) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            eprintln!("server: {line}");
            if line.starts_with("listening on ") {
                let _ = listening_tx.send(());
            }
        }
    });
    let mut stderr = strace.stderr.take().expect("stderr");
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    // serve opens the data dir before it says it is listening.
    let started = listening.recv_timeout(Duration::from_secs(30));
    // strace with `-o FILE PROG` blocks fatal signals, so the signal goes to
    // the traced serve itself: strace's only child.
    let children = format!("/proc/{0}/task/{0}/children", strace.id());
    let serve = std::fs::read_to_string(&children).unwrap_or_default();
    let serve = serve.split_whitespace().next().map(str::to_owned);
    if let Some(serve) = &serve {
        let _ = Command::new("kill").args(["-TERM", serve]).status();
    }
    let status = strace.wait().expect("waiting for strace");
    let stderr = stderr.join().unwrap_or_default();
    assert!(
        started.is_ok(),
        "serve said no `listening on` line within 30 s (serve pid {serve:?}, \
         strace {status}); stderr:\n{stderr}"
    );
    assert!(
        data.join("shard-001").is_dir(),
        "the engine opened: strace {status}; stderr:\n{stderr}"
    );

    // Per thread (file `t.PID`): `openat(AT_FDCWD, "PATH", ...) = FD`, then
    // `fsync(FD) = 0`. Threads share the fd table, so a path is keyed by fd
    // within the thread that opened it (each sync here runs on the thread
    // that opened the directory).
    let mut open: HashMap<(String, String), String> = HashMap::new();
    let mut synced = BTreeSet::new();
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&traces).unwrap() {
        let path = entry.unwrap().path();
        let pid = path
            .extension()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            lines.push((pid.clone(), line.to_owned()));
        }
    }
    for (pid, line) in &lines {
        let pid = pid.as_str();
        let call = line.trim_start();
        if let Some(rest) = call.strip_prefix("openat(") {
            let path = rest.split('"').nth(1).unwrap_or_default().to_owned();
            if let Some(fd) = call
                .rsplit("= ")
                .next()
                .filter(|fd| fd.parse::<u32>().is_ok())
            {
                open.insert((pid.to_owned(), fd.to_owned()), path);
            }
        } else if let Some(rest) = call.strip_prefix("fsync(") {
            let fd = rest.split(')').next().unwrap_or_default().to_owned();
            if call.ends_with("= 0") {
                if let Some(path) = open.get(&(pid.to_owned(), fd)) {
                    synced.insert(path.clone());
                }
            }
        }
    }
    for dir in [
        parent.clone(),
        data.clone(),
        data.join("shard-000"),
        data.join("shard-001"),
    ] {
        let dir = dir.display().to_string();
        assert!(
            synced.contains(&dir),
            "{dir} was never fsynced; synced: {synced:#?}"
        );
    }
}
