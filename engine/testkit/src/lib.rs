//! What ringfeed's tests share: the liveness watchdog (this module's
//! items), [`under_ci`], and [`mutation`], the edits of valid encodings the
//! fuzzing properties apply.
//!
//! The watchdog: a liveness guard for tests that start an engine or a server.
//!
//! A hang is a bug to find, never one to retry or wait out (docs/design.md
//! 2.13). A test arms the watchdog first thing and keeps the guard for
//! its whole run. If any guard is still armed after its bound (60 s;
//! `RINGFEED_WATCHDOG_SECS` sets another), the watchdog prints the test's name
//! and the state of every thread of this process and of the child processes
//! registered with [`watch_child`] (name, scheduler state, the kernel function
//! it waits in, its system call, its kernel stack where readable, and a user
//! stack from gdb where gdb is installed), then exits the test binary with
//! status 101. CI then fails at once, naming the test, instead of hanging
//! until its own time limit.
//!
//! The watcher thread sleeps on a condition variable with the earliest
//! deadline, so an armed watchdog costs no wake-ups while tests run.

pub mod mutation;

use std::fmt::Write as _;
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// The bound when `RINGFEED_WATCHDOG_SECS` is not set.
pub const DEFAULT_BOUND: Duration = Duration::from_secs(60);

/// Keeps the watchdog armed for one test; disarms it when dropped.
#[must_use = "the watchdog is disarmed as soon as the guard is dropped"]
pub struct Armed {
    id: u64,
}

/// Keeps a child process in the watchdog's report; dropped when the child is
/// stopped.
#[must_use = "the child leaves the report as soon as the guard is dropped"]
pub struct WatchedChild {
    pid: u32,
}

struct Entry {
    id: u64,
    name: String,
    started: Instant,
    deadline: Instant,
}

#[derive(Default)]
struct State {
    next_id: u64,
    armed: Vec<Entry>,
    children: Vec<u32>,
    /// Children killed when the watchdog fires (with `children`), so a hung
    /// test leaves no server of its own running after its binary exits.
    owned: Vec<u32>,
    watcher_started: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| Shared {
        state: Mutex::new(State::default()),
        changed: Condvar::new(),
    })
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    // A test that panicked while holding the lock must not hide a hang.
    shared.state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The bound a guard gets: `RINGFEED_WATCHDOG_SECS`, else [`DEFAULT_BOUND`].
pub fn bound() -> Duration {
    match std::env::var("RINGFEED_WATCHDOG_SECS") {
        Ok(secs) => Duration::from_secs(secs.trim().parse().unwrap_or_else(|_| {
            panic!("RINGFEED_WATCHDOG_SECS must be a whole number of seconds, got {secs:?}")
        })),
        Err(_) => DEFAULT_BOUND,
    }
}

/// Arms the watchdog for the calling test, named after the calling thread
/// (the test harness names each test's thread after the test).
pub fn arm() -> Armed {
    arm_for(DEFAULT_BOUND)
}

/// [`arm`] with a longer bound, for a test that legitimately runs long (one
/// that starts other systems, say). `RINGFEED_WATCHDOG_SECS` still wins.
pub fn arm_for(bound: Duration) -> Armed {
    let name = std::thread::current()
        .name()
        .unwrap_or("an unnamed thread")
        .to_owned();
    let bound = match std::env::var_os("RINGFEED_WATCHDOG_SECS") {
        Some(_) => self::bound(),
        None => bound,
    };
    arm_named(name, bound)
}

/// Arms the watchdog under a given name and bound.
pub fn arm_named(name: impl Into<String>, bound: Duration) -> Armed {
    let shared = shared();
    let mut state = lock(shared);
    if !state.watcher_started {
        std::thread::Builder::new()
            .name("watchdog".into())
            .spawn(move || watch(shared))
            .expect("starting the watchdog thread");
        state.watcher_started = true;
    }
    state.next_id += 1;
    let id = state.next_id;
    let started = Instant::now();
    state.armed.push(Entry {
        id,
        name: name.into(),
        started,
        deadline: started + bound,
    });
    drop(state);
    shared.changed.notify_all();
    Armed { id }
}

impl Drop for Armed {
    fn drop(&mut self) {
        let shared = shared();
        lock(shared).armed.retain(|e| e.id != self.id);
        shared.changed.notify_all();
    }
}

/// A child process the watchdog kills (SIGKILL, by its pid) if it fires
/// while the guard lives, as it kills every watched child: the test binary
/// exits at once, and no `Drop` of the test's would stop them.
#[must_use = "the child is no longer killed on a hang as soon as the guard is dropped"]
pub struct OwnedChild {
    pid: u32,
}

/// Kills `pid` if the watchdog fires while the guard lives (a child that
/// should not be in the report: a peer's process, say).
pub fn own_child(pid: u32) -> OwnedChild {
    lock(shared()).owned.push(pid);
    OwnedChild { pid }
}

impl Drop for OwnedChild {
    fn drop(&mut self) {
        forget(&mut lock(shared()).owned, self.pid);
    }
}

/// Takes `pid` off `pids`: a guard's child, once the guard is dropped.
fn forget(pids: &mut Vec<u32>, pid: u32) {
    if let Some(at) = pids.iter().position(|&p| p == pid) {
        pids.swap_remove(at);
    }
}

/// Adds a child process's threads to the report while the guard lives (and
/// kills it if the watchdog fires).
pub fn watch_child(pid: u32) -> WatchedChild {
    lock(shared()).children.push(pid);
    WatchedChild { pid }
}

impl Drop for WatchedChild {
    fn drop(&mut self) {
        forget(&mut lock(shared()).children, self.pid);
    }
}

