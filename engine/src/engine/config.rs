//! The engine's configuration: its defaults, the checks an open makes of
//! it, and the shard configuration derived from it.

use std::path::PathBuf;
use std::time::Duration;

use super::EngineError;
use crate::event::Limits;
use crate::log::LogConfig;
use crate::retention::RetentionPolicy;
use crate::shard::ShardConfig;

/// Everything the engine needs to open. `Default` gives the production defaults.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// This node's id in a cluster (at least 1). `Engine::open` records it in
    /// the data dir's meta the first time and refuses a data dir recorded
    /// under another id (its events belong to that node's sources). `None`
    /// takes whatever the meta records (nothing, for a single node).
    pub node_id: Option<u32>,
    pub shards: u32,
    /// Pin shard `i` to `cpus[i % cpus.len()]`; `None` leaves shards unbound.
    pub cpus: Option<Vec<usize>>,
    /// Capacity of one in-memory window (and the largest chunk a window becomes).
    pub window_bytes: usize,
    /// Window memory per shard; flushed windows beyond it are evicted.
    pub ring_bytes: usize,
    /// Record bytes per shard not yet durable; appends wait past it.
    pub max_unflushed_bytes: usize,
    /// Record bytes of appends queued for one shard and not yet taken by it;
    /// past it an append is refused at once with `QueueFull` (nothing of it
    /// appended). A queue holding nothing takes any one batch.
    pub max_queued_bytes: usize,
    /// Longest a memory-acknowledged event stays unflushed while the shard is idle.
    pub flush_interval: Duration,
    /// How long an append waits on a full flush queue before failing with
    /// `ResourceExhausted`, counted from its arrival at the engine (time
    /// queued behind other commands of its shard counts).
    pub append_timeout: Duration,
    pub segment_bytes: u64,
    pub retention: RetentionPolicy,
    pub retention_interval: Duration,
    pub limits: Limits,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            data_dir: PathBuf::from("./ringfeed-data"),
            node_id: None,
            shards: std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
            cpus: None,
            window_bytes: 1 << 20,
            ring_bytes: 64 << 20,
            max_unflushed_bytes: 16 << 20,
            max_queued_bytes: 64 << 20,
            flush_interval: Duration::from_millis(10),
            append_timeout: Duration::from_secs(5),
            segment_bytes: 256 << 20,
            retention: RetentionPolicy::default(),
            retention_interval: Duration::from_secs(60),
            limits: Limits::default(),
        }
    }
}

pub(super) fn shard_config(config: &EngineConfig, shard: u32) -> ShardConfig {
    ShardConfig {
        log: LogConfig {
            shard,
            segment_bytes: config.segment_bytes,
            // A flush round writes at most this much before syncing.
            max_unsynced_bytes: (config.max_unflushed_bytes as u64)
                .max(config.window_bytes as u64 * 4)
                .max(4 << 20),
        },
        window_bytes: config.window_bytes,
        ring_bytes: config.ring_bytes,
        max_unflushed_bytes: config.max_unflushed_bytes,
        flush_interval: config.flush_interval,
        append_timeout: config.append_timeout,
        retention: config.retention,
        retention_interval: config.retention_interval,
    }
}

pub(super) fn validate(config: &EngineConfig) -> Result<(), EngineError> {
    let bad = |m: String| Err(EngineError::Config(m));
    if config.shards == 0 || config.shards > 1024 {
        return bad(format!("shards must be 1..=1024, not {}", config.shards));
    }
    if config.window_bytes < 4096 || config.window_bytes > 64 << 20 {
        return bad(format!(
            "window_bytes must be 4 KiB..=64 MiB, not {}",
            config.window_bytes
        ));
    }
    if config.limits.max_event_bytes > config.window_bytes / 4 {
        return bad(format!(
            "max_event_bytes ({}) must be at most a quarter of window_bytes ({}), so sealed windows stay at least 3/4 full",
            config.limits.max_event_bytes, config.window_bytes
        ));
    }
    // Unflushed windows are at least 3/4 full, so they occupy at most 4/3 of the
    // unflushed bytes, plus the active window and one being opened.
    let needed = config.max_unflushed_bytes / 3 * 4 + 2 * config.window_bytes;
    if config.ring_bytes < needed {
        return bad(format!(
            "ring_bytes ({}) must be at least 4/3 of max_unflushed_bytes plus two windows ({needed}), \
             or unflushed windows could not all stay in the ring",
            config.ring_bytes
        ));
    }
    if config.max_unflushed_bytes < config.limits.max_event_bytes {
        return bad("max_unflushed_bytes must hold at least one largest event".into());
    }
    if config.segment_bytes < (config.window_bytes as u64) * 4 + 8192 {
        return bad(format!(
            "segment_bytes ({}) must hold at least four windows",
            config.segment_bytes
        ));
    }
    if config.flush_interval.is_zero() {
        return bad("flush_interval must be positive".into());
    }
    if config.node_id == Some(0) {
        return bad("node_id must be at least 1 (0 is no node id)".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_a_valid_configuration() {
        validate(&EngineConfig::default()).unwrap();
    }

    #[test]
    fn a_ring_too_small_for_the_unflushed_bound_is_refused() {
        let config = EngineConfig {
            ring_bytes: 8 << 20,
            ..EngineConfig::default()
        };
        assert!(
            matches!(validate(&config), Err(EngineError::Config(m)) if m.contains("ring_bytes"))
        );
    }
}
