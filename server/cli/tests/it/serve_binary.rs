//! The real `ringfeed serve` binary as a child process on a free port, and a
//! bounded way to run other processes against it. Shared by the tests that
//! drive the server from outside Rust's client (the CLI, Python).
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

// Below the watchdog's 60 s, so a server that never starts is reported as such.
const STARTUP: Duration = Duration::from_secs(30);
const SHUTDOWN: Duration = Duration::from_secs(30);

/// `ringfeed serve --listen 127.0.0.1:0`; stopped with SIGTERM (then SIGKILL)
/// on drop, so a failing test leaves no server behind.
pub struct Server {
    pid: u32,
    /// Puts the server's threads in the report of a test that hangs.
    _watched: ringfeed_testkit::WatchedChild,
    /// HOST:PORT from the server's `listening on` line.
    pub addr: String,
    /// HOST:PORT from the `metrics on http://HOST:PORT/metrics` line, if
    /// started with `--metrics-listen`.
    pub metrics: Option<String>,
    /// HOST:PORT from the `status page on http://HOST:PORT/` line, if
    /// started with `--http-listen`.
    pub page: Option<String>,
    /// The `-filer=` value SeaweedFS clients take, from the `seaweedfs filer
    /// API on ADDR (weed: -filer=HOST:PORT.GRPCPORT)` line, if started with
    /// `--filer-listen`.
    pub filer_api: Option<String>,
    /// What the server wrote to stderr so far, line by line.
    pub stderr: Arc<Mutex<Vec<String>>>,
    exited: mpsc::Receiver<ExitStatus>,
    stopped: bool,
}

impl Server {
    /// Starts a server over `data_dir` with `shards` shards and waits for
    /// its `listening on HOST:PORT` line.
    pub fn start(data_dir: &Path, shards: u32) -> Server {
        Server::start_with(data_dir, shards, &[])
    }

    /// [`Server::start`] on a given address (to restart on the same port).
    pub fn start_on(data_dir: &Path, shards: u32, listen: &str) -> Server {
        Server::spawn(data_dir, shards, listen, &[])
    }

    /// [`Server::start_on`] with more `serve` flags.
    pub fn start_on_with(data_dir: &Path, shards: u32, listen: &str, flags: &[&str]) -> Server {
        Server::spawn(data_dir, shards, listen, flags)
    }

    /// [`Server::start`] with more `serve` flags; with `--metrics-listen` it
    /// also waits for the `metrics on` line.
    pub fn start_with(data_dir: &Path, shards: u32, flags: &[&str]) -> Server {
        Server::spawn(data_dir, shards, "127.0.0.1:0", flags)
    }

    /// [`Server::start_with`] with more environment variables.
    pub fn start_with_env(
        data_dir: &Path,
        shards: u32,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Server::spawn_env(data_dir, shards, "127.0.0.1:0", flags, env)
    }

    fn spawn(data_dir: &Path, shards: u32, listen: &str, flags: &[&str]) -> Server {
        Server::spawn_env(data_dir, shards, listen, flags, &[])
    }

