//! The client half of the `ringfeed` command line: `append`, `tail` and
//! `status`, each a clap `Args` struct and an async function that talks to a
//! server through the generated `RingFeedClient`.
//!
//! Output is made for pipes: `append` and `tail` print one JSON object per
//! line and flush every line; diagnostics go to stderr. The printed forms are
//! a contract (scripts parse them): `{"shard":..,"offset":..,"ts":..}` per
//! acknowledged event, `{"ts":..,"shard":..,"offset":..,"cursor":"..","event":{..}}`
//! per delivered event, numbers as JSON numbers and the event in the proto3
//! JSON mapping. A tail line's cursor never skips an event when resumed from
//! (see [`TailArgs`] for the one case where it may repeat some).

use std::fmt::Write as _;
use std::io::{self, BufRead, Write};
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::{anyhow, bail, Context, Result};
use base64::alphabet;
use base64::engine::{DecodePaddingMode, Engine as _, GeneralPurpose, GeneralPurposeConfig};
use ringfeed_proto::bytes::Bytes;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::v1::subscribe_request::Start;
use ringfeed_proto::v1::{
    AppendRequest, Durability, Entry, Event, ListSubscribersRequest, Ordering, Position,
    ShardStatus, StatusRequest, StatusResponse, SubscribeRequest, SubscriberInfo,
};
use ringfeed_proto::RingFeedClient;

use crate::client::{Backoff, FollowedEvent, Follower};

const DEFAULT_SERVER: &str = "127.0.0.1:7070";

/// Largest response the client decodes (tonic's default is 4 MiB). A batch of
/// large events can exceed that; the server's own limits are the real bound.
const MAX_RESPONSE_BYTES: usize = 256 << 20;

/// Batches read from stdin but not yet handed to gRPC. With the batches in
/// flight on the stream this bounds memory while keeping the pipe full.
const APPEND_QUEUE: usize = 4;

/// Cursor text: URL-safe base64. Printed without padding; padding is
/// accepted on input so a cursor copied from elsewhere still works.
const CURSOR_B64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new()
        .with_encode_padding(false)
        .with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

// ---------------------------------------------------------------- append

/// What the flag-built event does to the entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Op {
    /// The entry appears: new_entry only.
    Create,
    /// The entry changes in place: old_entry and new_entry, same name.
    Update,
    /// The entry disappears: old_entry only.
    Delete,
    /// The entry moves: old_entry, new_entry named --new-name (default: the
    /// same name), new_parent_path = --new-dir (if given).
    Rename,
}

/// Append events: one built from flags (`--dir`, `--name`, `--op`), or, when
/// `--dir` is absent, JSON lines on stdin, one proto3-JSON `Event` per line
/// (e.g. `{"directory":"/a","newEntry":{"name":"f"}}`; blank lines are
/// skipped). Prints `{"shard":S,"offset":O,"ts":T}` per acknowledged event,
/// in input order.
#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    /// Server address (a URI with a scheme is also accepted).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Absolute directory of the one event to append. Without it, events are
    /// read as JSON lines from stdin.
    #[arg(long, value_name = "DIR", requires_all = ["name", "op"])]
    pub dir: Option<String>,
    /// Name of the entry the event is about (with --dir).
    #[arg(long, value_name = "NAME", requires = "dir")]
    pub name: Option<String>,
    /// What happened to the entry (with --dir).
    #[arg(long, value_enum, requires = "dir")]
    pub op: Option<Op>,
    /// For --op rename: the directory the entry moved to (new_parent_path).
    #[arg(long, value_name = "DIR", requires = "dir")]
    pub new_dir: Option<String>,
    /// For --op rename: the entry's new name (default: unchanged).
    #[arg(long, value_name = "NAME", requires = "dir")]
    pub new_name: Option<String>,
    /// Producer signature to record on the event (with --dir); repeat for
    /// several.
    #[arg(long = "signature", value_name = "N", requires = "dir")]
    pub signatures: Vec<i32>,
    /// Acknowledge only once the events are fdatasync'ed (DURABILITY_DURABLE:
    /// survives power loss). Default: DURABILITY_MEMORY, acknowledged once
    /// visible to subscribers.
    #[arg(long)]
    pub durable: bool,
    /// Events per Append request when reading stdin. Batches are pipelined on
    /// one AppendStream; a refused batch stops the run (earlier batches stay
    /// appended).
    #[arg(long, value_name = "N", default_value_t = 1024,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Append as idempotent producer ID (any number but 0, the same each time
    /// this producer runs): events are numbered from --first-sequence in
    /// input order, and events ringfeed stored before under the same ID and
    /// number are not stored again. Replaying the same input with the same ID
    /// and --first-sequence prints the same acknowledgements and stores
    /// nothing new (stderr says how many were already stored).
    #[arg(long, value_name = "ID",
          value_parser = clap::value_parser!(u64).range(1..))]
    pub producer_id: Option<u64>,
    /// Sequence number of the first event read (with --producer-id); each
    /// next event takes the next number. Default 0.
    #[arg(long, value_name = "N", requires = "producer_id")]
    pub first_sequence: Option<u64>,
}

/// Appends per `args` and prints one line per acknowledged event on stdout.
pub async fn append(args: AppendArgs) -> Result<()> {
    let stdin = io::stdin();
    append_with(args, move || stdin.lock(), &mut io::stdout()).await
}

