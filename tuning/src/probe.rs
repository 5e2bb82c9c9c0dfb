//! `ringfeed tune probe`: what this machine offers ringfeed, and what stands in
//! its way. Fast and read-only except for one small O_DIRECT test file in the
//! data dir, removed before returning. Every problem found carries the exact
//! text that fixes it.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::direct_io::DirectIo;
use crate::error::TuneError;
use crate::host::{existing_dir, split_cores};
use crate::host::{Cpus, Kernel, Memory, Process};
use crate::io_uring::IoUringReport;
use crate::render::{bytes, KvList};
use crate::storage::{Disk, Filesystem, FsClass};
use crate::sys;

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

fn find_problems(p: &Probe) -> Vec<Problem> {
    let mut found = Problems::default();
    io_uring_problems(p, &mut found);
    filesystem_problems(p, &mut found);
    disk_problems(p, &mut found);
    limit_problems(p, &mut found);
    machine_problems(p, &mut found);
    found.0
}

const GIB: u64 = 1 << 30;

/// The problems found so far, in the order found.
#[derive(Default)]
struct Problems(Vec<Problem>);

impl Problems {
    fn add(&mut self, severity: Severity, what: String, fix: String) {
        self.0.push(Problem {
            severity,
            what,
            fix,
        });
    }
}

/// The kernel and its io_uring.
fn io_uring_problems(p: &Probe, found: &mut Problems) {
    let sysctl_fix =
        "echo 'kernel.io_uring_disabled = 0' > /etc/sysctl.d/90-ringfeed.conf && sysctl --system";
    if p.kernel.version.is_some() && !p.kernel.at_least(5, 8) {
        found.add(
            Severity::Error,
            format!(
                "kernel {} is older than 5.8, the oldest glommio supports",
                p.kernel.release
            ),
            "upgrade the kernel to 5.10 or newer (an LTS kernel such as 6.1 or 6.6)".into(),
        );
    }
    let uring = &p.io_uring;
    if !uring.available {
        let err = uring.setup_error.clone().unwrap_or_default();
        let (what, fix) = if uring.disabled_sysctl == Some(2) {
            (
                format!("io_uring is disabled by kernel.io_uring_disabled = 2 ({err})"),
                sysctl_fix.to_string(),
            )
        } else if uring.disabled_sysctl == Some(1) {
            (
                format!("io_uring is limited to root and kernel.io_uring_group by kernel.io_uring_disabled = 1 ({err})"),
                format!("{sysctl_fix}  (or add the ringfeed user to the group whose gid is in kernel.io_uring_group)"),
            )
        } else if err.starts_with("ENOSYS") {
            (
                format!("the kernel has no io_uring ({err})"),
                "use a kernel built with CONFIG_IO_URING=y, 5.10 or newer".into(),
            )
        } else if err.starts_with("EPERM") && p.process.seccomp_mode == Some(2) {
            (
                format!("io_uring_setup is blocked by a seccomp filter ({err}), as container runtimes' default profiles do"),
                "run ringfeed outside the container, or with a seccomp profile that allows io_uring_setup, io_uring_enter and io_uring_register (docker: --security-opt seccomp=<profile>)".into(),
            )
        } else if err.starts_with("ENOMEM") {
            (
                format!("io_uring_setup failed for lack of locked memory ({err})"),
                "add LimitMEMLOCK=infinity to the [Service] section of the systemd unit (shell: ulimit -l unlimited)".into(),
            )
        } else {
            (
                format!("io_uring_setup failed: {err}"),
                "check dmesg and the kernel's io_uring configuration".into(),
            )
        };
        found.add(Severity::Error, what, fix);
    } else if uring.disabled_sysctl == Some(1) && p.process.uid == Some(0) {
        found.add(
            Severity::Warning,
            "kernel.io_uring_disabled = 1: io_uring works for root (this probe) but not for the ringfeed service user".into(),
            format!("{sysctl_fix}  (or add the ringfeed user to the group whose gid is in kernel.io_uring_group)"),
        );
    }
    let missing = uring.missing_required();
    if !missing.is_empty() {
        found.add(
            Severity::Error,
            format!(
                "the kernel's io_uring lacks opcodes ringfeed needs: {}",
                missing.join(", ")
            ),
            "upgrade the kernel to 5.10 or newer".into(),
        );
    }
}

