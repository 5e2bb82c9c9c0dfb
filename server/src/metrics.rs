//! The Prometheus metrics (`serve --metrics-listen ADDR`, `GET /metrics`,
//! served by [`crate::http`]) and the server-level counters behind them.
//!
//! Shard gauges (watermarks, memory, latch) and the process's RSS and open
//! fds are read when a scrape comes, so the append path pays nothing for
//! them; the shard counters and histograms are the engine's relaxed atomics
//! ([`ringfeed_engine::ShardStats`]). Every name starts with `ringfeed_`, and
//! the only label is `shard`, bounded by the shard count: nothing a client
//! sends (names, peers, paths) ever becomes a label, so the number of series
//! is fixed by the configuration.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use ringfeed_engine::{Engine, LatencySnapshot, SubscribeError};

use crate::append_budget::AppendBudget;
use crate::board::StatusBoard;

/// Server-level metrics, shared by every subscription task (`Arc`). Each
/// update is one atomic add, except the lag histogram's short lock per
/// response sent (not per event).
#[derive(Debug)]
pub struct ServerMetrics {
    /// Subscription streams open now: +1 when a stream is registered, -1 when
    /// its task ends, however it ends.
    subscribers_connected: Gauge,
    /// Streams ended because their client connected again (same name and id,
    /// newer epoch): counted where the registry supersedes the older stream.
    subscribers_superseded: Counter,
    /// Subscribe calls refused with ALREADY_EXISTS: the same client (name
    /// and id) is connected with an equal or higher epoch.
    subscribers_refused: Counter,
    /// Subscriptions answered OUT_OF_RANGE (a cursor or `since_ns` below the
    /// oldest retained event), at open or mid-stream.
    subscribers_out_of_range: Counter,
    subscribers_stalled_given_back: Counter,
    /// Subscriptions reading their backlog from segments now, and those
    /// waiting to be admitted to: moved by the backlog admission gate.
    backlog_admitted: Gauge,
    backlog_waiting: Gauge,
    events_sent: Counter,
    /// Encoded bytes of the event responses sent.
    bytes_sent: Counter,
    heartbeats_sent: Counter,
    /// Chunk-mode responses: stored records shipped verbatim.
    chunks_sent: Counter,
    /// The object store (issue 40): segments and bytes uploaded, failed
    /// upload passes, and what waits (sealed segments not uploaded yet, and
    /// how long ago the oldest of them was sealed).
    bucket_segments_uploaded: Counter,
    bucket_bytes_uploaded: Counter,
    bucket_upload_errors: Counter,
    bucket_upload_lag_segments: Gauge,
    bucket_upload_lag_bytes: Gauge,
    bucket_upload_lag_seconds: Gauge,
    bucket_fetches: Counter,
    bucket_segments_expired: Counter,
    bucket_bytes_fetched: Counter,
    bucket_read_errors: Counter,
    bucket_cache_hits: Counter,
    bucket_cache_misses: Counter,
    bucket_cache_bytes: Gauge,
    /// Encode once for all: live responses encoded once and kept for the
    /// streams of the same shape, and responses queued from such an encoding.
    shared_responses_built: Counter,
    shared_responses_reused: Counter,
    /// How far behind the newest event a subscriber was when a response went
    /// out: wall clock minus the subscription's merged watermark.
    lag_at_send: Histogram,
    /// Connections to the gRPC port open now (`crate::connections`), those
    /// closed before they completed their HTTP/2 handshake (silent past the
    /// handshake timeout, or made room for at the cap), and those refused at
    /// the cap.
    connections_open: Gauge,
    connections_closed_silent: Counter,
    connections_refused: Counter,
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            subscribers_connected: Gauge::default(),
            subscribers_superseded: Counter::default(),
            subscribers_refused: Counter::default(),
            subscribers_out_of_range: Counter::default(),
            subscribers_stalled_given_back: Counter::default(),
            backlog_admitted: Gauge::default(),
            backlog_waiting: Gauge::default(),
            events_sent: Counter::default(),
            bytes_sent: Counter::default(),
            chunks_sent: Counter::default(),
            bucket_segments_uploaded: Counter::default(),
            bucket_bytes_uploaded: Counter::default(),
            bucket_upload_errors: Counter::default(),
            bucket_upload_lag_segments: Gauge::default(),
            bucket_upload_lag_bytes: Gauge::default(),
            bucket_upload_lag_seconds: Gauge::default(),
            bucket_fetches: Counter::default(),
            bucket_segments_expired: Counter::default(),
            bucket_bytes_fetched: Counter::default(),
            bucket_read_errors: Counter::default(),
            bucket_cache_hits: Counter::default(),
            bucket_cache_misses: Counter::default(),
            bucket_cache_bytes: Gauge::default(),
            heartbeats_sent: Counter::default(),
            shared_responses_built: Counter::default(),
            shared_responses_reused: Counter::default(),
            // 1 ms to about 17 min: live tails sit at the bottom, catch-ups climb.
            lag_at_send: Histogram::new(exponential_buckets(0.001, 4.0, 11)),
            connections_open: Gauge::default(),
            connections_closed_silent: Counter::default(),
            connections_refused: Counter::default(),
        }
    }
}

