//! A fixed-bucket latency histogram of relaxed atomics, cheap enough to record
//! on the flush path and read from any thread (the metrics endpoint) without a
//! lock. The bounds are fixed so recording is a short scan and one add; a
//! reader may see a count and a sum from slightly different instants, which a
//! scrape tolerates.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in microseconds: 50 µs (a fast NVMe sync) to
/// 10 s (a disk that is failing). Slower observations land in the last slot.
const BOUNDS_US: [u64; 16] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 10_000_000,
];

/// Observations per bucket and their sum.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// `counts[i]` holds observations in `(BOUNDS_US[i - 1], BOUNDS_US[i]]`; the
    /// last slot holds those above every bound.
    counts: [AtomicU64; BOUNDS_US.len() + 1],
    sum_ns: AtomicU64,
}

/// A reading of a [`LatencyHistogram`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencySnapshot {
    /// (upper bound in seconds, observations in that bucket alone), ascending;
    /// the last bound is infinite.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum_seconds: f64,
}

impl LatencyHistogram {
    pub fn record(&self, latency: Duration) {
        let us = latency.as_micros();
        let slot = BOUNDS_US
            .iter()
            .position(|&bound| us <= u128::from(bound))
            .unwrap_or(BOUNDS_US.len());
        self.counts[slot].fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(latency.as_nanos() as u64, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> LatencySnapshot {
        let bounds = BOUNDS_US
            .iter()
            .map(|&us| us as f64 / 1e6)
            .chain([f64::INFINITY]);
        let buckets: Vec<(f64, u64)> = bounds
            .zip(&self.counts)
            .map(|(bound, n)| (bound, n.load(Ordering::Relaxed)))
            .collect();
        LatencySnapshot {
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
            sum_seconds: self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

impl LatencySnapshot {
    /// What was observed between `earlier` (a reading of the same histogram)
    /// and this reading.
    pub fn since(&self, earlier: &LatencySnapshot) -> LatencySnapshot {
        let buckets: Vec<(f64, u64)> = self
            .buckets
            .iter()
            .zip(&earlier.buckets)
            .map(|(&(bound, n), &(_, m))| (bound, n.saturating_sub(m)))
            .collect();
        LatencySnapshot {
            count: buckets.iter().map(|(_, n)| n).sum(),
            buckets,
            sum_seconds: (self.sum_seconds - earlier.sum_seconds).max(0.0),
        }
    }

    /// The upper bound, in seconds, of the bucket holding the `q` quantile
    /// (0 < q <= 1); 0 with no observation. Observations above every bound
    /// report the largest bound (10 s).
    pub fn quantile_bound(&self, q: f64) -> f64 {
        if self.count == 0 {
            return 0.0;
        }
        let rank = ((self.count as f64 * q).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for &(bound, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return if bound.is_finite() {
                    bound
                } else {
                    BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1e6
                };
            }
        }
        BOUNDS_US[BOUNDS_US.len() - 1] as f64 / 1e6
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn observations_land_in_their_bucket() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(50));
        h.record(Duration::from_micros(51));
        h.record(Duration::from_secs(60));
        let s = h.snapshot();
        assert_eq!(s.count, 3);
        assert_eq!(s.buckets[0], (50e-6, 1));
        assert_eq!(s.buckets[1], (100e-6, 1));
        assert_eq!(*s.buckets.last().unwrap(), (f64::INFINITY, 1));
        assert!(
            (s.sum_seconds - 60.000101).abs() < 1e-9,
            "{}",
            s.sum_seconds
        );
    }

    #[test]
    fn quantiles_of_what_was_observed_between_readings() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(40));
        let before = h.snapshot();
        for _ in 0..98 {
            h.record(Duration::from_micros(700));
        }
        h.record(Duration::from_millis(20));
        h.record(Duration::from_secs(30));
        let window = h.snapshot().since(&before);
        assert_eq!(window.count, 100);
        assert_eq!(window.quantile_bound(0.5), 0.001);
        assert_eq!(window.quantile_bound(0.99), 0.025);
        assert_eq!(window.quantile_bound(1.0), 10.0);
        assert_eq!(before.since(&before).quantile_bound(0.5), 0.0);
    }
}
