//! `serve` guards its data dir (issue 35).
//!
//! One server per data dir: a second `ringfeed serve` on a data
//! dir a running server holds is refused before it reads or writes anything
//! there, naming the holder's pid; the first goes on unharmed; `inspect`
//! stays read-only and says a server holds it; once the first stops, the
//! data dir opens again. (Two servers once both recovered and appended on
//! one data dir, and `inspect` then found a torn tail: "chunk out of
//! sequence".)
//!
//! A serve that cannot listen leaves nothing behind: its listeners are bound
//! before the data dir is created (a fresh one preallocates a segment per
//! shard: 512 MiB with the defaults were left by a mistyped port).

mod common;
mod serve_binary;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::{committed, create, request};
use ringfeed_proto::RingFeedClient;
use serve_binary::{run_bounded, Server};

/// Every file under `dir` but the lock file, with its size and content.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != "ringfeed.lock" {
                let name = path.strip_prefix(dir).unwrap().display().to_string();
                all.insert(name, std::fs::read(&path).unwrap());
            }
        }
    }
    all
}

fn ringfeed(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(args);
    command
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_server_on_a_held_data_dir_is_refused() {
    let _watchdog = ringfeed_watchdog::arm();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let first = Server::start(&data, 2);
    let mut client = RingFeedClient::connect(format!("http://{}", first.addr))
        .await
        .unwrap();
    let events = |from: usize| {
        (from..from + 100)
            .map(|i| create("/d", &format!("f{i}")))
            .collect()
    };
    client.append(request(events(0), true)).await.unwrap();
    let before = files(&data);

    let data_arg = data.to_str().unwrap();
    let second = run_bounded(
        ringfeed(&["serve", "--data-dir", data_arg, "--listen", "127.0.0.1:0"]),
        None,
        Duration::from_secs(30),
    );
    assert!(
        second.code().is_some_and(|c| c != 0),
        "the second server must exit with an error: {second}"
    );
    let holder = format!("in use by another ringfeed process (pid {})", first.pid());
    assert!(second.stderr.contains(&holder), "{second}");
    assert!(!second.stdout.contains("listening on"), "{second}");
    assert_eq!(
        files(&data),
        before,
        "the second server changed the data dir"
    );

    // Read-only, and it says who holds the data dir.
    let inspect = run_bounded(
        ringfeed(&["inspect", "--data-dir", data_arg]),
        None,
        Duration::from_secs(30),
    );
    assert_eq!(inspect.code(), Some(0), "{inspect}");
    let says = format!("a running server (pid {}) holds", first.pid());
    assert!(inspect.stdout.contains(&says), "{inspect}");
    assert_eq!(files(&data), before, "inspect changed the data dir");

    // The first is unharmed: it appends and serves as before.
    client.append(request(events(100), true)).await.unwrap();
    assert_eq!(committed(&mut client).await, 200);
    first.stop();

    // Freed with the process: the data dir opens again, with every event.
    let again = Server::start(&data, 2);
    let mut client = RingFeedClient::connect(format!("http://{}", again.addr))
        .await
        .unwrap();
    assert_eq!(committed(&mut client).await, 200);
    again.stop();
    let inspect = run_bounded(
        ringfeed(&["inspect", "--data-dir", data_arg]),
        None,
        Duration::from_secs(30),
    );
    assert_eq!(inspect.code(), Some(0), "{inspect}");
    assert!(!inspect.stdout.contains("holds"), "{inspect}");
}

#[test]
fn a_serve_that_cannot_listen_creates_no_data_dir() {
    let _watchdog = ringfeed_watchdog::arm();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap().to_string();
    let data_arg = data.to_str().unwrap();
    for flags in [
        vec!["--listen", at.as_str()],
        vec!["--listen", "127.0.0.1:0", "--metrics-listen", at.as_str()],
        vec!["--listen", "127.0.0.1:0", "--http-listen", at.as_str()],
        // Reachable from other hosts without TLS and tokens: refused.
        vec!["--listen", "0.0.0.0:0"],
    ] {
        let mut args = vec!["serve", "--data-dir", data_arg];
        args.extend(&flags);
        let out = run_bounded(ringfeed(&args), None, Duration::from_secs(30));
        assert!(out.code().is_some_and(|c| c != 0), "{flags:?}: {out}");
        assert!(out.stderr.contains("listening on"), "{flags:?}: {out}");
        assert!(!data.exists(), "{flags:?} left {} behind", data.display());
    }
}