impl ServerMetrics {
    pub fn subscriber_connected(&self) {
        self.subscribers_connected.inc();
    }

    pub fn subscriber_disconnected(&self) {
        self.subscribers_connected.dec();
    }

    pub fn subscriber_superseded(&self) {
        self.subscribers_superseded.inc();
    }

    pub fn subscriber_refused(&self) {
        self.subscribers_refused.inc();
    }

    /// Counts what a failed subscription tells about the server's state;
    /// only a cursor below retention is counted today.
    pub fn subscribe_failed(&self, error: &SubscribeError) {
        if let SubscribeError::BelowRetention { .. } = error {
            self.out_of_range();
        }
    }

    /// A stream ended with OUT_OF_RANGE (retention overtook it).
    pub fn out_of_range(&self) {
        self.subscribers_out_of_range.inc();
    }

    pub fn backlog_reader_admitted(&self) {
        self.backlog_admitted.inc();
    }

    pub fn backlog_reader_finished(&self) {
        self.backlog_admitted.dec();
    }

    pub fn backlog_reader_waiting(&self) {
        self.backlog_waiting.inc();
    }

    pub fn backlog_reader_stopped_waiting(&self) {
        self.backlog_waiting.dec();
    }

    /// One response of `events` events, `bytes` encoded bytes, sent while the
    /// subscriber was `lag_seconds` behind.
    pub fn events_sent(&self, events: usize, bytes: usize, lag_seconds: f64) {
        self.events_sent.inc_by(events as u64);
        self.bytes_sent.inc_by(bytes as u64);
        self.lag_at_send.observe(lag_seconds);
    }

    /// One chunk-mode response (its events and bytes also go to
    /// [`ServerMetrics::events_sent`]).
    pub fn chunk_sent(&self) {
        self.chunks_sent.inc();
    }

    /// A segment of `bytes` is in the bucket and its manifest.
    pub fn bucket_segment_uploaded(&self, bytes: u64) {
        self.bucket_segments_uploaded.inc();
        self.bucket_bytes_uploaded.inc_by(bytes);
    }

    /// An upload pass over a shard failed (it is retried with backoff).
    pub fn bucket_upload_failed(&self) {
        self.bucket_upload_errors.inc();
    }

    /// Sealed segments not in the bucket yet, their bytes, and the age of
    /// the oldest.
    pub fn set_bucket_upload_lag(&self, segments: u64, bytes: u64, oldest_seconds: u64) {
        self.bucket_upload_lag_segments.set(segments as i64);
        self.bucket_upload_lag_bytes.set(bytes as i64);
        self.bucket_upload_lag_seconds.set(oldest_seconds as i64);
    }