/// The data dir's filesystem and O_DIRECT on it.
fn filesystem_problems(p: &Probe, found: &mut Problems) {
    let fs = &p.filesystem;
    let fs_name = fs.mount_type.clone().unwrap_or_else(|| fs.fs_type.clone());
    match fs.class() {
        FsClass::Memory => found.add(
            Severity::Error,
            format!("the data dir is on {fs_name}: memory-backed, so nothing acknowledged as durable survives a reboot (and tmpfs has no O_DIRECT before 6.6)"),
            format!("{fs_name} keeps data in memory only: put the data dir on ext4/xfs (e.g. --data-dir /var/lib/ringfeed)"),
        ),
        FsClass::Indirect => found.add(
            Severity::Warning,
            format!("the data dir is on {fs_name}: O_DIRECT and fdatasync pass through another layer whose behaviour varies"),
            "put the data dir on a local ext4/xfs filesystem (in a container: a volume or bind mount from the host's ext4/xfs)".into(),
        ),
        FsClass::Caveats if fs.fs_type == "btrfs" => found.add(
            Severity::Warning,
            "the data dir is on btrfs: copy-on-write and checksums make every fdatasync write metadata too, and misaligned O_DIRECT silently falls back to buffered I/O".into(),
            format!("prefer ext4/xfs; on btrfs at least disable CoW for the empty data dir: chattr +C {}", p.data_dir.display()),
        ),
        FsClass::Caveats => found.add(
            Severity::Warning,
            format!("the data dir is on {fs_name}, which ringfeed is not tested on"),
            "prefer ext4 or xfs for the data dir".into(),
        ),
        FsClass::Unknown => found.add(
            Severity::Warning,
            format!("the data dir is on {fs_name}, which ringfeed does not know"),
            "put the data dir on ext4 or xfs".into(),
        ),
        FsClass::Recommended => {}
    }
    let dio = &p.direct_io;
    match dio.supported {
        Some(false) => found.add(
            Severity::Error,
            format!("O_DIRECT is not supported in {} ({})", p.probed_dir.display(), dio.test_file_error.clone().unwrap_or_default()),
            format!("O_DIRECT not supported on {fs_name}: put the data dir on ext4/xfs"),
        ),
        None => found.add(
            Severity::Warning,
            format!("could not test O_DIRECT in {}: {}", p.probed_dir.display(), dio.test_file_error.clone().unwrap_or_default()),
            format!("run the probe as the ringfeed user on the real data dir: sudo -u ringfeed ringfeed tune probe --data-dir {}", p.data_dir.display()),
        ),
        Some(true) if !dio.verified => found.add(
            Severity::Error,
            format!(
                "an O_DIRECT write at the reported alignment ({} offset, {} memory) failed: {}",
                dio.offset_align,
                dio.mem_align,
                dio.verify_error.clone().unwrap_or_default()
            ),
            "put the data dir on ext4/xfs on a local disk".into(),
        ),
        Some(true) => {}
    }
    // The engine aligns chunks to max(glommio's alignment, 4 KiB).
    let engine_align = dio.glommio_align.max(4096);
    if dio.supported == Some(true) && dio.offset_align > engine_align {
        found.add(
            Severity::Error,
            format!(
                "the filesystem needs O_DIRECT alignment {}, but ringfeed's storage engine would align chunks to {engine_align} (glommio reads {} from /sys/dev/block/{}:0): chunk writes would fail with EINVAL",
                dio.offset_align,
                dio.glommio_align,
                p.disk.as_ref().and_then(|d| d.dev.split(':').next()).unwrap_or("?")
            ),
            "put the data dir on a filesystem whose O_DIRECT alignment is at most 4096 (ext4/xfs on a 512e or 4Kn disk)".into(),
        );
    }
    if fs.has_option("data=journal") {
        found.add(
            Severity::Error,
            "ext4 is mounted with data=journal, which turns O_DIRECT into buffered I/O".into(),
            "mount with the default data=ordered: remove data=journal from /etc/fstab and remount"
                .into(),
        );
    }
    if fs.has_option("sync") || fs.has_option("dirsync") {
        found.add(
            Severity::Warning,
            "the filesystem is mounted sync: every write waits for the disk, ringfeed's group commit gains nothing".into(),
            "remove sync/dirsync from the mount options in /etc/fstab (ringfeed syncs what it acknowledges itself)".into(),
        );
    }
    if fs.has_option("nobarrier") || fs.has_option("barrier=0") {
        found.add(
            Severity::Error,
            "the filesystem is mounted without write barriers: fdatasync does not flush the disk cache, so durable acks are not".into(),
            "remove nobarrier/barrier=0 from the mount options in /etc/fstab and remount".into(),
        );
    }
    if !fs.has_option("noatime") && matches!(fs.class(), FsClass::Recommended | FsClass::Caveats) {
        let mnt = fs
            .mount_point
            .as_ref()
            .map_or("/".into(), |m| m.display().to_string());
        found.add(
            Severity::Info,
            "the filesystem is not mounted noatime: catch-up reads of segments may update access times".into(),
            format!("add noatime to the options of {mnt} in /etc/fstab, then: mount -o remount,noatime {mnt}"),
        );
    }
    if fs.free_bytes < GIB {
        found.add(
            Severity::Warning,
            format!("only {} free on the data dir's filesystem", bytes(fs.free_bytes)),
            "free space or put the data dir on a larger filesystem; profile shrinks segment_bytes to fit".into(),
        );
    }
}

