//! `tail` and `fanout`: live subscribers while one producer appends at a
//! fixed rate, open loop.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::measure::{cpu, cpu_each, server_figures};
use super::subscribers::{collect, subscribers};
use crate::results::Row;
use crate::systems::{From, System};

/// How long live subscribers may take to reach the live edge.
const LIVE_EDGE_LIMIT: Duration = Duration::from_secs(120);

pub(super) async fn live(
    system: &mut dyn System,
    rate: u64,
    seconds: f64,
    ks: &[usize],
    size: usize,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let total = (rate as f64 * seconds).round().max(1.0) as u64;
    let mut rows = Vec::new();
    let mut next = 0u64;
    for &k in ks {
        let want = next..next + total;
        next += total;
        let (tasks, t0) = subscribers(system, k, From::Now, want.clone(), true, None).await?;
        // Every subscriber connected and waiting at the live edge first.
        system.at_live_edge(k, LIVE_EDGE_LIMIT).await?;
        eprintln!(
            "  {k} subscribers at the live edge after {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let cpu0 = cpu(system);
        let each0 = cpu_each(system);
        let appender = system.appender();
        let period = Duration::from_secs_f64(1.0 / rate as f64);
        let started = Instant::now();
        let mut acks = Vec::with_capacity(total as usize);
        for i in want.clone() {
            // Open loop: send on schedule, never wait for earlier acks.
            let due = started + period.mul_f64((i - want.start) as f64);
            tokio::time::sleep_until(due.into()).await;
            let appender = appender.clone();
            acks.push(tokio::spawn(
                async move { appender.append_one(i, size).await },
            ));
        }
        let produced = started.elapsed().as_secs_f64();
        for a in acks {
            a.await.map_err(|e| anyhow!("append task: {e}"))??;
        }
        let mut row = Row::new(kind, format!("K={k} at {rate}/s"), "live");
        let inexact = collect(tasks, &mut row).await?.inexact;
        // The time histograms of a live run say nothing; keep latency only.
        row.hists.retain(|h| h.name == "latency");
        row.figures.retain(|(key, _)| key.starts_with("latency"));
        row.figures.insert(0, ("subscribers".into(), k as f64));
        row.figures
            .insert(1, ("sent events/s".into(), total as f64 / produced));
        row.figures
            .insert(2, ("deliveries".into(), total as f64 * k as f64));
        row.figure("inexact", inexact as f64);
        server_figures(&mut row, system, cpu(system) - cpu0, &each0);
        rows.push(row);
    }
    Ok(rows)
}
