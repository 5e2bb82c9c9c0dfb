//! `ringfeed tail`: follow the feed through reconnects and print one JSON line
//! per event with the cursor to resume after it.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use ringfeed_core::now_ns;
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::{Ordering, Scope, SubscribeRequest};
use signal_hook::consts::{SIGINT, SIGTERM};

use ringfeed_client::{
    cursor_text, parse_cursor_text, push_cursor_text, push_int, write_event_parts_json, Backoff,
    Connection, CursorFile, FollowedEvent, Follower, Step,
};

use super::connection::{code_name, connect, Access, StoppedBy};
use super::output::write_out;
use super::time::{parse_since, parse_when};

/// Follow the feed, like `weed filer.meta.tail`: prints
/// `{"ts":T,"shard":S,"offset":O,"cursor":"C","op":"create","event":{..}}`
/// per event (op: create, update, delete or rename; the
/// event in proto3 JSON; with --cluster `"node":N` follows `"ts"`) and exits
/// 0 when the stream ends after --until.
///
/// `cursor` resumes (with --cursor) right after its line, also inside
/// batches and chunks. The tail reconnects by itself after a lost connection
/// or a server restart (backoff 1 s, x1.6, capped at 2 min) and resumes
/// exactly, with no line missed or repeated; errors a retry cannot fix
/// (OUT_OF_RANGE, INVALID_ARGUMENT, FAILED_PRECONDITION when a server crash
/// lost events the cursor covers, ...) end it with their gRPC code.
#[derive(clap::Args, Debug)]
pub struct TailArgs {
    #[command(flatten)]
    pub access: Access,
    /// Only events under this path prefix (directory-boundary match: /a/b
    /// matches /a/b and /a/b/..., not /a/bc). Repeat for several. Default:
    /// every path.
    #[arg(long = "prefix", value_name = "PATH")]
    pub prefixes: Vec<String>,
    /// Never events under this path prefix, even when another filter matches.
    /// Repeatable.
    #[arg(long = "exclude", value_name = "PATH")]
    pub excludes: Vec<String>,
    /// Only events in exactly this directory (or renamed into it); not its
    /// subdirectories. Repeatable; combines with --prefix as "either".
    #[arg(long = "dir", value_name = "DIR")]
    pub dirs: Vec<String>,
    /// Start at events stamped at or after this time: a duration back from
    /// now ("1h", "90s", "2days") or an RFC 3339 time
    /// ("2026-11-29T10:00:00Z", "...+02:00").
    #[arg(long, value_name = "WHEN", group = "start_at")]
    pub since: Option<String>,
    /// Start at events stamped at or after this time, ns since the Unix epoch.
    #[arg(long, value_name = "NS", group = "start_at",
          value_parser = clap::value_parser!(i64).range(0..))]
    pub since_ns: Option<i64>,
    /// Resume exactly after the line that printed this cursor (as tail
    /// prints it, or in standard base64 as `subscribers --json` does).
    /// Without any start flag the tail starts now: only new events.
    #[arg(long, value_name = "CURSOR", group = "start_at")]
    pub cursor: Option<String>,
    /// Keep the tail's place in FILE: resume from the cursor in FILE when it
    /// exists (the start flags apply only when it does not), and after each
    /// batch of lines is written out, replace FILE atomically (write, fsync,
    /// rename) with the last written line's cursor. Stopped by Ctrl-C,
    /// SIGTERM or a closed pipe and started again, the tail prints every
    /// event once; after kill -9 or a power loss it may print the last
    /// unsaved batch again, never skip an event.
    #[arg(long, value_name = "FILE", conflicts_with = "cursor")]
    pub cursor_file: Option<std::path::PathBuf>,
    /// Start at the oldest retained event.
    #[arg(long, group = "start_at")]
    pub beginning: bool,
    /// Stop (exit 0) after the last event stamped at or before this time:
    /// the forms --since takes, a duration back from now ("10m") or an RFC
    /// 3339 time. Default: follow forever.
    #[arg(long, value_name = "WHEN", group = "stop_at")]
    pub until: Option<String>,
    /// Stop (exit 0) after the last event stamped at or before this time, ns
    /// since the Unix epoch.
    #[arg(long, value_name = "NS", group = "stop_at",
          value_parser = clap::value_parser!(i64).range(1..))]
    pub until_ns: Option<i64>,
    /// Deliver each shard in its own order as events arrive (lowest latency,
    /// no order across shards) instead of one merged order by time.
    #[arg(long)]
    pub per_shard: bool,
    /// Skip events whose signatures contain N (loop prevention). Not 0.
    #[arg(long, value_name = "N")]
    pub signature: Option<i32>,
    /// Ask the server for one event per response instead of batches (the
    /// default: the server packs the events at hand into one response,
    /// catching up and live, at no cost in latency). Every event prints the
    /// same either way, and so does every cursor of an unfiltered tail (a
    /// filtered tail's cursors may reach further past events the filter
    /// skipped; each resumes exactly). This is only slower.
    #[arg(long, conflicts_with = "batching")]
    pub no_batching: bool,
    /// Batches: the default (accepted for scripts written before it was).
    #[arg(long, hide = true)]
    pub batching: bool,
    /// Catch up from raw stored chunks (decoded and filtered here, fastest
    /// for large backlogs), then switch to events at the live edge. Each
    /// shard's events stay in order; shards interleave by chunk until then.
    #[arg(long)]
    pub chunk_mode: bool,
    /// Print only durable events (flushed to disk), so no line can ever name
    /// an event that a server crash then loses. Memory-acknowledged events
    /// print up to the server's flush interval later.
    #[arg(long)]
    pub durable_only: bool,
    /// With --cursor or --cursor-file: if a server crash lost events this cursor had already
    /// printed (the tail then exits 9, FAILED_PRECONDITION, "truncated by a
    /// crash"), continue from where the feed survived instead. The lines
    /// printed past that point before the crash are to be taken back.
    #[arg(long)]
    pub resume_truncated: bool,
    /// Print progress on stderr, at most once a second while catching up:
    /// events so far, events/s, lag (now minus the last event's or
    /// heartbeat's time). Asks the server for heartbeats.
    #[arg(long)]
    pub progress: bool,
    /// Follow the whole cluster: the server's shards merged with its peers'
    /// (a server started with --peers or --etcd). Lines then carry
    /// "node" after "ts", and cursors are cluster cursors that resume on any
    /// node of the cluster. Every start and stop flag works (now and --since
    /// by the server's clock; --until waits for every node, a down one too);
    /// batches as in node scope. With --chunk-mode it catches up from the
    /// server's stored chunks, then each peer's in turn, then merges. Not
    /// with --progress (yet).
    #[arg(long, conflicts_with = "progress")]
    pub cluster: bool,
}