/// The data dir's disk: scheduler, virtual disks, rotational media.
fn disk_problems(p: &Probe, found: &mut Problems) {
    if let Some(d) = &p.disk {
        let path = format!("/sys/block/{}/queue/scheduler", d.name);
        let udev = |sched: &str| {
            format!(
                "echo {sched} > {path}; to persist: echo 'ACTION==\"add|change\", KERNEL==\"{}\", ATTR{{queue/scheduler}}=\"{sched}\"' > /etc/udev/rules.d/60-ringfeed-scheduler.rules",
                d.name
            )
        };
        let fast =
            matches!(d.kind.as_str(), "nvme" | "virtio" | "xen") || d.rotational == Some(false);
        match d.scheduler.as_deref() {
            Some(s @ ("bfq" | "kyber" | "cfq")) => found.add(
                Severity::Warning,
                format!("{} uses the {s} I/O scheduler, which adds CPU and latency to every O_DIRECT write", d.name),
                udev(if fast { "none" } else { "mq-deadline" }),
            ),
            Some("mq-deadline") if fast => found.add(
                Severity::Info,
                format!(
                    "{} ({}) uses mq-deadline; with one writer per shard, none has less overhead on NVMe and virtio queues",
                    d.name, d.kind
                ),
                udev("none"),
            ),
            Some("none") if !fast && d.rotational == Some(true) => found.add(
                Severity::Info,
                format!("{} is a rotational disk with no I/O scheduler; mq-deadline keeps reads from starving behind flushes", d.name),
                udev("mq-deadline"),
            ),
            _ => {}
        }
        if d.virtual_disk {
            found.add(
                Severity::Info,
                format!(
                    "{} is a {} paravirtual disk: fdatasync is only as durable as the host's cache mode{}",
                    d.name,
                    d.kind,
                    if d.rotational == Some(true) { " (its rotational=1 says nothing about the host's media)" } else { "" }
                ),
                "on the host use cache=none or cache=directsync (never cache=unsafe) for this disk".into(),
            );
        } else if d.rotational == Some(true) && d.kind == "scsi" {
            found.add(
                Severity::Warning,
                format!("{} is a rotational disk: each fdatasync costs milliseconds, durable throughput will be low", d.name),
                "put the data dir on an SSD or NVMe device".into(),
            );
        }
    }
}

