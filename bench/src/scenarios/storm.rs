//! `storm`: subscribers resume at once, each the same number of events
//! behind, over a backlog.

use std::time::{Duration, Instant};

use anyhow::Result;

use super::measure::{cpu, cpu_each, memory_mib, reset_peaks, server_figures};
use super::subscribers::{catch_up_figures, chunks_sent, collect, served_as_named};
use super::subscribers::{subscriber_variants, subscribers};
use super::{PRELOAD_BATCH, PRELOAD_PRODUCERS};
use crate::results::Row;
use crate::systems::{From, System};

pub(super) async fn storm(
    system: &mut dyn System,
    backlog: u64,
    behind: u64,
    ks: &[usize],
    size: usize,
    time_limit: Duration,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let loaded = Instant::now();
    if backlog > 0 {
        system
            .append(0..backlog, size, PRELOAD_PRODUCERS, PRELOAD_BATCH, false)
            .await?;
    }
    // The resume window: one producer, so the event numbered `backlog` is
    // the first of it on every system (see `From::Resume`).
    let wall_ns = crate::util::now_ns();
    system
        .append(backlog..backlog + behind, size, 1, PRELOAD_BATCH, false)
        .await?;
    eprintln!(
        "  pre-loaded {} events in {:.1} s",
        backlog + behind,
        loaded.elapsed().as_secs_f64()
    );
    let from = From::Resume {
        index: backlog,
        wall_ns,
    };
    let mut rows = Vec::new();
    for (variant, chunk_mode) in subscriber_variants(kind) {
        system.set_chunk_mode(chunk_mode);
        for &k in ks {
            reset_peaks(system);
            let rss_before = memory_mib(system, "VmRSS");
            let cpu0 = cpu(system);
            let each0 = cpu_each(system);
            let chunks0 = chunks_sent(system).await?;
            let want = backlog..backlog + behind;
            let (tasks, _) = subscribers(system, k, from, want, false, Some(time_limit)).await?;
            let mut row = Row::new(kind, format!("K={k}"), variant);
            let collected = collect(tasks, &mut row).await?;
            row.figures.insert(0, ("subscribers".into(), k as f64));
            row.figures.insert(1, ("events each".into(), behind as f64));
            catch_up_figures(&mut row, &collected, size);
            if !system.processes().is_empty() {
                row.figure("server RSS before MiB", rss_before);
            }
            server_figures(&mut row, system, cpu(system) - cpu0, &each0);
            let backlog = behind * size as u64;
            served_as_named(system, &mut row, chunk_mode, chunks0, backlog).await?;
            rows.push(row);
        }
    }
    Ok(rows)
}
