//! A shard: one core's ring, flush queue and log, run on its own glommio executor.
//!
//! Three tasks share the shard's state on its core. The command loop stamps
//! and frames each append batch into the ring and publishes the committed
//! watermark in one non-yielding step, then announces it to readers once (the
//! engine's wake relay wakes them, see [`wake`]). The flusher
//! writes unflushed window suffixes as chunks (group commit), syncs, stores the
//! flushed watermark, and only then wakes durable-ack and flush waiters. The
//! ticker asks for a flush every flush interval, makes claims for idle merges
//! and runs retention. After a failed write or sync the shard latches: it
//! acknowledges nothing more until the engine is reopened.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use event_listener::Event;

pub(crate) mod core;
mod driver;
mod flusher;
mod shared;
mod ticker;
pub(crate) mod wake;

use self::core::{CoreLimits, ShardCore};
use self::driver::Driver;
use self::flusher::flusher;
pub use self::shared::{ShardShared, ShardStats};
use self::ticker::ticker;
pub use self::wake::{Readers, Waiter};
pub(crate) use self::wake::{Relay, RelayThread};
use crate::clock::Clock;
use crate::event::{AppendError, Durability, Stored};
use crate::log::{Log, LogConfig, RecoveryReport};
use crate::retention::RetentionPolicy;
use crate::storage::Storage;
use crate::RecoveryError;

pub(crate) type Reply<T> = flume::Sender<T>;

pub(crate) enum Command {
    Append(AppendCommand),
    /// Flush everything committed so far; reply when it is durable.
    Flush {
        reply: Reply<Result<(), AppendError>>,
    },
    /// Run on the shard's thread, inside its executor (see
    /// [`crate::Engine::run_on_shard`]).
    Run(Box<dyn FnOnce() + Send>),
}

/// One shard's part of an append.
pub(crate) struct AppendCommand {
    /// Records framed by the caller, back to back, not yet stamped.
    pub records: Vec<u8>,
    pub count: usize,
    pub durability: Durability,
    /// When the append reached the engine: `append_timeout` counts from here.
    pub arrived: Instant,
    /// The records carry producer stamps: each is checked against the
    /// shard's producer table (see `crate::producer`).
    pub idempotent: bool,
    /// The caller waits on this; once it is gone (its future dropped: a
    /// cancelled stream, a passed deadline) the append is not applied.
    pub reply: Reply<Result<Vec<Stored>, AppendError>>,
}

/// Settings of one shard.
#[derive(Clone, Debug)]
pub(crate) struct ShardConfig {
    pub log: LogConfig,
    pub window_bytes: usize,
    pub ring_bytes: usize,
    pub max_unflushed_bytes: usize,
    pub flush_interval: Duration,
    pub append_timeout: Duration,
    pub retention: RetentionPolicy,
    pub retention_interval: Duration,
}

/// Opens the shard's log and runs the shard until its command channel closes;
/// then flushes, syncs and closes the log. `ready` gets the recovery outcome.
pub(crate) async fn run<S: Storage + 'static>(
    storage: S,
    config: ShardConfig,
    shared: Arc<ShardShared>,
    clock: Arc<dyn Clock>,
    commands: flume::Receiver<Command>,
    ready: flume::Sender<
        Result<(RecoveryReport, Vec<crate::producer::ProducerHead>), RecoveryError>,
    >,
) {
    let files = storage.reader();
    let (mut log, report) = match Log::open(storage, config.log.clone()).await {
        Ok(opened) => opened,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    shared.attach(files, log.generations().clone());
    let (core, heads) = ShardCore::over_opened_log(shared.clone(), core_limits(&config), &mut log);
    let _ = ready.send(Ok((report, heads)));

    let core = Rc::new(Driver {
        config,
        core: RefCell::new(core),
        clock,
        wake_flusher: Event::new(),
        wake_ticker: Event::new(),
    });
    let flusher = glommio::spawn_local(flusher(log, core.clone()));
    let ticker = glommio::spawn_local(ticker(core.clone()));
    let driver = &*core;

    // Nothing here polls: a command wakes this task through flume's waker (a
    // foreign wake-up from the caller's thread). Before the glommio patch
    // (engine/vendor/PATCHES.md) such a wake-up could be slept through, and a
    // 10 ms timer here plus a signal every 50 ms papered over it.
    while let Ok(command) = commands.recv_async().await {
        match command {
            Command::Append(append) => {
                let len = append.records.len();
                driver.append(append).await;
                shared.release_queue(len);
                // glommio reaps I/O completions only when a task queue runs dry or
                // its preempt timer fires; a busy command queue would otherwise
                // hold the flusher's finished writes back for the whole timer.
                glommio::yield_if_needed().await;
            }
            Command::Flush { reply } => driver.flush(reply),
            Command::Run(start) => start(),
        }
    }
    driver.core.borrow_mut().close();
    driver.wake_flusher.notify(usize::MAX);
    let _ = ticker.cancel().await;
    flusher.await;
}

fn core_limits(config: &ShardConfig) -> CoreLimits {
    CoreLimits {
        window_bytes: config.window_bytes,
        ring_bytes: config.ring_bytes,
        max_unflushed_bytes: config.max_unflushed_bytes,
        round_bytes: config.log.max_unsynced_bytes as usize,
    }
}