/// Locked memory and open files.
fn limit_problems(p: &Probe, found: &mut Problems) {
    let m = &p.memlock;
    let shards_text = match (m.shards, m.shards_assumed) {
        (1, true) => "1 shard (the recommended count here) needs".to_string(),
        (n, true) => format!("{n} shards (the recommended count here) need"),
        (1, false) => "1 shard needs".to_string(),
        (n, false) => format!("{n} shards need"),
    };
    if let Some(soft) = m.soft_bytes {
        if soft < m.required_bytes {
            found.add(
                Severity::Error,
                format!(
                    "RLIMIT_MEMLOCK is {}, below the {} that {}: glommio will not start",
                    bytes(soft),
                    bytes(m.required_bytes),
                    shards_text
                ),
                "add LimitMEMLOCK=infinity to the [Service] section of the systemd unit (shell: ulimit -l unlimited; PAM: 'ringfeed - memlock unlimited' in /etc/security/limits.d/ringfeed.conf)".into(),
            );
        } else if soft < m.recommended_bytes && !p.process.cap_ipc_lock {
            found.add(
                Severity::Warning,
                format!(
                    "RLIMIT_MEMLOCK is {}: enough to start, but below the {} that {} to also register glommio's I/O buffers (without, glommio falls back to unregistered buffers)",
                    bytes(soft),
                    bytes(m.recommended_bytes),
                    shards_text
                ),
                "add LimitMEMLOCK=infinity to the [Service] section of the systemd unit (shell: ulimit -l unlimited)".into(),
            );
        } else if soft < m.recommended_bytes {
            found.add(
                Severity::Info,
                format!(
                    "RLIMIT_MEMLOCK is {} ({} recommended); this probe has CAP_IPC_LOCK, the ringfeed service user will not",
                    bytes(soft),
                    bytes(m.recommended_bytes)
                ),
                "keep LimitMEMLOCK=infinity in the systemd unit".into(),
            );
        }
    }
    if let Some(n) = p.nofile.soft.filter(|&n| n < 65536) {
        found.add(
            if n < 4096 { Severity::Warning } else { Severity::Info },
            format!(
                "RLIMIT_NOFILE is {n}: each subscriber holds a socket, each shard its segment files"
            ),
            "add LimitNOFILE=1048576 to the [Service] section of the systemd unit (shell: ulimit -n 1048576)".into(),
        );
    }
}

/// CPUs and memory.
fn machine_problems(p: &Probe, found: &mut Problems) {
    let usable = p.cpus.usable();
    if usable < 2 {
        found.add(
            Severity::Warning,
            "one usable CPU: the shard executor and the network threads share it, and every hop between them waits for a context switch".into(),
            "give ringfeed at least 2 CPUs (check the cgroup CPU quota and the affinity mask: taskset -p $$)".into(),
        );
    }
    if p.cpus.numa_nodes.len() > 1 {
        found.add(
            Severity::Info,
            format!("{} NUMA nodes: shards pinned across nodes reach the disk and the NIC through the interconnect", p.cpus.numa_nodes.len()),
            "pin shards to the CPUs of the node nearest the data disk (cat /sys/block/<dev>/device/numa_node): cpus = [...] in the config and CPUAffinity= in the unit".into(),
        );
    }
    if p.memory.usable_bytes() < GIB {
        found.add(
            Severity::Warning,
            format!("only {} of memory available", bytes(p.memory.usable_bytes())),
            "give the machine (or the cgroup: MemoryMax= in the unit) at least 1 GiB; profile sizes the rings to what is there".into(),
        );
    }
}

