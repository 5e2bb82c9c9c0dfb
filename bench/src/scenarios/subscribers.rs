//! Subscribers as every subscriber scenario runs them: started together,
//! each followed and checked exact, and their figures collected.

use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use hdrhistogram::Histogram;

use crate::results::{Row, Unit};
use crate::systems::{From, Kind, Subscriber, System};

/// How long a subscriber may wait for its next event before the scenario
/// calls it stalled (a failure, not a figure).
const STALL: Duration = Duration::from_secs(120);

/// The ringfeed variants a subscriber scenario runs (event mode and chunk
/// mode); the other systems run one, named by how they are read.
pub(super) fn subscriber_variants(kind: Kind) -> Vec<(&'static str, bool)> {
    if kind == Kind::Ringfeed {
        vec![("events", false), ("chunks", true)]
    } else {
        vec![("consumer", false)]
    }
}

/// What one subscriber saw.
pub(super) struct Followed {
    /// Since the subscribers were started.
    first: Duration,
    done: Duration,
    /// Events received.
    got: u64,
    /// Stopped at the time limit before getting every event.
    timed_out: bool,
    /// Got each event it should, once. A subscriber stopped at the time
    /// limit is judged on what it got: no repeats, nothing unasked-for.
    exact: bool,
    /// Append-to-delivery latencies, µs (live scenarios only).
    latency: Option<Histogram<u64>>,
}

/// Which of the event numbers `want` a subscriber got: exact while each came
/// at most once and none came from outside `want`.
pub(super) struct Tally {
    start: u64,
    seen: Vec<bool>,
    pub(super) got: u64,
    pub(super) exact: bool,
}

impl Tally {
    pub(super) fn new(want: std::ops::Range<u64>) -> Tally {
        Tally {
            start: want.start,
            seen: vec![false; (want.end - want.start) as usize],
            got: 0,
            exact: true,
        }
    }

    pub(super) fn record(&mut self, index: u64) {
        self.got += 1;
        match index.checked_sub(self.start).map(|i| i as usize) {
            Some(i) if i < self.seen.len() && !self.seen[i] => self.seen[i] = true,
            _ => self.exact = false,
        }
    }
}

/// Reads `want` events from `sub` and checks it got each of `want` exactly
/// once (in any order across ringfeed's shards).
async fn follow(
    mut sub: Box<dyn Subscriber>,
    want: std::ops::Range<u64>,
    t0: Instant,
    measure_latency: bool,
    deadline: Option<Instant>,
) -> Result<Followed> {
    let n = want.end - want.start;
    let mut tally = Tally::new(want);
    let mut first = None;
    let mut latency = measure_latency
        .then(|| Histogram::<u64>::new(3))
        .transpose()?;
    let mut timed_out = false;
    let mut batch = Vec::new();
    while tally.got < n {
        // Under a time limit only the limit ends the wait: a subscriber that
        // gets nothing before it is measured as timed out, not failed.
        let wait = match deadline {
            Some(d) => d.saturating_duration_since(Instant::now()),
            None => STALL,
        };
        match tokio::time::timeout(wait, sub.next_batch(&mut batch)).await {
            Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                timed_out = true;
                break;
            }
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => bail!("the subscription ended after {} of {n} events", tally.got),
            Ok(Err(e)) => return Err(e.context(format!("after {} of {n} events", tally.got))),
            Err(_) => bail!("no event for {STALL:?} after {} of {n}", tally.got),
        };
        // One clock reading for the batch: its events arrived together.
        let now = latency.is_some().then(crate::util::now_ns);
        for d in &batch {
            if let (Some(h), Some(now)) = (latency.as_mut(), now) {
                h.record(((now - d.sent_ns).max(0) / 1000) as u64)?;
            }
            tally.record(d.index);
        }
        first.get_or_insert_with(|| t0.elapsed());
    }
    Ok(Followed {
        first: first.unwrap_or_default(),
        done: t0.elapsed(),
        got: tally.got,
        timed_out,
        exact: tally.exact,
        latency,
    })
}