/// Follows the feed per `args`, printing one line per event on stdout.
/// SIGINT or SIGTERM stops it cleanly: no more lines are taken from the
/// stream, the lines already taken are written (and their cursor saved with
/// --cursor-file), and it exits 130 or 143; a second signal exits at once.
pub async fn tail(args: TailArgs) -> Result<()> {
    let cursor_file = args.cursor_file.clone().map(CursorFile::new);
    let mut lines = Lines::spawn(io::stdout(), cursor_file);
    let stop = stop_signal()?;
    let stopped = {
        let followed = follow(args, &mut lines);
        tokio::pin!(followed);
        tokio::select! {
            followed = &mut followed => Err(followed),
            signal = stop => Ok(signal),
        }
    };
    // Whatever ended the stream, the lines read before it are printed.
    let written = lines.finish();
    match stopped {
        Err(followed) => followed.and(written.map(drop)),
        Ok(signal) => {
            written?;
            Err(StoppedBy(signal).into())
        }
    }
}

/// Resolves at the first SIGINT or SIGTERM; the second exits the process at
/// once (a tail whose reader stopped reading cannot finish writing).
fn stop_signal() -> Result<impl std::future::Future<Output = i32>> {
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).context("handling SIGINT")?;
    let (first, stop) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut signals = signals.forever();
        if let Some(signal) = signals.next() {
            let _ = first.send(signal);
        }
        if let Some(signal) = signals.next() {
            std::process::exit(128 + signal);
        }
    });
    Ok(async move { stop.await.unwrap_or(SIGTERM) })
}

