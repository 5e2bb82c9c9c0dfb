//! The Linux calls the probe and the calibration need that std does not wrap:
//! statx, statfs, getrlimit, fallocate, the raw io_uring syscalls, and an
//! aligned buffer for O_DIRECT. This is the crate's only `unsafe`; every
//! wrapper returns owned, plain values so callers stay safe code.

use std::alloc::{self, Layout};
use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// The statx fields the probe reads.
#[derive(Clone, Copy, Debug)]
pub struct Statx {
    /// Which fields the kernel filled (`STATX_*` bits).
    pub mask: u32,
    pub dev_major: u32,
    pub dev_minor: u32,
    pub dio_mem_align: u32,
    pub dio_offset_align: u32,
    /// 0 unless the kernel set `STATX_DIO_READ_ALIGN` (6.14+).
    pub dio_read_offset_align: u32,
}

/// `statx(2)` on `path`, asking for `mask`.
#[allow(unsafe_code)]
pub fn statx(path: &Path, mask: u32) -> io::Result<Statx> {
    let c = cstring(path)?;
    // SAFETY: `libc::statx` is a plain C struct of integers; all-zero is a valid value.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and outlives the call; `buf` is a valid,
    // writable `struct statx` that the kernel fills and nothing else aliases.
    let rc = unsafe { libc::statx(libc::AT_FDCWD, c.as_ptr(), 0, mask, &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Statx {
        mask: buf.stx_mask,
        dev_major: buf.stx_dev_major,
        dev_minor: buf.stx_dev_minor,
        dio_mem_align: buf.stx_dio_mem_align,
        dio_offset_align: buf.stx_dio_offset_align,
        dio_read_offset_align: if buf.stx_mask & libc::STATX_DIO_READ_ALIGN != 0 {
            buf.stx_dio_read_offset_align
        } else {
            0
        },
    })
}

/// The statfs fields the probe reads.
#[derive(Clone, Copy, Debug)]
pub struct StatFs {
    pub magic: u64,
    /// `f_bsize`: the filesystem's block size.
    pub block_size: u64,
    pub total_bytes: u64,
    /// Free to an unprivileged user (`f_bavail`).
    pub avail_bytes: u64,
}

/// `statfs(2)` on `path`.
#[allow(unsafe_code)]
pub fn statfs(path: &Path) -> io::Result<StatFs> {
    let c = cstring(path)?;
    // SAFETY: `libc::statfs` is a plain C struct of integers; all-zero is a valid value.
    let mut buf: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is NUL-terminated and outlives the call; `buf` is a valid,
    // writable `struct statfs`.
    let rc = unsafe { libc::statfs(c.as_ptr(), &mut buf) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // Linux counts blocks in f_frsize units (equal to f_bsize on most filesystems).
    let unit = if buf.f_frsize > 0 {
        buf.f_frsize as u64
    } else {
        buf.f_bsize as u64
    };
    Ok(StatFs {
        // f_type is a signed word on some targets; the magic is its low 32 bits.
        magic: (buf.f_type as u64) & 0xffff_ffff,
        block_size: buf.f_bsize as u64,
        total_bytes: (buf.f_blocks as u64).saturating_mul(unit),
        avail_bytes: (buf.f_bavail as u64).saturating_mul(unit),
    })
}

/// A resource limit; `None` is unlimited.
#[derive(Clone, Copy, Debug)]
pub struct RLimit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

#[cfg(target_env = "gnu")]
type Resource = libc::__rlimit_resource_t;
#[cfg(not(target_env = "gnu"))]
type Resource = libc::c_int;

#[allow(unsafe_code)]
fn getrlimit(resource: Resource) -> io::Result<RLimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid, writable `struct rlimit` for the duration of the call.
    let rc = unsafe { libc::getrlimit(resource, &mut lim) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // rlim_t is u64 on the targets ringfeed runs on.
    let value = |v: libc::rlim_t| (v != libc::RLIM_INFINITY).then_some(v);
    Ok(RLimit {
        soft: value(lim.rlim_cur),
        hard: value(lim.rlim_max),
    })
}

pub fn memlock_limit() -> io::Result<RLimit> {
    getrlimit(libc::RLIMIT_MEMLOCK)
}

pub fn nofile_limit() -> io::Result<RLimit> {
    getrlimit(libc::RLIMIT_NOFILE)
}

/// Allocates `len` bytes of disk space for `file` (mode 0: the file size grows,
/// the extents stay unwritten), as ringfeed does for a new segment.
#[allow(unsafe_code)]
pub fn fallocate(file: &File, len: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(len)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "length out of range"))?;
    // SAFETY: the descriptor is open for the lifetime of `file`; fallocate
    // touches no memory of ours.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `struct io_uring_params` (120 bytes). The probe reads only `features`; the
/// offsets are for mapping the rings, which it never does.
#[repr(C, align(8))]
struct IoUringParams([u32; 30]);

/// What `io_uring_setup(2)` gave: the ring's descriptor and `features` bits.
pub struct IoUring {
    pub fd: OwnedFd,
    pub features: u32,
}

/// Creates (but does not map) an io_uring with `entries` submission slots.
#[allow(unsafe_code)]
pub fn io_uring_setup(entries: u32) -> io::Result<IoUring> {
    let mut params = IoUringParams([0; 30]);
    // SAFETY: `params` is a zeroed `struct io_uring_params` of the kernel's size
    // and alignment, writable for the call; the syscall returns a new descriptor
    // or -1.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_io_uring_setup,
            entries,
            &mut params as *mut IoUringParams,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let raw = i32::try_from(rc)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "io_uring_setup fd"))?;
    // SAFETY: `raw` is a descriptor the kernel just created for us and nothing
    // else owns; `OwnedFd` closes it exactly once.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    Ok(IoUring {
        fd,
        features: params.0[5],
    })
}