/// [`append`] with its input and output given. `input` is opened (called)
/// only when events come from stdin, on the thread that reads them.
async fn append_with<R: BufRead>(
    args: AppendArgs,
    input: impl FnOnce() -> R + Send + 'static,
    out: &mut (impl Write + Send),
) -> Result<()> {
    let durability = if args.durable {
        Durability::Durable
    } else {
        Durability::Memory
    } as i32;
    let producer_id = args.producer_id.unwrap_or(0);
    let mut next_sequence = args.first_sequence.unwrap_or(0);
    if args.dir.is_some() {
        let event = flag_event(&args)?;
        let mut client = connect(&args.server).await?;
        let response = client
            .append(AppendRequest {
                events: vec![event],
                durability,
                producer_id,
                first_sequence: next_sequence,
            })
            .await?
            .into_inner();
        print_acks(out, &response.positions)?;
        report_duplicates(response.duplicates.into(), 1, producer_id);
        return Ok(());
    }

    let (tx, rx) = tokio::sync::mpsc::channel::<AppendRequest>(APPEND_QUEUE);
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let batch = args.batch as usize;
    // A plain thread: stdin reads block, and blocking_send must not run on a
    // runtime thread.
    std::thread::spawn(move || {
        let read = read_batches(input(), batch, |events| {
            // Numbered only for a producer (a sequence without one is refused).
            let first_sequence = if producer_id == 0 { 0 } else { next_sequence };
            next_sequence += events.len() as u64;
            tx.blocking_send(AppendRequest {
                events,
                durability,
                producer_id,
                first_sequence,
            })
            .is_ok()
        });
        // `tx` is dropped here (with the closure), which ends the request
        // stream; only then is the result reported.
        let _ = done_tx.send(read);
    });

    let mut client = connect(&args.server).await?;
    let requests = tokio_stream::wrappers::ReceiverStream::new(rx);
    let mut acks = client.append_stream(requests).await?.into_inner();
    let mut acked = 0u64;
    let mut duplicates = 0u64;
    // After a failure, the requests grouped with it that were stored in full
    // are still acknowledged before the stream's status: print them all,
    // then report the first failure.
    let mut first_failure: Option<Status> = None;
    loop {
        let ack = match acks.message().await {
            Ok(Some(ack)) => ack,
            Ok(None) => break,
            Err(status) => {
                if first_failure.is_none() {
                    first_failure = Some(status);
                }
                break;
            }
        };
        if let Some(failure) = ack.failure {
            let stored = if failure.stored.is_empty() {
                String::new()
            } else {
                let at: Vec<String> = failure
                    .stored_indexes
                    .iter()
                    .zip(&failure.stored)
                    .map(|(i, p)| format!("event {i} at shard {} offset {}", p.shard, p.offset))
                    .collect();
                format!(" (stored anyway: {})", at.join(", "))
            };
            let message = format!("{}{stored}", failure.message);
            first_failure.get_or_insert(Status::new(Code::from(failure.code), message));
            continue;
        }
        print_acks(out, &ack.positions)?;
        acked += ack.positions.len() as u64;
        duplicates += u64::from(ack.duplicates);
    }
    report_duplicates(duplicates, acked, producer_id);
    if let Some(status) = first_failure {
        return Err(status.into());
    }
    // Dropping the call releases the request stream, so a reader still
    // blocked on a full queue (a server that ended early) gets unstuck.
    drop(acks);
    drop(client);
    let sent = done_rx
        .await
        .map_err(|_| anyhow!("the stdin reader died"))??;
    if acked != sent {
        bail!("the server acknowledged {acked} of {sent} events sent");
    }
    Ok(())
}

/// Says on stderr how many acknowledged events an idempotent producer had
/// stored before (stdout, the acknowledgements, is the same either way).
fn report_duplicates(duplicates: u64, acked: u64, producer_id: u64) {
    if duplicates > 0 {
        eprintln!(
            "ringfeed append: {duplicates} of {acked} acknowledged event(s) were stored before \
             by producer {producer_id}; their original positions are printed, nothing was stored again"
        );
    }
}

/// The one event described by the flags of `args` (which has `--dir`).
fn flag_event(args: &AppendArgs) -> Result<Event> {
    let (Some(dir), Some(name), Some(op)) = (&args.dir, &args.name, args.op) else {
        bail!("--dir needs --name and --op");
    };
    let entry = |name: &str| Entry {
        name: name.to_owned(),
        ..Default::default()
    };
    if op != Op::Rename && (args.new_dir.is_some() || args.new_name.is_some()) {
        bail!("--new-dir and --new-name only go with --op rename");
    }
    let (old_entry, new_entry, new_parent_path) = match op {
        Op::Create => (None, Some(entry(name)), String::new()),
        Op::Delete => (Some(entry(name)), None, String::new()),
        Op::Update => (Some(entry(name)), Some(entry(name)), String::new()),
        Op::Rename => {
            if args.new_dir.is_none() && args.new_name.is_none() {
                bail!("--op rename needs --new-dir and/or --new-name");
            }
            (
                Some(entry(name)),
                Some(entry(args.new_name.as_deref().unwrap_or(name))),
                args.new_dir.clone().unwrap_or_default(),
            )
        }
    };
    Ok(Event {
        directory: dir.clone(),
        old_entry,
        new_entry,
        new_parent_path,
        signatures: args.signatures.clone(),
    })
}

/// Reads one proto3-JSON `Event` per line from `input` and hands them to
/// `send` in batches of at most `batch`, in input order; blank lines are
/// skipped. `send` returning false (nobody is listening any more) stops the
/// reading quietly. Returns the number of events handed over.
///
/// A line that is not an Event is an error naming its line number, and the
/// batch holding it is never handed over (nor anything after it), so a bad
/// line appends nothing that was not already sent.
fn read_batches(
    input: impl BufRead,
    batch: usize,
    mut send: impl FnMut(Vec<Event>) -> bool,
) -> Result<u64> {
    let mut sent = 0u64;
    let mut pending = Vec::with_capacity(batch.min(4096));
    for (index, line) in input.lines().enumerate() {
        let number = index + 1;
        let line = line.with_context(|| format!("reading stdin line {number}"))?;
        if line.trim().is_empty() {
            continue;
        }
        let event: Event = serde_json::from_str(&line)
            .with_context(|| format!("stdin line {number} is not an Event"))?;
        pending.push(event);
        if pending.len() == batch {
            let n = pending.len() as u64;
            if !send(std::mem::take(&mut pending)) {
                return Ok(sent);
            }
            sent += n;
        }
    }
    if !pending.is_empty() {
        let n = pending.len() as u64;
        if send(pending) {
            sent += n;
        }
    }
    Ok(sent)
}