async fn follow(args: TailArgs, lines: &mut Lines) -> Result<()> {
    let request = subscribe_request(&args, now_ns())?;
    let mut progress = args.progress.then(Progress::new);
    // An unreachable server at the start is an error, not something to wait for.
    connect(&args.access).await?;
    // `subscribe_request` decides batching; a Follower asks for batches
    // unless told otherwise.
    let batching = request.batching;
    let mut follower = Follower::new(&args.access.server, request, Backoff::default())?
        .with_token(args.access.token.as_deref())?;
    if !batching {
        follower = follower.one_event_per_response();
    }
    if let Some(file) = &args.cursor_file {
        follower = follower.with_cursor_file(CursorFile::new(file))?;
    }
    // Once per outage: when the server is lost, and when the tail is back.
    let server = args.access.server.clone();
    follower = follower.on_connection(move |change| match change {
        Connection::Lost { error, retry_in } => eprintln!(
            "ringfeed: lost {server} ({}: {}); reconnecting in {:.1} s, then with backoff",
            code_name(error.code()),
            error.message().replace(['\n', '\r'], " "),
            retry_in.as_secs_f64()
        ),
        Connection::Back { attempts, cursor } => eprintln!(
            "ringfeed: back on {server} after {attempts} attempt{}; resuming {}",
            if attempts == 1 { "" } else { "s" },
            if cursor.is_empty() {
                "where the start flags say".to_owned()
            } else {
                format!("after cursor {}", cursor_text(cursor))
            }
        ),
    });
    let tls = args.access.tls();
    if tls.enabled() {
        follower = follower.with_tls(tls.config()?)?;
    }
    // Lines gather in a buffer handed to the writer when nothing more is at
    // hand (so a batch is one write); the writer's buffers come back empty,
    // and the cursor has its own: nothing is allocated per event.
    let mut text = Vec::with_capacity(1 << 17);
    let mut cursor = Vec::new();
    let ended = loop {
        // An error (also one decoding the rest of a batch) ends the tail
        // after the lines before it are handed over.
        // With --progress, the live edge shows as a watermark step.
        let step = match progress.as_mut() {
            Some(_) => follower.next_step().await,
            None => follower
                .next()
                .await
                .map(|event| event.map_or(Step::End, Step::Event)),
        };
        let event = match step {
            Ok(Step::Event(event)) => event,
            Ok(Step::Watermark(ns)) => {
                if let Some(line) = progress.as_mut().and_then(|p| p.at_edge(ns, now_ns())) {
                    eprintln!("{line}");
                }
                continue;
            }
            Ok(Step::End) => break Ok(()),
            Err(e) => break Err(e.into()),
        };
        cursor.clear();
        follower.checkpoint_bytes(&mut cursor);
        if let Err(e) = event_line(&mut text, &event, &cursor) {
            break Err(e);
        }
        if let Some(progress) = progress.as_mut() {
            progress.observe(1, follower.watermark_ns());
        }
        if !follower.has_buffered() || text.len() > 1 << 16 {
            match lines.write(std::mem::take(&mut text), &cursor).await {
                Some(empty) => text = empty,
                // The reader went away (`| head`), or writing failed:
                // `finish` says which.
                None => return Ok(()),
            }
        }
        if let Some(line) = progress
            .as_mut()
            .and_then(|p| p.line(Instant::now(), now_ns()))
        {
            eprintln!("{line}");
        }
    };
    lines.write(text, &cursor).await;
    ended
}

/// The tail's output, written by a thread of its own. A reader slow to take
/// the lines (a pipe into a slow program) then blocks that thread, never
/// the runtime: the tail stops reading the stream (the server sees it fall
/// behind) but goes on answering the server's HTTP/2 keepalive pings.
/// Written from the runtime, a blocked stdout stalled the pings too, and the
/// server closed the connection after 30 s (its keepalive's interval plus
/// timeout); the tail reconnected from its cursor, over and over, and
/// dropped out of the server's subscriber list each time.
struct Lines {
    /// Lines to write, and the cursor after the last of them (empty: none
    /// to save).
    to_writer: Option<tokio::sync::mpsc::Sender<(Vec<u8>, Vec<u8>)>>,
    /// Buffers the writer wrote, given back to be filled again.
    written: std::sync::mpsc::Receiver<Vec<u8>>,
    /// `Ok(false)` if the reader went away.
    writer: std::thread::JoinHandle<Result<bool>>,
    /// With --cursor-file: the writer saves each batch's cursor there once
    /// the batch is written.
    saves: bool,
}