const IORING_REGISTER_PROBE: u32 = 8;
const IO_URING_OP_SUPPORTED: u16 = 1;
const PROBE_OPS: usize = 256;

/// `struct io_uring_probe` followed by room for 256 `struct io_uring_probe_op`
/// (16 + 256 * 8 bytes).
#[repr(C, align(8))]
struct ProbeBuf([u8; 16 + PROBE_OPS * 8]);

/// `IORING_REGISTER_PROBE` (5.6+): which opcodes this kernel supports.
/// Returns one flag per opcode number up to the kernel's last opcode.
#[allow(unsafe_code)]
pub fn io_uring_probe(ring: &IoUring) -> io::Result<Vec<bool>> {
    let mut buf = ProbeBuf([0; 16 + PROBE_OPS * 8]);
    // SAFETY: `buf` is zeroed, writable, sized for `PROBE_OPS` entries as the
    // last argument says, and aligned for the kernel's struct; the descriptor is
    // a live io_uring owned by `ring`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.fd.as_raw_fd(),
            IORING_REGISTER_PROBE,
            buf.0.as_mut_ptr(),
            PROBE_OPS as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let ops_len = usize::from(buf.0[1]).min(PROBE_OPS);
    Ok((0..ops_len)
        .map(|i| {
            let op = &buf.0[16 + i * 8..16 + i * 8 + 8];
            u16::from_ne_bytes([op[2], op[3]]) & IO_URING_OP_SUPPORTED != 0
        })
        .collect())
}

/// A zeroed heap buffer whose start is aligned for O_DIRECT.
pub struct AlignedBuf {
    ptr: std::ptr::NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    /// `len` bytes aligned to `align` (a power of two). `len` may be 0 only in
    /// name: at least one byte is allocated.
    #[allow(unsafe_code)]
    pub fn new(len: usize, align: usize) -> io::Result<AlignedBuf> {
        let layout = Layout::from_size_align(len.max(1), align)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        // SAFETY: `layout` has a non-zero size.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = std::ptr::NonNull::new(raw)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        Ok(AlignedBuf { ptr, layout })
    }

    #[allow(unsafe_code)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `layout.size()` initialised (zeroed) bytes that
        // live as long as `self`; shared access follows from `&self`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    #[allow(unsafe_code)]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for AlignedBuf {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `alloc_zeroed` with this same `layout` and is
        // freed only here.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}
