//! Waiting on a subscription: async and blocking waits for its next event,
//! and the listeners on its shards' readers that wake them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll as TaskPoll};
use std::time::{Duration, Instant};

use super::{Delivered, Step, SubscribeError, Subscription};
use crate::shard::{Readers, Waiter};

impl Subscription {
    /// The next event, waiting for one; `None` once `until_ns` is reached.
    pub async fn next(&mut self) -> Result<Option<Delivered>, SubscribeError> {
        loop {
            match self.poll()? {
                Step::Event(event) => return Ok(Some(event)),
                Step::End => return Ok(None),
                Step::Pending => {}
            }
            // Listen, then look again, so a wake-up between the two is not lost.
            let listeners = self.listen();
            match self.poll()? {
                Step::Event(event) => return Ok(Some(event)),
                Step::End => return Ok(None),
                Step::Pending => AnyListener(listeners).await,
            }
        }
    }

    /// [`Subscription::next`] for threads: waits at most `timeout`, then
    /// returns [`Step::Pending`].
    pub fn next_blocking(&mut self, timeout: Duration) -> Result<Step, SubscribeError> {
        match self.poll()? {
            Step::Pending => {}
            step => return Ok(step),
        }
        let deadline = Instant::now() + timeout;
        loop {
            match self.poll()? {
                Step::Pending => {}
                step => return Ok(step),
            }
            let listeners = self.listen();
            match self.poll()? {
                Step::Pending => {}
                step => return Ok(step),
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Step::Pending);
            }
            // A thread can block on one listener at a time: wait on the first
            // in short slices, so wake-ups of the others are seen promptly too.
            let slice = (deadline - now).min(Duration::from_millis(1));
            if let Some(first) = listeners.into_iter().next() {
                first.wait_timeout(slice);
            }
        }
    }

    /// Completes when any of the subscription's shards has news (a batch, a
    /// flush, a claim answered): poll after creating it, then wait on it, and
    /// no news is missed. It owns its listeners (borrows nothing).
    pub fn changed(&self) -> impl Future<Output = ()> + Send + 'static {
        AnyListener(self.listen())
    }

    /// Asks every shard to claim its stamps up to `ts` (answered at once by an
    /// idle shard), so the subscription's watermark can pass `ts`; the
    /// answers wake [`Subscription::changed`].
    pub fn request_claims(&self, ts: i64) {
        for lane in &self.lanes {
            lane.shard().request_claim(ts);
        }
    }

    /// Waits on every shard's readers: one listener per shard, woken by the
    /// engine's relay once per batch or flush of that shard (never by the shard).
    fn listen(&self) -> Vec<Waiter> {
        self.lanes
            .iter()
            .map(|l| Readers::wait(l.shard()))
            .collect()
    }
}

/// Completes when any of the waiters is woken.
struct AnyListener(Vec<Waiter>);

impl Future for AnyListener {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> TaskPoll<()> {
        for waiter in self.0.iter_mut() {
            if Pin::new(waiter).poll(cx).is_ready() {
                return TaskPoll::Ready(());
            }
        }
        TaskPoll::Pending
    }
}
