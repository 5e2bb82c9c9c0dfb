//! The simulated clients: who they are (the crowd, their patterns) and what
//! they do to their streams (connect and resume, get superseded or shut
//! down, read).

use std::sync::Arc;
use std::time::Duration;

use ringfeed_engine::sim::Broken;
use ringfeed_engine::{Cursor, Ordering, Start, SubscribeError, SubscribeRequest, Subscription};
use ringfeed_proto::tonic::Code;
use ringfeed_proto::v1;
use tokio::sync::watch;

use super::oracle::End;
use super::{ClientStream, World};
use crate::registry::Registered;
use crate::sender::StreamOptions;

/// How many clients follow the shards, and the response budget their
/// streams share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crowd {
    pub clients: usize,
    pub response_budget_bytes: usize,
}

impl Crowd {
    /// The crowd seed `seed` runs: one seed in three (`seed % 3 == 0`) 30
    /// clients on a budget of two responses; the others 6 clients on 16.
    pub fn of_seed(seed: u64) -> Crowd {
        match seed % 3 {
            0 => Crowd {
                clients: 30,
                response_budget_bytes: 2 * BATCH_MAX_BYTES,
            },
            _ => Crowd {
                clients: 6,
                response_budget_bytes: 16 * BATCH_MAX_BYTES,
            },
        }
    }
}

/// The simulated streams' largest batch (and twice their largest chunk).
pub(super) const BATCH_MAX_BYTES: usize = 4 << 10;

/// Each client's pattern, by `client index % 6`: ordering, chunk mode,
/// batching, heartbeats. The sixth is paused: it reads one response now
/// and then, so it falls behind the ring and past retention.
pub(super) const PATTERNS: [(Ordering, bool, bool, bool); 6] = [
    (Ordering::Merged, false, false, true),
    (Ordering::Merged, false, true, false),
    (Ordering::PerShard, false, true, true),
    (Ordering::Merged, true, false, true),
    (Ordering::PerShard, true, true, false),
    (Ordering::Merged, false, true, true),
];

impl World {
    /// Opens client `c`'s stream from its cursor (a new epoch), skipping a
    /// shard below retention forward explicitly, as a client told so would.
    pub(super) fn connect(&mut self, c: usize) -> Result<(), Broken> {
        let shards = self.sim.shards();
        let sub = loop {
            let client = &self.clients[c];
            let until_ns = (!client.chunk_mode && self.sim.below(4) == 0).then(|| {
                let newest = shards
                    .iter()
                    .map(|s| s.watermarks.snapshot().committed_ts)
                    .max()
                    .unwrap_or(0);
                newest + self.sim.below(50_000_000) as i64
            });
            let client = &self.clients[c];
            let request = SubscribeRequest {
                ordering: client.ordering,
                until_ns,
                ..SubscribeRequest::from(match &client.cursor {
                    Some(cursor) => Start::Cursor(cursor.clone()),
                    None => Start::Beginning,
                })
            };
            match self.sim.subscribe(request) {
                Ok(sub) => break (sub, until_ns),
                Err(SubscribeError::BelowRetention {
                    shard,
                    offset,
                    retained_from,
                    ..
                }) => {
                    let Some(mut cursor) = client.cursor.clone() else {
                        return Err((
                            "2.7 a subscription from the beginning starts at the oldest retained event",
                            format!("client {c}: refused below retention on shard {shard}"),
                        ));
                    };
                    if cursor.next_offset(shard) != offset || offset >= retained_from {
                        return Err((
                            "2.7 a cursor below the retained range is refused naming the oldest retained offset",
                            format!("client {c}: shard {shard} offset {offset}, retained from {retained_from}"),
                        ));
                    }
                    cursor = skip_to(&shards, cursor, shard, retained_from);
                    self.clients[c].cursor = Some(cursor);
                    self.sim.note(format!(
                        "client {c} skips shard {shard} to retained {retained_from}"
                    ));
                }
                Err(e) => {
                    return Err((
                        "2.6 a cursor a client received resumes",
                        format!("client {c}: {e}"),
                    ))
                }
            }
        };
        let (sub, until_ns) = sub;
        let client = &mut self.clients[c];
        client.epoch += 1;
        let registered = self.register(c)?;
        let stream = self.start(c, sub, until_ns, registered);
        self.clients[c].stream = Some(stream);
        self.outcome.streams += 1;
        self.sim
            .note(format!("client {c} connects (until {until_ns:?})"));
        Ok(())
    }

