//! `ringfeed inspect` changes nothing in the data dir it reads. It used to open
//! each shard's log for writing, so looking at a crashed data dir repaired it
//! (removed leftovers, zeroed torn tails) and, with generations, would have
//! started a new generation on every look.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::serve_binary::{run_bounded, Server};

/// Every file under `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                files.insert(path.display().to_string(), std::fs::read(&path).unwrap());
            }
        }
    }
    files
}

#[test]
fn inspect_reports_what_an_open_would_repair_and_changes_nothing() {
    let _watchdog = ringfeed_testkit::arm();
    let data = tempfile::tempdir().expect("temp dir");
    let server = Server::start(data.path(), 1);
    let mut append = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    append.args(["append", "--server", &server.addr, "--durable"]);
    let input = "{\"directory\":\"/a\",\"newEntry\":{\"name\":\"f\"}}\n".repeat(20);
    let out = run_bounded(append, Some(input.into_bytes()), Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{out}");
    server.kill();
    // The leftover of a segment creation a crash interrupted.
    let leftover = data.path().join("shard-000/00000000000000000020.seg.tmp");
    std::fs::write(&leftover, vec![0u8; 4096]).unwrap();

    let before = snapshot(data.path());
    let mut inspect = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    inspect.arg("inspect").arg("--data-dir").arg(data.path());
    let out = run_bounded(inspect, None, Duration::from_secs(30));
    assert_eq!(out.code(), Some(0), "{out}");
    for part in [
        "shard 0: next offset 20",
        "00000000000000000020.seg.tmp: a leftover a server's open would remove",
        "read-only: nothing in",
    ] {
        assert!(out.stdout.contains(part), "{part:?} missing from\n{out}");
    }
    assert!(
        snapshot(data.path()) == before,
        "inspect changed the data dir"
    );
}
