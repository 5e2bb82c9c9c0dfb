//! A server process the bench started: its CPU time and memory from /proc,
//! stopped (SIGTERM, then SIGKILL after 10 s) and reaped on drop.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};

pub struct Process {
    pub name: String,
    child: Child,
}

impl Process {
    /// Starts `command` with stdin closed. Its stdout and stderr go to
    /// `log` (a file in the system's temp dir), so a failing start can be
    /// diagnosed; the bench's own output stays clean.
    // The bench starts ringfeed through `spawn_server`; only the peers'
    // adapters start processes through this and `running`.
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> Result<Process> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        Ok(Process {
            name: name.to_owned(),
            child,
        })
    }

    /// Starts `command` and waits (at most `timeout`) for a stdout line that
    /// starts with `prefix`; returns the process and the rest of that line.
    /// Later stdout lines are drained and dropped; stderr is inherited.
    pub fn spawn_until_line(
        name: &str,
        mut command: Command,
        prefix: &'static str,
        timeout: Duration,
    ) -> Result<(Process, String)> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {name} ({:?})", command.get_program()))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line.strip_prefix(prefix) {
                    let _ = tx.send(rest.trim().to_owned());
                }
            }
        });
        let process = Process {
            name: name.to_owned(),
            child,
        };
        let rest = rx
            .recv_timeout(timeout)
            .map_err(|_| anyhow!("{name} printed no `{prefix}` line within {timeout:?}"))?;
        Ok((process, rest))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running (not exited).
    #[cfg_attr(not(feature = "peers"), allow(dead_code))]
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn proc_file(&self, name: &str) -> String {
        std::fs::read_to_string(format!("/proc/{}/{name}", self.child.id())).unwrap_or_default()
    }

    /// User plus system CPU seconds the process has used so far.
    pub fn cpu_seconds(&self) -> f64 {
        let ticks = crate::util::stat_cpu_ticks(&self.proc_file("stat"));
        ticks as f64 / crate::util::CLOCK_TICKS_PER_SECOND as f64
    }

    /// A `/proc/PID/status` memory line (`VmRSS`, `VmHWM`) in bytes.
    pub fn memory(&self, key: &str) -> u64 {
        self.proc_file("status")
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| {
                v.trim_start_matches(':')
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .map_or(0, |kib| kib * 1024)
    }

    /// Resets the peak RSS (`VmHWM`) to the current RSS, so a scenario's peak
    /// is its own and not the pre-load's (writes 5 to /proc/PID/clear_refs).
    pub fn reset_peak(&self) {
        let _ = std::fs::write(format!("/proc/{}/clear_refs", self.child.id()), "5");
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
