//! Merging the feeds of several sources (a cluster's `(node, shard)`s) into
//! one, late but never lost (docs/design.md 7).
//!
//! Each source hands over its events in its own order, each stamped higher
//! than the one before, and a *bound*: a stamp at or below which it will
//! never hand over another event (a peer's claimed watermark, carried on its
//! heartbeats). An event is delivered in `(ts, source)` order once every
//! other source either has an event queued (ordered after it) or is bound at
//! or above its stamp.
//!
//! A source that blocks the merge (nothing queued, bound below the next
//! event's stamp) holds it for at most `peer_hold`; then it is *skipped*:
//! the merge goes on without it, and its events, when they come, are
//! delivered at once, marked late, in its own order. It rejoins the merge
//! once it has caught up (its next event, or its bound, is past what the
//! merge delivered). Nothing is dropped and nothing repeated: every event
//! pushed is popped exactly once, each source's in order. The caller owns
//! time (`now_ns` arguments) and I/O, so the merge is deterministic and
//! tested alone; [`Merge::deadline`] says when to look again while a source
//! holds it (never spinning).

use std::collections::VecDeque;

/// A source of a merged feed: a shard of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SourceId {
    pub node: u32,
    pub shard: u32,
}

/// What [`Merge::pop`] hands out.
#[derive(Debug, PartialEq, Eq)]
pub struct Popped<E> {
    /// Index of the source (as given to [`Merge::new`]).
    pub source: usize,
    pub ts: i64,
    pub event: E,
    /// Delivered below the merged order: its source was skipped for
    /// holding the merge longer than `peer_hold`.
    pub late: bool,
}

struct Source<E> {
    id: SourceId,
    queue: VecDeque<(i64, E)>,
    /// No event at or below this will be pushed (beyond those queued).
    bound: i64,
    /// Stamp of the last event pushed (each must be above it).
    last_ts: i64,
    /// Since when it has held the merge, if it does.
    holding_since: Option<u64>,
    /// Skipped: the key `(ts, source)` the merge was waiting to deliver
    /// when it was.
    skipped: Option<(i64, SourceId)>,
}

/// The merge of several sources' feeds; `E` is the caller's event.
pub struct Merge<E> {
    sources: Vec<Source<E>>,
    peer_hold_ns: u64,
    /// Key `(ts, source id)` of the last event delivered in order.
    delivered: Option<(i64, SourceId)>,
    /// The stamp of the event the merge waits to deliver, while sources hold it.
    held_at: Option<i64>,
}

impl<E> Merge<E> {
    /// A merge of `sources` (distinct ids), each bound at `i64::MIN`.
    pub fn new(sources: &[SourceId], peer_hold_ns: u64) -> Merge<E> {
        let mut merge = Merge {
            sources: Vec::with_capacity(sources.len()),
            peer_hold_ns,
            delivered: None,
            held_at: None,
        };
        for &id in sources {
            merge.add_source(id);
        }
        merge
    }

    /// Adds a source to a running merge (a node joining) and returns its
    /// index. Its events at or below where the merge stands are delivered
    /// late: it starts skipped at the last event delivered, and rejoins the
    /// order once it has caught up, as a skipped source does, so it never
    /// holds the merge before it has said anything. Before anything was
    /// delivered it is an ordinary source.
    pub fn add_source(&mut self, id: SourceId) -> usize {
        assert!(
            self.sources.iter().all(|s| s.id != id),
            "source {id:?} is in the merge already"
        );
        self.sources.push(Source {
            id,
            queue: VecDeque::new(),
            bound: i64::MIN,
            last_ts: i64::MIN,
            holding_since: None,
            skipped: self.delivered,
        });
        self.sources.len() - 1
    }

    /// Queues the next event of `source`; its stamp must be above the
    /// source's previous one and above its bound.
    pub fn push(&mut self, source: usize, ts: i64, event: E) {
        let s = &mut self.sources[source];
        assert!(
            ts > s.last_ts && ts > s.bound,
            "source {:?}: event stamped {ts} after {} (bound {})",
            s.id,
            s.last_ts,
            s.bound
        );
        s.last_ts = ts;
        s.queue.push_back((ts, event));
    }

    /// `source` will push nothing stamped at or below `bound` (bounds only
    /// rise; a lower one is ignored).
    pub fn bound(&mut self, source: usize, bound: i64) {
        let s = &mut self.sources[source];
        s.bound = s.bound.max(bound);
    }

