//! `ringfeed append`: events from flags or JSON lines on stdin, pipelined on
//! one AppendStream; one acknowledgement line per event.

use std::io::{self, BufRead, Write};

use anyhow::{anyhow, bail, Context, Result};
use ringfeed_proto::tonic::{Code, Status};
use ringfeed_proto::v1::{AppendRequest, Durability, Entry, Event, Position};

use super::connection::{connect, Access};
use super::output::write_out;

/// Batches read from stdin but not yet handed to gRPC. With the batches in
/// flight on the stream this bounds memory while keeping the pipe full.
const APPEND_QUEUE: usize = 4;

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
    #[command(flatten)]
    pub access: Access,
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
pub(super) async fn append_with<R: BufRead>(
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
        let mut client = connect(&args.access).await?;
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

    let mut client = connect(&args.access).await?;
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
pub(super) fn report_duplicates(duplicates: u64, acked: u64, producer_id: u64) {
    if duplicates > 0 {
        eprintln!(
            "ringfeed append: {duplicates} of {acked} acknowledged event(s) were stored before \
             by producer {producer_id}; their original positions are printed, nothing was stored again"
        );
    }
}

/// The one event described by the flags of `args` (which has `--dir`).
pub(super) fn flag_event(args: &AppendArgs) -> Result<Event> {
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
        seaweedfs: None,
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
pub(super) fn read_batches(
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

pub(super) fn ack_line(position: &Position) -> String {
    format!(
        r#"{{"shard":{},"offset":{},"ts":{}}}"#,
        position.shard, position.offset, position.ts_ns
    )
}

pub(super) fn print_acks(out: &mut impl Write, positions: &[Position]) -> Result<()> {
    let mut text = String::with_capacity(positions.len() * 48);
    for position in positions {
        text.push_str(&ack_line(position));
        text.push('\n');
    }
    write_out(out, &text).context("writing to stdout")
}
