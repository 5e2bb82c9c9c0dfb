//! The followed filers on `/metrics`: one series per filer and metric,
//! labelled `filer` (as `--follow-filer` names it; bounded by the
//! configuration, never by clients), read when a scrape comes.

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use super::follow::{FilerProgress, FilerReading};

#[derive(Debug)]
pub struct FilerMetrics(pub Vec<Arc<FilerProgress>>);

type Gauge = (
    &'static str,
    &'static str,
    fn(&FilerReading, i64) -> Option<f64>,
);

const GAUGES: &[Gauge] = &[
    ("filer_connected", "1 while the filer's metadata stream is open", |r, _| {
        Some(f64::from(u8::from(r.connected)))
    }),
    (
        "filer_stored_ts_seconds",
        "The filer's time of the last event stored from it (Unix seconds): where following resumes",
        |r, _| (r.stored_ts_ns > 0).then(|| r.stored_ts_ns as f64 / 1e9),
    ),
    (
        "filer_behind_seconds",
        "Now minus the latest filer time the filer has sent everything up to (events, idle heartbeats)",
        |r, now| (r.seen_ts_ns > 0).then(|| (now - r.seen_ts_ns).max(0) as f64 / 1e9),
    ),
    (
        "filer_failing",
        "1 while the filer's stream is down with an error (ringfeed status says which)",
        |r, _| Some(f64::from(u8::from(!r.connected && r.error.is_some()))),
    ),
    (
        "filer_log_gap",
        "1 while the filer is not followed because its log no longer reaches back to the last event stored from it",
        |r, _| Some(f64::from(u8::from(r.log_gap))),
    ),
];

type Counter = (&'static str, &'static str, fn(&FilerReading) -> u64);

const COUNTERS: &[Counter] = &[
    (
        "filer_events",
        "Events stored from the filer since the server started",
        |r| r.events,
    ),
    (
        "filer_reconnects",
        "Streams to the filer that ended and were opened again",
        |r| r.reconnects,
    ),
    (
        "filer_refused",
        "Events the filer sent that were refused and not stored (malformed, or back in time)",
        |r| r.refused,
    ),
    (
        "filer_gaps_skipped",
        "Gaps in the filer's log gone past with --follow-skip-gap (the events in them are not stored)",
        |r| r.gaps_skipped,
    ),
];

impl Collector for FilerMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let readings: Vec<FilerReading> = self.0.iter().map(|f| f.read()).collect();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        for (name, help, read) in GAUGES {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for r in &readings {
                if let Some(value) = read(r, now) {
                    ConstGauge::new(value)
                        .encode(metric.encode_family(&[("filer", r.filer.as_str())])?)?;
                }
            }
        }
        for (name, help, read) in COUNTERS {
            let mut metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
            for r in &readings {
                ConstCounter::new(read(r))
                    .encode(metric.encode_family(&[("filer", r.filer.as_str())])?)?;
            }
        }
        Ok(())
    }
}