    fn spawn_env(
        data_dir: &Path,
        shards: u32,
        listen: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Server {
        Server::try_spawn(data_dir, shards, listen, flags, env).unwrap_or_else(|(pid, threads)| {
            // A server that never starts is a hang to find, not to retry.
            panic!(
                "ringfeed serve (pid {pid}) printed no `listening on` line within {STARTUP:?}; \
                 its threads then:\n{threads}"
            )
        })
    }

    /// Starts the server and waits for its lines. If they do not come within
    /// [`STARTUP`], the server is stopped and its pid and every thread's
    /// state (taken before stopping it) are returned.
    fn try_spawn(
        data_dir: &Path,
        shards: u32,
        listen: &str,
        flags: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Server, (u32, String)> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_ringfeed"))
            .envs(env.iter().copied())
            .arg("serve")
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", listen, "--shards", &shards.to_string()])
            .args(flags)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting ringfeed serve");
        let pid = child.id();
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (addr_tx, addr_rx) = mpsc::channel();
        let (metrics_tx, metrics_rx) = mpsc::channel();
        let (page_tx, page_rx) = mpsc::channel();
        let (filer_tx, filer_rx) = mpsc::channel();
        // Keep draining both pipes for the server's whole life so it never
        // blocks on a full pipe; what it says shows up when the test fails.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                if let Some(addr) = line.strip_prefix("listening on ") {
                    let _ = addr_tx.send(addr.trim().to_owned());
                }
                let url = line
                    .strip_prefix("metrics on http://")
                    .or_else(|| line.strip_prefix("metrics on https://"));
                if let Some(url) = url {
                    let _ = metrics_tx.send(url.trim().trim_end_matches("/metrics").to_owned());
                }
                let page = line
                    .strip_prefix("status page on http://")
                    .or_else(|| line.strip_prefix("status page on https://"));
                if let Some(url) = page {
                    let _ = page_tx.send(url.trim().trim_end_matches('/').to_owned());
                }
                if let Some((_, weed)) = line
                    .strip_prefix("seaweedfs filer API on ")
                    .and_then(|rest| rest.split_once("(weed: -filer="))
                {
                    let _ = filer_tx.send(weed.trim_end_matches(')').to_owned());
                }
            }
        });
        let stderr_lines = Arc::new(Mutex::new(Vec::new()));
        let lines = stderr_lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                eprintln!("server: {line}");
                lines.lock().unwrap().push(line);
            }
        });
        let exited = wait_in_background(child);
        let mut server = Server {
            pid,
            _watched: ringfeed_testkit::watch_child(pid),
            addr: String::new(),
            metrics: None,
            page: None,
            filer_api: None,
            stderr: stderr_lines,
            exited,
            stopped: false,
        };
        // On a timeout `server` is dropped on return, which stops the process.
        let stuck = |pid| {
            (
                pid,
                ringfeed_testkit::process_threads(pid, "ringfeed serve"),
            )
        };
        server.addr = addr_rx.recv_timeout(STARTUP).map_err(|_| stuck(pid))?;
        if flags.contains(&"--metrics-listen") {
            server.metrics = Some(metrics_rx.recv_timeout(STARTUP).map_err(|_| stuck(pid))?);
        }
        if flags.contains(&"--http-listen") {
            server.page = Some(page_rx.recv_timeout(STARTUP).map_err(|_| stuck(pid))?);
        }
        if flags.contains(&"--filer-listen") {
            server.filer_api = Some(filer_rx.recv_timeout(STARTUP).map_err(|_| stuck(pid))?);
        }
        Ok(server)
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The server's peak resident set so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))
            .expect("the server's /proc status");
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc/PID/status");
        kib * 1024
    }

    /// SIGKILL: the server stops at once, flushing nothing; waits for the exit.
    pub fn kill(mut self) {
        self.stopped = true;
        if self.exited.try_recv().is_ok() {
            return; // already reaped: its pid may be someone else's by now
        }
        signal(self.pid, "KILL");
        let _ = self.exited.recv_timeout(SHUTDOWN);
    }

    /// SIGSTOP: the server freezes, connections open (a gray failure).
    pub fn pause(&self) {
        assert!(!self.stopped, "pausing a stopped server");
        signal(self.pid, "STOP");
    }

    /// SIGHUP (reload the token file).
    pub fn hangup(&self) {
        signal(self.pid, "HUP");
    }

    /// SIGCONT after [`Server::pause`].
    pub fn resume(&self) {
        assert!(!self.stopped, "resuming a stopped server");
        signal(self.pid, "CONT");
    }

    /// SIGTERM, then wait for the exit (SIGKILL after a bound).
    pub fn stop(mut self) {
        self.terminate();
    }

    fn terminate(&mut self) {
        if self.stopped {
            return;
        }
        self.stopped = true;
        // Already reaped: its pid may belong to someone else by now.
        if let Ok(status) = self.exited.try_recv() {
            eprintln!("server had exited: {status}");
            return;
        }
        signal(self.pid, "TERM");
        signal(self.pid, "CONT"); // a paused server acts on it only then
        match self.exited.recv_timeout(SHUTDOWN) {
            Ok(status) => eprintln!("server exited: {status}"),
            Err(_) => {
                eprintln!("server still running {SHUTDOWN:?} after SIGTERM: SIGKILL");
                signal(self.pid, "KILL");
                let _ = self.exited.recv_timeout(SHUTDOWN);
            }
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Sends a signal with kill(1): the tests need no unsafe code for it.
fn signal(pid: u32, name: &str) {
    let _ = Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status();
}

/// Reaps `child` on a thread; its exit status arrives on the channel.
fn wait_in_background(mut child: Child) -> mpsc::Receiver<ExitStatus> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        if let Ok(status) = child.wait() {
            let _ = tx.send(status);
        }
    });
    rx
}