    /// Bucket retention removed a segment from the bucket.
    pub fn bucket_segment_expired(&self) {
        self.bucket_segments_expired.inc();
    }

    /// A fetch from the bucket (a chunk index or a piece of a segment) got
    /// `bytes`.
    pub fn bucket_fetched(&self, bytes: u64) {
        self.bucket_fetches.inc();
        self.bucket_bytes_fetched.inc_by(bytes);
    }

    /// A fetch from the bucket failed or got bytes that failed their checks.
    pub fn bucket_read_failed(&self) {
        self.bucket_read_errors.inc();
    }

    /// A reader below the local log found its chunk in the cache.
    pub fn bucket_cache_hit(&self) {
        self.bucket_cache_hits.inc();
    }

    /// A reader below the local log started a fetch.
    pub fn bucket_cache_miss(&self) {
        self.bucket_cache_misses.inc();
    }

    /// Bytes of chunks the bucket cache holds.
    pub fn set_bucket_cache_bytes(&self, bytes: u64) {
        self.bucket_cache_bytes.set(bytes as i64);
    }

    pub fn stalled_given_back(&self) {
        self.subscribers_stalled_given_back.inc();
    }

    pub fn heartbeat_sent(&self) {
        self.heartbeats_sent.inc();
    }

    pub fn connection_opened(&self) {
        self.connections_open.inc();
    }

    pub fn connection_closed(&self) {
        self.connections_open.dec();
    }

    pub fn connection_closed_silent(&self) {
        self.connections_closed_silent.inc();
    }

    pub fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    pub fn shared_response_built(&self) {
        self.shared_responses_built.inc();
    }

    pub fn shared_response_reused(&self) {
        self.shared_responses_reused.inc();
    }

    /// Responses queued from another stream's encoding so far.
    pub fn shared_responses_reused(&self) -> u64 {
        self.shared_responses_reused.get()
    }

