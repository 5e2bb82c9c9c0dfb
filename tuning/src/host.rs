//! The machine as a whole: kernel release, CPUs and NUMA nodes, memory, and
//! the process's own limits (capabilities, seccomp, cgroup memory). Read from
//! /proc and /sys only; a file that is missing leaves its field empty rather
//! than failing the probe.

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::TuneError;

use serde::Serialize;

/// `uname -r`, parsed.
#[derive(Clone, Debug, Serialize)]
pub struct Kernel {
    /// As `uname -r` prints it, e.g. `6.18.44-fc-v782`.
    pub release: String,
    /// `(major, minor)` when the release starts with them.
    pub version: Option<(u32, u32)>,
    pub arch: String,
    /// The CPU reports the `hypervisor` flag: this is a virtual machine.
    pub hypervisor: bool,
}

impl Kernel {
    pub fn read() -> Kernel {
        let release = read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default();
        let hypervisor = fs::read_to_string("/proc/cpuinfo")
            .map(|s| {
                s.lines()
                    .filter(|l| l.starts_with("flags"))
                    .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
            })
            .unwrap_or(false);
        Kernel {
            version: parse_kernel_version(&release),
            release,
            arch: std::env::consts::ARCH.to_string(),
            hypervisor,
        }
    }

    /// True when the kernel is known to be at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        self.version.is_some_and(|v| v >= (major, minor))
    }
}

pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// CPUs this process may use, and how they group into NUMA nodes.
#[derive(Clone, Debug, Serialize)]
pub struct Cpus {
    /// `std::thread::available_parallelism`: affinity and cgroup quota applied.
    pub available_parallelism: usize,
    /// `/sys/devices/system/cpu/online`.
    pub online: Vec<u32>,
    /// `Cpus_allowed_list` of this process (its affinity mask).
    pub allowed: Vec<u32>,
    pub numa_nodes: Vec<NumaNode>,
}

#[derive(Clone, Debug, Serialize)]
pub struct NumaNode {
    pub id: u32,
    pub cpus: Vec<u32>,
}

