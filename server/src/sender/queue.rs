//! A stream's queued responses as the transport takes them, and the budget
//! of the frames it holds until they are written (`Leases`).

use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use ringfeed_proto::raw::RawFilerResponse;
use ringfeed_proto::tonic::Status;
use ringfeed_proto::RawSubscribeResponse;
use tokio::sync::{mpsc, OwnedSemaphorePermit};

/// A response a stream queues: it becomes a gRPC frame whose bytes keep a
/// lease (its budget) until the transport drops them.
pub(crate) trait Framed: Send + 'static {
    fn into_leased<L: Send + 'static>(self, lease: L) -> Self;
}

impl Framed for RawSubscribeResponse {
    fn into_leased<L: Send + 'static>(self, lease: L) -> Self {
        RawSubscribeResponse::Framed(self.into_frame(lease))
    }
}

impl Framed for RawFilerResponse {
    fn into_leased<L: Send + 'static>(self, lease: L) -> Self {
        RawFilerResponse::Frames(self.into_leased_frames(lease))
    }
}

/// A queued response and the budget it holds until the transport has
/// written it. Boxed: tokio's channel allocates 32 slots at once whatever
/// its capacity, and a slot of the response itself (with the error it once
/// carried) cost every stream 6 KiB (heap profile of 5,000 subscribers).
pub(crate) type Queued<T> = Box<(T, Option<OwnedSemaphorePermit>)>;

/// A stream's queued responses, shared by its sender (which may give them
/// back) and the transport (which takes them).
pub(super) struct Queue<T>(pub(super) std::sync::Mutex<QueueState<T>>);

pub(super) struct QueueState<T> {
    pub(super) rx: mpsc::Receiver<Queued<T>>,
    /// The budget of the responses the transport has taken and not yet
    /// written.
    pub(super) leases: Arc<Leases>,
    /// When the transport last took a response.
    pub(super) last_pull: tokio::time::Instant,
}

impl<T: Framed> Queue<T> {
    fn state(&self) -> std::sync::MutexGuard<'_, QueueState<T>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next response for the transport, as a gRPC frame that holds the
    /// response's budget until the transport drops it: written to the
    /// socket, or the stream gone. The transport's copy is the frame (the
    /// server's codec does not copy it again), so the budget counts it
    /// exactly, and it comes back without any other response being built.
    ///
    /// (It used to come back when the transport took the stream's next
    /// response, which the sender needed budget to build: once every
    /// permit was held so, nobody could build, and a storm of 5,000
    /// subscribers stood still at 2,048 streams, issue 41.)
    pub(super) fn poll_next(
        &self,
        cx: &mut std::task::Context<'_>,
    ) -> Poll<Option<Result<T, Status>>> {
        let mut state = self.state();
        let (response, permit) = match std::task::ready!(state.rx.poll_recv(cx)) {
            Some(queued) => *queued,
            None => return Poll::Ready(None),
        };
        state.last_pull = tokio::time::Instant::now();
        let framed = match permit {
            Some(permit) => response.into_leased(Leases::lease(&state.leases, permit)),
            None => response.into_leased(()),
        };
        Poll::Ready(Some(Ok(framed)))
    }

    /// How long responses have waited with the transport taking none, if
    /// any wait (an idle live subscriber, with nothing queued, is not stalled).
    pub(super) fn stalled_for(&self) -> Option<Duration> {
        let state = self.state();
        (!state.rx.is_empty()).then(|| state.last_pull.elapsed())
    }

    /// Drops everything queued, and the budget of what the transport holds
    /// (its frames stay until written or dropped, no longer counted); the
    /// transport then finds the queue ended.
    pub(super) fn give_back(&self) {
        let mut state = self.state();
        state.rx.close();
        while state.rx.try_recv().is_ok() {}
        state.leases.revoke();
    }
}

/// The budget of a stream's frames that the transport holds: each frame's
/// part comes back when the frame is dropped, or all of it when the stream
/// is given back (its client stopped reading: HTTP/2 may hold its frames
/// for as long as the connection lives).
#[derive(Default)]
pub(super) struct Leases(std::sync::Mutex<Option<OwnedSemaphorePermit>>);

/// One frame's part of its stream's [`Leases`].
struct Lease {
    leases: Arc<Leases>,
    units: usize,
}

impl Leases {
    fn lease(leases: &Arc<Leases>, permit: OwnedSemaphorePermit) -> Lease {
        let units = permit.num_permits();
        let mut held = leases.held();
        match held.as_mut() {
            Some(all) => all.merge(permit),
            None => *held = Some(permit),
        }
        Lease {
            leases: leases.clone(),
            units,
        }
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Option<OwnedSemaphorePermit>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives back the budget of every frame (the stream is over).
    fn revoke(&self) {
        drop(self.held().take());
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let mut held = self.leases.held();
        // Nothing after `revoke`.
        if let Some(all) = held.as_mut() {
            if all.num_permits() <= self.units {
                *held = None;
            } else {
                drop(all.split(self.units));
            }
        }
    }
}