    fn register(&self, registry: &mut Registry) {
        let r = registry;
        r.register(
            "subscribers_connected",
            "Subscription streams open now",
            self.subscribers_connected.clone(),
        );
        r.register(
            "subscribers_superseded",
            "Streams ended because their client reconnected with a newer epoch",
            self.subscribers_superseded.clone(),
        );
        r.register(
            "subscribers_refused",
            "Subscribe calls refused because the server was at its subscriber limit",
            self.subscribers_refused.clone(),
        );
        r.register(
            "subscribers_out_of_range",
            "Subscriptions answered OUT_OF_RANGE: a start below the oldest retained event",
            self.subscribers_out_of_range.clone(),
        );
        r.register(
            "subscribers_stalled_given_back",
            "Streams ended UNAVAILABLE because their client read nothing for stall_timeout_secs",
            self.subscribers_stalled_given_back.clone(),
        );
        r.register(
            "connections_open",
            "Connections to the gRPC port open now",
            self.connections_open.clone(),
        );
        r.register(
            "connections_closed_silent",
            "Connections closed before they completed their HTTP/2 handshake: silent past the handshake timeout, or closed to make room at max_connections",
            self.connections_closed_silent.clone(),
        );
        r.register(
            "connections_refused",
            "Connections refused at max_connections, every open one having completed its handshake",
            self.connections_refused.clone(),
        );
        r.register(
            "shared_responses_built",
            "Live responses encoded once and kept for every stream of the same filter, order and batching",
            self.shared_responses_built.clone(),
        );
        r.register(
            "shared_responses_reused",
            "Responses queued from an encoding another stream built (nothing read or encoded again)",
            self.shared_responses_reused.clone(),
        );
        r.register(
            "backlog_readers_admitted",
            "Subscriptions reading their backlog from segments now",
            self.backlog_admitted.clone(),
        );
        r.register(
            "backlog_readers_waiting",
            "Subscriptions waiting to be admitted to read their backlog",
            self.backlog_waiting.clone(),
        );
        r.register(
            "subscriber_events_sent",
            "Events sent to subscribers",
            self.events_sent.clone(),
        );
        r.register(
            "subscriber_bytes_sent",
            "Encoded bytes of event responses sent to subscribers",
            self.bytes_sent.clone(),
        );
        r.register(
            "object_store_segments_uploaded",
            "Sealed segments uploaded to the object store and named in its manifest",
            self.bucket_segments_uploaded.clone(),
        );
        r.register(
            "object_store_bytes_uploaded",
            "Bytes of sealed segments uploaded to the object store",
            self.bucket_bytes_uploaded.clone(),
        );
        r.register(
            "object_store_upload_errors",
            "Failed upload passes over a shard (retried with backoff; the log says why)",
            self.bucket_upload_errors.clone(),
        );
        r.register(
            "object_store_upload_lag_segments",
            "Sealed segments not in the object store yet",
            self.bucket_upload_lag_segments.clone(),
        );
        r.register(
            "object_store_upload_lag_bytes",
            "Bytes of the sealed segments not in the object store yet",
            self.bucket_upload_lag_bytes.clone(),
        );
        r.register(
            "object_store_upload_lag_seconds",
            "How long ago the oldest sealed segment not in the object store yet was sealed",
            self.bucket_upload_lag_seconds.clone(),
        );
        r.register(
            "object_store_segments_expired",
            "Segments bucket retention removed from the object store",
            self.bucket_segments_expired.clone(),
        );
        r.register(
            "object_store_fetches",
            "Fetches from the object store for readers below the local log",
            self.bucket_fetches.clone(),
        );
        r.register(
            "object_store_bytes_fetched",
            "Bytes fetched from the object store for readers below the local log",
            self.bucket_bytes_fetched.clone(),
        );
        r.register(
            "object_store_read_errors",
            "Fetches from the object store that failed or failed their checks (retried)",
            self.bucket_read_errors.clone(),
        );
        r.register(
            "object_store_cache_hits",
            "Chunks below the local log found in the object-store cache",
            self.bucket_cache_hits.clone(),
        );
        r.register(
            "object_store_cache_misses",
            "Chunks below the local log not in the object-store cache (a fetch started)",
            self.bucket_cache_misses.clone(),
        );
        r.register(
            "object_store_cache_bytes",
            "Bytes of chunks in the object-store cache",
            self.bucket_cache_bytes.clone(),
        );
        r.register(
            "subscriber_chunks_sent",
            "Chunk-mode responses sent to subscribers (stored records, verbatim)",
            self.chunks_sent.clone(),
        );
        r.register(
            "heartbeats_sent",
            "Heartbeats sent to subscribers",
            self.heartbeats_sent.clone(),
        );
        r.register(
            "subscriber_lag_seconds",
            "How far behind the newest event a subscriber was when a response went out",
            self.lag_at_send.clone(),
        );
    }
}

/// What a scrape encodes: the server metrics plus collectors that read the
/// engine, the subscriber registry and the process when the scrape comes.
pub struct Exporter {
    registry: Registry,
}

impl Exporter {
    pub fn new(engine: Arc<Engine>, metrics: &ServerMetrics, board: Arc<StatusBoard>) -> Exporter {
        let mut registry = Registry::with_prefix("ringfeed");
        metrics.register(&mut registry);
        registry.register_collector(Box::new(Shards(engine)));
        registry.register_collector(Box::new(SubscriberLag(board)));
        registry.register_collector(Box::new(ProcessStats));
        Exporter { registry }
    }

    /// Adds the followed filers' series (`serve --follow-filer`).
    pub fn with_filers(mut self, filers: Vec<Arc<crate::seaweedfs::FilerProgress>>) -> Exporter {
        if !filers.is_empty() {
            self.registry
                .register_collector(Box::new(crate::seaweedfs::FilerMetrics(filers)));
        }
        self
    }