fn ack_line(position: &Position) -> String {
    format!(
        r#"{{"shard":{},"offset":{},"ts":{}}}"#,
        position.shard, position.offset, position.ts_ns
    )
}

fn print_acks(out: &mut impl Write, positions: &[Position]) -> Result<()> {
    let mut text = String::with_capacity(positions.len() * 48);
    for position in positions {
        text.push_str(&ack_line(position));
        text.push('\n');
    }
    write_out(out, &text).context("writing to stdout")
}

// ------------------------------------------------------------------ tail

/// Follow the feed, like `weed filer.meta.tail`: prints
/// `{"ts":T,"shard":S,"offset":O,"cursor":"C","event":{..}}` per event (the
/// event in proto3 JSON) and exits 0 when the stream ends after --until.
///
/// `cursor` resumes (with --cursor) right after its line, also inside
/// batches and chunks. The tail reconnects by itself after a lost connection
/// or a server restart (backoff 1 s, x1.6, capped at 2 min) and resumes
/// exactly, with no line missed or repeated; errors a retry cannot fix
/// (OUT_OF_RANGE, INVALID_ARGUMENT, FAILED_PRECONDITION when a server crash
/// lost events the cursor covers, ...) end it with their gRPC code.
#[derive(clap::Args, Debug)]
pub struct TailArgs {
    /// Server address (a URI with a scheme is also accepted).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_SERVER)]
    pub server: String,
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
    /// Resume exactly after the line that printed this cursor. Without any
    /// start flag the tail starts now: only new events.
    #[arg(long, value_name = "CURSOR", group = "start_at")]
    pub cursor: Option<String>,
    /// Start at the oldest retained event.
    #[arg(long, group = "start_at")]
    pub beginning: bool,
    /// Stop (exit 0) after the last event stamped at or before this RFC 3339
    /// time. Default: follow forever.
    #[arg(long, value_name = "TIME", group = "stop_at")]
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
    /// Let the server pack events into batches while catching up; every
    /// event still prints its own line. Default: one event per response.
    #[arg(long)]
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
    /// With --cursor: if a server crash lost events this cursor had already
    /// printed (the tail then exits 9, FAILED_PRECONDITION, "truncated by a
    /// crash"), continue from where the feed survived instead. The lines
    /// printed past that point before the crash are to be taken back.
    #[arg(long, requires = "cursor")]
    pub resume_truncated: bool,
    /// Print progress on stderr, at most once a second while catching up:
    /// events so far, events/s, lag (now minus the last event's or
    /// heartbeat's time). Asks the server for heartbeats.
    #[arg(long)]
    pub progress: bool,
}

/// Follows the feed per `args`, printing one line per event on stdout.
pub async fn tail(args: TailArgs) -> Result<()> {
    tail_to(args, &mut io::stdout()).await
}

async fn tail_to(args: TailArgs, out: &mut (impl Write + Send)) -> Result<()> {
    let request = subscribe_request(&args, now_ns())?;
    let mut progress = args.progress.then(Progress::new);
    // An unreachable server at the start is an error, not something to wait for.
    connect(&args.server).await?;
    let mut follower = Follower::new(&args.server, request, Backoff::default())?;
    let mut text = String::new();
    while let Some(event) = follower.next().await? {
        let cursor = follower
            .cursor()
            .map(|c| CURSOR_B64.encode(c.to_bytes()))
            .unwrap_or_default();
        event_line(&mut text, &event, &cursor)?;
        if let Some(progress) = progress.as_mut() {
            progress.observe(1, follower.watermark_ns());
        }
        // Write when nothing more is at hand, so a batch is one write.
        if follower.buffered() == 0 || text.len() > 1 << 16 {
            if !write_lines(out, &text)? {
                return Ok(());
            }
            text.clear();
        }
        if let Some(line) = progress
            .as_mut()
            .and_then(|p| p.line(Instant::now(), now_ns()))
        {
            eprintln!("{line}");
        }
    }
    write_lines(out, &text).map(drop)
}

/// Writes tail output; `Ok(false)` when the reader went away (`| head`),
/// which ends the tail cleanly.
fn write_lines(out: &mut impl Write, text: &str) -> Result<bool> {
    match write_out(out, text) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e).context("writing to stdout"),
    }
}

/// Writes `text` and flushes.
fn write_out(out: &mut impl Write, text: &str) -> io::Result<()> {
    out.write_all(text.as_bytes()).and_then(|()| out.flush())
}

/// The SubscribeRequest for `args`; `now_ns` anchors `--since <duration>`.
fn subscribe_request(args: &TailArgs, now_ns: i64) -> Result<SubscribeRequest> {
    let start = if let Some(cursor) = &args.cursor {
        Start::Cursor(decode_cursor(cursor)?)
    } else if let Some(ns) = args.since_ns {
        Start::SinceNs(ns)
    } else if let Some(since) = &args.since {
        Start::SinceNs(parse_since(since, now_ns)?)
    } else if args.beginning {
        Start::Beginning(true)
    } else {
        Start::Now(true)
    };
    let until_ns = match (&args.until, args.until_ns) {
        (Some(until), _) => parse_timestamp(until).with_context(|| format!("--until {until:?}"))?,
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
        batching: args.batching,
        chunk_mode: args.chunk_mode,
        heartbeats: args.progress,
        durable_only: args.durable_only,
        resume_truncated: args.resume_truncated,
        ..Default::default()
    })
}

