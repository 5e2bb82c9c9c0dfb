//! At most one log line per kind of warning per interval, with a count of the
//! ones held back. Warnings that repeat while their cause persists (a slow
//! disk, a stalled subscriber) would otherwise flood the log and hide
//! everything else in it.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One kind of warning's limit. Usually a `static`, shared by every shard or
/// connection that can raise it.
#[derive(Debug)]
pub struct RateLimit {
    every: Duration,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    last: Option<Instant>,
    suppressed: u64,
}

impl RateLimit {
    pub const fn new(every: Duration) -> RateLimit {
        RateLimit {
            every,
            state: Mutex::new(Window {
                last: None,
                suppressed: 0,
            }),
        }
    }

    /// `Some(n)` if a line may be written now, `n` being how many were held
    /// back since the last one written; `None` (and one more held back) if not.
    pub fn check(&self) -> Option<u64> {
        self.check_at(Instant::now())
    }

    /// [`RateLimit::check`] at a given instant.
    pub fn check_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match w.last {
            Some(last) if now.saturating_duration_since(last) < self.every => {
                w.suppressed += 1;
                None
            }
            _ => {
                w.last = Some(now);
                Some(std::mem::take(&mut w.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_with_the_count_held_back() {
        let limit = RateLimit::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(limit.check_at(t0), Some(0));
        assert_eq!(limit.check_at(t0 + Duration::from_secs(1)), None);
        assert_eq!(limit.check_at(t0 + Duration::from_millis(9_999)), None);
        assert_eq!(limit.check_at(t0 + Duration::from_secs(10)), Some(2));
        assert_eq!(limit.check_at(t0 + Duration::from_secs(11)), None);
        assert_eq!(limit.check_at(t0 + Duration::from_secs(25)), Some(1));
        assert_eq!(limit.check_at(t0 + Duration::from_secs(36)), Some(0));
    }
}
