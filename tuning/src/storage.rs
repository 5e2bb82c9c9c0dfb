//! Where the data dir's bytes go: the filesystem (statfs magic, the mount's
//! type, source and options from /proc/self/mountinfo) and the block device
//! under it (its sysfs queue: scheduler, rotational, nr_requests, block sizes,
//! driver). A partition resolves to its whole disk, a device-mapper or md
//! device lists the disks it stacks on.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::host::read_trimmed;
use crate::sys;

#[derive(Clone, Debug, Serialize)]
pub struct Filesystem {
    /// A name for the statfs magic (`ext4` covers ext2/3/4, which share it).
    pub fs_type: String,
    /// The mount's own type name from mountinfo, e.g. `ext4`, `fuse.sshfs`.
    pub mount_type: Option<String>,
    pub magic: u64,
    /// The filesystem block size (statfs `f_bsize`). Direct writes into
    /// preallocated extents that are not aligned to it make the filesystem
    /// zero and convert partial blocks: legal, but several times slower.
    pub block_size: u64,
    pub mount_point: Option<PathBuf>,
    /// The mounted device or source, e.g. `/dev/vda`.
    pub mount_source: Option<String>,
    /// Per-mount and superblock options, e.g. `rw`, `relatime`, `discard`.
    pub mount_options: Vec<String>,
    pub total_bytes: u64,
    /// Free to an unprivileged user.
    pub free_bytes: u64,
}

/// Filesystem families as far as ringfeed cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsClass {
    /// ext4, xfs: O_DIRECT and fdatasync behave as ringfeed expects.
    Recommended,
    /// Works with caveats (btrfs, f2fs, bcachefs, zfs).
    Caveats,
    /// Memory-backed: nothing survives a reboot (tmpfs, ramfs).
    Memory,
    /// Stacked or remote (overlayfs, NFS, FUSE, 9p, CIFS): O_DIRECT and sync semantics vary.
    Indirect,
    Unknown,
}

/// statfs magic numbers, from `include/uapi/linux/magic.h` and the filesystems' own sources.
const MAGICS: &[(u64, &str, FsClass)] = &[
    (0xEF53, "ext4", FsClass::Recommended),
    (0x5846_5342, "xfs", FsClass::Recommended),
    (0x9123_683E, "btrfs", FsClass::Caveats),
    (0xF2F5_2010, "f2fs", FsClass::Caveats),
    (0xCA45_1A4E, "bcachefs", FsClass::Caveats),
    (0x2FC1_2FC1, "zfs", FsClass::Caveats),
    (0x0102_1994, "tmpfs", FsClass::Memory),
    (0x8584_58F6, "ramfs", FsClass::Memory),
    (0x794C_7630, "overlayfs", FsClass::Indirect),
    (0x6969, "nfs", FsClass::Indirect),
    (0x6573_5546, "fuse", FsClass::Indirect),
    (0x0102_1997, "9p", FsClass::Indirect),
    (0xFF53_4D42, "cifs", FsClass::Indirect),
    (0xFE53_4D42, "smb2", FsClass::Indirect),
    (0x00C3_6400, "ceph", FsClass::Indirect),
    (0x6175_6673, "aufs", FsClass::Indirect),
    (0x7371_7368, "squashfs", FsClass::Unknown),
    (0x4D44, "vfat", FsClass::Unknown),
    (0x2011_BAB0, "exfat", FsClass::Unknown),
    (0x5346_544E, "ntfs", FsClass::Unknown),
    (0x1373, "devfs", FsClass::Unknown),
    (0x9FA0, "proc", FsClass::Unknown),
    (0x6265_6572, "sysfs", FsClass::Unknown),
];

pub fn fs_name(magic: u64) -> Option<&'static str> {
    MAGICS.iter().find(|m| m.0 == magic).map(|m| m.1)
}

pub fn fs_class(magic: u64) -> FsClass {
    MAGICS
        .iter()
        .find(|m| m.0 == magic)
        .map_or(FsClass::Unknown, |m| m.2)
}

impl Filesystem {
    pub fn read(dir: &Path, dev: Option<(u32, u32)>) -> std::io::Result<Filesystem> {
        let st = sys::statfs(dir)?;
        let mount = dev.and_then(|d| find_mount(dir, d));
        Ok(Filesystem {
            fs_type: fs_name(st.magic)
                .map_or_else(|| format!("unknown (0x{:x})", st.magic), str::to_string),
            mount_type: mount.as_ref().map(|m| m.fs_type.clone()),
            magic: st.magic,
            block_size: st.block_size,
            mount_point: mount.as_ref().map(|m| m.mount_point.clone()),
            mount_source: mount.as_ref().map(|m| m.source.clone()),
            mount_options: mount.map(|m| m.options).unwrap_or_default(),
            total_bytes: st.total_bytes,
            free_bytes: st.avail_bytes,
        })
    }