fn event_line(text: &mut String, event: &FollowedEvent, cursor: &str) -> Result<()> {
    let decoded = event.decode().context("decoding an event")?;
    // serde_json::to_string keeps the proto field order (to_value would sort
    // the keys); the JSON is the same either way.
    let json = serde_json::to_string(&decoded).context("encoding an event as JSON")?;
    // The cursor is URL-safe base64: nothing in it needs JSON escaping.
    let _ = writeln!(
        text,
        r#"{{"ts":{},"shard":{},"offset":{},"cursor":"{}","event":{}}}"#,
        event.ts_ns, event.shard, event.offset, cursor, json
    );
    Ok(())
}

fn decode_cursor(text: &str) -> Result<Bytes> {
    let bytes = CURSOR_B64.decode(text.trim()).with_context(|| {
        format!("--cursor {text:?} is not a cursor printed by tail (URL-safe base64)")
    })?;
    if bytes.is_empty() {
        bail!("--cursor is empty");
    }
    Ok(Bytes::from(bytes))
}

/// `--since`: a duration back from `now_ns`, or an RFC 3339 time.
fn parse_since(text: &str, now_ns: i64) -> Result<i64> {
    if let Ok(back) = humantime::parse_duration(text.trim()) {
        let back = i64::try_from(back.as_nanos()).unwrap_or(i64::MAX);
        return Ok(now_ns.saturating_sub(back).max(0));
    }
    parse_timestamp(text).with_context(|| {
        format!("--since {text:?} is neither a duration (\"1h\", \"30m\") nor an RFC 3339 time")
    })
}

/// An RFC 3339 time ("2026-11-29T10:00:00.5Z", "2026-11-29 10:00:00+02:00")
/// as ns since the Unix epoch. humantime reads only UTC, so a numeric offset
/// is split off and applied here.
fn parse_timestamp(text: &str) -> Result<i64> {
    let text = text.trim();
    let (utc, offset_s) = split_utc_offset(text)?;
    let time = humantime::parse_rfc3339_weak(utc)
        .map_err(|e| anyhow!("{text:?} is not an RFC 3339 time: {e}"))?;
    let since_epoch = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| anyhow!("{text:?} is before 1970"))?;
    let ns = i64::try_from(since_epoch.as_nanos())
        .map_err(|_| anyhow!("{text:?} is too far in the future"))?;
    Ok(ns - offset_s * 1_000_000_000)
}

/// Splits `2026-11-29T12:00:00+02:00` into the time and +7200 s. A trailing
/// `Z` (or nothing, which humantime's weak parser reads as UTC) is offset 0.
fn split_utc_offset(text: &str) -> Result<(&str, i64)> {
    let bytes = text.as_bytes();
    // The date part is 10 bytes; an offset is the last 6 after it.
    if bytes.len() > 16 {
        let at = bytes.len() - 6;
        let sign = match bytes[at] {
            b'+' => 1,
            b'-' => -1,
            _ => return Ok((text.strip_suffix(['Z', 'z']).unwrap_or(text), 0)),
        };
        let (hours, minutes) = (&text[at + 1..at + 3], &text[at + 4..]);
        if bytes[at + 3] != b':' {
            bail!("{text:?}: a UTC offset is written +HH:MM");
        }
        let hours: i64 = hours
            .parse()
            .with_context(|| format!("{text:?}: bad UTC offset"))?;
        let minutes: i64 = minutes
            .parse()
            .with_context(|| format!("{text:?}: bad UTC offset"))?;
        return Ok((&text[..at], sign * (hours * 3600 + minutes * 60)));
    }
    Ok((text.strip_suffix(['Z', 'z']).unwrap_or(text), 0))
}

/// Lag (s) above which a quiet tail still reports progress.
const QUIET_LAG_S: f64 = 3.0;

/// `--progress`: counts what arrives and says so at most once a second.
struct Progress {
    since: Instant,
    events_since: u64,
    events: u64,
    /// Latest time known delivered: last event's ts or heartbeat watermark.
    watermark_ns: i64,
}

impl Progress {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            events_since: 0,
            events: 0,
            watermark_ns: 0,
        }
    }

    /// `count` more events; everything stamped at or below `watermark_ns`
    /// has been printed.
    fn observe(&mut self, count: u64, watermark_ns: i64) {
        let ts = watermark_ns;
        self.events_since += count;
        self.events += count;
        self.watermark_ns = self.watermark_ns.max(ts);
    }

    /// A progress line if a second has passed and the tail is still catching
    /// up (events flowed, or it lags by more than [`QUIET_LAG_S`]).
    fn line(&mut self, now: Instant, now_ns: i64) -> Option<String> {
        let elapsed = now.duration_since(self.since);
        if elapsed < Duration::from_secs(1) {
            return None;
        }
        let lag_s =
            (self.watermark_ns > 0).then(|| now_ns.saturating_sub(self.watermark_ns) as f64 / 1e9);
        // Heartbeat watermarks trail the clock by about a heartbeat period,
        // so a quiet live tail shows ~1 s of lag: only more counts as behind.
        let behind = self.events_since > 0 || lag_s.is_some_and(|lag| lag >= QUIET_LAG_S);
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

// ---------------------------------------------------------------- subscribers

/// List the connected subscription streams: client name, id and epoch, peer
/// address, mode (waiting for admission, chunks, backlog, live), lag in
/// events and seconds, events sent, connected since, filters and cursor.
#[derive(clap::Args, Debug)]
pub struct SubscribersArgs {
    /// Server address (a URI with a scheme is also accepted).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Print the ListSubscribersResponse as one proto3-JSON object instead of
    /// a table (64-bit numbers are strings, the cursor is standard base64).
    #[arg(long)]
    pub json: bool,
}

/// Prints the server's subscribers per `args` on stdout.
pub async fn subscribers(args: SubscribersArgs) -> Result<()> {
    let mut client = connect(&args.server).await?;
    let list = client
        .list_subscribers(ListSubscribersRequest {})
        .await?
        .into_inner();
    let text = if args.json {
        serde_json::to_string(&list).context("encoding the subscribers as JSON")? + "\n"
    } else {
        subscribers_table(&list.subscribers)
    };
    write_out(&mut io::stdout(), &text).context("writing to stdout")
}

// ---------------------------------------------------------------- status

/// Show the server's per-shard watermarks, ring and flush state, and its
/// subscribers.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Server address (a URI with a scheme is also accepted).
    #[arg(long, value_name = "HOST:PORT", default_value = DEFAULT_SERVER)]
    pub server: String,
    /// Print the StatusResponse as one proto3-JSON object instead of tables
    /// (64-bit numbers are strings there, as the mapping says).
    #[arg(long)]
    pub json: bool,
}