    fn register(&mut self, c: usize) -> Result<Registered, Broken> {
        let client = &self.clients[c];
        let info = v1::SubscriberInfo {
            client_name: "sim".into(),
            client_id: client.id,
            client_epoch: client.epoch,
            ..Default::default()
        };
        let (registered, superseded) = self.registry.register(info, "", 0).map_err(|s| {
            (
                "a client's next epoch registers",
                format!("client {c}: {}", s.message()),
            )
        })?;
        if superseded.is_some() {
            // A stream of this client still registered (its sender has not
            // yet seen it go): it may now end superseded.
            let epoch = self.clients[c].epoch;
            let id = self.clients[c].id;
            for stream in self.draining.iter_mut().filter(|s| s.client == id) {
                if !stream.may_fail.contains(&(Code::Cancelled, epoch)) {
                    stream.may_fail.push((Code::Cancelled, epoch));
                }
            }
        }
        Ok(registered)
    }

    fn start(
        &self,
        c: usize,
        sub: Subscription,
        until_ns: Option<i64>,
        registered: Registered,
    ) -> ClientStream {
        let client = &self.clients[c];
        let cursor = sub.cursor();
        let options = StreamOptions {
            batching: client.batching,
            heartbeat: client.heartbeat.then_some(Duration::from_millis(10)),
            chunk_mode: client.chunk_mode,
            scope: None,
        };
        let responses = self
            .streams
            .start(sub, options, registered, self.shutdown.subscribe());
        ClientStream {
            client: client.id,
            responses,
            ordering: client.ordering,
            chunk_mode: client.chunk_mode,
            until_ns,
            next: cursor.offsets().to_vec(),
            cursor,
            last_merged: None,
            heartbeat_mark: i64::MIN,
            chunks_ended: false,
            may_fail: Vec::new(),
            failed: false,
        }
    }

    /// A newer epoch of client `c` connects while its stream is open: the
    /// old stream must end CANCELLED naming the new epoch, after what it
    /// had queued.
    pub(super) fn supersede(&mut self, c: usize) -> Result<(), Broken> {
        let Some(mut old) = self.clients[c].stream.take() else {
            return Ok(());
        };
        let epoch = self.clients[c].epoch + 1;
        old.may_fail.push((Code::Cancelled, epoch));
        self.clients[c].cursor = Some(old.cursor.clone());
        self.draining.push(old);
        self.sim
            .note(format!("client {c} superseded by epoch {epoch}"));
        self.connect(c)
    }

    /// The server shuts down: every stream must end UNAVAILABLE after what
    /// it had queued; a new server life starts (clients reconnect).
    pub(super) fn shut_down(&mut self) {
        let _ = self.shutdown.send(true);
        for stream in &mut self.draining {
            stream.may_fail.push((Code::Unavailable, 0));
        }
        for client in &mut self.clients {
            if let Some(mut stream) = client.stream.take() {
                stream.may_fail.push((Code::Unavailable, 0));
                client.cursor = Some(stream.cursor.clone());
                self.draining.push(stream);
            }
        }
        self.shutdown = watch::channel(false).0;
        self.sim.note("server shuts down".into());
    }

    /// Client `c` reads up to `max` responses of its stream, each checked.
    pub(super) fn read_client(&mut self, c: usize, max: u64) -> Result<(), Broken> {
        let Some(mut stream) = self.clients[c].stream.take() else {
            return Ok(());
        };
        let ended = self.read(&mut stream, max, &format!("client {c}"))?;
        self.clients[c].cursor = Some(stream.cursor.clone());
        match ended {
            Some(End::Clean) => self.clients[c].finished = true,
            Some(End::Failed) => {}
            None => self.clients[c].stream = Some(stream),
        }
        Ok(())
    }

    pub(super) fn read_draining(&mut self) -> Result<(), Broken> {
        let mut draining = std::mem::take(&mut self.draining);
        let mut kept = Vec::new();
        for (i, mut stream) in draining.drain(..).enumerate() {
            if self
                .read(&mut stream, u64::MAX, &format!("draining stream {i}"))?
                .is_none()
            {
                kept.push(stream);
            }
        }
        kept.append(&mut self.draining);
        self.draining = kept;
        Ok(())
    }
}

/// `cursor` with `shard` moved to `to` (an explicit skip past retention).
fn skip_to(
    shards: &[Arc<ringfeed_engine::ShardShared>],
    cursor: Cursor,
    shard: u32,
    to: u64,
) -> Cursor {
    let mut next = cursor.offsets().to_vec();
    let mut gens = cursor
        .generations()
        .map_or_else(|| vec![0; next.len()], <[u32]>::to_vec);
    let s = shard as usize;
    next[s] = to;
    gens[s] = match to {
        0 => 0,
        to => shards[s].generations().of_offset(to - 1),
    };
    Cursor::with_generations(next, gens)
}
