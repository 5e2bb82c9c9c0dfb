//! `append`: producers × batch × event size × durability, and pipelined
//! single events.

use std::time::Instant;

use anyhow::Result;

use super::measure::{cpu, cpu_each, server_figures};
use super::variant_of;
use crate::results::{Row, Unit};
use crate::systems::{Kind, System};

/// The cases of an `append` run.
pub(super) struct AppendCases<'a> {
    pub(super) events: u64,
    pub(super) producers: &'a [usize],
    pub(super) batches: &'a [usize],
    pub(super) sizes: &'a [usize],
    pub(super) durabilities: &'a [bool],
    pub(super) pipeline: &'a [usize],
}

/// How one append case sends: closed-loop requests of `batch` events, or
/// single-event requests with up to `window` in flight.
#[derive(Clone, Copy)]
enum Sending {
    Batch(usize),
    Pipeline(usize),
}

pub(super) async fn append(system: &mut dyn System, cases: &AppendCases<'_>) -> Result<Vec<Row>> {
    let kind = system.kind();
    let events = cases.events;
    let mut rows = Vec::new();
    let mut next = 0u64;
    for &p in cases.producers {
        let sendings = cases
            .batches
            .iter()
            .map(|&b| Sending::Batch(b))
            .chain(cases.pipeline.iter().map(|&w| Sending::Pipeline(w)));
        for sending in sendings {
            // Only ringfeed appends batches; the others run the batch-1 case.
            if kind != Kind::Ringfeed && matches!(sending, Sending::Batch(b) if b != 1) {
                continue;
            }
            for &size in cases.sizes {
                for &durable in cases.durabilities {
                    if kind != Kind::Ringfeed && !durable {
                        continue;
                    }
                    // Counted for durable cases only (see below).
                    let syncs0 = if durable {
                        system.syncs().await.transpose()?
                    } else {
                        None
                    };
                    let cpu0 = cpu(system);
                    let each0 = cpu_each(system);
                    let started = Instant::now();
                    let range = next..next + events;
                    let (acks, case) = match sending {
                        Sending::Batch(batch) => (
                            system.append(range, size, p, batch, durable).await?,
                            format!("{p} producers × batch {batch} × {size} B"),
                        ),
                        Sending::Pipeline(window) => {
                            match system
                                .append_pipelined(range, size, p, window, durable)
                                .await
                            {
                                Some(acks) => (
                                    acks?,
                                    format!("{p} producers × pipeline {window} × {size} B"),
                                ),
                                None => continue,
                            }
                        }
                    };
                    let secs = started.elapsed().as_secs_f64();
                    let cpu_s = cpu(system) - cpu0;
                    next += events;
                    let variant = if kind == Kind::Ringfeed {
                        variant_of(durable).to_owned()
                    } else {
                        system.durability(true).to_owned()
                    };
                    let mut row = Row::new(kind, case, variant);
                    row.figure("events", events as f64)
                        .figure("s", secs)
                        .figure("events/s", events as f64 / secs)
                        .figure("MB/s", events as f64 * size as f64 / secs / 1e6)
                        .hist("ack", acks, Unit::MicrosAsMs);
                    if !system.processes().is_empty() {
                        row.figure("server CPU µs/event", cpu_s * 1e6 / events as f64);
                    }
                    // Group commit: the acknowledgements each fdatasync served.
                    // Every shard syncs its own log, so a request spanning both
                    // shards waits for two: below 1 is possible.
                    if let Some(before) = syncs0 {
                        let syncs = system.syncs().await.transpose()?.unwrap_or(before) - before;
                        let acks = match sending {
                            Sending::Batch(batch) => events.div_ceil(batch as u64),
                            Sending::Pipeline(_) => events,
                        };
                        if syncs > 0 {
                            row.figure("acks per fdatasync", acks as f64 / syncs as f64);
                        }
                    }
                    server_figures(&mut row, system, cpu_s, &each0);
                    rows.push(row);
                }
            }
        }
    }
    Ok(rows)
}
