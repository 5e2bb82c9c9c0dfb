//! O_DIRECT in the data dir: does it work, and at what alignment? The kernel's
//! own answer (statx `STATX_DIOALIGN`, 6.1+) comes first, then the disk's
//! logical block size from sysfs, then what test writes show. Whatever the
//! source, the probe checks the answer with one aligned write. All writes go to
//! one small file that is removed when the probe ends.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::io_uring::errno_text;
use crate::sys::{self, AlignedBuf};

/// Where the reported alignment came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AlignSource {
    /// statx `STATX_DIOALIGN` on a file in the data dir.
    Statx,
    /// The disk's `queue/logical_block_size`.
    Sysfs,
    /// The smallest test-write alignment that succeeded.
    Empirical,
    /// Nothing answered: 4096, which every Linux block device accepts.
    Default,
}

/// statx's direct-I/O fields for a file in the data dir.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StatxDio {
    /// `stx_dio_mem_align`: buffer address alignment.
    pub mem_align: u32,
    /// `stx_dio_offset_align`: file offset and length alignment.
    pub offset_align: u32,
    /// `stx_dio_read_offset_align` (6.14+), when the kernel reports it and it
    /// differs from `offset_align` (xfs can read at finer alignment than it writes).
    pub read_offset_align: Option<u32>,
}

#[derive(Clone, Debug, Serialize)]
pub struct DirectIo {
    /// `Some(false)`: opening a file with O_DIRECT failed with EINVAL.
    /// `None`: the test file could not be created at all (see `test_file_error`).
    pub supported: Option<bool>,
    pub test_file_error: Option<String>,
    pub statx: Option<StatxDio>,
    /// Why `statx` is empty: old kernel, or the filesystem does not say.
    pub statx_note: Option<String>,
    pub sysfs_logical_block_size: Option<u32>,
    /// Smallest of 512, 1024, 2048, 4096 at which an O_DIRECT write (offset and
    /// length) succeeded with a page-aligned buffer.
    pub empirical_offset_align: Option<u32>,
    /// Smallest power of two from 1 to 4096 at which the buffer address of a
    /// 4 KiB O_DIRECT write may be aligned.
    pub empirical_mem_align: Option<u32>,
    /// File offset and length alignment ringfeed should use for direct writes.
    pub offset_align: u32,
    /// Buffer address alignment ringfeed should use.
    pub mem_align: u32,
    pub source: AlignSource,
    /// What glommio 0.9's `DmaFile::alignment()` will say for this directory
    /// (see `storage::glommio_alignment`); the engine aligns chunks to it, and
    /// to at least 4 KiB.
    pub glommio_align: u32,
    /// One O_DIRECT write at exactly `offset_align` / `mem_align` succeeded.
    pub verified: bool,
    pub verify_error: Option<String>,
}

impl DirectIo {
    /// Probes O_DIRECT in `dir` (which must exist) with a temporary file.
    /// `kernel_has_dioalign`: the kernel is 6.1 or newer, so a missing
    /// `STATX_DIOALIGN` means the filesystem does not report it.
    pub fn probe(
        dir: &Path,
        sysfs_logical_block_size: Option<u32>,
        kernel_has_dioalign: bool,
        glommio_align: u32,
    ) -> DirectIo {
        let mut report = DirectIo {
            supported: None,
            test_file_error: None,
            statx: None,
            statx_note: None,
            sysfs_logical_block_size,
            empirical_offset_align: None,
            empirical_mem_align: None,
            offset_align: 4096,
            mem_align: 4096,
            source: AlignSource::Default,
            glommio_align,
            verified: false,
            verify_error: None,
        };
        let test = match TempFile::create(dir, "probe", true) {
            Ok(t) => {
                report.supported = Some(true);
                t
            }
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                report.supported = Some(false);
                report.test_file_error = Some(format!("open(O_DIRECT): {}", errno_text(&e)));
                return report;
            }
            Err(e) => {
                report.test_file_error = Some(format!("create test file: {}", errno_text(&e)));
                if let Some(lbs) = sysfs_logical_block_size {
                    report.offset_align = lbs;
                    report.mem_align = lbs;
                    report.source = AlignSource::Sysfs;
                }
                return report;
            }
        };