/// Starts `k` subscribers from `from` at once, each following `want`.
pub(super) async fn subscribers(
    system: &dyn System,
    k: usize,
    from: From,
    want: std::ops::Range<u64>,
    measure_latency: bool,
    time_limit: Option<Duration>,
) -> Result<(Vec<tokio::task::JoinHandle<Result<Followed>>>, Instant)> {
    let t0 = Instant::now();
    // Subscribe concurrently, so a storm really is one.
    let subs: Vec<Box<dyn Subscriber>> =
        futures_util::future::try_join_all((0..k).map(|_| system.subscribe(from))).await?;
    let tasks = subs
        .into_iter()
        .map(|s| {
            let deadline = time_limit.map(|l| t0 + l);
            tokio::spawn(follow(s, want.clone(), t0, measure_latency, deadline))
        })
        .collect();
    Ok((tasks, t0))
}

/// What a group of subscribers did, together.
pub(super) struct Collected {
    /// When the last one finished (caught up, or stopped at the time limit).
    pub(super) last: Duration,
    /// Events received, over all of them.
    pub(super) delivered: u64,
    pub(super) inexact: usize,
    pub(super) timed_out: usize,
}

/// Waits for every subscriber; adds their first-event and caught-up
/// histograms (ms; caught up counts only those that did) to `row`.
pub(super) async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<Followed>>>,
    row: &mut Row,
) -> Result<Collected> {
    let (mut first, mut done) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
    let mut latency = Histogram::<u64>::new(3)?;
    let mut all = Collected {
        last: Duration::ZERO,
        delivered: 0,
        inexact: 0,
        timed_out: 0,
    };
    for t in tasks {
        let f = t.await.map_err(|e| anyhow!("subscriber task: {e}"))??;
        if f.got > 0 {
            first.record(f.first.as_millis() as u64)?;
        }
        if !f.timed_out {
            done.record(f.done.as_millis() as u64)?;
        }
        all.last = all.last.max(f.done);
        all.delivered += f.got;
        all.inexact += usize::from(!f.exact);
        all.timed_out += usize::from(f.timed_out);
        if let Some(h) = f.latency {
            latency.add(&h)?;
        }
    }
    if !latency.is_empty() {
        row.hist("latency", latency, Unit::MicrosAsMs);
    }
    if !first.is_empty() {
        row.hist_short("first event", first, Unit::Ms);
    }
    if !done.is_empty() {
        row.hist_short("caught up", done, Unit::Ms);
    }
    Ok(all)
}

/// Chunk-mode responses the server has sent so far and the backlog past
/// which chunks must flow (`None` where its metrics are not readable: a
/// `--target` server, the other systems).
pub(super) async fn chunks_sent(system: &dyn System) -> Result<Option<(u64, u64)>> {
    system.chunks_sent().await.transpose()
}

/// Checks that a row was served in the mode its variant names, and shows
/// the chunk responses it got: rows named "chunks" were once served in
/// event mode for months (the ringfeed adapter ignored the mode) and
/// nothing noticed. `before` is [`chunks_sent`] when the row started;
/// `backlog` the bytes each subscriber caught up over (a backlog the
/// server's open windows hold is served as events, rightly).
pub(super) async fn served_as_named(
    system: &dyn System,
    row: &mut Row,
    chunk_mode: bool,
    before: Option<(u64, u64)>,
    backlog: u64,
) -> Result<()> {
    let (Some((before, _)), Some((after, past))) = (before, chunks_sent(system).await?) else {
        return Ok(());
    };
    let sent = after - before;
    row.figure("chunk responses", sent as f64);
    if chunk_mode && sent == 0 && backlog > past {
        bail!(
            "{}: chunk mode was asked for and no chunk was sent over a {backlog}-byte backlog",
            row.variant
        );
    }
    if !chunk_mode && sent > 0 {
        bail!(
            "{}: event mode was asked for and {sent} chunks were sent",
            row.variant
        );
    }
    Ok(())
}

/// The figures of a catch-up (`catchup`, `storm`): throughput over the run,
/// and the time until all were caught up when none hit the time limit.
pub(super) fn catch_up_figures(row: &mut Row, c: &Collected, size: usize) {
    let secs = c.last.as_secs_f64();
    if c.timed_out == 0 {
        row.figure("all caught up s", secs);
    }
    row.figure("events/s", c.delivered as f64 / secs)
        .figure("MB/s", c.delivered as f64 * size as f64 / secs / 1e6)
        .figure("timed out", c.timed_out as f64)
        .figure("inexact", c.inexact as f64);
}