    pub fn class(&self) -> FsClass {
        fs_class(self.magic)
    }

    pub fn has_option(&self, opt: &str) -> bool {
        self.mount_options.iter().any(|o| o == opt)
    }
}

struct Mount {
    mount_point: PathBuf,
    fs_type: String,
    source: String,
    options: Vec<String>,
}

/// The mountinfo entry for device `dev` whose mount point is the longest
/// prefix of `dir` (bind mounts list one device several times).
fn find_mount(dir: &Path, dev: (u32, u32)) -> Option<Mount> {
    let dir = fs::canonicalize(dir).ok()?;
    let info = fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = format!("{}:{}", dev.0, dev.1);
    let mut best: Option<Mount> = None;
    for line in info.lines() {
        // id parent maj:min root mount_point mount_opts [optional...] - fstype source super_opts
        let (left, right) = match line.split_once(" - ") {
            Some(x) => x,
            None => continue,
        };
        let l: Vec<&str> = left.split(' ').collect();
        let r: Vec<&str> = right.split(' ').collect();
        if l.len() < 6 || r.len() < 3 || l[2] != want {
            continue;
        }
        let mount_point = PathBuf::from(unescape_mountinfo(l[4]));
        if !dir.starts_with(&mount_point) {
            continue;
        }
        if best
            .as_ref()
            .is_some_and(|b| b.mount_point.as_os_str().len() >= mount_point.as_os_str().len())
        {
            continue;
        }
        let mut options: Vec<String> = Vec::new();
        for o in l[5].split(',').chain(r[2].split(',')) {
            if !o.is_empty() && !options.iter().any(|x| x == o) {
                options.push(o.to_string());
            }
        }
        best = Some(Mount {
            mount_point,
            fs_type: r[0].to_string(),
            source: unescape_mountinfo(r[1]),
            options,
        });
    }
    best
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The block device under the data dir, as sysfs describes it.
#[derive(Clone, Debug, Serialize)]
pub struct Disk {
    /// The whole disk, e.g. `vda`, `nvme0n1`, `dm-0`.
    pub name: String,
    /// The partition the filesystem is on, when it is one, e.g. `vda1`.
    pub partition: Option<String>,
    /// `major:minor` of the filesystem's device.
    pub dev: String,
    /// The active I/O scheduler, e.g. `mq-deadline`, `none`.
    pub scheduler: Option<String>,
    pub schedulers_available: Vec<String>,
    /// sysfs `rotational`. Virtual disks often say 1 whatever the host has.
    pub rotational: Option<bool>,
    /// `nr_requests`: the block layer's queue depth.
    pub nr_requests: Option<u32>,
    pub logical_block_size: Option<u32>,
    pub physical_block_size: Option<u32>,
    /// The kernel driver, e.g. `virtio_blk`, `nvme`, `sd`.
    pub driver: Option<String>,
    /// `virtio`, `nvme`, `scsi`, `xen`, `device-mapper`, `md`, `loop`, `zram`, `mmc` or `other`.
    pub kind: String,
    /// A hypervisor's paravirtual disk (virtio, xen, Hyper-V, VMware): fdatasync
    /// latency and honesty depend on the host's cache mode.
    pub virtual_disk: bool,
    /// Disks a device-mapper or md device is built on.
    pub slaves: Vec<String>,
    /// sysfs path of the queue read.
    pub sysfs: PathBuf,
}

impl Disk {
    /// Finds the disk for device `major:minor`; `mount_source` (`/dev/...`) is the
    /// fallback for filesystems on anonymous devices (btrfs).
    pub fn find(dev: (u32, u32), mount_source: Option<&str>) -> Option<Disk> {
        let by_dev = PathBuf::from(format!("/sys/dev/block/{}:{}", dev.0, dev.1));
        let dev_dir = fs::canonicalize(&by_dev).ok().or_else(|| {
            let src = mount_source.filter(|s| s.starts_with("/dev/"))?;
            let real = fs::canonicalize(src).ok()?;
            let name = real.file_name()?.to_str()?.to_string();
            fs::canonicalize(format!("/sys/class/block/{name}")).ok()
        })?;
        let dev_name = dev_dir.file_name()?.to_str()?.to_string();
        let (disk_dir, partition) = if dev_dir.join("partition").exists() {
            (dev_dir.parent()?.to_path_buf(), Some(dev_name))
        } else {
            (dev_dir.clone(), None)
        };
        let name = disk_dir.file_name()?.to_str()?.to_string();
        let queue = disk_dir.join("queue");
        let sched_line = read_trimmed(queue.join("scheduler"));
        let (scheduler, schedulers_available) = match &sched_line {
            Some(line) => parse_scheduler(line),
            None => (None, Vec::new()),
        };
        let num = |f: &str| read_trimmed(queue.join(f)).and_then(|s| s.parse::<u32>().ok());
        let driver = driver_of(&disk_dir);
        let path = disk_dir.to_string_lossy().into_owned();
        let kind = if name.starts_with("dm-") {
            "device-mapper"
        } else if name.starts_with("md") && disk_dir.join("md").exists() {
            "md"
        } else if name.starts_with("loop") {
            "loop"
        } else if name.starts_with("zram") {
            "zram"
        } else if name.starts_with("nvme") {
            "nvme"
        } else if path.contains("/virtio")
            || driver.as_deref().is_some_and(|d| d.starts_with("virtio"))
        {
            "virtio"
        } else if name.starts_with("xvd") || path.contains("/vbd-") {
            "xen"
        } else if name.starts_with("mmcblk") {
            "mmc"
        } else if name.starts_with("sd") {
            "scsi"
        } else {
            "other"
        };
        let virtual_disk = matches!(kind, "virtio" | "xen")
            || matches!(driver.as_deref(), Some("hv_storvsc" | "vmw_pvscsi"));
        let mut slaves: Vec<String> = fs::read_dir(disk_dir.join("slaves"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        slaves.sort();
        Some(Disk {
            name,
            partition,
            dev: format!("{}:{}", dev.0, dev.1),
            scheduler,
            schedulers_available,
            rotational: num("rotational").map(|r| r != 0),
            nr_requests: num("nr_requests"),
            logical_block_size: num("logical_block_size"),
            physical_block_size: num("physical_block_size"),
            driver,
            kind: kind.to_string(),
            virtual_disk,
            slaves,
            sysfs: queue,
        })
    }
}

/// The O_DIRECT alignment glommio 0.9's `DmaFile` assumes for a file on
/// device `major:minor`: the logical block size of `/sys/dev/block/MAJOR:0`
/// (it forces the minor to 0 to skip partitions), 512 when that does not
/// exist (btrfs's anonymous devices, tmpfs), and never below 512. For a
/// device whose minor-0 sibling is another disk (a second NVMe namespace, a
/// second device-mapper volume) this reads the wrong disk.
pub fn glommio_alignment(major: u32) -> u32 {
    read_trimmed(format!("/sys/dev/block/{major}:0/queue/logical_block_size"))
        .and_then(|s| s.parse::<u32>().ok())
        .unwrap_or(512)
        .max(512)
}

/// `none [mq-deadline] kyber bfq` → (`mq-deadline`, all four).
pub fn parse_scheduler(line: &str) -> (Option<String>, Vec<String>) {
    let mut active = None;
    let mut all = Vec::new();
    for word in line.split_whitespace() {
        let name = word.trim_start_matches('[').trim_end_matches(']');
        if word.starts_with('[') {
            active = Some(name.to_string());
        }
        all.push(name.to_string());
    }
    // A queue offering only `none` prints it without brackets.
    if active.is_none() && all.len() == 1 {
        active = all.first().cloned();
    }
    (active, all)
}

fn driver_of(disk_dir: &Path) -> Option<String> {
    // sd/virtio: device/driver; nvme: device is the controller, its parent has the driver.
    for link in ["device/driver", "device/device/driver"] {
        if let Ok(target) = fs::read_link(disk_dir.join(link)) {
            if let Some(name) = target.file_name().and_then(|n| n.to_str()) {
                return Some(name.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_line_parses() {
        let (a, all) = parse_scheduler("none [mq-deadline] kyber bfq");
        assert_eq!(a.as_deref(), Some("mq-deadline"));
        assert_eq!(all, ["none", "mq-deadline", "kyber", "bfq"]);
        assert_eq!(parse_scheduler("none").0.as_deref(), Some("none"));
        assert_eq!(
            parse_scheduler("[none] mq-deadline").0.as_deref(),
            Some("none")
        );
    }

    #[test]
    fn mountinfo_escapes_decode() {
        assert_eq!(unescape_mountinfo("/mnt/my\\040disk"), "/mnt/my disk");
        assert_eq!(unescape_mountinfo("/plain"), "/plain");
        assert_eq!(unescape_mountinfo("/end\\04"), "/end\\04");
    }

    #[test]
    fn magics_name_the_usual_filesystems() {
        assert_eq!(fs_name(0xEF53), Some("ext4"));
        assert_eq!(fs_class(0x0102_1994), FsClass::Memory);
        assert_eq!(fs_class(0x794C_7630), FsClass::Indirect);
        assert_eq!(fs_class(0x1234), FsClass::Unknown);
    }
}