impl Lines {
    fn spawn(mut out: impl Write + Send + 'static, cursor_file: Option<CursorFile>) -> Lines {
        // One buffer queued, one being written and one being filled at most.
        let (to_writer, mut queued) = tokio::sync::mpsc::channel::<(Vec<u8>, Vec<u8>)>(1);
        let (give_back, written) = std::sync::mpsc::channel();
        let saves = cursor_file.is_some();
        let writer = std::thread::spawn(move || {
            while let Some((mut text, cursor)) = queued.blocking_recv() {
                if !write_lines(&mut out, &text)? {
                    return Ok(false);
                }
                // Saved only once its lines are written: a restart then
                // never skips a line, and repeats none after a clean stop.
                if let (Some(file), false) = (&cursor_file, cursor.is_empty()) {
                    file.save(&cursor).with_context(|| {
                        format!("saving the cursor to {}", file.path().display())
                    })?;
                }
                text.clear();
                let _ = give_back.send(text);
            }
            Ok(true)
        });
        Lines {
            to_writer: Some(to_writer),
            written,
            writer,
            saves,
        }
    }

    /// Queues `text` (waiting while the writer is behind), with `cursor`,
    /// the cursor after its last line, and returns an empty buffer to fill
    /// next; `None` once the writer stopped.
    async fn write(&mut self, text: Vec<u8>, cursor: &[u8]) -> Option<Vec<u8>> {
        if text.is_empty() {
            return Some(text);
        }
        let cursor = if self.saves {
            cursor.to_vec()
        } else {
            Vec::new()
        };
        self.to_writer.as_ref()?.send((text, cursor)).await.ok()?;
        Some(
            self.written
                .try_recv()
                .unwrap_or_else(|_| Vec::with_capacity(1 << 17)),
        )
    }

    /// Waits until every queued line is written: `Ok(false)` if the reader
    /// went away first.
    fn finish(mut self) -> Result<bool> {
        self.to_writer = None;
        self.writer
            .join()
            .unwrap_or_else(|_| bail!("the thread writing to stdout panicked"))
    }
}

/// Writes tail output; `Ok(false)` when the reader went away (`| head`),
/// which ends the tail cleanly.
pub(super) fn write_lines(out: &mut impl Write, text: &[u8]) -> Result<bool> {
    match write_out(out, text) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing to stdout"),
    }
}

/// The SubscribeRequest for `args`; `now_ns` anchors `--since <duration>`.
pub(super) fn subscribe_request(args: &TailArgs, now_ns: i64) -> Result<SubscribeRequest> {
    if args.resume_truncated && args.cursor.is_none() && args.cursor_file.is_none() {
        bail!("--resume-truncated goes with --cursor or --cursor-file");
    }
    let start = if let Some(cursor) = &args.cursor {
        Start::Cursor(decode_cursor(cursor)?)
    } else if let Some(ns) = args.since_ns {
        Start::SinceNs(ns)
    } else if let Some(since) = &args.since {
        let ns = parse_since(since, now_ns)?;
        if ns > now_ns {
            bail!(
                "--since {since:?} is in the future: the tail would print nothing until then; \
                 give a time in the past, or leave out --since to start now"
            );
        }
        Start::SinceNs(ns)
    } else if args.beginning {
        Start::Beginning(true)
    } else {
        Start::Now(true)
    };
    let until_ns = match (&args.until, args.until_ns) {
        (Some(until), _) => parse_when(until, now_ns, "--until")?,
        (None, Some(ns)) => ns,
        (None, None) => 0,
    };
    if args.signature == Some(0) {
        bail!("--signature 0 means no signature; give the producer's non-zero signature");
    }
    let mut prefixes = args.prefixes.iter().cloned();
    Ok(SubscribeRequest {
        client_name: "ringfeed tail".to_owned(),
        path_prefix: prefixes.next().unwrap_or_default(),
        path_prefixes: prefixes.collect(),
        directories: args.dirs.clone(),
        exclude_prefixes: args.excludes.clone(),
        signature: args.signature.unwrap_or(0),
        start: Some(start),
        until_ns,
        ordering: if args.per_shard {
            Ordering::PerShard
        } else {
            Ordering::Merged
        } as i32,
        batching: !args.no_batching,
        chunk_mode: args.chunk_mode,
        heartbeats: args.progress,
        durable_only: args.durable_only,
        resume_truncated: args.resume_truncated,
        scope: if args.cluster {
            Scope::Cluster
        } else {
            Scope::Node
        } as i32,
        ..Default::default()
    })
}