/// Prints the server's status per `args` on stdout.
pub async fn status(args: StatusArgs) -> Result<()> {
    let mut client = connect(&args.server).await?;
    let status = client.status(StatusRequest {}).await?.into_inner();
    let mut out = io::stdout();
    let text = if args.json {
        serde_json::to_string(&status).context("encoding the status as JSON")? + "\n"
    } else {
        let subscribers = match client.list_subscribers(ListSubscribersRequest {}).await {
            Ok(response) => Some(response.into_inner().subscribers),
            // An older server: the count in the status is all there is.
            Err(status) if status.code() == Code::Unimplemented => None,
            Err(status) => return Err(status.into()),
        };
        render_status(&status, subscribers.as_deref())
    };
    write_out(&mut out, &text).context("writing to stdout")
}

fn render_status(status: &StatusResponse, subscribers: Option<&[SubscriberInfo]>) -> String {
    let mut text = format!(
        "ringfeed {} at {}: {} shard{}, {} subscriber{}\n\n",
        if status.version.is_empty() {
            "?"
        } else {
            &status.version
        },
        format_ts(status.now_ns),
        status.shards.len(),
        plural(status.shards.len() as u64),
        status.subscribers,
        plural(status.subscribers),
    );
    let rows: Vec<Vec<String>> = status.shards.iter().map(shard_row).collect();
    text.push_str(&table(
        &[
            ("shard", Align::Right),
            ("committed", Align::Right),
            ("flushed", Align::Right),
            ("evicted", Align::Right),
            ("retained", Align::Right),
            ("ring bytes", Align::Right),
            ("unflushed bytes", Align::Right),
            ("segments", Align::Right),
            ("last committed", Align::Left),
            ("latched", Align::Left),
        ],
        &rows,
    ));
    text.push_str(
        "(committed/flushed = first offset not yet committed/durable; evicted = ring holds offsets from here; retained = oldest offset on disk)\n",
    );
    if let Some(subscribers) = subscribers {
        text.push('\n');
        text.push_str(&subscribers_table(subscribers));
    }
    text
}

/// The subscribers as a table, or "no subscribers".
fn subscribers_table(subscribers: &[SubscriberInfo]) -> String {
    if subscribers.is_empty() {
        return "no subscribers\n".to_owned();
    }
    let rows: Vec<Vec<String>> = subscribers.iter().map(subscriber_row).collect();
    table(
        &[
            ("client", Align::Left),
            ("id", Align::Right),
            ("epoch", Align::Right),
            ("peer", Align::Left),
            ("mode", Align::Left),
            ("lag events", Align::Right),
            ("lag s", Align::Right),
            ("sent", Align::Right),
            ("connected since", Align::Left),
            ("filters", Align::Left),
            ("cursor", Align::Left),
        ],
        &rows,
    )
}

fn shard_row(shard: &ShardStatus) -> Vec<String> {
    vec![
        shard.shard.to_string(),
        shard.committed_next.to_string(),
        shard.flushed_next.to_string(),
        shard.evicted_below.to_string(),
        shard.retained_from.to_string(),
        shard.ring_bytes.to_string(),
        shard.unflushed_bytes.to_string(),
        shard.segment_count.to_string(),
        format_ts(shard.committed_ts_ns),
        if shard.latched.is_empty() {
            "-".to_owned()
        } else {
            shard.latched.clone()
        },
    ]
}

fn subscriber_row(s: &SubscriberInfo) -> Vec<String> {
    let mut filters = Vec::new();
    if !s.path_prefix.is_empty() {
        filters.push(format!("prefix={}", s.path_prefix));
    }
    filters.extend(s.path_prefixes.iter().map(|p| format!("prefix={p}")));
    filters.extend(s.directories.iter().map(|d| format!("dir={d}")));
    filters.extend(s.exclude_prefixes.iter().map(|p| format!("exclude={p}")));
    if s.signature != 0 {
        filters.push(format!("signature={}", s.signature));
    }
    if s.ordering == Ordering::PerShard as i32 {
        filters.push("per-shard".to_owned());
    }
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            s.to_owned()
        }
    };
    vec![
        or_dash(&s.client_name),
        s.client_id.to_string(),
        s.client_epoch.to_string(),
        or_dash(&s.peer),
        or_dash(&s.mode),
        s.lag_events.to_string(),
        format!("{:.3}", s.lag_seconds),
        s.events_sent.to_string(),
        format_ts(s.connected_since_ns),
        if filters.is_empty() {
            "-".to_owned()
        } else {
            filters.join(" ")
        },
        or_dash(&CURSOR_B64.encode(&s.cursor)),
    ]
}

#[derive(Clone, Copy)]
enum Align {
    Left,
    Right,
}

/// Columns padded to their widest cell, two spaces apart.
fn table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = headers.iter().map(|(h, _)| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, ((cell, width), (_, align))) in row.iter().zip(&widths).zip(headers).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = match align {
                Align::Left => write!(line, "{cell:<width$}"),
                Align::Right => write!(line, "{cell:>width$}"),
            };
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// An RFC 3339 UTC time (microseconds), or "-" for 0 ("none").
fn format_ts(ns: i64) -> String {
    match u64::try_from(ns) {
        Ok(ns) if ns > 0 => {
            humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
        }
        _ => "-".to_owned(),
    }
}

