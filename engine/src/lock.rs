//! One process per data dir. [`Engine::open`](crate::Engine::open) takes an
//! exclusive `flock` on `DATA/ringfeed.lock` before it reads anything in the
//! data dir and holds it for the engine's life; the kernel drops it with the
//! process, however the process ends, so a crash leaves nothing to clean.
//! Two servers on one data dir once both recovered and appended, and each
//! cut the other's chunks as a torn tail.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file in a data dir; it holds the holder's pid, for messages.
pub const LOCK_FILE: &str = "ringfeed.lock";

/// A data dir's lock, held until dropped.
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
}

/// Why a data dir could not be locked.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "{dir} is in use by another ringfeed process{}: one process per data dir; stop it, \
         or give this one another data dir",
        holder_text(*.pid)
    )]
    Held { dir: PathBuf, pid: Option<u32> },
    #[error("locking {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

fn holder_text(pid: Option<u32>) -> String {
    pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
}

impl DataDirLock {
    /// Takes `dir`'s lock (creating its lock file), or says who holds it.
    pub fn take(dir: &Path) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if !flock(&file, libc::LOCK_EX).map_err(io)? {
            return Err(LockError::Held {
                dir: dir.to_path_buf(),
                pid: read_pid(&mut file),
            });
        }
        // Ours: say who holds it (advisory, for the next one's message).
        file.set_len(0).map_err(io)?;
        file.rewind().map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { _file: file })
    }

    /// Whether a process holds `dir`'s lock, and its pid if it said it:
    /// for read-only tools, which create and change nothing (no lock file:
    /// nobody holds it).
    pub fn holder(dir: &Path) -> Option<Option<u32>> {
        let mut file = File::open(dir.join(LOCK_FILE)).ok()?;
        match flock(&file, libc::LOCK_SH) {
            Ok(false) => Some(read_pid(&mut file)),
            // Free (the shared lock goes with the file), or unknowable.
            _ => None,
        }
    }
}

/// `flock(operation | LOCK_NB)`: false if another holds a conflicting lock.
#[allow(unsafe_code)]
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<bool> {
    loop {
        // SAFETY: a plain syscall on a descriptor `file` keeps open.
        let rc = unsafe { libc::flock(file.as_raw_fd(), operation | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let error = std::io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

/// The pid a holder wrote, if it did (it writes it just after locking).
fn read_pid(file: &mut File) -> Option<u32> {
    let mut text = String::new();
    file.rewind().ok()?;
    file.take(32).read_to_string(&mut text).ok()?;
    text.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_data_dir_is_refused_naming_the_holder_and_freed_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DataDirLock::holder(dir.path()).is_none(), "no lock file");
        let lock = DataDirLock::take(dir.path()).unwrap();
        let me = Some(std::process::id());
        // flock conflicts between open files, in one process too.
        match DataDirLock::take(dir.path()) {
            Err(LockError::Held { pid, .. }) => assert_eq!(pid, me),
            other => panic!("a second lock: {other:?}"),
        }
        assert_eq!(DataDirLock::holder(dir.path()), Some(me));
        drop(lock);
        assert!(DataDirLock::holder(dir.path()).is_none(), "freed");
        DataDirLock::take(dir.path()).expect("free again");
    }
}