    /// Adds the append budget's readings: bytes taken now, the whole budget,
    /// and the messages it refused (docs/design.md 2.11).
    pub fn with_append_budget(mut self, budget: Arc<AppendBudget>) -> Exporter {
        self.registry
            .register_collector(Box::new(AppendBudgetReadings(budget)));
        self
    }

    /// The metrics in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail, and every collector here is infallible.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry);
        text
    }
}

/// Per-shard metrics, read from the engine at scrape time.
struct Shards(Arc<Engine>);

impl std::fmt::Debug for Shards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shards")
    }
}

/// One shard's values at one scrape.
struct ShardReading {
    shard: u32,
    committed: u64,
    flushed: u64,
    evicted: u64,
    retained: u64,
    unflushed_bytes: u64,
    ring_bytes: u64,
    latched: bool,
    disk_full: bool,
    append_events: u64,
    append_bytes: u64,
    flushed_bytes: u64,
    io_errors: u64,
    flush: LatencySnapshot,
    fsync: LatencySnapshot,
}

impl Shards {
    fn read(&self) -> Vec<ShardReading> {
        (0..self.0.shard_count())
            .map(|id| {
                let shard = self.0.shard(id);
                let w = shard.watermarks.snapshot();
                let stats = shard.stats();
                ShardReading {
                    shard: id,
                    committed: w.committed_next,
                    flushed: w.flushed_next,
                    evicted: w.evicted_below,
                    retained: w.retained_from,
                    unflushed_bytes: shard.unflushed_bytes() as u64,
                    ring_bytes: shard.ring_bytes() as u64,
                    latched: shard.latched().is_some(),
                    disk_full: shard.no_space().is_some(),
                    append_events: stats.appended.load(Ordering::Relaxed),
                    append_bytes: stats.appended_bytes.load(Ordering::Relaxed),
                    flushed_bytes: stats.bytes.load(Ordering::Relaxed),
                    io_errors: stats.io_errors.load(Ordering::Relaxed),
                    flush: stats.flush_latency.snapshot(),
                    fsync: stats.fsync_latency.snapshot(),
                }
            })
            .collect()
    }
}

/// Reads one value of a shard's reading.
type Read = fn(&ShardReading) -> u64;
type ReadHistogram = fn(&ShardReading) -> &LatencySnapshot;

const SHARD_GAUGES: [(&str, &str, Read); 8] = [
    (
        "shard_committed_offset",
        "Next offset to be committed (events appended and visible so far).",
        |r| r.committed,
    ),
    (
        "shard_flushed_offset",
        "Every event below this offset is durable.",
        |r| r.flushed,
    ),
    (
        "shard_evicted_offset",
        "The ring no longer holds events below this offset.",
        |r| r.evicted,
    ),
    (
        "shard_retained_offset",
        "Oldest offset still on disk.",
        |r| r.retained,
    ),
    (
        "shard_unflushed_bytes",
        "Record bytes committed but not yet durable.",
        |r| r.unflushed_bytes,
    ),
    ("shard_ring_bytes", "Window memory the ring holds.", |r| {
        r.ring_bytes
    }),
    (
        "shard_latched",
        "1 if the shard stopped on an I/O error and acknowledges nothing more.",
        |r| u64::from(r.latched),
    ),
    (
        "shard_disk_full",
        "1 while the shard refuses appends because its next segment does not fit on the disk.",
        |r| u64::from(r.disk_full),
    ),
];

const SHARD_COUNTERS: [(&str, &str, Read); 4] = [
    (
        "shard_append_events",
        "Events appended (stamped and made visible).",
        |r| r.append_events,
    ),
    ("shard_append_bytes", "Framed record bytes appended.", |r| {
        r.append_bytes
    }),
    ("shard_flushed_bytes", "Record bytes made durable.", |r| {
        r.flushed_bytes
    }),
    (
        "shard_io_errors",
        "Failed writes and syncs (each one latches the shard).",
        |r| r.io_errors,
    ),
];

