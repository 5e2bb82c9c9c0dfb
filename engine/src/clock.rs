//! Where stamps come from. Injectable, so tests can step the clock backwards.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub use ringfeed_core::now_ns;

/// Wall-clock time in nanoseconds since the Unix epoch.
pub trait Clock: Send + Sync {
    fn now_ns(&self) -> i64;
}

/// The system's realtime clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ns(&self) -> i64 {
        now_ns()
    }
}

/// A clock that only moves when told to; clones share the time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn new(now_ns: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(now_ns)))
    }

    /// Sets the time, forwards or backwards.
    pub fn set(&self, now_ns: i64) {
        self.0.store(now_ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ns(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