impl Cpus {
    pub fn read() -> Cpus {
        let available_parallelism = std::thread::available_parallelism().map_or(1, |n| n.get());
        let online = read_trimmed("/sys/devices/system/cpu/online")
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_default();
        let allowed = proc_status_field("Cpus_allowed_list")
            .and_then(|s| parse_cpu_list(&s))
            .unwrap_or_else(|| online.clone());
        let mut numa_nodes: Vec<NumaNode> = fs::read_dir("/sys/devices/system/node")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_prefix("node")?.parse().ok()?;
                let cpus = read_trimmed(e.path().join("cpulist"))
                    .and_then(|s| parse_cpu_list(&s))
                    .unwrap_or_default();
                Some(NumaNode { id, cpus })
            })
            .collect();
        numa_nodes.sort_by_key(|n| n.id);
        Cpus {
            available_parallelism,
            online,
            allowed,
            numa_nodes,
        }
    }

    /// The CPUs ringfeed can plan with: the affinity mask, but never more than
    /// the cgroup quota lets it use.
    pub fn usable(&self) -> usize {
        let allowed = if self.allowed.is_empty() {
            self.available_parallelism
        } else {
            self.allowed.len()
        };
        allowed.min(self.available_parallelism).max(1)
    }
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(s: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (u32, u32) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// Formats CPU ids back into the kernel's compact list form.
pub fn format_cpu_list(cpus: &[u32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            end += 1;
            i += 1;
        }
        out.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    out.join(",")
}

#[derive(Clone, Debug, Serialize)]
pub struct Memory {
    /// `MemTotal`.
    pub total_bytes: u64,
    /// `MemAvailable`: what can be allocated without swapping.
    pub available_bytes: u64,
    /// `memory.max` of this process's cgroup (v2), when it is not `max`.
    pub cgroup_limit_bytes: Option<u64>,
}

impl Memory {
    pub fn read() -> Memory {
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| -> u64 {
            meminfo
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .map_or(0, |kib| kib * 1024)
        };
        Memory {
            total_bytes: field("MemTotal"),
            available_bytes: field("MemAvailable"),
            cgroup_limit_bytes: cgroup_memory_max(),
        }
    }

    /// What ringfeed may plan to use: available memory, capped by the cgroup limit.
    pub fn usable_bytes(&self) -> u64 {
        match self.cgroup_limit_bytes {
            Some(limit) => self.available_bytes.min(limit),
            None => self.available_bytes,
        }
    }
}

fn cgroup_memory_max() -> Option<u64> {
    let cgroup = fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let path = Path::new("/sys/fs/cgroup")
        .join(rel.trim_start_matches('/'))
        .join("memory.max");
    read_trimmed(path)?.parse().ok()
}

/// Process attributes that decide whether io_uring and locked memory work.
#[derive(Clone, Debug, Serialize)]
pub struct Process {
    pub uid: Option<u32>,
    /// `CAP_IPC_LOCK` is in the effective set: locked-memory limits do not apply.
    pub cap_ipc_lock: bool,
    /// `Seccomp` mode from /proc/self/status (2 = filter: a container profile may block io_uring).
    pub seccomp_mode: Option<u32>,
}

impl Process {
    pub fn read() -> Process {
        const CAP_IPC_LOCK: u32 = 14;
        let cap_eff = proc_status_field("CapEff").and_then(|s| u64::from_str_radix(&s, 16).ok());
        Process {
            uid: proc_status_field("Uid").and_then(|s| s.split_whitespace().nth(1)?.parse().ok()),
            cap_ipc_lock: cap_eff.is_some_and(|c| c & (1 << CAP_IPC_LOCK) != 0),
            seccomp_mode: proc_status_field("Seccomp").and_then(|s| s.parse().ok()),
        }
    }
}

fn proc_status_field(name: &str) -> Option<String> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    status.lines().find_map(|l| {
        let v = l.strip_prefix(name)?.strip_prefix(':')?;
        Some(v.trim().to_string())
    })
}

pub fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// How `usable` CPUs split into shard executors and tokio network threads.
/// 1-2 CPUs: 1 + 1 (one network thread is the least that keeps gRPC off the
/// shard's core when there are two). 3: 2 + 1. 4 and more: three quarters
/// shards, the rest network, since a shard core does the stamping, copying and
/// flushing while network threads mostly encode and send.
pub fn split_cores(usable: usize) -> (u32, u32) {
    let n = usable.max(1) as u32;
    match n {
        1 | 2 => (1, 1),
        3 => (2, 1),
        _ => {
            let shards = n * 3 / 4;
            (shards, n - shards)
        }
    }
}

/// `dir` if it exists, else its nearest existing ancestor; `false` in the second case.
pub fn existing_dir(dir: &Path) -> Result<(PathBuf, bool), TuneError> {
    let abs = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| TuneError::io("getcwd", dir, e))?
            .join(dir)
    };
    let mut cur: &Path = &abs;
    let mut first = true;
    loop {
        match fs::metadata(cur) {
            Ok(m) if m.is_dir() => return Ok((cur.to_path_buf(), first)),
            Ok(_) => {
                return Err(TuneError::NotADirectory {
                    path: cur.to_path_buf(),
                })
            }
            Err(_) => {}
        }
        first = false;
        cur = match cur.parent() {
            Some(p) => p,
            None => {
                return Err(TuneError::NoExistingAncestor {
                    path: dir.to_path_buf(),
                })
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_round_trip() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11").unwrap(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("0\n").unwrap(), vec![0]);
        assert_eq!(parse_cpu_list("").unwrap(), Vec::<u32>::new());
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("x").is_none());
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_cpu_list(&[5]), "5");
    }

    #[test]
    fn kernel_versions_parse() {
        assert_eq!(parse_kernel_version("6.18.44-fc-v782"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.4.0-150-generic"), Some((5, 4)));
        assert_eq!(parse_kernel_version("5.12"), Some((5, 12)));
        assert_eq!(parse_kernel_version("weird"), None);
    }
}
