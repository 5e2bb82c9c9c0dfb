//! Why a probe or a calibration could not run at all. Problems the probe finds
//! on the machine are not errors: they are `Problem`s in the report.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

#[derive(Debug, Error)]
pub enum TuneError {
    /// Neither the data dir nor any of its ancestors exists (a relative path
    /// whose working directory vanished, say).
    #[error("no part of the data dir {path} exists")]
    NoExistingAncestor { path: PathBuf },

    #[error("{path} is not a directory")]
    NotADirectory { path: PathBuf },

    /// An I/O call failed; `op` names it (`"open O_DIRECT"`, `"fdatasync"`, ...).
    #[error("{op} on {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    /// The calibration needs O_DIRECT and the filesystem refused it.
    #[error("O_DIRECT is not supported in {path} ({source}); put the data dir on ext4 or xfs")]
    DirectIoUnsupported {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("calibration needs {needed} bytes free in {path}, only {free} are")]
    NoSpace {
        path: PathBuf,
        needed: u64,
        free: u64,
    },
}

impl TuneError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> TuneError {
        TuneError::Io {
            op,
            path: path.into(),
            source,
        }
    }
}
