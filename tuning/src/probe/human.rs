//! The probe's report for humans: aligned `key: value` lines, then the
//! problems with their fixes.

use super::{Probe, Problem, Severity};
use crate::render::{bytes, KvList};

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
                        crate::direct_io::AlignSource::Statx => "statx STATX_DIOALIGN",
                        crate::direct_io::AlignSource::Sysfs => "the disk's logical block size",
                        crate::direct_io::AlignSource::Empirical => "test writes",
                        crate::direct_io::AlignSource::Default => "nothing: 4096 assumed",
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