fn watch(shared: &'static Shared) {
    let mut state = lock(shared);
    loop {
        let now = Instant::now();
        let earliest = state.armed.iter().min_by_key(|e| e.deadline);
        match earliest {
            None => {
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(|e| e.into_inner());
            }
            Some(entry) if entry.deadline <= now => {
                let report = report(entry, &state.children);
                // Print in one piece, to stderr: the harness does not capture
                // this thread, and the process ends right after.
                eprintln!("{report}");
                // This test's children, and every other test's of this
                // binary: they all end with it.
                for pid in state.children.iter().chain(&state.owned) {
                    let _ = std::process::Command::new("kill")
                        .args(["-KILL", &pid.to_string()])
                        .status();
                }
                std::process::exit(101);
            }
            Some(entry) => {
                let wait = entry.deadline - now;
                state = shared
                    .changed
                    .wait_timeout(state, wait)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        }
    }
}

fn report(entry: &Entry, children: &[u32]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n==== WATCHDOG: test `{}` still running after {:.0?}: a hang (a bug, not a slow machine); \
         every thread's state follows, then this test binary exits with status 101 ====",
        entry.name,
        entry.started.elapsed()
    );
    let me = std::process::id();
    out.push_str(&process_threads(me, "this test process"));
    for &child in children {
        out.push_str(&process_threads(child, "child process"));
    }
    for pid in std::iter::once(me).chain(children.iter().copied()) {
        out.push_str(&user_stacks(pid));
    }
    let _ = writeln!(
        out,
        "==== WATCHDOG: end of report for `{}` ====",
        entry.name
    );
    out
}

/// Every thread of `pid`: tid, name, state, wchan, syscall and kernel stack.
pub fn process_threads(pid: u32, what: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "---- {what} {pid} ----");
    let tasks = match std::fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        Err(e) => {
            let _ = writeln!(out, "  cannot list /proc/{pid}/task: {e}");
            return out;
        }
    };
    let mut tids: Vec<u32> = tasks
        .filter_map(|t| t.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    for tid in tids {
        let dir = format!("/proc/{pid}/task/{tid}");
        let read =
            |file: &str| std::fs::read_to_string(format!("{dir}/{file}")).unwrap_or_default();
        let stat = read("stat");
        // "tid (comm) S ...": the name may hold spaces and parentheses.
        let (name, state) = match (stat.find('('), stat.rfind(')')) {
            (Some(open), Some(close)) if open < close => (
                &stat[open + 1..close],
                stat[close + 1..].split_whitespace().next().unwrap_or("?"),
            ),
            _ => ("?", "?"),
        };
        let status = read("status");
        let switches: Vec<&str> = status
            .lines()
            .filter(|l| l.contains("ctxt_switches"))
            .map(|l| l.split_whitespace().last().unwrap_or("?"))
            .collect();
        let _ = writeln!(
            out,
            "  tid {tid} {name:?} state {state} wchan {} syscall {} ctxt_switches {}",
            read("wchan").trim(),
            read("syscall").split_whitespace().next().unwrap_or("?"),
            switches.join("/"),
        );
        for frame in read("stack").lines() {
            let _ = writeln!(out, "      {frame}");
        }
    }
    out
}

/// User-space stacks of every thread of `pid`, from gdb if it is installed.
fn user_stacks(pid: u32) -> String {
    let output = std::process::Command::new("timeout")
        .args([
            "-k",
            "5",
            "30",
            "gdb",
            "-p",
            &pid.to_string(),
            "-batch",
            "-nx",
        ])
        .args(["-ex", "set pagination off", "-ex", "thread apply all bt 30"])
        .stdin(std::process::Stdio::null())
        .output();
    match output {
        Ok(o) if o.status.success() => format!(
            "---- user stacks of {pid} (gdb) ----\n{}",
            String::from_utf8_lossy(&o.stdout)
        ),
        _ => {
            format!("---- no user stacks of {pid}: gdb is not installed or could not attach ----\n")
        }
    }
}

/// Whether the tests run under CI (`CI` set to anything but empty, `0` or
/// `false`; `.ci/run` exports `CI=true`). There, a program a test drives
/// that is missing fails the test; elsewhere the test says it is skipped.
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_this_process_threads() {
        let report = process_threads(std::process::id(), "this test process");
        let tid_lines = report.lines().filter(|l| l.starts_with("  tid ")).count();
        assert!(tid_lines >= 1, "report: {report}");
        assert!(report.contains("state "), "report: {report}");
    }

    /// Run only as the child of `a_hung_test_fails_naming_it`.
    #[test]
    #[ignore = "hangs on purpose; run by a_hung_test_fails_naming_it"]
    fn hangs_for_the_watchdog() {
        let _watchdog = arm();
        loop {
            std::thread::park();
        }
    }

    #[test]
    fn a_hung_test_fails_naming_it() {
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "tests::hangs_for_the_watchdog",
                "--ignored",
                "--nocapture",
            ])
            .env("RINGFEED_WATCHDOG_SECS", "1")
            .output()
            .expect("running the test binary");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(101), "stderr: {stderr}");
        assert!(
            stderr.contains("WATCHDOG: test `tests::hangs_for_the_watchdog` still running"),
            "stderr: {stderr}"
        );
        assert!(stderr.contains("\"watchdog\" state"), "stderr: {stderr}");
    }

    #[test]
    fn a_dropped_guard_is_disarmed() {
        let guard = arm_named("short", Duration::from_secs(3600));
        let id = guard.id;
        assert!(lock(shared()).armed.iter().any(|e| e.id == id));
        drop(guard);
        assert!(!lock(shared()).armed.iter().any(|e| e.id == id));
    }
}