/// What a bounded run produced. `status` is None if it was killed.
pub struct Output {
    pub status: Option<ExitStatus>,
    pub stdout: String,
    pub stderr: String,
}

impl Output {
    /// Exit code, or None if killed (timeout or signal).
    pub fn code(&self) -> Option<i32> {
        self.status.and_then(|s| s.code())
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "status {:?}\n--- stdout ---\n{}--- stderr ---\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// Runs `command` with `stdin` as its input (empty if None) and its output
/// captured, killing it after `timeout`.
pub fn run_bounded(mut command: Command, stdin: Option<Vec<u8>>, timeout: Duration) -> Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("starting {command:?}: {e}"));
    let pid = child.id();
    let mut input = child.stdin.take().expect("stdin");
    let writer = std::thread::spawn(move || {
        if let Some(bytes) = stdin {
            let _ = input.write_all(&bytes);
        }
        // Dropping `input` closes the pipe: EOF.
    });
    let read = |pipe: Option<Box<dyn Read + Send>>| -> JoinHandle<String> {
        std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        })
    };
    let stdout = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let stderr = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let exited = wait_in_background(child);
    let status = match exited.recv_timeout(timeout) {
        Ok(status) => Some(status),
        Err(_) => {
            eprintln!("{command:?} still running after {timeout:?}: killed");
            signal(pid, "KILL");
            let _ = exited.recv_timeout(SHUTDOWN);
            None
        }
    };
    let _ = writer.join();
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// `ringfeed token new FLAGS`: (the token, its `[[token]]` table).
pub fn new_token(flags: &[&str]) -> (String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["token", "new"]).args(flags);
    let out = run_bounded(command, None, Duration::from_secs(10));
    assert!(out.code() == Some(0), "token new: {}", out.stderr);
    let (token, table) = out.stdout.split_once('\n').expect("a token line");
    (token.to_owned(), table.to_owned())
}

/// `METHOD path` over plain HTTP/1.1 to `addr` (the metrics or the status
/// page), with an optional bearer token: (status code, the head lowercased,
/// body). Fails after 20 s without an answer.
pub fn http_request(
    addr: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
) -> (u16, String, String) {
    let mut conn = std::net::TcpStream::connect(addr).expect("connecting to the HTTP endpoint");
    conn.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("authorization: Bearer {t}\r\n"));
    write!(
        conn,
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\n{auth}content-length: 0\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    conn.read_to_string(&mut response)
        .expect("reading the response");
    let code = response[9..12].parse().expect("status code");
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    (code, head.to_ascii_lowercase(), body.to_owned())
}

/// The entry name of the event a `tail` line prints (`event.newEntry.name`,
/// else `event.oldEntry.name`); panics on a line that is not one.
pub fn tailed_name(line: &str) -> String {
    let line: serde_json::Value =
        serde_json::from_str(line).unwrap_or_else(|e| panic!("not a tail line ({e}): {line:?}"));
    let event = &line["event"];
    let entry = if event["newEntry"].is_object() {
        &event["newEntry"]
    } else {
        &event["oldEntry"]
    };
    entry["name"].as_str().expect("an entry name").to_owned()
}

/// `ringfeed append` (bounded by `timeout`) of one create event per name,
/// the i-th in `dirs[i % dirs.len()]`; panics unless every event is
/// acknowledged.
pub fn append_creates<S: AsRef<str>>(
    addr: &str,
    dirs: &[&str],
    names: impl IntoIterator<Item = S>,
    timeout: Duration,
) {
    let mut input = String::new();
    for (i, name) in names.into_iter().enumerate() {
        let event = serde_json::json!({
            "directory": dirs[i % dirs.len()],
            "newEntry": {"name": name.as_ref()},
        });
        input.push_str(&event.to_string());
        input.push('\n');
    }
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringfeed"));
    command.args(["append", "--server", addr]);
    let out = run_bounded(command, Some(input.into_bytes()), timeout);
    assert_eq!(out.code(), Some(0), "append: {out}");
}
