//! A client that stopped reading: noticed on its stream's queue, and what
//! it holds given back (`stall_timeout`).

use std::time::Duration;

use ringfeed_proto::tonic::Status;

use super::queue::{Framed, Queue};
use crate::metrics::ServerMetrics;

/// Watches a stream's queue for a client that stopped reading, and gives
/// back what it holds.
pub(crate) struct Stalls<T> {
    pub(super) queue: std::sync::Weak<Queue<T>>,
}

impl<T: Framed> Stalls<T> {
    /// Completes once responses have waited `timeout` with the transport
    /// taking none: the client stopped reading. Checked four times per
    /// timeout; never completes once the client is gone.
    ///
    /// Counted from the later of the transport's last take and the first
    /// check that found responses waiting: after a quiet spell longer than
    /// `timeout`, a response queued just before a check is not a stall.
    pub(crate) async fn stalled(&self, timeout: Duration) -> Duration {
        let mut waiting_since = None;
        loop {
            tokio::time::sleep((timeout / 4).max(Duration::from_millis(10))).await;
            let Some(since_pull) = self.queue.upgrade().and_then(|q| q.stalled_for()) else {
                waiting_since = None;
                continue;
            };
            let seen = *waiting_since.get_or_insert_with(tokio::time::Instant::now);
            let stalled = since_pull.min(seen.elapsed());
            if stalled >= timeout {
                return stalled;
            }
        }
    }

    /// The client (`who`: its name and address) took nothing for `stalled`: its queued responses and
    /// their budget are dropped, and the stream is to end with the
    /// UNAVAILABLE returned (after what the transport already holds), which
    /// the client library takes for "resume from the cursor".
    pub(crate) fn give_back(
        &self,
        stalled: Duration,
        who: &str,
        metrics: &ServerMetrics,
    ) -> Status {
        if let Some(queue) = self.queue.upgrade() {
            queue.give_back();
        }
        metrics.stalled_given_back();
        tracing::warn!(
            "subscriber {who} read nothing for {} s (stall_timeout_secs): its queued \
             responses and their budget were given back and its stream ends with UNAVAILABLE; \
             its client resumes from its cursor when it reads again",
            stalled.as_secs()
        );
        Status::unavailable(format!(
            "this subscriber read nothing for {} s: its place was given back; resume from the \
             last cursor received",
            stalled.as_secs()
        ))
    }
}
