//! Idempotent producers: what a shard remembers of each producer's sequence
//! numbers, so that a retried batch appends nothing and gets its original
//! positions back.
//!
//! A producer numbers its events (`first_sequence` for a batch's first event,
//! each next event one more); every record it appends carries its
//! [`ProducerStamp`]. A shard keeps, per producer, the highest sequence it
//! stored and the positions of its most recent events, as *runs*: events
//! whose sequence, offset and stamp each advance by one from the previous
//! (a batch's events of one shard are staged back to back, so a batch of one
//! directory is one run). For each event of an append the shard decides:
//!
//! - sequence above the highest stored: **new**, staged;
//! - at or below it and remembered: **duplicate**, not staged, answered with
//!   the remembered position;
//! - at or below it and not remembered (older than the runs kept, or a
//!   sequence this shard never stored because later ones came first):
//!   **stale**, and the shard's part of the batch is refused whole. Storing
//!   it would put the producer's events of one directory out of order.
//!
//! The table is rebuilt at open from the records recovery reads anyway (it
//! verifies every chunk): it holds exactly what the log holds, so an event
//! lost to a crash (memory-acknowledged, never flushed) is new again. It is
//! bounded: [`MAX_RUNS`] runs per producer, [`MAX_PRODUCERS`] producers per
//! shard (the least recently used is forgotten; a forgotten producer is
//! treated as a new one).

use std::collections::VecDeque;
use std::num::NonZeroUsize;

use lru::LruCache;

use crate::record::ProducerStamp;

/// Runs remembered per producer and shard (32 bytes each).
pub const MAX_RUNS: usize = 1024;

/// Producers remembered per shard; past it the least recently used is forgotten.
pub const MAX_PRODUCERS: usize = 1024;

/// Events whose sequence, offset and stamp each advance by one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    first_sequence: u64,
    first_offset: u64,
    first_ts: i64,
    count: u64,
}

impl Run {
    fn extends(&self, sequence: u64, offset: u64, ts: i64) -> bool {
        sequence == self.first_sequence + self.count
            && offset == self.first_offset + self.count
            && ts == self.first_ts + self.count as i64
    }

    fn get(&self, sequence: u64) -> Option<(u64, i64)> {
        let i = sequence.checked_sub(self.first_sequence)?;
        (i < self.count).then(|| (self.first_offset + i, self.first_ts + i as i64))
    }
}

#[derive(Debug, Default)]
struct Producer {
    /// Highest sequence stored on this shard.
    last: u64,
    /// Oldest first; sequences increase along it.
    runs: VecDeque<Run>,
}

/// A producer's state on one shard, as [`ProducerTable::heads`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerHead {
    pub producer_id: u64,
    /// Highest sequence stored on the shard, plus one.
    pub next_sequence: u64,
    /// Offset and stamp of the event with the highest sequence.
    pub last: Option<(u64, i64)>,
}

/// What a shard should do with one event of an idempotent producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    New,
    /// Stored before, at this offset and stamp.
    Duplicate {
        offset: u64,
        ts: i64,
    },
    /// At or below the highest sequence stored (`last`), and not remembered.
    Stale {
        last: u64,
    },
}

/// One shard's memory of its producers.
#[derive(Debug)]
pub struct ProducerTable {
    producers: LruCache<u64, Producer>,
}

impl Default for ProducerTable {
    fn default() -> ProducerTable {
        ProducerTable {
            producers: LruCache::new(NonZeroUsize::new(MAX_PRODUCERS).expect("not zero")),
        }
    }
}

impl ProducerTable {
    /// How many producers are remembered.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// Classifies one event. Does not change the table: a batch is checked
    /// whole before any of it is staged.
    pub fn check(&self, stamp: ProducerStamp) -> Seen {
        let Some(p) = self.producers.peek(&stamp.producer_id) else {
            return Seen::New;
        };
        if stamp.sequence > p.last {
            return Seen::New;
        }
        let i = p
            .runs
            .partition_point(|r| r.first_sequence <= stamp.sequence);
        match i.checked_sub(1).and_then(|i| p.runs[i].get(stamp.sequence)) {
            Some((offset, ts)) => Seen::Duplicate { offset, ts },
            None => Seen::Stale { last: p.last },
        }
    }

