//! Reconnecting: the delays between tries (gRPC's connection backoff), and
//! which failures a reconnect can fix.

use std::time::Duration;

use ringfeed_proto::tonic::{Code, Status};

/// Reconnect delays: gRPC's connection-backoff defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Backoff {
    pub initial: Duration,
    pub multiplier: f64,
    /// Each delay is randomised by +/- this fraction.
    pub jitter: f64,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_secs(1),
            multiplier: 1.6,
            jitter: 0.2,
            max: Duration::from_secs(120),
        }
    }
}

impl Backoff {
    /// The delay before reconnect attempt `attempt` (0-based), with jitter
    /// drawn from `random` in [0, 1).
    pub fn delay(&self, attempt: u32, random: f64) -> Duration {
        let base = self.initial.as_secs_f64() * self.multiplier.powi(attempt as i32);
        let base = base.min(self.max.as_secs_f64());
        let jittered = base * (1.0 + self.jitter * (2.0 * random - 1.0));
        Duration::from_secs_f64(jittered.max(0.0))
    }
}

/// Whether a reconnect can fix what `status` reports. CANCELLED is final
/// only when the server says this stream was superseded: a reset connection
/// also surfaces as CANCELLED.
pub(crate) fn retryable(status: &Status) -> bool {
    match status.code() {
        Code::Cancelled => ringfeed_proto::wire::superseded_by(status).is_none(),
        Code::Unavailable
        | Code::Unknown
        | Code::Internal
        | Code::Aborted
        | Code::DeadlineExceeded
        | Code::ResourceExhausted => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SUPERSEDED;

    #[test]
    fn backoff_grows_by_the_multiplier_within_jitter_and_is_capped() {
        let b = Backoff::default();
        assert_eq!(b.delay(0, 0.5), Duration::from_secs(1));
        let second = b.delay(1, 0.5).as_secs_f64();
        assert!((second - 1.6).abs() < 1e-9, "{second}");
        assert!((b.delay(0, 0.0).as_secs_f64() - 0.8).abs() < 1e-9);
        assert!(b.delay(0, 0.999_999).as_secs_f64() < 1.2 + 1e-6);
        assert_eq!(b.delay(60, 0.5), Duration::from_secs(120));
    }

    #[test]
    fn only_transient_codes_are_retried() {
        assert!(retryable(&Status::unavailable("restart")));
        for code in [
            Code::OutOfRange,
            Code::InvalidArgument,
            Code::AlreadyExists,
            Code::DataLoss,
        ] {
            assert!(!retryable(&Status::new(code, "x")), "{code:?}");
        }
        assert!(!retryable(&Status::cancelled(format!(
            "{SUPERSEDED} by epoch 9"
        ))));
        assert!(!retryable(&ringfeed_proto::wire::superseded_status(9)));
        assert!(retryable(&Status::cancelled("connection reset")));
    }
}
