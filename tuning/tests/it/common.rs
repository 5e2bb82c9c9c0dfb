//! Test helpers: a scratch directory on a real disk filesystem.

use std::path::PathBuf;

use ringfeed_tuning::storage::{Filesystem, FsClass};

/// A temporary directory on ext4/xfs when one is at hand: the system temp dir
/// if it is on one (it may be tmpfs), else `target/tuning-tmp` beside the
/// crate. `None` in the second field: neither is on ext4/xfs, and the caller
/// should skip what only a block filesystem guarantees.
pub fn real_disk_tempdir() -> (tempfile::TempDir, Option<String>) {
    let in_target = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tuning-tmp");
    for base in [std::env::temp_dir(), in_target] {
        if std::fs::create_dir_all(&base).is_err() {
            continue;
        }
        if let Ok(fs) = Filesystem::read(&base, None) {
            if fs.class() == FsClass::Recommended {
                let dir = tempfile::tempdir_in(&base).expect("create temp dir");
                return (dir, Some(fs.fs_type));
            }
        }
    }
    let dir = tempfile::tempdir().expect("create temp dir");
    (dir, None)
}
