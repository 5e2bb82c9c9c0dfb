//! The `ringfeed` command line. `serve` runs the server over the engine
//! (`ringfeed_server::serve`); `token`, `tune`, `inspect` and `repair`
//! work on a server's files and machine; `append`, `tail`, `status`,
//! `subscribers` and `nodes` are clients, each a clap `Args` struct and an
//! async function that talks to a server through the client crate.
//!
//! The commands that need the engine (and so glommio) are behind the
//! `server` feature, on by default; `cargo build -p ringfeed-cli
//! --no-default-features` builds the client commands alone.
//!
//! Output is made for pipes: `append` and `tail` print one JSON object per
//! line and flush every line; diagnostics go to stderr. The printed forms are
//! a contract (scripts parse them): `{"shard":..,"offset":..,"ts":..}` per
//! acknowledged event, `{"ts":..,"shard":..,"offset":..,"cursor":"..","event":{..}}`
//! per delivered event, numbers as JSON numbers and the event in the proto3
//! JSON mapping. A tail line's cursor never skips an event when resumed from
//! (see [`TailArgs`] for the one case where it may repeat some).

#![deny(unsafe_code)]

/// mimalloc, not glibc malloc: under an append flood glibc's per-thread arenas
/// and dynamic mmap threshold kept freed batch buffers resident, and peak RSS
/// was about twice what was live (`ringfeed-bench append-flood`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
#[cfg(feature = "server")]
use std::path::PathBuf;

mod append;
mod connection;
#[cfg(feature = "server")]
mod inspect;
mod nodes;
mod output;
#[cfg(feature = "server")]
mod repair;
#[cfg(feature = "server")]
mod serve;
mod status;
mod tail;
#[cfg(test)]
mod tests;
mod time;
#[cfg(feature = "server")]
mod token;
#[cfg(feature = "server")]
mod tune;

use append::{append, AppendArgs};
use connection::exit_code;
use nodes::{nodes, NodesArgs};
use status::{status, subscribers, StatusArgs, SubscribersArgs};
use tail::{tail, TailArgs};

#[derive(Parser)]
#[command(
    name = "ringfeed",
    version,
    about = "A thread-per-core change-feed storage engine: append metadata change events, follow them from any point in time"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    #[cfg(feature = "server")]
    /// Run the server: open (and recover) the data dir, serve gRPC until SIGINT/SIGTERM,
    /// then stop accepting, flush, sync and exit 0.
    ///
    /// Prints `listening on ADDR` once it accepts connections (then `metrics on
    /// http://ADDR/metrics` with --metrics-listen, and `status page on
    /// http://ADDR/` with --http-listen). Logs go to stderr.
    Serve(serve::ServeArgs),
    /// Append events (from flags, or JSON lines on stdin) and print their positions.
    ///
    /// One event from flags:
    ///   ringfeed append --dir /photos --name cat.jpg --op create
    ///
    /// Or one proto3-JSON `Event` per line on stdin (blank lines skipped):
    ///   {"directory":"/photos","newEntry":{"name":"dog.jpg","size":"1024"}}
    ///   {"directory":"/docs","oldEntry":{"name":"a.txt"},"newEntry":{"name":"b.txt"}}
    ///
    /// Each acknowledged event prints {"shard":S,"offset":O,"ts":T}, in input order.
    #[command(verbatim_doc_comment)]
    Append(AppendArgs),
    /// Follow the feed and print one JSON line per event.
    Tail(TailArgs),
    /// Show the server's shards, watermarks and subscribers.
    Status(StatusArgs),
    /// List the connected subscribers: identity, peer, mode, lag, filters, cursor.
    Subscribers(SubscribersArgs),
    /// Show the nodes of the cluster as the server sees them, and which are up.
    Nodes(NodesArgs),
    #[cfg(feature = "server")]
    /// Tokens for `serve --token-file` (docs/security.md).
    Token {
        #[command(subcommand)]
        what: token::TokenCommand,
    },
    #[cfg(feature = "server")]
    /// Check this machine, measure its disk and recommend a configuration.
    Tune {
        #[command(subcommand)]
        what: tune::Tune,
    },
    #[cfg(feature = "server")]
    /// Print the segments, chunk counts and generations of every shard in a data dir,
    /// read-only: it changes nothing (a leftover or torn tail a server's open would
    /// repair is reported, not repaired). Beside a running server it may see the
    /// active segment mid-write. With --object-store, what a bucket holds instead.
    Inspect {
        /// The data dir to read (a server's --data-dir); nothing in it is
        /// changed, and a running server may keep it.
        #[arg(long, default_value = ringfeed_server::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// List what this object store holds (as `serve --object-store` takes it,
        /// credentials from the AWS_* environment): every node's and shard's manifest,
        /// its segments, and any object a manifest names that is missing or of
        /// another size (then the exit status is 1). Read-only.
        #[arg(long, value_name = "URL", conflicts_with = "data_dir")]
        object_store: Option<String>,
    },
    #[cfg(feature = "server")]
    /// Mend a data dir whose logs `serve` refuses for damage (a flipped bit, a
    /// zeroed block): keeps every event but those of the chunks that no longer
    /// verify, appends the events after the damage again from the first lost
    /// offset under a new generation (a cursor past the hole is then refused as
    /// truncated, as after a crash: resume it with --resume-truncated or from a
    /// time), and prints which shard, offsets and stamps were lost. Refused while
    /// a server holds the data dir. Safe to run again, also after it was cut short.
    Repair {
        /// The data dir to mend (a server's --data-dir, with the server stopped).
        #[arg(long, default_value = ringfeed_server::DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Say what would be lost and kept; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

fn main() -> std::process::ExitCode {
    let result = match Cli::parse().command {
        #[cfg(feature = "server")]
        Command::Serve(args) => serve::run(args),
        Command::Append(args) => client(append(args)),
        Command::Tail(args) => client(tail(args)),
        Command::Status(args) => client(status(args)),
        Command::Subscribers(args) => client(subscribers(args)),
        Command::Nodes(args) => client(nodes(args)),
        #[cfg(feature = "server")]
        Command::Token { what } => token::run(what),
        #[cfg(feature = "server")]
        Command::Tune { what } => tune::run(what),
        #[cfg(feature = "server")]
        Command::Inspect {
            object_store: Some(url),
            ..
        } => client(inspect::bucket(url)),
        Command::Inspect { data_dir, .. } => inspect::run(&data_dir),
        #[cfg(feature = "server")]
        Command::Repair { data_dir, dry_run } => repair::run(&data_dir, dry_run),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let (code, message) = exit_code(&e);
            eprintln!("ringfeed: {message}");
            std::process::ExitCode::from(code.clamp(1, 255) as u8)
        }
    }
}

/// Runs a client command on a small tokio runtime.
fn client(f: impl std::future::Future<Output = Result<()>>) -> Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?
        .block_on(f)
}
