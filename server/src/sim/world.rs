//! The simulated server and its clients, stepped: random client moves, the
//! sender tasks run on the paused clock, and the quiesce rounds at the end.

use std::collections::hash_map::DefaultHasher;
use std::hash::Hasher;
use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::sim::{Broken, Sim, SimConfig};
use tokio::sync::watch;

use super::clients::{Crowd, BATCH_MAX_BYTES, PATTERNS};
use super::{Client, StreamOutcome, World};
use crate::metrics::ServerMetrics;
use crate::registry::Registry;
use crate::sender::{Admission, Streams, SubscriberLimits};
use crate::shared::Groups;

impl World {
    pub(super) fn new(seed: u64, config: &SimConfig) -> World {
        let sim = Sim::new(seed, config);
        let crowd = Crowd::of_seed(seed);
        let limits = SubscriberLimits {
            batch_max_events: 16,
            batch_max_bytes: BATCH_MAX_BYTES,
            queue_responses: 4,
            response_budget_bytes: crowd.response_budget_bytes,
            backlog_readers: 2,
            chunk_max_bytes: BATCH_MAX_BYTES / 2,
            send_buffer_bytes: 4 << 10,
            ..SubscriberLimits::default()
        };
        let metrics = Arc::new(ServerMetrics::default());
        let streams = Streams {
            shards: sim.shards().into(),
            admission: Arc::new(Admission::new(&limits, metrics.clone())),
            limits: Arc::new(limits),
            metrics,
            groups: Groups::default(),
        };
        let clients = (0..crowd.clients)
            .map(|i| {
                let (ordering, chunk_mode, batching, heartbeat) = PATTERNS[i % PATTERNS.len()];
                Client {
                    paused: i % PATTERNS.len() == 5,
                    id: i as u64 + 1,
                    epoch: 0,
                    ordering,
                    chunk_mode,
                    batching,
                    heartbeat,
                    pace: u64::MAX,
                    stream: None,
                    cursor: None,
                    finished: false,
                }
            })
            .collect();
        World {
            sim,
            streams,
            registry: Arc::new(Registry::default()),
            shutdown: watch::channel(false).0,
            clients,
            draining: Vec::new(),
            digest: DefaultHasher::new(),
            outcome: StreamOutcome::default(),
        }
    }

    pub(super) fn outcome(&self) -> StreamOutcome {
        StreamOutcome {
            digest: self.digest.finish(),
            shared_responses: self.streams.metrics.shared_responses_reused(),
            ..self.outcome.clone()
        }
    }

    pub(super) async fn step(&mut self) -> Result<(), Broken> {
        if self.sim.restarts() > 0 {
            return Err((
                "the stream simulation runs without restarts",
                "a restart happened: its faults are filtered by stream_faults".into(),
            ));
        }
        let c = self.sim.below(self.clients.len() as u64) as usize;
        let paused = self.clients[c].paused;
        match self.sim.below(1000) {
            // The paused client keeps its stream, so it meets retention.
            _ if paused => {}
            // A disconnect: the client drops its stream; it resumes later.
            0..=29 if self.clients[c].stream.take().is_some() => {
                self.sim.note(format!("client {c} disconnects"));
            }
            30..=79 => {
                let pace = match self.sim.below(3) {
                    0 => 0,
                    1 => 1,
                    _ => u64::MAX,
                };
                self.clients[c].pace = pace;
                self.sim.note(format!("client {c} reads {pace} per step"));
            }
            80..=89 => self.supersede(c)?,
            90 if self.sim.below(4) == 0 => self.shut_down(),
            _ => {}
        }
        // Clients without a stream come back now and then.
        for c in 0..self.clients.len() {
            let client = &self.clients[c];
            if client.stream.is_none() && !client.finished && self.sim.below(20) == 0 {
                self.connect(c)?;
            }
        }
        self.run_for(Duration::from_millis(1)).await;
        for c in 0..self.clients.len() {
            let pace = match self.clients[c].paused {
                true => u64::from(self.sim.below(30) == 0),
                false => self.clients[c].pace,
            };
            self.read_client(c, pace)?;
        }
        self.read_draining()?;
        Ok(())
    }

    /// Lets the sender tasks run, then moves the runtime's clock by `by`
    /// (heartbeat timers fire as it passes them).
    async fn run_for(&mut self, by: Duration) {
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
        tokio::time::advance(by).await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }

    /// Faults have stopped and the shards are flushed: every client reads
    /// everything; each stream catches up with every shard (liveness).
    pub(super) async fn quiesce_round(&mut self) -> Result<bool, Broken> {
        for client in &mut self.clients {
            client.pace = u64::MAX;
            client.paused = false;
        }
        {
            for c in 0..self.clients.len() {
                if self.clients[c].stream.is_none() && !self.clients[c].finished {
                    self.connect(c)?;
                }
            }
            self.run_for(Duration::from_millis(1)).await;
            // Fast clients: read, let the senders refill, until nothing comes.
            loop {
                let before = self.outcome.clone();
                for c in 0..self.clients.len() {
                    self.read_client(c, u64::MAX)?;
                }
                self.read_draining()?;
                if self.outcome == before {
                    break;
                }
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
            }
            let shards = self.sim.shards();
            let committed: Vec<u64> = shards
                .iter()
                .map(|s| s.watermarks.committed_next())
                .collect();
            let caught_up = self.clients.iter().all(|client| {
                client.finished || client.stream.as_ref().is_some_and(|s| s.next == committed)
            });
            Ok(caught_up && self.draining.is_empty())
        }
    }

    /// Still behind after every quiesce round.
    pub(super) fn stuck(&self) -> Result<(), Broken> {
        let at: Vec<_> = self
            .clients
            .iter()
            .map(|c| {
                let stream = c.stream.as_ref().map(|s| {
                    format!(
                        "at {:?} until {:?} may fail {:?}",
                        s.next, s.until_ns, s.may_fail
                    )
                });
                format!(
                    "client {}: {}",
                    c.id - 1,
                    stream.unwrap_or_else(|| format!("no stream (finished: {})", c.finished))
                )
            })
            .collect();
        let committed: Vec<u64> = self
            .sim
            .shards()
            .iter()
            .map(|s| s.watermarks.committed_next())
            .collect();
        Err((
            "liveness: once faults stop, every stream catches up and every ended stream ends",
            format!(
                "committed {committed:?}; {}; {} stream(s) still draining",
                at.join("; "),
                self.draining.len()
            ),
        ))
    }
}
