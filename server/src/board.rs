//! The server's state as `Status` answers it (and the status page's
//! `/api/status`): shards, connected subscribers with their lag as of the
//! answer, and the one-second samples behind the rates and sparklines.
//!
//! A sampler task ([`StatusBoard::sample_every_second`]) reads the shards'
//! counters and latency histograms and the subscribers' lag once a second
//! and keeps five minutes of samples. It reads atomics and walks the
//! registry once: the append and delivery paths pay nothing for it.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ringfeed_engine::clock::now_ns;
use ringfeed_engine::{Engine, LatencySnapshot};
use ringfeed_proto::v1;

use crate::registry::Registry;

/// How many one-second samples the sparklines cover: five minutes.
const HISTORY: usize = 300;
/// The window the flush and fsync percentiles cover, in samples.
const LATENCY_WINDOW: usize = 60;

/// The state `Status` answers with, shared by the gRPC service, the status
/// page and the metrics endpoint.
pub struct StatusBoard {
    engine: Arc<Engine>,
    registry: Arc<Registry>,
    started_ns: i64,
    data_dir: String,
    samples: Mutex<VecDeque<Sample>>,
    /// The filers followed (`serve --follow-filer`), set once at start.
    filers: std::sync::OnceLock<Vec<Arc<crate::seaweedfs::FilerProgress>>>,
    /// The uploads to the object store (`serve --object-store`), set once at start.
    object_store: std::sync::OnceLock<Arc<crate::bucket::UploadState>>,
}

/// One sample: what the shards had counted, and the worst lag then.
struct Sample {
    at_ns: i64,
    /// Per shard: events appended so far, and the latency histograms.
    appended: Vec<u64>,
    flush: Vec<LatencySnapshot>,
    fsync: Vec<LatencySnapshot>,
    /// Per shard, events per second since the previous sample.
    append_rates: Vec<f64>,
    worst_lag_seconds: f64,
}

impl StatusBoard {
    pub fn new(engine: Arc<Engine>, registry: Arc<Registry>, data_dir: String) -> StatusBoard {
        StatusBoard {
            engine,
            registry,
            started_ns: now_ns(),
            data_dir,
            samples: Mutex::new(VecDeque::with_capacity(HISTORY)),
            filers: std::sync::OnceLock::new(),
            object_store: std::sync::OnceLock::new(),
        }
    }

    /// The uploads to the object store, for status (set once, at start).
    pub fn set_object_store(&self, state: Arc<crate::bucket::UploadState>) {
        let _ = self.object_store.set(state);
    }

    /// The filers this server follows, for status (set once, at start).
    pub fn set_filers(&self, filers: Vec<Arc<crate::seaweedfs::FilerProgress>>) {
        let _ = self.filers.set(filers);
    }

    fn filers(&self) -> Vec<v1::FollowedFiler> {
        let Some(filers) = self.filers.get() else {
            return Vec::new();
        };
        filers
            .iter()
            .map(|f| {
                let r = f.read();
                v1::FollowedFiler {
                    filer: r.filer,
                    connected: r.connected,
                    stored_ts_ns: r.stored_ts_ns,
                    seen_ts_ns: r.seen_ts_ns,
                    flushed_ts_ns: r.flushed_ts_ns,
                    events: r.events,
                    reconnects: r.reconnects,
                    error: if r.connected {
                        String::new()
                    } else {
                        r.error.unwrap_or_default()
                    },
                    refused: r.refused,
                    last_refused: r.last_refused.unwrap_or_default(),
                    log_gap: r.log_gap,
                    gaps_skipped: r.gaps_skipped,
                }
            })
            .collect()
    }

    /// Each shard's next offset to commit, by shard id.
    fn committed(&self) -> Vec<u64> {
        (0..self.engine.shard_count())
            .map(|id| self.engine.shard(id).watermarks.committed_next())
            .collect()
    }

    /// Every connected subscriber, its lag as of now (oldest stream first).
    pub fn subscribers(&self) -> Vec<v1::SubscriberInfo> {
        self.registry.list(now_ns(), &self.committed())
    }

    /// The largest lag among connected subscribers now (0 with none).
    pub fn worst_lag_seconds(&self) -> f64 {
        self.registry.worst_lag_seconds(now_ns(), &self.committed())
    }