    /// Records a staged (or recovered) event, whose sequence the caller found
    /// new with [`ProducerTable::check`].
    pub fn record(&mut self, stamp: ProducerStamp, offset: u64, ts: i64) {
        // Past MAX_PRODUCERS this forgets the least recently used one.
        let p = self
            .producers
            .get_or_insert_mut(stamp.producer_id, Producer::default);
        if !p.runs.is_empty() && stamp.sequence <= p.last {
            // Only while rebuilding from a log: the producer had been
            // forgotten (evicted) and started over with lower numbers.
            p.runs.clear();
        }
        p.last = stamp.sequence;
        match p.runs.back_mut() {
            Some(run) if run.extends(stamp.sequence, offset, ts) => run.count += 1,
            _ => {
                if p.runs.len() >= MAX_RUNS {
                    p.runs.pop_front();
                }
                p.runs.push_back(Run {
                    first_sequence: stamp.sequence,
                    first_offset: offset,
                    first_ts: ts,
                    count: 1,
                });
            }
        }
    }

    /// Each producer's next expected sequence on this shard (highest stored
    /// + 1), and where its highest stored event is, if remembered.
    pub fn heads(&self) -> impl Iterator<Item = ProducerHead> + '_ {
        self.producers.iter().map(|(&id, p)| ProducerHead {
            producer_id: id,
            next_sequence: p.last + 1,
            last: p.runs.back().and_then(|run| run.get(p.last)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(producer_id: u64, sequence: u64) -> ProducerStamp {
        ProducerStamp {
            producer_id,
            sequence,
        }
    }

    #[test]
    fn retries_are_duplicates_and_older_unknown_sequences_are_stale() {
        let mut t = ProducerTable::default();
        // Sequences 10, 11, 12 back to back (one run), then 14 elsewhere (13
        // went to another shard).
        for (i, seq) in [10, 11, 12].into_iter().enumerate() {
            t.record(stamp(1, seq), 100 + i as u64, 1000 + i as i64);
        }
        t.record(stamp(1, 14), 200, 5000);
        assert_eq!(
            t.producers.peek(&1).unwrap().runs.len(),
            2,
            "10..=12 is one run"
        );
        assert_eq!(
            t.check(stamp(1, 11)),
            Seen::Duplicate {
                offset: 101,
                ts: 1001
            }
        );
        assert_eq!(
            t.check(stamp(1, 14)),
            Seen::Duplicate {
                offset: 200,
                ts: 5000
            }
        );
        assert_eq!(t.check(stamp(1, 13)), Seen::Stale { last: 14 });
        assert_eq!(t.check(stamp(1, 9)), Seen::Stale { last: 14 });
        assert_eq!(t.check(stamp(1, 15)), Seen::New);
        assert_eq!(t.check(stamp(2, 0)), Seen::New);
        assert_eq!(
            t.heads().collect::<Vec<_>>(),
            vec![ProducerHead {
                producer_id: 1,
                next_sequence: 15,
                last: Some((200, 5000)),
            }]
        );
    }

    #[test]
    fn memory_is_bounded_per_producer_and_per_shard() {
        let mut t = ProducerTable::default();
        // Every event its own run (offsets jump).
        for seq in 0..(MAX_RUNS as u64 + 10) {
            t.record(stamp(1, seq), seq * 2, seq as i64 * 2);
        }
        assert_eq!(t.producers.peek(&1).unwrap().runs.len(), MAX_RUNS);
        assert_eq!(
            t.check(stamp(1, 0)),
            Seen::Stale {
                last: MAX_RUNS as u64 + 9
            }
        );
        assert!(matches!(t.check(stamp(1, 10)), Seen::Duplicate { .. }));
        for id in 2..(MAX_PRODUCERS as u64 + 5) {
            t.record(stamp(id, 0), 0, 0);
        }
        assert_eq!(t.len(), MAX_PRODUCERS);
        // Producer 1 was used least recently: forgotten, so new again.
        assert_eq!(t.check(stamp(1, 0)), Seen::New);
    }
}