impl Probe {
    /// Aligned `key: value` lines, then the problems with their fixes.
    pub fn render_human(&self) -> String {
        let mut kv = KvList::new();
        kv.push("data dir", self.data_dir.display().to_string());
        if !self.data_dir_exists {
            kv.push(
                "probed dir",
                format!("{} (nearest existing ancestor)", self.probed_dir.display()),
            );
        }
        kv.push(
            "kernel",
            format!(
                "{} ({}{})",
                self.kernel.release,
                self.kernel.arch,
                if self.kernel.hypervisor {
                    ", virtual machine"
                } else {
                    ""
                }
            ),
        );
        let u = &self.io_uring;
        let sysctl = match u.disabled_sysctl {
            Some(v) => format!(", kernel.io_uring_disabled = {v}"),
            None => String::new(),
        };
        kv.push(
            "io_uring",
            if u.available {
                format!("available (features 0x{:x}{sysctl})", u.features)
            } else {
                format!(
                    "UNAVAILABLE: {}{sysctl}",
                    u.setup_error.clone().unwrap_or_default()
                )
            },
        );
        let ops = |required: bool| {
            u.opcodes
                .iter()
                .filter(|o| o.required == required)
                .map(|o| {
                    let mark = match o.supported {
                        Some(true) => "",
                        Some(false) => " (missing)",
                        None => " (?)",
                    };
                    format!("{}{mark}", o.name)
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        if u.available {
            kv.push("io_uring opcodes", ops(true));
            kv.push("  optional", ops(false));
        }
        let fs = &self.filesystem;
        kv.push(
            "filesystem",
            format!(
                "{}{} on {}, {} free of {}",
                fs.mount_type.as_deref().unwrap_or(&fs.fs_type),
                fs.mount_point
                    .as_ref()
                    .map_or(String::new(), |m| format!(" at {}", m.display())),
                fs.mount_source.as_deref().unwrap_or("?"),
                bytes(fs.free_bytes),
                bytes(fs.total_bytes)
            ),
        );
        kv.push(
            "mount options",
            format!(
                "{} (block size {})",
                fs.mount_options.join(","),
                fs.block_size
            ),
        );
        let d = &self.direct_io;
        kv.push(
            "O_DIRECT",
            match d.supported {
                Some(true) => format!(
                    "supported; align offsets and lengths to {}, buffers to {} (from {}){}",
                    d.offset_align,
                    d.mem_align,
                    match d.source {
                        super::direct_io::AlignSource::Statx => "statx STATX_DIOALIGN",
                        super::direct_io::AlignSource::Sysfs => "the disk's logical block size",
                        super::direct_io::AlignSource::Empirical => "test writes",
                        super::direct_io::AlignSource::Default => "nothing: 4096 assumed",
                    },
                    if d.verified {
                        ", verified by a test write"
                    } else {
                        ", TEST WRITE FAILED"
                    }
                ),
                Some(false) => format!(
                    "NOT SUPPORTED: {}",
                    d.test_file_error.clone().unwrap_or_default()
                ),
                None => format!(
                    "not tested: {}",
                    d.test_file_error.clone().unwrap_or_default()
                ),
            },
        );
        let statx = match (&d.statx, &d.statx_note) {
            (Some(s), _) => format!(
                "dio_offset_align {}, dio_mem_align {}{}",
                s.offset_align,
                s.mem_align,
                s.read_offset_align
                    .map_or(String::new(), |r| format!(", dio_read_offset_align {r}"))
            ),
            (None, Some(n)) => n.clone(),
            (None, None) => "-".into(),
        };
        kv.push("  statx", statx);
        kv.push(
            "  test writes",
            format!(
                "offset/length from {}, buffer address from {}",
                d.empirical_offset_align
                    .map_or("-".into(), |v| v.to_string()),
                d.empirical_mem_align.map_or("-".into(), |v| v.to_string())
            ),
        );
        kv.push(
            "  engine",
            format!(
                "glommio DmaFile::alignment() {}; chunks aligned to {}",
                d.glommio_align,
                d.glommio_align.max(4096)
            ),
        );
        match &self.disk {
            Some(disk) => {
                kv.push(
                    "disk",
                    format!(
                        "{}{} ({}, driver {}{}{})",
                        disk.name,
                        disk.partition
                            .as_ref()
                            .map_or(String::new(), |p| format!(" (partition {p})")),
                        disk.kind,
                        disk.driver.as_deref().unwrap_or("?"),
                        if disk.virtual_disk { ", virtual" } else { "" },
                        if disk.slaves.is_empty() {
                            String::new()
                        } else {
                            format!(", on {}", disk.slaves.join(" "))
                        }
                    ),
                );
                kv.push(
                    "  queue",
                    format!(
                        "scheduler {} [{}], rotational {}, nr_requests {}",
                        disk.scheduler.as_deref().unwrap_or("?"),
                        disk.schedulers_available.join(" "),
                        disk.rotational
                            .map_or("?".into(), |r| u8::from(r).to_string()),
                        disk.nr_requests.map_or("?".into(), |n| n.to_string())
                    ),
                );
                kv.push(
                    "  block size",
                    format!(
                        "logical {}, physical {}",
                        disk.logical_block_size
                            .map_or("?".into(), |n| n.to_string()),
                        disk.physical_block_size
                            .map_or("?".into(), |n| n.to_string())
                    ),
                );
            }
            None => kv.push("disk", "no block device found in sysfs".to_string()),
        }
        let lim = |v: Option<u64>| v.map_or("unlimited".to_string(), bytes);
        let m = &self.memlock;
        kv.push(
            "memlock",
            format!(
                "soft {}, hard {}; {} shard{}{} need{} {} (recommended {})",
                lim(m.soft_bytes),
                lim(m.hard_bytes),
                m.shards,
                if m.shards == 1 { "" } else { "s" },
                if m.shards_assumed { " (assumed)" } else { "" },
                if m.shards == 1 { "s" } else { "" },
                bytes(m.required_bytes),
                bytes(m.recommended_bytes)
            ),
        );
        kv.push("  rule", m.rule.clone());
        let num = |v: Option<u64>| v.map_or("unlimited".to_string(), |n| n.to_string());
        kv.push(
            "nofile",
            format!(
                "soft {}, hard {}",
                num(self.nofile.soft),
                num(self.nofile.hard)
            ),
        );
        kv.push(
            "process",
            format!(
                "uid {}, CAP_IPC_LOCK {}, seccomp {}",
                self.process.uid.map_or("?".into(), |u| u.to_string()),
                if self.process.cap_ipc_lock {
                    "yes"
                } else {
                    "no"
                },
                self.process
                    .seccomp_mode
                    .map_or("?".into(), |s| s.to_string())
            ),
        );
        let c = &self.cpus;
        kv.push(
            "cpus",
            format!(
                "{} usable (available_parallelism {}, online {}, allowed {})",
                c.usable(),
                c.available_parallelism,
                crate::host::format_cpu_list(&c.online),
                crate::host::format_cpu_list(&c.allowed)
            ),
        );
        kv.push(
            "numa nodes",
            if c.numa_nodes.is_empty() {
                "none reported".to_string()
            } else {
                c.numa_nodes
                    .iter()
                    .map(|n| {
                        format!(
                            "node{}: cpus {}",
                            n.id,
                            crate::host::format_cpu_list(&n.cpus)
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            },
        );
        kv.push(
            "memory",
            format!(
                "{} total, {} available{}",
                bytes(self.memory.total_bytes),
                bytes(self.memory.available_bytes),
                self.memory
                    .cgroup_limit_bytes
                    .map_or(String::new(), |l| format!(", cgroup limit {}", bytes(l)))
            ),
        );
        let mut out = kv.render();
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out.push_str(&render_problems(&self.problems));
        out
    }

    /// True when nothing of severity `Error` was found.
    pub fn ok(&self) -> bool {
        !self.problems.iter().any(|p| p.severity == Severity::Error)
    }
}

pub(crate) fn render_problems(problems: &[Problem]) -> String {
    if problems.is_empty() {
        return "problems: none\n".into();
    }
    let mut out = format!("problems: {}\n", problems.len());
    for p in problems {
        let tag = match p.severity {
            Severity::Error => "ERROR",
            Severity::Warning => "WARN ",
            Severity::Info => "INFO ",
        };
        out.push_str(&format!("  {tag} {}\n        fix: {}\n", p.what, p.fix));
    }
    out
}

impl std::fmt::Display for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render_human())
    }
}