// ---------------------------------------------------------------- common

async fn connect(server: &str) -> Result<RingFeedClient<Channel>> {
    let uri = if server.contains("://") {
        server.to_owned()
    } else {
        format!("http://{server}")
    };
    let client = RingFeedClient::connect(uri.clone())
        .await
        .with_context(|| format!("connecting to {uri}"))?;
    Ok(client.max_decoding_message_size(MAX_RESPONSE_BYTES))
}

use ringfeed_engine::clock::now_ns;

/// Exit code and one-line message for an error from the functions above:
/// a gRPC status -> (its numeric code, "error: <CODE_NAME>: <message>");
/// anything else -> (1, "error: ...").
pub fn exit_code(err: &anyhow::Error) -> (i32, String) {
    let one_line = |s: &str| s.replace(['\n', '\r'], " ");
    if let Some(status) = err.chain().find_map(|e| e.downcast_ref::<Status>()) {
        let code = status.code();
        // Code::Ok as an error would exit 0; it cannot happen, but never lie.
        if code != Code::Ok {
            return (
                code as i32,
                format!("error: {}: {}", code_name(code), one_line(status.message())),
            );
        }
    }
    (1, format!("error: {}", one_line(&format!("{err:#}"))))
}

/// The canonical name of a gRPC status code, as in the gRPC spec.
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use ringfeed_proto::prost::Message;

    #[derive(Parser, Debug)]
    enum Cli {
        Append(AppendArgs),
        Tail(TailArgs),
        Status(StatusArgs),
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("ringfeed").chain(args.iter().copied()))
    }

    fn append_args(args: &[&str]) -> AppendArgs {
        let mut all = vec!["append"];
        all.extend_from_slice(args);
        match parse(&all).expect("parse") {
            Cli::Append(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn tail_args(args: &[&str]) -> TailArgs {
        let mut all = vec!["tail"];
        all.extend_from_slice(args);
        match parse(&all).expect("parse") {
            Cli::Tail(a) => a,
            other => panic!("{other:?}"),
        }
    }

    fn entry(name: &str) -> Option<Entry> {
        Some(Entry {
            name: name.into(),
            ..Default::default()
        })
    }

    #[test]
    fn help_documents_every_flag() {
        use clap::CommandFactory;
        for sub in ["append", "tail", "status"] {
            let mut cmd = Cli::command();
            let cmd = cmd.find_subcommand_mut(sub).expect("subcommand");
            for arg in cmd.get_arguments() {
                if matches!(arg.get_id().as_str(), "help" | "version") {
                    continue;
                }
                assert!(
                    arg.get_help().is_some_and(|h| !h.to_string().is_empty()),
                    "{sub} --{} has no help",
                    arg.get_id()
                );
            }
        }
    }

    #[test]
    fn defaults() {
        let a = append_args(&[]);
        assert_eq!(a.server, "127.0.0.1:7070");
        assert_eq!(a.batch, 1024);
        assert!(!a.durable && a.dir.is_none());
        match parse(&["status", "--server", "h:1", "--json"]).expect("parse") {
            Cli::Status(s) => assert!(s.json && s.server == "h:1"),
            other => panic!("{other:?}"),
        }
        let request = subscribe_request(&tail_args(&[]), 5).expect("request");
        assert_eq!(request.start, Some(Start::Now(true)));
        assert_eq!(request.until_ns, 0);
        assert_eq!(request.ordering, Ordering::Merged as i32);
        assert!(!request.batching && !request.heartbeats);
    }

    #[test]
    fn flag_events_map_ops_to_entries() {
        let event = |args: &[&str]| flag_event(&append_args(args));
        assert_eq!(
            event(&[
                "--dir",
                "/a",
                "--name",
                "f",
                "--op",
                "create",
                "--signature",
                "3",
                "--signature",
                "4"
            ])
            .expect("create"),
            Event {
                directory: "/a".into(),
                new_entry: entry("f"),
                signatures: vec![3, 4],
                ..Default::default()
            }
        );
        assert_eq!(
            event(&["--dir", "/a", "--name", "f", "--op", "delete"]).expect("delete"),
            Event {
                directory: "/a".into(),
                old_entry: entry("f"),
                ..Default::default()
            }
        );
        assert_eq!(
            event(&["--dir", "/a", "--name", "f", "--op", "update"]).expect("update"),
            Event {
                directory: "/a".into(),
                old_entry: entry("f"),
                new_entry: entry("f"),
                ..Default::default()
            }
        );
        assert_eq!(
            event(&[
                "--dir",
                "/a",
                "--name",
                "f",
                "--op",
                "rename",
                "--new-dir",
                "/b"
            ])
            .expect("move"),
            Event {
                directory: "/a".into(),
                old_entry: entry("f"),
                new_entry: entry("f"),
                new_parent_path: "/b".into(),
                ..Default::default()
            }
        );
        assert_eq!(
            event(&[
                "--dir",
                "/a",
                "--name",
                "f",
                "--op",
                "rename",
                "--new-name",
                "g"
            ])
            .expect("rename"),
            Event {
                directory: "/a".into(),
                old_entry: entry("f"),
                new_entry: entry("g"),
                ..Default::default()
            }
        );
        assert!(event(&["--dir", "/a", "--name", "f", "--op", "rename"]).is_err());
        assert!(event(&[
            "--dir",
            "/a",
            "--name",
            "f",
            "--op",
            "create",
            "--new-name",
            "g"
        ])
        .is_err());
    }

    #[test]
    fn flag_event_flags_need_each_other() {
        assert!(parse(&["append", "--dir", "/a", "--op", "create"]).is_err());
        assert!(parse(&["append", "--dir", "/a", "--name", "f"]).is_err());
        assert!(parse(&["append", "--name", "f"]).is_err());
        assert!(parse(&["append", "--signature", "1"]).is_err());
        assert!(parse(&["append", "--dir", "/a", "--name", "f", "--op", "move"]).is_err());
        assert!(parse(&["append", "--batch", "0"]).is_err());
    }

    fn batches(input: &str, batch: usize) -> (Result<u64>, Vec<Vec<Event>>) {
        let mut got = Vec::new();
        let result = read_batches(input.as_bytes(), batch, |events| {
            got.push(events);
            true
        });
        (result, got)
    }

    fn dir_event(dir: &str) -> Event {
        Event {
            directory: dir.into(),
            new_entry: entry("f"),
            ..Default::default()
        }
    }

    #[test]
    fn json_lines_are_batched_in_order() {
        let input = "{\"directory\":\"/1\",\"newEntry\":{\"name\":\"f\"}}\n\n   \n\
                     {\"directory\":\"/2\",\"new_entry\":{\"name\":\"f\"}}\n\
                     {\"directory\":\"/3\",\"newEntry\":{\"name\":\"f\"}}";
        let (result, got) = batches(input, 2);
        assert_eq!(result.expect("read"), 3);
        assert_eq!(
            got,
            vec![
                vec![dir_event("/1"), dir_event("/2")],
                vec![dir_event("/3")]
            ]
        );
        let (result, got) = batches("", 2);
        assert_eq!(result.expect("read"), 0);
        assert!(got.is_empty());
    }

    #[test]
    fn a_bad_line_names_its_number_and_sends_nothing_of_its_batch() {
        let good = "{\"directory\":\"/1\",\"newEntry\":{\"name\":\"f\"}}\n";
        let input = format!("{good}{good}{good}{{\"directory\":\"/4\",\"newEntri\":{{}}}}\n{good}");
        let (result, got) = batches(&input, 2);
        let err = format!("{:#}", result.expect_err("bad line accepted"));
        assert!(err.contains("stdin line 4"), "{err}");
        assert!(err.contains("newEntri"), "{err}");
        // Lines 1-2 went as a batch; line 3 shared a batch with line 4.
        assert_eq!(got, vec![vec![dir_event("/1"), dir_event("/1")]]);
    }

    #[test]
    fn reading_stops_when_nobody_listens() {
        let good = "{\"directory\":\"/1\"}\n".repeat(5);
        let mut calls = 0;
        let sent = read_batches(good.as_bytes(), 2, |_| {
            calls += 1;
            calls < 2
        })
        .expect("read");
        assert_eq!((sent, calls), (2, 2));
    }

    #[test]
    fn ack_lines_are_numbers() {
        let line = ack_line(&Position {
            shard: 1,
            offset: 18446744073709551615,
            ts_ns: 1_700_000_000_123_456_789,
        });
        assert_eq!(
            line,
            r#"{"shard":1,"offset":18446744073709551615,"ts":1700000000123456789}"#
        );
        let value: serde_json::Value = serde_json::from_str(&line).expect("json");
        assert!(value["shard"].is_u64() && value["offset"].is_u64() && value["ts"].is_i64());
    }

    #[test]
    fn tail_filters_and_bounds() {
        let request = subscribe_request(
            &tail_args(&[
                "--prefix",
                "/a",
                "--prefix",
                "/b",
                "--prefix",
                "/c",
                "--exclude",
                "/a/tmp",
                "--dir",
                "/d",
                "--since-ns",
                "42",
                "--until-ns",
                "99",
                "--per-shard",
                "--signature",
                "7",
                "--progress",
            ]),
            0,
        )
        .expect("request");
        assert_eq!(request.path_prefix, "/a");
        assert_eq!(request.path_prefixes, ["/b", "/c"]);
        assert_eq!(request.exclude_prefixes, ["/a/tmp"]);
        assert_eq!(request.directories, ["/d"]);
        assert_eq!(request.start, Some(Start::SinceNs(42)));
        assert_eq!(request.until_ns, 99);
        assert_eq!(request.ordering, Ordering::PerShard as i32);
        assert_eq!(request.signature, 7);
        assert!(request.heartbeats);

        let start = |args: &[&str]| {
            subscribe_request(&tail_args(args), 10_000_000_000_000).map(|r| r.start)
        };
        assert_eq!(
            start(&["--beginning"]).expect("beginning"),
            Some(Start::Beginning(true))
        );
        assert_eq!(
            start(&["--since", "1h"]).expect("since 1h"),
            Some(Start::SinceNs(10_000_000_000_000 - 3_600_000_000_000))
        );
        assert_eq!(
            start(&["--since", "1970-01-01T00:00:01.5Z"]).expect("since time"),
            Some(Start::SinceNs(1_500_000_000))
        );
        assert_eq!(
            start(&["--cursor", "AAEC_w"]).expect("cursor"),
            Some(Start::Cursor(Bytes::from_static(&[0, 1, 2, 255])))
        );
        assert!(start(&["--since", "yesterday-ish"]).is_err());
        assert!(start(&["--cursor", "not base64!"]).is_err());
        assert!(start(&["--signature", "0"]).is_err());
        assert!(parse(&["tail", "--beginning", "--since", "1h"]).is_err());
        assert!(parse(&["tail", "--cursor", "AA", "--since-ns", "1"]).is_err());
        assert!(parse(&["tail", "--until", "2026-01-01T00:00:00Z", "--until-ns", "1"]).is_err());
        assert!(parse(&["tail", "--until-ns", "0"]).is_err());
        let until = subscribe_request(&tail_args(&["--until", "2026-11-29T10:00:00Z"]), 0)
            .expect("until")
            .until_ns;
        assert_eq!(until, 1_795_946_400_000_000_000);
    }

    #[test]
    fn timestamps_with_offsets() {
        let utc = parse_timestamp("2026-11-29T10:00:00Z").expect("utc");
        assert_eq!(
            parse_timestamp("2026-11-29T12:00:00+02:00").expect("+2"),
            utc
        );
        assert_eq!(
            parse_timestamp("2026-11-29T08:30:00-01:30").expect("-1:30"),
            utc
        );
        assert_eq!(
            parse_timestamp("2026-11-29 10:00:00").expect("space, no zone"),
            utc
        );
        assert_eq!(
            parse_timestamp("2026-11-29T10:00:00.000000001Z").expect("ns"),
            utc + 1
        );
        assert!(parse_timestamp("2026-11-29T12:00:00+0200").is_err());
        assert!(parse_timestamp("1h").is_err());
    }

    #[test]
    fn tail_lines_are_one_json_object_per_event() {
        let event = FollowedEvent {
            ts_ns: 1000,
            shard: 1,
            offset: 0,
            event: dir_event("/a").encode_to_vec().into(),
        };
        let mut text = String::new();
        event_line(&mut text, &event, "AQ").expect("event");
        assert_eq!(
            text,
            "{\"ts\":1000,\"shard\":1,\"offset\":0,\"cursor\":\"AQ\",\"event\":{\"directory\":\"/a\",\"newEntry\":{\"name\":\"f\"}}}\n"
        );
        let garbage = FollowedEvent {
            event: Bytes::from_static(&[0xff]),
            ..event
        };
        assert!(event_line(&mut text, &garbage, "AQ").is_err());
    }

    #[test]
    fn progress_speaks_at_most_once_a_second_while_behind() {
        let mut progress = Progress::new();
        let t0 = progress.since;
        let now_ns = 100_000_000_000;
        progress.observe(1, 1000);
        assert!(progress
            .line(t0 + Duration::from_millis(500), now_ns)
            .is_none());
        let line = progress
            .line(t0 + Duration::from_secs(2), now_ns)
            .expect("line");
        assert!(
            line.starts_with("progress: 1 events, 0 events/s, lag 100.0s"),
            "{line}"
        );
        // Caught up and quiet: silent.
        progress.observe(0, now_ns - 1000);
        assert!(progress.line(t0 + Duration::from_secs(4), now_ns).is_none());
        // Quiet with a heartbeat period of lag: still silent; far behind: speaks.
        assert!(progress
            .line(t0 + Duration::from_secs(6), now_ns + 1_500_000_000)
            .is_none());
        let line = progress
            .line(t0 + Duration::from_secs(8), now_ns + 10_000_000_000)
            .expect("behind");
        assert!(line.ends_with("lag 10.0s"), "{line}");
        // Nothing known yet: nothing to say.
        assert!(Progress::new()
            .line(Instant::now() + Duration::from_secs(2), now_ns)
            .is_none());
    }

    #[test]
    fn exit_codes_follow_grpc_status() {
        let err = anyhow::Error::from(Status::out_of_range("cursor 5 on shard 0\nis gone"));
        assert_eq!(
            exit_code(&err),
            (
                11,
                "error: OUT_OF_RANGE: cursor 5 on shard 0 is gone".to_owned()
            )
        );
        let err = anyhow::Error::from(Status::invalid_argument("events[0].directory: relative"))
            .context("appending");
        assert_eq!(
            exit_code(&err),
            (
                3,
                "error: INVALID_ARGUMENT: events[0].directory: relative".to_owned()
            )
        );
        let err = anyhow!("stdin line 4 is not an Event").context("append");
        assert_eq!(
            exit_code(&err),
            (1, "error: append: stdin line 4 is not an Event".to_owned())
        );
    }

    #[test]
    fn status_renders_as_tables() {
        let status = StatusResponse {
            shards: vec![
                ShardStatus {
                    shard: 0,
                    committed_next: 1200,
                    committed_ts_ns: 1_795_946_400_000_000_000,
                    flushed_next: 1100,
                    evicted_below: 1000,
                    ring_bytes: 8 << 20,
                    unflushed_bytes: 4096,
                    segment_count: 2,
                    ..Default::default()
                },
                ShardStatus {
                    shard: 1,
                    latched: "fdatasync failed: EIO".into(),
                    ..Default::default()
                },
            ],
            subscribers: 1,
            now_ns: 1_795_946_401_000_000_000,
            version: "0.1.0".into(),
        };
        let subscriber = SubscriberInfo {
            client_name: "ringfeed tail".into(),
            peer: "127.0.0.1:5000".into(),
            path_prefix: "/a".into(),
            exclude_prefixes: vec!["/a/tmp".into()],
            mode: "live".into(),
            lag_seconds: 0.25,
            events_sent: 7,
            cursor: vec![0x52, 0x43, 0x01].into(),
            ..Default::default()
        };
        let text = render_status(&status, Some(&[subscriber]));
        let expected = "\
ringfeed 0.1.0 at 2026-11-29T10:00:01.000000Z: 2 shards, 1 subscriber

shard  committed  flushed  evicted  retained  ring bytes  unflushed bytes  segments  last committed               latched
    0       1200     1100     1000         0     8388608             4096         2  2026-11-29T10:00:00.000000Z  -
    1          0        0        0         0           0                0         0  -                            fdatasync failed: EIO
(committed/flushed = first offset not yet committed/durable; evicted = ring holds offsets from here; retained = oldest offset on disk)

client         id  epoch  peer            mode  lag events  lag s  sent  connected since  filters                   cursor
ringfeed tail   0      0  127.0.0.1:5000  live           0  0.250     7  -                prefix=/a exclude=/a/tmp  UkMB
";
        assert_eq!(text, expected, "\n{text}");
        assert!(render_status(&status, Some(&[])).ends_with("\nno subscribers\n"));
    }
}