/// Appends the line of `event`: `cursor` is the checkpoint after it in its
/// wire form (printed as URL-safe base64, which needs no JSON escaping).
pub(super) fn event_line(text: &mut Vec<u8>, event: &FollowedEvent, cursor: &[u8]) -> Result<()> {
    let start = text.len();
    text.extend_from_slice(br#"{"ts":"#);
    push_int(text, event.ts_ns);
    // Only cluster streams name the node (ids start at 1).
    if event.node != 0 {
        text.extend_from_slice(br#","node":"#);
        push_int(text, event.node);
    }
    text.extend_from_slice(br#","shard":"#);
    push_int(text, event.shard);
    text.extend_from_slice(br#","offset":"#);
    push_int(text, event.offset);
    text.extend_from_slice(br#","cursor":""#);
    push_cursor_text(text, cursor);
    text.extend_from_slice(b"\",");
    // What the event did, beside its entries (which say it only implicitly).
    let parts = event.view().parts();
    if let Some(kind) = parts.as_ref().ok().and_then(|p| p.kind()) {
        text.extend_from_slice(br#""op":""#);
        text.extend_from_slice(kind.name().as_bytes());
        text.extend_from_slice(br#"","#);
    }
    text.extend_from_slice(br#""event":"#);
    if let Err(e) = write_event_parts_json(&event.event, parts, text) {
        text.truncate(start);
        return Err(e).context("decoding an event");
    }
    text.extend_from_slice(b"}\n");
    Ok(())
}

pub(super) fn decode_cursor(text: &str) -> Result<Bytes> {
    match parse_cursor_text(text) {
        Some(bytes) => Ok(Bytes::from(bytes)),
        None if text.trim().is_empty() => bail!("--cursor is empty"),
        None => bail!(
            "--cursor {text:?} is not a cursor printed by tail (URL-safe base64) or by \
             subscribers --json (base64)"
        ),
    }
}

/// Lag (s) above which a quiet tail still reports progress.
pub(super) const QUIET_LAG_S: f64 = 3.0;

/// `--progress`: counts what arrives and says so at most once a second.
pub(super) struct Progress {
    pub(super) since: Instant,
    pub(super) events_since: u64,
    pub(super) events: u64,
    /// Latest time known delivered: last event's ts or heartbeat watermark.
    pub(super) watermark_ns: i64,
    /// "caught up" was said and the tail has not fallen behind since: live
    /// events flowing are then not progress to report.
    pub(super) caught_up: bool,
}

impl Progress {
    pub(super) fn new() -> Self {
        Self {
            since: Instant::now(),
            events_since: 0,
            events: 0,
            watermark_ns: 0,
            caught_up: false,
        }
    }

    /// `count` more events; everything stamped at or below `watermark_ns`
    /// has been printed.
    pub(super) fn observe(&mut self, count: u64, watermark_ns: i64) {
        let ts = watermark_ns;
        self.events_since += count;
        self.events += count;
        self.watermark_ns = self.watermark_ns.max(ts);
    }

    /// At the live edge (no event at hand; every event at or below
    /// `watermark_ns` printed): "caught up" once, when the lag is small,
    /// until the tail falls behind again.
    pub(super) fn at_edge(&mut self, watermark_ns: i64, now_ns: i64) -> Option<String> {
        self.observe(0, watermark_ns);
        let lag_s = now_ns.saturating_sub(self.watermark_ns) as f64 / 1e9;
        if self.caught_up || self.watermark_ns == 0 || lag_s >= QUIET_LAG_S {
            return None;
        }
        self.caught_up = true;
        Some(format!(
            "caught up: {} events, lag {lag_s:.1}s; following live",
            self.events
        ))
    }

    /// A progress line if a second has passed and the tail is still catching
    /// up (events flowed, or it lags by more than [`QUIET_LAG_S`]).
    pub(super) fn line(&mut self, now: Instant, now_ns: i64) -> Option<String> {
        let elapsed = now.duration_since(self.since);
        if elapsed < Duration::from_secs(1) {
            return None;
        }
        let lag_s =
            (self.watermark_ns > 0).then(|| now_ns.saturating_sub(self.watermark_ns) as f64 / 1e9);
        // Heartbeat watermarks trail the clock by about a heartbeat period,
        // so a quiet live tail shows ~1 s of lag: only more counts as behind.
        let far = lag_s.is_some_and(|lag| lag >= QUIET_LAG_S);
        if far {
            self.caught_up = false;
        }
        let behind = (self.events_since > 0 && !self.caught_up) || far;
        let rate = self.events_since as f64 / elapsed.as_secs_f64();
        self.since = now;
        self.events_since = 0;
        if !behind {
            return None;
        }
        let lag = match lag_s {
            Some(lag) => format!("{lag:.1}s"),
            None => "unknown".to_owned(),
        };
        Some(format!(
            "progress: {} events, {rate:.0} events/s, lag {lag}",
            self.events
        ))
    }
}