    /// The next event to deliver now, if any.
    pub fn pop(&mut self, now_ns: u64) -> Option<Popped<E>> {
        self.rejoin();
        // Late events first: they are below the order already delivered,
        // and holding them back would only make them later.
        if let Some(i) = self
            .sources
            .iter()
            .position(|s| s.skipped.is_some() && !s.queue.is_empty())
        {
            let (ts, event) = self.sources[i].queue.pop_front().expect("not empty");
            return Some(Popped {
                source: i,
                ts,
                event,
                late: true,
            });
        }
        loop {
            let candidate = self
                .sources
                .iter()
                .enumerate()
                .filter(|(_, s)| s.skipped.is_none())
                .filter_map(|(i, s)| s.queue.front().map(|&(ts, _)| ((ts, s.id), i)))
                .min();
            self.held_at = None;
            let Some(((ts, id), i)) = candidate else {
                for s in &mut self.sources {
                    s.holding_since = None; // nothing waits on anyone
                }
                return None;
            };
            let mut held = false;
            let mut skipped_one = false;
            for s in self.sources.iter_mut().filter(|s| s.skipped.is_none()) {
                // Bound at or above `ts`: its later events are stamped above
                // `ts`, so come after (ties need no source order).
                if !s.queue.is_empty() || s.bound >= ts {
                    s.holding_since = None;
                    continue;
                }
                let since = *s.holding_since.get_or_insert(now_ns);
                if now_ns.saturating_sub(since) >= self.peer_hold_ns {
                    s.skipped = Some((ts, id));
                    s.holding_since = None;
                    skipped_one = true;
                } else {
                    held = true;
                }
            }
            if held {
                self.held_at = Some(ts);
                return None;
            }
            if skipped_one {
                continue; // the candidate stands; look again without them
            }
            let (ts, event) = self.sources[i].queue.pop_front().expect("the candidate");
            self.delivered = Some((ts, id));
            return Some(Popped {
                source: i,
                ts,
                event,
                late: false,
            });
        }
    }

    /// A skipped source rejoins once nothing it can still push lies at or
    /// below where the merge stands (what it delivered, or was about to
    /// deliver when it skipped the source): its next event is past that, or,
    /// with none queued, its bound has reached it.
    fn rejoin(&mut self) {
        for s in &mut self.sources {
            let Some(skipped_at) = s.skipped else {
                continue;
            };
            let stands = self.delivered.map_or(skipped_at, |d| d.max(skipped_at));
            let caught_up = match s.queue.front() {
                Some(&(ts, _)) => (ts, s.id) > stands,
                None => s.bound >= stands.0,
            };
            if caught_up {
                s.skipped = None;
            }
        }
    }

    /// When a source holding the merge will have held it for `peer_hold`:
    /// call [`Merge::pop`] then, unless something arrives first.
    pub fn deadline(&self) -> Option<u64> {
        self.sources
            .iter()
            .filter_map(|s| s.holding_since)
            .min()
            .map(|since| since.saturating_add(self.peer_hold_ns))
    }

    /// The sources the merge goes on without (held it past `peer_hold` and
    /// not caught up since).
    pub fn skipped(&self) -> impl Iterator<Item = SourceId> + '_ {
        self.sources
            .iter()
            .filter(|s| s.skipped.is_some())
            .map(|s| s.id)
    }

    /// The stamp of the event the merge waits to deliver while
    /// [`Merge::holding`] sources hold it: their bounds must reach it (a
    /// caller asks them to claim up to it).
    pub fn held_at(&self) -> Option<i64> {
        self.held_at
    }

    /// The sources holding the merge now.
    pub fn holding(&self) -> impl Iterator<Item = SourceId> + '_ {
        self.sources
            .iter()
            .filter(|s| s.holding_since.is_some())
            .map(|s| s.id)
    }

    /// Every event stamped at or below this has been delivered (or will
    /// never come): each source's next queued event is above it, and a
    /// source with none queued is bound at or above it. Skipped sources
    /// count too, so it never claims past a late event still to come.
    pub fn watermark(&self) -> i64 {
        self.sources
            .iter()
            .map(|s| match s.queue.front() {
                Some(&(ts, _)) => ts - 1,
                None => s.bound,
            })
            .min()
            .unwrap_or(i64::MIN)
    }

    /// Events queued and not yet delivered, over all sources.
    pub fn queued(&self) -> usize {
        self.sources.iter().map(|s| s.queue.len()).sum()
    }
}
