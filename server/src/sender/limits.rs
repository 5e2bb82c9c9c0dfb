//! How subscription streams are paced, batched and admitted (the limits an
//! operator sets), and the heartbeat interval a client asks for.

use std::time::Duration;

/// How subscription streams are paced, batched and admitted.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscriberLimits {
    /// Most events and bytes of one batch response.
    pub batch_max_events: usize,
    pub batch_max_bytes: usize,
    /// Responses queued per subscriber ahead of the gRPC stream.
    pub queue_responses: usize,
    /// Bytes of responses built and not yet taken past by the transport
    /// (queued, or encoded in tonic's and hyper's buffers), all subscribers
    /// together.
    pub response_budget_bytes: usize,
    /// Subscribers that may read backlog at the same time; others wait.
    pub backlog_readers: usize,
    /// Bytes the filters of all connected subscribers (the filer API's
    /// too) may hold together (each at most `MAX_FILTER_PATH_BYTES` of
    /// paths); a subscriber past it is refused with RESOURCE_EXHAUSTED.
    pub filter_budget_bytes: usize,
    /// Most record bytes of one chunk response (at least one record).
    pub chunk_max_bytes: usize,
    /// Bytes each stream may hold encoded in the HTTP/2 layer and not yet
    /// written to its connection (hyper's per-stream send buffer).
    pub send_buffer_bytes: usize,
    /// A subscriber that has taken nothing for this long gives its place back:
    /// its queued responses and their budget are dropped and its stream
    /// ends with UNAVAILABLE (after what its transport already holds); its
    /// client resumes from its cursor, exactly.
    pub stall_timeout: Duration,
    /// HTTP/2 keepalive: a connection silent this long gets a ping, and
    /// is closed if the answer takes longer than `keepalive_timeout`.
    pub keepalive_interval: Duration,
    pub keepalive_timeout: Duration,
}

impl Default for SubscriberLimits {
    fn default() -> Self {
        SubscriberLimits {
            batch_max_events: 512,
            batch_max_bytes: 64 << 10,
            queue_responses: 8,
            response_budget_bytes: 128 << 20,
            backlog_readers: 64,
            filter_budget_bytes: 64 << 20,
            // A stored chunk that fits goes whole, with its stored checksum
            // and no walk of its records (`RawChunk::records_crc`); its
            // records are a view of the segment mapping, never copied into
            // the frame. 1 MiB (one default window) halved the server's CPU
            // for one subscriber catching up, but each response reserves
            // its size of the response budget before it is read, and a
            // storm of 2,000 resuming subscribers then waited: first event
            // p99 9.6 s and all caught up in 10.1 s, against 2.4-2.7 s and
            // 7.0-7.9 s at 64 KiB (`storm --subscribers 2000`).
            chunk_max_bytes: 64 << 10,
            send_buffer_bytes: 64 << 10,
            stall_timeout: Duration::from_secs(60),
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
        }
    }
}

/// Default and smallest heartbeat interval.
const HEARTBEAT_DEFAULT: Duration = Duration::from_secs(1);
const HEARTBEAT_MIN: Duration = Duration::from_millis(10);

/// How often a subscription asked for heartbeats gets one while quiet.
pub(crate) fn heartbeat_interval(r: &ringfeed_proto::v1::SubscribeRequest) -> Option<Duration> {
    r.heartbeats.then(|| {
        match r.heartbeat_interval_ms {
            0 => HEARTBEAT_DEFAULT,
            ms => Duration::from_millis(u64::from(ms)),
        }
        .max(HEARTBEAT_MIN)
    })
}