    /// Takes one sample now.
    pub fn sample(&self) {
        let now = now_ns();
        self.registry.sample_rates(now);
        let shards: Vec<_> = (0..self.engine.shard_count())
            .map(|id| self.engine.shard(id).stats())
            .collect();
        let appended: Vec<u64> = shards
            .iter()
            .map(|s| s.appended.load(Ordering::Relaxed))
            .collect();
        let worst_lag_seconds = self.worst_lag_seconds();
        let mut samples = lock(&self.samples);
        let append_rates = match samples.back() {
            Some(last) if now > last.at_ns => appended
                .iter()
                .zip(&last.appended)
                .map(|(&n, &m)| n.saturating_sub(m) as f64 * 1e9 / (now - last.at_ns) as f64)
                .collect(),
            _ => vec![0.0; appended.len()],
        };
        if samples.len() == HISTORY {
            samples.pop_front();
        }
        samples.push_back(Sample {
            at_ns: now,
            appended,
            flush: shards.iter().map(|s| s.flush_latency.snapshot()).collect(),
            fsync: shards.iter().map(|s| s.fsync_latency.snapshot()).collect(),
            append_rates,
            worst_lag_seconds,
        });
    }

    /// Samples once a second until `stop` turns true.
    pub async fn sample_every_second(
        self: Arc<Self>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => self.sample(),
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }

    /// The answer to `request`: every shard, up to its `subscriber_limit`
    /// subscribers (the most lagging first), and with `history` the samples.
    pub fn status(&self, request: &v1::StatusRequest) -> v1::StatusResponse {
        let subscriber_limit = request.subscriber_limit as usize;
        let now = now_ns();
        // Cluster nodes ask each peer every second, for no subscriber.
        let (connected, subscribers) = if subscriber_limit == 0 {
            (self.registry.len() as u64, Vec::new())
        } else {
            let mut subscribers = self.registry.list(now, &self.committed());
            let connected = subscribers.len() as u64;
            subscribers.sort_by(|a, b| b.lag_seconds.total_cmp(&a.lag_seconds));
            subscribers.truncate(subscriber_limit);
            (connected, subscribers)
        };
        let samples = lock(&self.samples);
        let last = samples.back();
        // The latency window: from the sample a minute before the last.
        let first = samples
            .len()
            .checked_sub(LATENCY_WINDOW + 1)
            .and_then(|i| samples.get(i))
            .or(samples.front());
        let shards = self
            .engine
            .status()
            .into_iter()
            .map(|s| {
                let w = s.watermarks;
                let i = s.shard as usize;
                let window = |pick: fn(&Sample) -> &Vec<LatencySnapshot>| match (first, last) {
                    (Some(first), Some(last)) if last.at_ns > first.at_ns => {
                        pick(last)[i].since(&pick(first)[i])
                    }
                    _ => LatencySnapshot::default(),
                };
                let flush = window(|s| &s.flush);
                let fsync = window(|s| &s.fsync);
                v1::ShardStatus {
                    shard: s.shard,
                    committed_next: w.committed_next,
                    committed_ts_ns: w.committed_ts,
                    claimed_ts_ns: w.claimed_ts,
                    flushed_next: w.flushed_next,
                    flushed_ts_ns: w.flushed_ts,
                    evicted_below: w.evicted_below,
                    retained_from: w.retained_from,
                    ring_bytes: s.ring_bytes as u64,
                    unflushed_bytes: s.unflushed_bytes as u64,
                    segment_count: s.segments as u32,
                    latched: s.latched.unwrap_or_default(),
                    disk_full: s.no_space.unwrap_or_default(),
                    append_events_per_second: last.map_or(0.0, |l| l.append_rates[i]),
                    flush_p50_seconds: flush.quantile_bound(0.5),
                    flush_p99_seconds: flush.quantile_bound(0.99),
                    fsync_p50_seconds: fsync.quantile_bound(0.5),
                    fsync_p99_seconds: fsync.quantile_bound(0.99),
                    appended_events: self
                        .engine
                        .shard(s.shard)
                        .stats()
                        .appended
                        .load(Ordering::Relaxed),
                }
            })
            .collect();
        let history = samples
            .iter()
            .filter(|_| request.history)
            .map(|s| v1::StatusSample {
                at_ns: s.at_ns,
                append_events_per_second: s.append_rates.iter().sum(),
                worst_lag_seconds: s.worst_lag_seconds,
            })
            .collect();
        v1::StatusResponse {
            shards,
            subscribers: connected,
            now_ns: now,
            version: env!("CARGO_PKG_VERSION").into(),
            node_id: self.engine.node_id().unwrap_or(0),
            started_ns: self.started_ns,
            data_dir: self.data_dir.clone(),
            subscriber_list: subscribers,
            history,
            feed_id: match self.engine.feed_id() {
                0 => String::new(),
                id => ringfeed_engine::FeedId(id).to_string(),
            },
            filers: self.filers(),
            object_store: self.object_store.get().map(|s| {
                let mut store = s.snapshot();
                store.uploaded_below = (0..self.engine.shard_count())
                    .map(|id| self.engine.shard(id).uploaded_below())
                    .collect();
                store.held_from = (0..self.engine.shard_count())
                    .map(|id| {
                        let shard = self.engine.shard(id);
                        shard
                            .cold()
                            .and_then(|c| c.held(id))
                            .map_or(shard.uploaded_below(), |held| held.start)
                    })
                    .collect();
                store
            }),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}
