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

/// Event `i` of an in-process workload: a create of `f{i}` in one of 64
/// directories, with a `payload_bytes`-byte payload.
pub(crate) fn create_event(i: u64, payload_bytes: usize) -> ringfeed_engine::NewEvent {
    ringfeed_engine::NewEvent {
        directory: format!("/d{}", i % 64),
        new_name: format!("f{i}"),
        payload: vec![0x61; payload_bytes].into(),
        ..Default::default()
    }
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

/// Clock ticks per second of `/proc/.../stat` times (USER_HZ, fixed at 100 by
/// Linux's ABI).
pub(crate) const CLOCK_TICKS_PER_SECOND: u64 = 100;

/// User plus system CPU of a `/proc/PID/stat` or `/proc/PID/task/TID/stat`
/// line, in clock ticks; 0 for a line that does not parse.
pub(crate) fn stat_cpu_ticks(stat: &str) -> u64 {
    // Fields after the ")" that ends the command name: utime is the 12th
    // and stime the 13th of them (fields 14 and 15 of the line).
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    field(11) + field(12)
}

/// Fetches `/metrics` from `at` over a fresh connection, as a scraper would;
/// returns the whole response (status line, headers, body).
pub async fn scrape_metrics(at: std::net::SocketAddr) -> anyhow::Result<String> {
    http_get(at, "/metrics").await
}

/// `GET path` from the server's HTTP endpoint at `at` (one connection per
/// request): the whole response, which must be a 200.
pub async fn http_get(at: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(at).await?;
    conn.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut response = Vec::new();
    conn.read_to_end(&mut response).await?;
    let response = String::from_utf8_lossy(&response).into_owned();
    if !response.starts_with("HTTP/1.1 200") {
        anyhow::bail!("GET {path}: {response}");
    }
    Ok(response)
}

/// The sum of a metric's samples over all its label sets in a scrape.
pub fn metric_sum(scrape: &str, name: &str) -> f64 {
    scrape
        .lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}
