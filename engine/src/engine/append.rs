//! Appends: a batch validated as a whole, routed to shards by a hash of its
//! directories, framed per shard on the caller's thread, given queue room,
//! sent, and answered; and the flush of every shard.

use crate::event::{validate_batch, AppendError, Durability, NewEvent, Position, Producer, Stored};
use crate::record::ProducerStamp;
use crate::shard::{AppendCommand, Command};

use super::Engine;

impl Engine {
    /// The shard a directory's events go to. Stable across restarts.
    pub fn shard_for(&self, directory: &str) -> u32 {
        crc32c::crc32c(directory.as_bytes()) % self.shard_count()
    }

    /// Appends a batch. All of it is validated first; an invalid batch appends
    /// nothing. Returns each event's position, in the batch's order.
    ///
    /// A batch spanning several shards is appended per shard: if one shard
    /// fails (back-pressure, I/O failure), events routed to others may still
    /// have been appended.
    ///
    /// Dropping the returned future (a cancelled call, a passed deadline)
    /// before a shard takes its part means that part is not applied: a shard
    /// checks that its caller still waits in the same step that stages the
    /// events (`ShardStats::abandoned` counts the ones dropped).
    pub async fn append(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<Position>, AppendError> {
        let stored = self.append_idempotent(events, durability, None).await?;
        Ok(stored.into_iter().map(|s| s.position).collect())
    }

    /// [`Engine::append`] for an idempotent producer (`None`: an ordinary
    /// append). Events stored before by the same producer and sequence are
    /// not appended again; they come back with their original position and
    /// `duplicate` set. A batch starting past the producer's next sequence
    /// is refused whole (`SequenceGap`); a shard holding a later sequence of
    /// the producer than one it is sent and does not remember refuses its
    /// part (`StaleSequence`).
    pub async fn append_idempotent(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<Vec<Stored>, AppendError> {
        let (stored, failure) = self.append_partial(events, durability, producer).await?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(stored
            .into_iter()
            .map(|p| p.expect("every event was answered"))
            .collect())
    }

    /// [`Engine::append_idempotent`], saying what was stored when a shard
    /// fails: each event's outcome if its shard appended (and, for
    /// `Durable`, acknowledged) it, and the first shard's error. `Err` means
    /// nothing was sent to any shard (the batch was refused whole).
    pub async fn append_partial(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<(Vec<Option<Stored>>, Option<AppendError>), AppendError> {
        self.append_routed(events, durability, producer, None).await
    }

    /// [`Engine::append_idempotent`] of a whole batch to one shard, whatever
    /// its directories: for a producer whose events must stay in one log, so
    /// that what survives a crash is a prefix of what it sent (recovery keeps
    /// each shard's valid prefix, 2.9) and it can resume right after its
    /// [`Engine::last_stored`] event. Subscribers see the events as any
    /// others: filters and the merge do not depend on the shard.
    pub async fn append_to_shard(
        &self,
        shard: u32,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
    ) -> Result<Vec<Stored>, AppendError> {
        assert!(shard < self.shard_count(), "no shard {shard}");
        let (stored, failure) = self
            .append_routed(events, durability, producer, Some(shard))
            .await?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(stored
            .into_iter()
            .map(|p| p.expect("every event was answered"))
            .collect())
    }

    async fn append_routed(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
        producer: Option<Producer>,
        shard: Option<u32>,
    ) -> Result<(Vec<Option<Stored>>, Option<AppendError>), AppendError> {
        let arrived = std::time::Instant::now();
        validate_batch(&events, &self.limits)?;
        let count = events.len();
        if let Some(p) = producer {
            if p.id == 0 {
                return Err(AppendError::Invalid {
                    index: 0,
                    field: "producer_id",
                    reason: "is 0, which means \"no producer\"".into(),
                });
            }
            if p.first_sequence.checked_add(count as u64).is_none() {
                return Err(AppendError::Invalid {
                    index: 0,
                    field: "first_sequence",
                    reason: format!("{} leaves no room for {count} events", p.first_sequence),
                });
            }
        }
        let stamp = |index: usize| {
            producer.map(|p| ProducerStamp {
                producer_id: p.id,
                sequence: p.first_sequence + index as u64,
            })
        };
        let stamp_len = if producer.is_some() {
            crate::record::PRODUCER_STAMP_LEN
        } else {
            0
        };
        // Route, then frame each shard's records here, on the caller's thread,
        // so the shard's core only copies and stamps them.
        let routes: Vec<usize> = events
            .iter()
            .map(|e| shard.unwrap_or_else(|| self.shard_for(&e.directory)) as usize)
            .collect();
        // Sized up front: a large batch framed into a growing Vec left a trail
        // of freed half-size buffers (fragmentation that kept peak RSS high
        // under an append flood).
        let mut sizes = vec![(0usize, 0usize); self.shards.len()];
        for (event, &shard) in events.iter().zip(&routes) {
            sizes[shard].0 += 1;
            sizes[shard].1 += event.record_len() + stamp_len;
        }
        let mut parts: Vec<(Vec<usize>, Vec<u8>)> = sizes
            .iter()
            .map(|&(count, bytes)| (Vec::with_capacity(count), Vec::with_capacity(bytes)))
            .collect();
        for (index, (event, &shard)) in events.iter().zip(&routes).enumerate() {
            let (indexes, records) = &mut parts[shard];
            let mut record = event.record(0, 0);
            record.producer = stamp(index);
            // The shard stamps it, and checksums it then.
            record.frame_unstamped(records)?;
            indexes.push(index);
        }
        drop(events);
        // Reserve queue room on every shard first: a batch is refused whole
        // or sent whole, and the commands queued for a shard stay bounded.
        for (shard, (indexes, records)) in parts.iter().enumerate() {
            if indexes.is_empty() {
                continue;
            }
            let reserved = self.shards[shard]
                .shared
                .reserve_queue(records.len(), self.max_queued_bytes);
            if let Err(e) = reserved {
                self.release_queued(parts[..shard].iter().map(|(_, r)| r.len()).enumerate());
                return Err(e);
            }
        }
        // An idempotent producer's batch is admitted (its first sequence
        // checked against the producer's next) and sent to every shard under
        // one lock, so two batches of one producer reach every shard in the
        // order they were admitted.
        let (pending, mut failure) = match producer {
            Some(p) => {
                let mut sequences = self.sequences.lock().expect("not poisoned");
                if let Err(e) = sequences.admit(p, count as u64) {
                    drop(sequences);
                    self.release_queued(parts.iter().map(|(_, r)| r.len()).enumerate());
                    return Err(e);
                }
                self.send_parts(parts, durability, arrived, true)?
            }
            None => self.send_parts(parts, durability, arrived, false)?,
        };
        let mut positions = vec![None; count];
        for (indexes, answer) in pending {
            match answer
                .recv_async()
                .await
                .unwrap_or(Err(AppendError::ShutDown))
            {
                Ok(got) => {
                    for (index, position) in indexes.into_iter().zip(got) {
                        positions[index] = Some(position);
                    }
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        Ok((positions, failure))
    }

    /// Sends each shard its part. `Err` if nothing could be sent; otherwise
    /// the parts sent (their batch indexes and where the answer comes) and
    /// the error that stopped the rest, if any. Never waits.
    #[allow(clippy::type_complexity)]
    fn send_parts(
        &self,
        parts: Vec<(Vec<usize>, Vec<u8>)>,
        durability: Durability,
        arrived: std::time::Instant,
        idempotent: bool,
    ) -> Result<
        (
            Vec<(
                Vec<usize>,
                flume::Receiver<Result<Vec<Stored>, AppendError>>,
            )>,
            Option<AppendError>,
        ),
        AppendError,
    > {
        let mut pending = Vec::new();
        let mut failure = None;
        let mut parts = parts.into_iter().enumerate();
        for (shard, (indexes, records)) in parts.by_ref() {
            if indexes.is_empty() {
                continue;
            }
            let (reply, answer) = flume::bounded(1);
            let len = records.len();
            let sent = self.send(
                shard,
                Command::Append(AppendCommand {
                    records,
                    count: indexes.len(),
                    durability,
                    arrived,
                    idempotent,
                    reply,
                }),
            );
            if let Err(e) = sent {
                // Not sent: give back its room (the shard is gone anyway).
                self.shards[shard].shared.release_queue(len);
                if pending.is_empty() {
                    self.release_queued(parts.map(|(s, (_, r))| (s, r.len())));
                    return Err(e); // nothing was sent anywhere
                }
                failure = Some(e);
                break;
            }
            pending.push((indexes, answer));
        }
        // Parts never sent (the engine shut down meanwhile) give back their room.
        self.release_queued(parts.map(|(s, (_, r))| (s, r.len())));
        Ok((pending, failure))
    }

    /// Gives back queue room reserved for parts that were never sent, as
    /// `(shard, record bytes)` (an empty part reserved nothing: 0 bytes).
    fn release_queued(&self, parts: impl Iterator<Item = (usize, usize)>) {
        for (shard, bytes) in parts {
            self.shards[shard].shared.release_queue(bytes);
        }
    }

    /// [`Engine::append`] for callers that are not async.
    pub fn append_blocking(
        &self,
        events: Vec<NewEvent>,
        durability: Durability,
    ) -> Result<Vec<Position>, AppendError> {
        futures_lite::future::block_on(self.append(events, durability))
    }

    /// Makes everything committed so far durable, on every shard.
    pub async fn flush(&self) -> Result<(), AppendError> {
        let mut answers = Vec::new();
        for shard in 0..self.shards.len() {
            let (reply, answer) = flume::bounded(1);
            self.send(shard, Command::Flush { reply })?;
            answers.push(answer);
        }
        for answer in answers {
            answer
                .recv_async()
                .await
                .map_err(|_| AppendError::ShutDown)??;
        }
        Ok(())
    }
}
