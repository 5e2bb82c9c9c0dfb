//! What stands in ringfeed's way on this machine, each problem with the
//! exact text that fixes it: the kernel and io_uring, the filesystem, the
//! disk, the process limits, the machine.

use super::{Probe, Problem, Severity};
use crate::render::bytes;
use crate::storage::FsClass;

pub(super) fn find_problems(p: &Probe) -> Vec<Problem> {
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