        match statx_dio(test.path()) {
            Ok(Some(dio)) => report.statx = Some(dio),
            Ok(None) => {
                report.statx_note = Some("the filesystem reports no direct-I/O alignment".into())
            }
            Err(note) if kernel_has_dioalign && !note.starts_with("statx:") => {
                report.statx_note = Some("this filesystem does not report STATX_DIOALIGN".into())
            }
            Err(note) => report.statx_note = Some(note),
        }
        report.empirical_offset_align = [512u32, 1024, 2048, 4096]
            .into_iter()
            .find(|&a| try_direct_write(test.file(), u64::from(a), a as usize, 4096).is_ok());
        report.empirical_mem_align = (0..=12)
            .map(|s| 1u32 << s)
            .find(|&m| try_direct_write(test.file(), 0, 4096, m as usize).is_ok());

        (report.offset_align, report.mem_align, report.source) = match (
            report.statx,
            sysfs_logical_block_size,
            report.empirical_offset_align,
        ) {
            (Some(s), _, _) => (s.offset_align, s.mem_align, AlignSource::Statx),
            (None, Some(lbs), _) => (lbs, lbs, AlignSource::Sysfs),
            (None, None, Some(e)) => (
                e,
                report.empirical_mem_align.unwrap_or(e),
                AlignSource::Empirical,
            ),
            (None, None, None) => (4096, 4096, AlignSource::Default),
        };
        match try_direct_write(
            test.file(),
            u64::from(report.offset_align),
            report.offset_align as usize,
            report.mem_align as usize,
        ) {
            Ok(()) => report.verified = true,
            Err(e) => report.verify_error = Some(errno_text(&e)),
        }
        report
    }
}

/// statx `STATX_DIOALIGN` for `path`: `Ok(None)` when the kernel knows the
/// field but the file cannot do direct I/O (both values 0), `Err` with a note
/// when the kernel does not know it.
pub fn statx_dio(path: &Path) -> Result<Option<StatxDio>, String> {
    let st = sys::statx(path, libc::STATX_DIOALIGN | libc::STATX_DIO_READ_ALIGN)
        .map_err(|e| format!("statx: {}", errno_text(&e)))?;
    if st.mask & libc::STATX_DIOALIGN == 0 {
        return Err(
            "the kernel has no STATX_DIOALIGN (before 6.1) or the filesystem does not fill it"
                .into(),
        );
    }
    if st.dio_offset_align == 0 {
        return Ok(None);
    }
    Ok(Some(StatxDio {
        mem_align: st.dio_mem_align,
        offset_align: st.dio_offset_align,
        read_offset_align: (st.dio_read_offset_align != 0
            && st.dio_read_offset_align != st.dio_offset_align)
            .then_some(st.dio_read_offset_align),
    }))
}

/// Opens `path` for O_DIRECT reading and writing, creating it (must not exist) when `create`.
pub fn open_direct(path: &Path, create: bool) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).custom_flags(libc::O_DIRECT);
    if create {
        opts.create_new(true);
    }
    opts.open(path)
}

/// One O_DIRECT write of `len` bytes at `offset` from a buffer whose address is
/// aligned to exactly `mem_align` (a power of two up to 4096): aligned to it and
/// not to twice it, so a success proves that alignment is enough.
pub fn try_direct_write(file: &File, offset: u64, len: usize, mem_align: usize) -> io::Result<()> {
    let mut buf = AlignedBuf::new(len + 8192, 8192)?;
    let start = if mem_align >= 8192 { 0 } else { mem_align };
    let slice = &mut buf.as_mut_slice()[start..start + len];
    slice.fill(0xA5);
    let n = file.write_at(slice, offset)?;
    if n != len {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short direct write: {n} of {len} bytes"),
        ));
    }
    Ok(())
}

/// A uniquely named file in the data dir, removed on drop (also on error paths).
pub struct TempFile {
    path: PathBuf,
    file: File,
}

impl TempFile {
    /// Creates `dir/.ringfeed-<purpose>-<pid>-<nanos>.tmp`, with O_DIRECT when `direct`.
    pub fn create(dir: &Path, purpose: &str, direct: bool) -> io::Result<TempFile> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = dir.join(format!(
            ".ringfeed-{purpose}-{}-{nanos}.tmp",
            std::process::id()
        ));
        let file = if direct {
            open_direct(&path, true).inspect_err(|e| {
                // A filesystem without direct I/O fails the open after creating
                // the file; O_EXCL means it is ours to remove.
                if e.raw_os_error() == Some(libc::EINVAL) {
                    let _ = fs::remove_file(&path);
                }
            })?
        } else {
            OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)?
        };
        Ok(TempFile { path, file })
    }

    pub fn file(&self) -> &File {
        &self.file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}
