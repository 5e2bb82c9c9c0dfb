//! `catchup`: events pre-loaded, then subscribers from the beginning; and
//! the system's command-line tail doing the same.

use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};

use super::measure::{cpu, cpu_each, reset_peaks, server_figures, ClientCost};
use super::subscribers::{catch_up_figures, chunks_sent, collect, served_as_named};
use super::subscribers::{subscriber_variants, subscribers};
use super::subscribers::{Collected, Tally};
use super::{PRELOAD_BATCH, PRELOAD_PRODUCERS};
use crate::results::Row;
use crate::systems::{self, From, Kind, System};

pub(super) async fn catchup(
    system: &mut dyn System,
    events: u64,
    ks: &[usize],
    size: usize,
    time_limit: Duration,
) -> Result<Vec<Row>> {
    let kind = system.kind();
    let loaded = Instant::now();
    system
        .append(0..events, size, PRELOAD_PRODUCERS, PRELOAD_BATCH, false)
        .await?;
    eprintln!(
        "  pre-loaded {events} events in {:.1} s",
        loaded.elapsed().as_secs_f64()
    );
    let mut rows = Vec::new();
    for (variant, chunk_mode) in subscriber_variants(kind) {
        system.set_chunk_mode(chunk_mode);
        for &k in ks {
            // The row's peak is its own, not the pre-load's.
            reset_peaks(system);
            let cpu0 = cpu(system);
            let each0 = cpu_each(system);
            let client0 = ClientCost::now();
            let chunks0 = chunks_sent(system).await?;
            let (tasks, _) = subscribers(
                system,
                k,
                From::Beginning,
                0..events,
                false,
                Some(time_limit),
            )
            .await?;
            let mut row = Row::new(kind, format!("K={k}"), variant);
            let collected = collect(tasks, &mut row).await?;
            row.figures.insert(0, ("subscribers".into(), k as f64));
            row.figures.insert(1, ("events each".into(), events as f64));
            catch_up_figures(&mut row, &collected, size);
            client0.figures(&mut row, collected.delivered);
            server_figures(&mut row, system, cpu(system) - cpu0, &each0);
            let backlog = events * size as u64;
            served_as_named(system, &mut row, chunk_mode, chunks0, backlog).await?;
            rows.push(row);
        }
    }
    if let Some(cli) = system.tail_cli() {
        reset_peaks(system);
        let cpu0 = cpu(system);
        let each0 = cpu_each(system);
        let mut row = cli_catch_up(kind, cli, events, size, time_limit).await?;
        server_figures(&mut row, system, cpu(system) - cpu0, &each0);
        rows.push(row);
    }
    Ok(rows)
}

