//! Helpers every benchmark module shares: scratch directories, medians,
//! the machine line printed above results, clocks and executors.

use std::path::Path;

use anyhow::{Context, Result};
use glommio::{LocalExecutorBuilder, Placement};

/// Runs `f` on a fresh, unpinned glommio executor and returns its result.
pub(crate) fn on_glommio<T, F, Fut>(f: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T>> + 'static,
{
    LocalExecutorBuilder::new(Placement::Unbound)
        .name("bench")
        .spawn(f)
        .map_err(|e| anyhow::anyhow!("starting glommio: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("glommio executor: {e:?}"))?
}

pub(crate) fn fresh_dir(dir: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Wall-clock ns since the Unix epoch: the clock the shards stamp with.
pub(crate) use ringfeed_engine::clock::now_ns;

/// The tokio runtime the gRPC benchmarks run their clients (and in-process
/// servers) on: two workers, one per core of the target machine.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

pub(crate) fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("{cores} cores, kernel {}", kernel.trim())
}
