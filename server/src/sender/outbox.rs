//! The sending side of a stream's responses (node and cluster streams both
//! send through one): its queue, and its final error on a channel of its own.

use std::sync::Arc;

use ringfeed_proto::tonic::Status;
use ringfeed_proto::RawSubscribeResponse;
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio_stream::{Stream, StreamExt};

use super::queue::{Framed, Queue, QueueState, Queued};
use super::stalls::Stalls;
use super::SubscriberLimits;

/// What a subscriber reads: its queued responses, then the final error if
/// the stream failed (docs/design.md 2.10).
pub(crate) type Responses<T = RawSubscribeResponse> =
    std::pin::Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The sending side of a stream's responses: its queue, and its final
/// error on a channel of its own. Node and cluster streams both send
/// through one.
pub(crate) struct Outbox<T = RawSubscribeResponse> {
    tx: mpsc::Sender<Queued<T>>,
    /// The receiving side of `tx`, to give back what a stalled client holds.
    /// Weak: the transport owns the queue, and its dropping it (the client
    /// went away) is what `tx.closed()` reports.
    queue: std::sync::Weak<Queue<T>>,
    /// The stream's final error, delivered after everything queued on `tx`.
    /// A channel of its own (used once) always has room, so a client that
    /// stopped reading can never turn the error into a clean end.
    final_status: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Status>>>,
}

impl<T: Framed> Outbox<T> {
    /// An outbox queueing up to `limits.queue_responses` responses, and what
    /// the client reads from it: the queued responses, then the final error
    /// if the stream failed.
    pub(crate) fn new(limits: &SubscriberLimits) -> (Outbox<T>, Responses<T>) {
        Outbox::with_capacity(limits.queue_responses)
    }

    /// An outbox queueing up to `responses` responses.
    pub(crate) fn with_capacity(responses: usize) -> (Outbox<T>, Responses<T>) {
        let (tx, rx) = mpsc::channel(responses.max(1));
        // A oneshot: an mpsc channel of one allocates 32 slots of Status
        // (5.8 KiB a stream).
        let (final_status, final_rx) = tokio::sync::oneshot::channel();
        let queue = Arc::new(Queue(std::sync::Mutex::new(QueueState {
            rx,
            leases: Default::default(),
            last_pull: tokio::time::Instant::now(),
        })));
        let outbox = Outbox {
            tx,
            queue: Arc::downgrade(&queue),
            final_status: std::sync::Mutex::new(Some(final_status)),
        };
        // Never sent (the outbox dropped): no final error, the stream ends.
        let final_status =
            futures_lite::stream::once_future(final_rx).filter_map(|status| status.ok().map(Err));
        let responses =
            futures_lite::stream::poll_fn(move |cx| queue.poll_next(cx)).chain(final_status);
        (outbox, Box::pin(responses))
    }

    /// Queues `response` with the budget it holds until the transport takes
    /// the next, waiting while the queue is full; `Err` once the client is
    /// gone.
    pub(crate) async fn send(
        &self,
        response: T,
        permit: Option<OwnedSemaphorePermit>,
    ) -> Result<(), Gone> {
        self.tx
            .send(Box::new((response, permit)))
            .await
            .map_err(|_| Gone)
    }

    /// Completes when the client has gone away.
    pub(crate) async fn closed(&self) {
        self.tx.closed().await
    }

    /// Ends the stream with `status` after everything queued. Never waits,
    /// never through the (possibly full) response queue: a status that
    /// could not be queued was once dropped, and the stream then ended OK,
    /// which a client takes for "until reached".
    pub(crate) fn fail(&self, status: Status) {
        let sender = self
            .final_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(sender) = sender {
            let _ = sender.send(status);
        }
    }

    /// Watches for a client that stopped reading (see [`Stalls`]).
    pub(crate) fn stalls(&self) -> Stalls<T> {
        Stalls {
            queue: self.queue.clone(),
        }
    }
}

/// The client went away.
#[derive(Debug)]
pub(crate) struct Gone;
