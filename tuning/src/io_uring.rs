//! Can this process use io_uring, and does the kernel support the opcodes
//! ringfeed's glommio executors submit? Sets up a 4-entry ring (never mapped,
//! closed at once) and asks `IORING_REGISTER_PROBE` for the opcode table.

use serde::Serialize;

use crate::host::read_trimmed;
use crate::sys;

/// One io_uring opcode ringfeed (through glommio) may submit.
#[derive(Clone, Debug, Serialize)]
pub struct Opcode {
    pub name: &'static str,
    pub code: u8,
    /// Without it ringfeed cannot run; the others have fallbacks.
    pub required: bool,
    /// `None` when the kernel has no `IORING_REGISTER_PROBE` (before 5.6).
    pub supported: Option<bool>,
}

/// `(name, opcode number, required)`, numbers from `include/uapi/linux/io_uring.h`.
const OPCODES: &[(&str, u8, bool)] = &[
    ("READ", 22, true),
    ("WRITE", 23, true),
    ("FSYNC", 3, true),
    ("TIMEOUT", 11, true),
    ("POLL_ADD", 6, true),
    ("READV", 1, false),
    ("WRITEV", 2, false),
    ("READ_FIXED", 4, false),
    ("WRITE_FIXED", 5, false),
    ("ASYNC_CANCEL", 14, false),
    ("LINK_TIMEOUT", 15, false),
    ("FALLOCATE", 17, false),
    ("OPENAT", 18, false),
    ("CLOSE", 19, false),
    ("STATX", 21, false),
];

#[derive(Clone, Debug, Serialize)]
pub struct IoUringReport {
    /// `io_uring_setup` succeeded for this process.
    pub available: bool,
    /// The errno when it did not, e.g. `EPERM (Operation not permitted)`.
    pub setup_error: Option<String>,
    /// `kernel.io_uring_disabled` (6.6+): 0 on, 1 only for root and
    /// `kernel.io_uring_group`, 2 off. `None` when the sysctl does not exist.
    pub disabled_sysctl: Option<u32>,
    /// `kernel.io_uring_group` when the sysctl exists (-1: no group).
    pub allowed_group: Option<i64>,
    /// `features` bits the kernel returned from `io_uring_setup`.
    pub features: u32,
    pub opcodes: Vec<Opcode>,
}

impl IoUringReport {
    pub fn read() -> IoUringReport {
        let disabled_sysctl =
            read_trimmed("/proc/sys/kernel/io_uring_disabled").and_then(|s| s.parse().ok());
        let allowed_group =
            read_trimmed("/proc/sys/kernel/io_uring_group").and_then(|s| s.parse().ok());
        let (available, setup_error, features, supported) = match sys::io_uring_setup(4) {
            Ok(ring) => {
                let table = sys::io_uring_probe(&ring).ok();
                (true, None, ring.features, table)
            }
            Err(e) => (false, Some(errno_text(&e)), 0, None),
        };
        let opcodes = OPCODES
            .iter()
            .map(|&(name, code, required)| Opcode {
                name,
                code,
                required,
                supported: supported
                    .as_ref()
                    .map(|t| t.get(usize::from(code)).copied().unwrap_or(false)),
            })
            .collect();
        IoUringReport {
            available,
            setup_error,
            disabled_sysctl,
            allowed_group,
            features,
            opcodes,
        }
    }

    /// Required opcodes the kernel said it does not support.
    pub fn missing_required(&self) -> Vec<&'static str> {
        self.opcodes
            .iter()
            .filter(|o| o.required && o.supported == Some(false))
            .map(|o| o.name)
            .collect()
    }
}

/// `EPERM (Operation not permitted)`.
pub fn errno_text(e: &std::io::Error) -> String {
    let name = match e.raw_os_error() {
        Some(libc::EPERM) => "EPERM",
        Some(libc::ENOSYS) => "ENOSYS",
        Some(libc::ENOMEM) => "ENOMEM",
        Some(libc::EINVAL) => "EINVAL",
        Some(libc::EACCES) => "EACCES",
        Some(libc::EMFILE) => "EMFILE",
        Some(libc::ENOSPC) => "ENOSPC",
        Some(libc::EROFS) => "EROFS",
        Some(libc::EOPNOTSUPP) => "EOPNOTSUPP",
        Some(libc::EFAULT) => "EFAULT",
        _ => return e.to_string(),
    };
    let msg = e.to_string();
    let msg = msg.split(" (os error").next().unwrap_or(&msg);
    format!("{name} ({msg})")
}