/// The system's command-line tail from the beginning, its JSON read from a
/// pipe (kept in memory, parsed after the clock stops): events/s until it
/// printed every pre-loaded event, and the tail process's own CPU per event.
/// Exact when every event number appears once.
pub(crate) async fn cli_catch_up(
    kind: Kind,
    cli: systems::TailCli,
    events: u64,
    size: usize,
    time_limit: Duration,
) -> Result<Row> {
    use std::io::Read;
    let systems::TailCli {
        mut command,
        terminator,
        payload,
    } = cli;
    let program = command.get_program().to_string_lossy().into_owned();
    // The output is kept to be checked after the clock stops. Its pages are
    // touched now: faulting them in while the tail runs cost this process
    // about as much CPU as the tail's own on the two cores they share, and
    // `| wc -l` or `| jq` pays nothing like it.
    // Written once to fault its pages in before the clock starts, then
    // emptied: `vec![0; n]` would leave them untouched (calloc).
    #[allow(clippy::slow_vector_initialization)]
    let mut out = Vec::with_capacity(events as usize * 1024);
    out.resize(out.capacity(), 0u8);
    out.clear();
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| anyhow!("starting {program}: {e}"))?;
    let pid = child.id();
    let mut stdout = child.stdout.take().expect("piped");
    let started = Instant::now();
    // A thread reads until the expected number of lines or the time limit
    // (the pipe's reader, like `| wc -l`, does nothing else meanwhile).
    let reader = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 1 << 20];
        let (mut lines, mut cpu_ticks) = (0u64, 0);
        let timed_out = loop {
            if lines >= events {
                break false;
            }
            if started.elapsed() > time_limit {
                break true;
            }
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break lines < events,
                Ok(n) => {
                    // Terminators may straddle reads: look again at the
                    // last few bytes already read.
                    let from = out.len().saturating_sub(terminator.len() - 1);
                    out.extend_from_slice(&buf[..n]);
                    lines += count(&out[from..], terminator);
                    if lines >= events {
                        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                            .unwrap_or_default();
                        cpu_ticks = crate::util::stat_cpu_ticks(&stat);
                    }
                }
            }
        };
        (out, started.elapsed(), timed_out, cpu_ticks)
    });
    let (out, elapsed, timed_out, cpu_ticks) = reader.await?;
    let _ = child.kill();
    let _ = child.wait();
    let mut tally = Tally::new(0..events);
    let objects = serde_json::Deserializer::from_slice(&out).into_iter::<serde_json::Value>();
    for value in objects.map_while(Result::ok) {
        if let Some(index) = systems::json_stamp(&value, payload) {
            tally.record(index);
        }
    }
    // Every pre-loaded event, once (a tail stopped at the time limit missed
    // some: inexact too).
    let exact = tally.exact && tally.got == events;
    let got = tally.got;
    let secs = elapsed.as_secs_f64();
    let mut row = Row::new(kind, "tail CLI", "cli");
    row.figure("subscribers", 1.0)
        .figure("events each", events as f64);
    catch_up_figures(
        &mut row,
        &Collected {
            last: elapsed,
            delivered: got,
            inexact: usize::from(!exact),
            timed_out: usize::from(timed_out),
        },
        size,
    );
    if cpu_ticks > 0 {
        let cpu_s = cpu_ticks as f64 / crate::util::CLOCK_TICKS_PER_SECOND as f64;
        row.figure("client CPU µs/event", cpu_s * 1e6 / got.max(1) as f64);
    }
    eprintln!(
        "  {program} tail: {got} bench events in {secs:.2} s{}",
        if exact { "" } else { ", NOT exact" }
    );
    if !exact {
        let head = String::from_utf8_lossy(&out[..out.len().min(600)]).into_owned();
        eprintln!("  its output began: {head:?}");
    }
    Ok(row)
}

/// Occurrences of `terminator` in `bytes`. The reader shares two cores
/// with the tail it measures: a byte-by-byte `windows` scan cost it a core
/// for most of a ringfeed tail's run, so the usual one-byte case is counted
/// in a loop the compiler vectorizes, and a longer one is looked for only
/// where its last byte is.
fn count(bytes: &[u8], terminator: &[u8]) -> u64 {
    let Some((&last, head)) = terminator.split_last() else {
        return 0;
    };
    if head.is_empty() {
        return bytes.iter().filter(|&&b| b == last).count() as u64;
    }
    bytes
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b == last && i >= head.len() && bytes[i - head.len()..i] == *head)
        .count() as u64
}

#[cfg(test)]
mod count_tests {
    use super::count;

    #[test]
    fn counts_terminators_as_a_window_scan_does() {
        for (bytes, terminator) in [
            (&b"a\nb\n\nc"[..], &b"\n"[..]),
            (b"{\n}\n{\n}\n}\n", b"\n}\n"),
            (b"\n}\n}\n", b"\n}\n"),
            (b"", b"\n"),
            (b"}\n", b"\n}\n"),
        ] {
            let windows = bytes
                .windows(terminator.len())
                .filter(|w| *w == terminator)
                .count();
            assert_eq!(count(bytes, terminator), windows as u64, "{bytes:?}");
        }
    }
}
