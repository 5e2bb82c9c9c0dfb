//! Waking subscribers without making the shard pay for them.
//!
//! A shard's append or flush must cost the same however many subscribers
//! wait on it. So the shard never notifies them itself: it marks itself due
//! (an atomic swap) and, if the engine's relay thread is parked, wakes that
//! one thread. The relay then wakes every subscriber waiting on the due
//! shards. While the relay is busy waking, further batches only set the mark:
//! all batches in between are announced by its next pass, one wake-up per
//! subscriber per pass, however many batches it covers.
//!
//! No shard work happens when no subscriber waits: a subscription counts
//! itself in [`Readers::waiting`] before it listens and looks again, and the
//! shard reads that count after storing its watermarks (both sides sequentially
//! consistent), so either the shard sees the waiter or the waiter sees the
//! watermarks.
//!
//! Without a relay (the deterministic simulator, which has no threads), the
//! shard notifies its readers directly.

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use event_listener::{Event, EventListener, Listener};

use super::ShardShared;

/// What subscriptions of one shard wait on.
#[derive(Debug, Default)]
pub struct Readers {
    /// Notified (by the relay) after the shard's committed or flushed
    /// watermark moved, or it answered a claim, or it latched.
    event: Event,
    /// Subscriptions between "about to listen" and "done waiting".
    waiting: AtomicUsize,
    /// The shard has news its readers were not woken for yet.
    due: AtomicBool,
}

impl Readers {
    /// Counts a subscription of `shard` as waiting and listens, until the
    /// returned waiter drops. Look again for news after this, before waiting.
    pub fn wait(shard: &Arc<ShardShared>) -> Waiter {
        shard.readers.waiting.fetch_add(1, Ordering::SeqCst);
        Waiter {
            listener: Some(shard.readers.event.listen()),
            shard: shard.clone(),
        }
    }

    /// The shard's side, after it stored new watermarks: O(1).
    pub(crate) fn announce(&self, relay: Option<&Relay>) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) == 0 {
            return;
        }
        match relay {
            None => {
                self.event.notify(usize::MAX);
            }
            Some(relay) => {
                if !self.due.swap(true, Ordering::AcqRel) {
                    relay.wake.notify(1);
                }
            }
        }
    }

    /// Wakes every waiting subscription now, from any thread (not through
    /// the relay): for news that is not the shard's, such as a cold store's
    /// fetch being in.
    pub(crate) fn wake_all(&self) {
        fence(Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.event.notify(usize::MAX);
        }
    }

    /// The relay's side: wakes the readers if the shard marked itself due.
    fn relay(&self) -> bool {
        if !self.due.swap(false, Ordering::AcqRel) {
            return false;
        }
        self.event.notify(usize::MAX);
        true
    }
}

/// A subscription waiting on one shard: counted, and listening.
pub struct Waiter {
    /// `None` once waited on.
    listener: Option<EventListener>,
    shard: Arc<ShardShared>,
}

impl Waiter {
    /// Blocks the thread until woken or `timeout` passed.
    pub fn wait_timeout(mut self, timeout: std::time::Duration) {
        if let Some(listener) = self.listener.take() {
            listener.wait_timeout(timeout);
        }
    }
}

impl std::future::Future for Waiter {
    type Output = ();

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        match self.listener.as_mut() {
            Some(listener) => std::pin::Pin::new(listener).poll(cx),
            None => std::task::Poll::Ready(()),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.shard.readers.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The engine's wake relay: one thread that wakes the subscribers of the
/// shards that marked themselves due.
#[derive(Debug, Default)]
pub struct Relay {
    wake: Event,
    stop: AtomicBool,
}

/// The relay thread; stops (and is joined) when dropped.
pub(crate) struct RelayThread {
    relay: Arc<Relay>,
    thread: Option<JoinHandle<()>>,
}

impl RelayThread {
    /// Starts the relay over `shards` (all that were made with `relay`).
    pub fn start(relay: Arc<Relay>, shards: Vec<Arc<ShardShared>>) -> std::io::Result<RelayThread> {
        let r = relay.clone();
        let thread = std::thread::Builder::new()
            .name("ringfeed-wake".into())
            .spawn(move || {
                batch_policy();
                loop {
                    let listener = r.wake.listen();
                    let mut woke = false;
                    for shard in &shards {
                        woke |= shard.readers.relay();
                    }
                    if r.stop.load(Ordering::Acquire) {
                        return;
                    }
                    if !woke {
                        listener.wait();
                    }
                }
            })?;
        Ok(RelayThread {
            relay,
            thread: Some(thread),
        })
    }
}

/// Puts the calling thread under SCHED_BATCH: a fair share of the CPU like
/// any thread, but its wake-ups never preempt a running thread. Without it,
/// on a machine with as many busy threads as cores, the shard that woke the
/// relay was preempted by it at once and paid for the relay's whole pass
/// (shard-wakeups measured ~20 us per batch with even one subscriber).
#[allow(unsafe_code)]
fn batch_policy() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread (pid 0) with a valid param.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_BATCH, &param) };
    if rc != 0 {
        tracing::debug!(
            "the wake relay stays under the default policy: {}",
            std::io::Error::last_os_error()
        );
    }
}

impl Drop for RelayThread {
    fn drop(&mut self) {
        self.relay.stop.store(true, Ordering::Release);
        self.relay.wake.notify(usize::MAX);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
