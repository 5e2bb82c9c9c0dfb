//! The SeaweedFS view's order: events of several sources (each followed
//! filer, and ringfeed's own appends) merged by `(ts_ns, source)`, each given
//! out only once every other source's watermark has passed it. A SeaweedFS
//! client's only cursor is the `ts_ns` of the last event it got, so a client
//! that resumes after T must find every event after T, from every source,
//! and none twice: that holds when the events went out in `ts_ns` order.
//!
//! A source whose watermark has not moved for the hold (a filer down or
//! frozen; a live filer heartbeats every 5 s) is not waited for: the others
//! flow, and its events, when they come, go out late (out of order, never
//! dropped), counted.

use std::collections::VecDeque;

/// What the merge orders: anything with a time.
pub trait Timed {
    fn ts_ns(&self) -> i64;
}

impl<T: Timed> Timed for std::sync::Arc<T> {
    fn ts_ns(&self) -> i64 {
        T::ts_ns(self)
    }
}

pub struct Merge<E> {
    sources: Vec<Source<E>>,
    /// The `ts_ns` of the latest event given out.
    last_ts: i64,
    hold_ns: i64,
}

struct Source<E> {
    /// Its events not given out yet, in its `ts_ns` order.
    queue: VecDeque<E>,
    /// The time through which every event of the source is in `queue` or
    /// given out.
    watermark: i64,
    /// When (ns, this server's clock) `watermark` last moved.
    moved_at: i64,
}

impl<E: Timed> Merge<E> {
    /// `sources` sources, each with nothing known past `start` (events at or
    /// before it are not wanted), at time `now`.
    pub fn new(sources: usize, start: i64, hold_ns: i64, now: i64) -> Merge<E> {
        Merge {
            sources: (0..sources)
                .map(|_| Source {
                    queue: VecDeque::new(),
                    watermark: start,
                    moved_at: now,
                })
                .collect(),
            last_ts: start,
            hold_ns,
        }
    }

    /// An event of `source`, after the ones pushed before for it.
    pub fn push(&mut self, source: usize, event: E) {
        self.sources[source].queue.push_back(event);
    }

    /// Every event of `source` through `watermark` has been pushed.
    pub fn advance(&mut self, source: usize, watermark: i64, now: i64) {
        let s = &mut self.sources[source];
        if watermark > s.watermark {
            s.watermark = watermark;
            s.moved_at = now;
        }
    }

    /// Events pushed and not given out yet.
    pub fn queued(&self) -> usize {
        self.sources.iter().map(|s| s.queue.len()).sum()
    }

    /// Whether every source has passed `ts` (or is not waited for).
    pub fn passed(&self, ts: i64, now: i64) -> bool {
        self.sources
            .iter()
            .all(|s| s.queue.front().is_none_or(|e| e.ts_ns() > ts) && self.waits_not(s, ts, now))
    }

    fn waits_not(&self, s: &Source<E>, ts: i64, now: i64) -> bool {
        s.watermark >= ts || now - s.moved_at > self.hold_ns
    }

    /// Whether an event can be given out now.
    pub fn ready(&self, now: i64) -> bool {
        self.next(now).is_some()
    }

    /// The source whose event goes out next, if every source allows it.
    fn next(&self, now: i64) -> Option<usize> {
        let (ts, index) = self
            .sources
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.queue.front().map(|e| (e.ts_ns(), i)))
            .min()?;
        let ready = self
            .sources
            .iter()
            .enumerate()
            .all(|(i, s)| i == index || !s.queue.is_empty() || self.waits_not(s, ts, now));
        ready.then_some(index)
    }

    /// The next event to give out, if every source allows it; `true` with
    /// it when it is late (after an event with a higher `ts_ns`).
    pub fn pop(&mut self, now: i64) -> Option<(E, bool)> {
        let index = self.next(now)?;
        let event = self.sources[index].queue.pop_front()?;
        let late = event.ts_ns() < self.last_ts;
        self.last_ts = self.last_ts.max(event.ts_ns());
        Some((event, late))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct At(i64);

    impl Timed for At {
        fn ts_ns(&self) -> i64 {
            self.0
        }
    }

    fn at(ts_ns: i64) -> At {
        At(ts_ns)
    }

    fn drain(merge: &mut Merge<At>, now: i64) -> Vec<(i64, bool)> {
        std::iter::from_fn(|| merge.pop(now))
            .map(|(e, late)| (e.0, late))
            .collect()
    }

    #[test]
    fn events_go_out_in_time_order_once_every_source_has_passed() {
        let mut merge = Merge::new(2, 0, 1_000, 0);
        merge.push(0, at(10));
        merge.push(0, at(30));
        // Source 1 has said nothing past 0: nothing goes out.
        assert_eq!(drain(&mut merge, 0), vec![]);
        merge.advance(1, 15, 0);
        assert_eq!(drain(&mut merge, 0), vec![(10, false)]);
        merge.push(1, at(20));
        merge.advance(1, 25, 0);
        assert_eq!(drain(&mut merge, 0), vec![(20, false)]);
        // 30 waits for source 1's watermark; source 0's own does not matter.
        merge.advance(1, 40, 0);
        assert_eq!(drain(&mut merge, 0), vec![(30, false)]);
        assert_eq!(merge.queued(), 0);
        // Passed (an until_ns reached) needs every source's word, its own too.
        assert!(!merge.passed(40, 0));
        merge.advance(0, 40, 0);
        assert!(merge.passed(40, 0) && !merge.passed(41, 0));
    }

    #[test]
    fn equal_times_go_out_by_source() {
        let mut merge = Merge::new(2, 0, 1_000, 0);
        merge.push(1, at(5));
        merge.push(0, at(5));
        merge.advance(0, 5, 0);
        merge.advance(1, 5, 0);
        let out: Vec<_> = std::iter::from_fn(|| merge.pop(0)).collect();
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn a_source_silent_past_the_hold_is_not_waited_for_and_comes_late() {
        let mut merge = Merge::new(2, 0, 1_000, 0);
        merge.push(0, at(10));
        merge.advance(0, 50, 0);
        assert_eq!(drain(&mut merge, 1_000), vec![]);
        // Source 1 silent for longer than the hold.
        assert_eq!(drain(&mut merge, 1_001), vec![(10, false)]);
        // Its event, when it comes, goes out: late, never dropped.
        merge.push(1, at(5));
        assert_eq!(drain(&mut merge, 1_002), vec![(5, true)]);
    }
}
