//! `ringfeed tune probe`: what this machine offers ringfeed, and what stands in
//! its way. Fast and read-only except for one small O_DIRECT test file in the
//! data dir, removed before returning. Every problem found carries the exact
//! text that fixes it.

mod human;
mod problems;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::direct_io::DirectIo;
use crate::error::TuneError;
use crate::host::{existing_dir, split_cores};
use crate::host::{Cpus, Kernel, Memory, Process};
use crate::io_uring::IoUringReport;
use crate::storage::{Disk, Filesystem};
use crate::sys;
use problems::find_problems;

/// How much a problem matters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// ringfeed will not start, or what it acknowledges as durable is not.
    Error,
    /// ringfeed runs, but slower or less safely than it could.
    Warning,
    /// A suggestion.
    Info,
}

/// Something the probe found, and the exact change that fixes it.
#[derive(Clone, Debug, Serialize)]
pub struct Problem {
    pub severity: Severity,
    pub what: String,
    pub fix: String,
}

/// glommio's executor refuses to start when `RLIMIT_MEMLOCK` is below this,
/// whatever the kernel.
pub const GLOMMIO_MIN_MEMLOCK: u64 = 512 << 10;
/// Locked memory per shard executor for its io_uring rings on kernels before
/// 5.12, which charge ring memory to `RLIMIT_MEMLOCK` (5.12+ charge the memory cgroup).
pub const RING_MEMLOCK_PER_SHARD: u64 = 512 << 10;
/// glommio registers its I/O buffer pool (`io_memory`, 10 MiB by default) with
/// each of an executor's three rings; registered (pinned) buffers count against
/// `RLIMIT_MEMLOCK` on every kernel unless the process has `CAP_IPC_LOCK`. When
/// they do not fit glommio logs a warning and uses unregistered buffers.
pub const REGISTERED_BUFFERS_PER_SHARD: u64 = 3 * (10 << 20);

/// `RLIMIT_MEMLOCK` against what the shards need.
#[derive(Clone, Debug, Serialize)]
pub struct Memlock {
    /// Soft limit in bytes; `None` is unlimited.
    pub soft_bytes: Option<u64>,
    pub hard_bytes: Option<u64>,
    /// Shard count the requirement is computed for.
    pub shards: u32,
    /// The probe picked `shards` from the cores (none was given).
    pub shards_assumed: bool,
    /// Below this ringfeed does not start.
    pub required_bytes: u64,
    /// At or above this glommio can also register its I/O buffers.
    pub recommended_bytes: u64,
    pub rule: String,
}

impl Memlock {
    fn evaluate(limit: sys::RLimit, shards: u32, shards_assumed: bool, kernel: &Kernel) -> Memlock {
        let old_kernel = !kernel.at_least(5, 12);
        let required = if old_kernel {
            GLOMMIO_MIN_MEMLOCK.max(u64::from(shards) * RING_MEMLOCK_PER_SHARD)
        } else {
            GLOMMIO_MIN_MEMLOCK
        };
        let recommended = required + u64::from(shards) * REGISTERED_BUFFERS_PER_SHARD;
        let rule = format!(
            "glommio refuses to start below 512 KiB; {}; registered I/O buffers add up to 30 MiB per shard \
             (3 rings x 10 MiB io_memory, skipped with a warning when they do not fit)",
            if old_kernel {
                "this kernel (< 5.12) charges io_uring ring memory to memlock: 512 KiB per shard"
            } else {
                "this kernel (>= 5.12) charges io_uring ring memory to the memory cgroup, not memlock"
            }
        );
        Memlock {
            soft_bytes: limit.soft,
            hard_bytes: limit.hard,
            shards,
            shards_assumed,
            required_bytes: required,
            recommended_bytes: recommended,
            rule,
        }
    }
}

/// `RLIMIT_NOFILE`: ringfeed holds one socket per subscriber plus segment files.
#[derive(Clone, Debug, Serialize)]
pub struct Nofile {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

/// Everything `ringfeed tune probe` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Probe {
    /// The data dir as asked for.
    pub data_dir: PathBuf,
    pub data_dir_exists: bool,
    /// The directory actually probed: the data dir, or its nearest existing ancestor.
    pub probed_dir: PathBuf,
    pub kernel: Kernel,
    pub process: Process,
    pub io_uring: IoUringReport,
    pub filesystem: Filesystem,
    pub direct_io: DirectIo,
    /// The block device under the data dir, when sysfs shows one.
    pub disk: Option<Disk>,
    pub memlock: Memlock,
    pub nofile: Nofile,
    pub cpus: Cpus,
    pub memory: Memory,
    pub problems: Vec<Problem>,
    pub notes: Vec<String>,
}

/// Probes the machine for a ringfeed with `shards` shards (default: the
/// recommended split of this machine's cores) and its data in `data_dir`.
pub fn probe(data_dir: &Path, shards: Option<u32>) -> Result<Probe, TuneError> {
    let (probed_dir, exists) = existing_dir(data_dir)?;
    let mut notes = Vec::new();
    if !exists {
        notes.push(format!(
            "{} does not exist yet; probed its nearest existing ancestor {} (ringfeed creates the data dir at first start)",
            data_dir.display(),
            probed_dir.display()
        ));
    }
    let kernel = Kernel::read();
    let process = Process::read();
    let cpus = Cpus::read();
    let memory = Memory::read();
    let io_uring = IoUringReport::read();

    let dev = sys::statx(&probed_dir, 0)
        .map(|s| (s.dev_major, s.dev_minor))
        .map_err(|e| TuneError::io("statx", &probed_dir, e))?;
    let filesystem = Filesystem::read(&probed_dir, Some(dev))
        .map_err(|e| TuneError::io("statfs", &probed_dir, e))?;
    let disk = Disk::find(dev, filesystem.mount_source.as_deref());
    let direct_io = DirectIo::probe(
        &probed_dir,
        disk.as_ref().and_then(|d| d.logical_block_size),
        kernel.at_least(6, 1),
        crate::storage::glommio_alignment(dev.0),
    );

    let (shards, shards_assumed) = match shards {
        Some(n) => (n.max(1), false),
        None => (split_cores(cpus.usable()).0, true),
    };
    let memlock = Memlock::evaluate(
        sys::memlock_limit().map_err(|e| TuneError::io("getrlimit(RLIMIT_MEMLOCK)", "-", e))?,
        shards,
        shards_assumed,
        &kernel,
    );
    let nofile = sys::nofile_limit()
        .map(|l| Nofile {
            soft: l.soft,
            hard: l.hard,
        })
        .map_err(|e| TuneError::io("getrlimit(RLIMIT_NOFILE)", "-", e))?;

    let mut probe = Probe {
        data_dir: data_dir.to_path_buf(),
        data_dir_exists: exists,
        probed_dir,
        kernel,
        process,
        io_uring,
        filesystem,
        direct_io,
        disk,
        memlock,
        nofile,
        cpus,
        memory,
        problems: Vec::new(),
        notes,
    };
    probe.problems = find_problems(&probe);
    probe.problems.sort_by_key(|p| p.severity);
    Ok(probe)
}

impl Probe {
    /// True when nothing of severity `Error` was found.
    pub fn ok(&self) -> bool {
        !self.problems.iter().any(|p| p.severity == Severity::Error)
    }
}