const SHARD_HISTOGRAMS: [(&str, &str, ReadHistogram); 2] = [
    (
        "shard_flush_seconds",
        "Flush rounds: chunk writes plus the fdatasync after them.",
        |r| &r.flush,
    ),
    (
        "shard_fsync_seconds",
        "The fdatasync ending each flush round.",
        |r| &r.fsync,
    ),
];

impl Collector for Shards {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let readings = self.read();
        for (name, help, read) in SHARD_GAUGES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for r in &readings {
                let value = ConstGauge::new(read(r) as i64);
                value.encode(metric.encode_family(&[("shard", r.shard)])?)?;
            }
        }
        for (name, help, read) in SHARD_COUNTERS {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for r in &readings {
                ConstCounter::new(read(r)).encode(metric.encode_family(&[("shard", r.shard)])?)?;
            }
        }
        for (name, help, read) in SHARD_HISTOGRAMS {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Histogram)?;
            for r in &readings {
                let h = read(r);
                metric
                    .encode_family(&[("shard", r.shard)])?
                    .encode_histogram::<NoLabelSet>(h.sum_seconds, h.count, &h.buckets, None)?;
            }
        }
        Ok(())
    }
}

/// The largest lag among connected subscribers, as the status board lists them.
struct SubscriberLag(Arc<StatusBoard>);

impl std::fmt::Debug for SubscriberLag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubscriberLag")
    }
}

impl Collector for SubscriberLag {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let lag = ConstGauge::new(self.0.worst_lag_seconds());
        lag.encode(encoder.encode_descriptor(
            "subscriber_lag_max_seconds",
            "Largest lag among connected subscribers now (0 if none).",
            None,
            lag.metric_type(),
        )?)
    }
}

/// The append budget, read when a scrape comes.
#[derive(Debug)]
struct AppendBudgetReadings(Arc<AppendBudget>);

impl Collector for AppendBudgetReadings {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let budget = &self.0;
        let capacity = budget.capacity_bytes();
        let in_use = ConstGauge::new(capacity.saturating_sub(budget.available_bytes()) as i64);
        in_use.encode(encoder.encode_descriptor(
            "append_budget_in_use_bytes",
            "Bytes of append requests the server holds now, of its append budget",
            None,
            in_use.metric_type(),
        )?)?;
        let whole = ConstGauge::new(capacity as i64);
        whole.encode(encoder.encode_descriptor(
            "append_budget_bytes",
            "The server's append budget (config append_budget_bytes)",
            None,
            whole.metric_type(),
        )?)?;
        let refused = ConstCounter::new(budget.refused());
        refused.encode(encoder.encode_descriptor(
            "appends_refused_budget",
            "Append messages refused RESOURCE_EXHAUSTED because the append budget stayed full for append_timeout_ms",
            None,
            refused.metric_type(),
        )?)?;
        Ok(())
    }
}

/// The process's resident memory and open file descriptors, from /proc.
#[derive(Debug)]
struct ProcessStats;

impl Collector for ProcessStats {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(bytes) = resident_bytes() {
            let rss = ConstGauge::new(bytes as i64);
            rss.encode(encoder.encode_descriptor(
                "process_resident_memory_bytes",
                "Resident memory of the server process.",
                None,
                rss.metric_type(),
            )?)?;
        }
        if let Ok(fds) = std::fs::read_dir("/proc/self/fd") {
            let fds = ConstGauge::new(fds.count() as i64);
            fds.encode(encoder.encode_descriptor(
                "process_open_fds",
                "Open file descriptors of the server process.",
                None,
                fds.metric_type(),
            )?)?;
        }
        Ok(())
    }
}

/// VmRSS from /proc/self/status (reported in kB), so no page size is needed.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
