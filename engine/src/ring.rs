//! The ring: a shard's in-memory windows, oldest first, the last one active.
//!
//! The shard frames records into the active window; the flusher writes each
//! window's unflushed suffix as a chunk; a window leaves the ring only when it
//! is sealed, entirely flushed, and the ring is over its byte budget (flush
//! before evict: `evicted <= flushed`, always). Readers on other threads see
//! the windows through [`RingView`], a snapshot of `Arc<Window>`s.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use crate::chunk::ChunkDescription;
use crate::record;
use crate::window::{Window, WindowWriter};

/// What readers see of a ring: its windows, oldest first.
#[derive(Default)]
pub struct RingView {
    windows: Mutex<VecDeque<Arc<Window>>>,
}

impl RingView {
    /// The windows now in the ring, oldest first.
    pub fn windows(&self) -> Vec<Arc<Window>> {
        self.lock().iter().cloned().collect()
    }

    /// The first offset the ring holds, if it holds a window.
    pub fn first_offset(&self) -> Option<u64> {
        self.lock().front().map(|w| w.first_offset())
    }

    /// The window holding `offset` (or, for the last window, where `offset`
    /// will be appended), if the ring still holds it.
    pub fn window_for(&self, offset: u64) -> Option<Arc<Window>> {
        let windows = self.lock();
        let i = windows.partition_point(|w| w.first_offset() <= offset);
        windows.get(i.checked_sub(1)?).cloned()
    }

    /// The oldest window in the ring.
    pub fn first_window(&self) -> Option<Arc<Window>> {
        self.lock().front().cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<Window>>> {
        // The guarded deque is always consistent; a panic elsewhere cannot tear it.
        self.windows.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Writer-side state of one window.
struct Slot {
    window: Arc<Window>,
    /// Present while the window is active.
    writer: Option<WindowWriter>,
    len: usize,
    next_offset: u64,
    last_ts: i64,
    /// Bytes durable on disk (a round's sync returned).
    flushed_len: usize,
    /// Bytes handed to the flusher in a round (being written, written, or
    /// syncing): `flushed_len <= planned_len <= len`. A round is planned while
    /// the previous one syncs, so the two differ.
    planned_len: usize,
    planned_next: u64,
    /// Stamp of the first record at `planned_len` (meaningful while `len > planned_len`).
    unplanned_first_ts: i64,
}

impl Slot {
    fn unflushed(&self) -> usize {
        self.len - self.flushed_len
    }

    fn unplanned(&self) -> usize {
        self.len - self.planned_len
    }
}

/// A window suffix to be written as one chunk.
#[derive(Clone)]
pub(crate) struct FlushRange {
    pub window: Arc<Window>,
    pub from: usize,
    pub to: usize,
    pub description: ChunkDescription,
}

impl FlushRange {
    pub fn body(&self) -> &[u8] {
        &self.window.committed()[self.from..self.to]
    }
}

/// The shard's ring. Lives on the shard's core only.
pub(crate) struct Ring {
    slots: VecDeque<Slot>,
    view: Arc<RingView>,
    window_bytes: usize,
    budget: usize,
    capacity: usize,
    unflushed: usize,
    unplanned: usize,
    /// Offset the next record gets.
    next_offset: u64,
}

impl Ring {
    pub fn new(window_bytes: usize, budget: usize, next_offset: u64, view: Arc<RingView>) -> Ring {
        Ring {
            slots: VecDeque::new(),
            view,
            window_bytes,
            budget,
            capacity: 0,
            unflushed: 0,
            unplanned: 0,
            next_offset,
        }
    }

    /// The offset the next record gets.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Bytes of records not yet flushed (durable).
    pub fn unflushed_bytes(&self) -> usize {
        self.unflushed
    }

    /// Bytes of records not yet handed to the flusher in a round
    /// ([`Ring::mark_planned`]).
    pub fn unplanned_bytes(&self) -> usize {
        self.unplanned
    }

    /// Bytes of window memory the ring holds.
    pub fn capacity_bytes(&self) -> usize {
        self.capacity
    }

    /// Stamps one encoded record with the ring's next offset and `ts` and
    /// frames it into the active window, opening a new window when it does not
    /// fit. Not visible to readers until [`Ring::publish`]. Returns the offset.
    pub fn stage(&mut self, encoded: &[u8], ts: i64) -> u64 {
        let offset = self.next_offset;
        let len = encoded.len();
        let fits = self
            .slots
            .back_mut()
            .and_then(|s| s.writer.as_mut())
            .is_some_and(|w| w.remaining() >= len);
        if !fits {
            self.open_window(len);
        }
        let slot = self.slots.back_mut().expect("a window was just opened");
        let writer = slot.writer.as_mut().expect("the last window is active");
        writer.stage_encoded(encoded, offset, ts);
        if slot.len == slot.planned_len {
            slot.unplanned_first_ts = ts;
        }
        slot.len += len;
        slot.next_offset = offset + 1;
        slot.last_ts = ts;
        self.unflushed += len;
        self.unplanned += len;
        self.next_offset = offset + 1;
        offset
    }

    /// Makes every staged record visible to readers.
    pub fn publish(&mut self) {
        if let Some(writer) = self.slots.back_mut().and_then(|s| s.writer.as_mut()) {
            writer.publish();
        }
    }

    /// Seals the active window (publishing what is staged) and opens a new one.
    fn open_window(&mut self, record_len: usize) {
        if let Some(slot) = self.slots.back_mut() {
            if let Some(writer) = slot.writer.take() {
                writer.seal();
            }
        }
        let writer = WindowWriter::new(self.window_bytes.max(record_len), self.next_offset);
        let window = writer.window().clone();
        self.capacity += window.capacity();
        self.slots.push_back(Slot {
            window: window.clone(),
            writer: Some(writer),
            len: 0,
            next_offset: self.next_offset,
            last_ts: 0,
            flushed_len: 0,
            planned_len: 0,
            planned_next: self.next_offset,
            unplanned_first_ts: 0,
        });
        self.view.lock().push_back(window);
    }

    /// The unplanned suffixes of the windows (not yet in a round), oldest
    /// first, up to about `max_bytes`. The caller hands them out as a round
    /// and marks them with [`Ring::mark_planned`].
    pub fn flush_plan(&self, shard: u32, max_bytes: usize) -> Vec<FlushRange> {
        let mut plan = Vec::new();
        let mut total = 0;
        for slot in self.slots.iter().filter(|s| s.unplanned() > 0) {
            if total > 0 && total + slot.unplanned() > max_bytes {
                break;
            }
            total += slot.unplanned();
            plan.push(FlushRange {
                window: slot.window.clone(),
                from: slot.planned_len,
                to: slot.len,
                description: ChunkDescription {
                    shard,
                    generation: 0, // the log writes its own
                    first_offset: slot.planned_next,
                    record_count: (slot.next_offset - slot.planned_next) as u32,
                    first_ts: slot.unplanned_first_ts,
                    last_ts: slot.last_ts,
                    body_len: slot.unplanned(),
                },
            });
        }
        plan
    }

    /// Records that `plan` (from [`Ring::flush_plan`]) was handed out as a
    /// round: the next plan starts after it.
    pub fn mark_planned(&mut self, plan: &[FlushRange]) {
        for range in plan {
            let slot = self.slot_of(range);
            debug_assert_eq!(slot.planned_len, range.from);
            slot.planned_len = range.to;
            slot.planned_next =
                range.description.first_offset + u64::from(range.description.record_count);
            if slot.len > slot.planned_len {
                // Records were staged after the plan was made: the next
                // range starts at the first of them.
                let (_, _, ts) =
                    record::peek_position(&slot.window.committed()[slot.planned_len..])
                        .expect("committed window bytes are records the shard framed");
                slot.unplanned_first_ts = ts;
            }
            self.unplanned -= range.to - range.from;
        }
    }

    /// Undoes [`Ring::mark_planned`] of the last round planned, which was
    /// not written (the disk was full): the next plan starts where it did.
    pub fn unplan(&mut self, plan: &[FlushRange]) {
        for range in plan {
            let slot = self.slot_of(range);
            debug_assert_eq!(
                slot.planned_len, range.to,
                "only the last round is handed back"
            );
            slot.planned_len = range.from;
            slot.planned_next = range.description.first_offset;
            slot.unplanned_first_ts = range.description.first_ts;
            self.unplanned += range.to - range.from;
        }
    }

    /// Records that `plan` is durable (rounds become durable in the order they
    /// were planned). Call [`Ring::evict`] only after the flushed watermark
    /// covering it is published: a reader that finds an offset gone from the
    /// ring must find it on disk.
    pub fn mark_flushed(&mut self, plan: &[FlushRange]) {
        for range in plan {
            let slot = self.slot_of(range);
            debug_assert_eq!(slot.flushed_len, range.from);
            debug_assert!(
                range.to <= slot.planned_len,
                "only a planned range is flushed"
            );
            slot.flushed_len = range.to;
            self.unflushed -= range.to - range.from;
        }
    }

    fn slot_of(&mut self, range: &FlushRange) -> &mut Slot {
        self.slots
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.window, &range.window))
            .expect("a window with unflushed data is never evicted")
    }

    /// Evicts sealed, flushed windows while the ring is over its budget.
    /// Returns the offset below which the ring no longer holds records.
    pub fn evict(&mut self) -> u64 {
        while self.capacity > self.budget {
            let Some(oldest) = self.slots.front() else {
                break;
            };
            if oldest.writer.is_some() || oldest.unflushed() > 0 {
                break; // flush before evict: an unflushed or active window stays
            }
            let slot = self.slots.pop_front().expect("checked above");
            self.capacity -= slot.window.capacity();
            self.view.lock().pop_front();
        }
        self.evicted_below()
    }

    pub fn evicted_below(&self) -> u64 {
        self.slots
            .front()
            .map_or(self.next_offset, |s| s.window.first_offset())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Record;

    /// Stages a record the way the shard does: encoded elsewhere, stamped here.
    fn stage(ring: &mut Ring, rec: &Record<'_>) {
        let mut buf = vec![0u8; rec.encoded_len()];
        rec.encode_into(&mut buf).unwrap();
        assert_eq!(ring.stage(&buf, rec.ts), rec.offset);
    }

    fn rec(offset: u64, ts: i64) -> Record<'static> {
        crate::testing::test_create(offset, ts)
    }

    /// Regression: records appended while a flush was in flight kept the stamp
    /// of the flushed range's first record as "first unflushed stamp", so the
    /// next chunk claimed a first stamp below the previous chunk's last and the
    /// log refused it (latching the shard).
    #[test]
    fn appends_during_a_flush_start_the_next_chunk_with_their_own_stamp() {
        let mut ring = Ring::new(4096, 1 << 20, 0, Arc::new(RingView::default()));
        for i in 0..3 {
            stage(&mut ring, &rec(i, 100 + i as i64));
        }
        ring.publish();
        let first = ring.flush_plan(0, 1 << 20);
        // Staged between the plan and its hand-out.
        stage(&mut ring, &rec(3, 103));
        ring.publish();
        ring.mark_planned(&first);
        stage(&mut ring, &rec(4, 104));
        ring.publish();
        let second = ring.flush_plan(0, 1 << 20);
        assert_eq!(second.len(), 1);
        let d = second[0].description;
        assert_eq!(
            (d.first_offset, d.record_count, d.first_ts, d.last_ts),
            (3, 2, 103, 104)
        );
        ring.mark_flushed(&first);
    }

    /// A round is planned while the one before it is still being synced (the
    /// flusher overlaps the next write with the running fdatasync): it starts
    /// where the planned one ends, and the bytes stay unflushed, holding the
    /// window in the ring, until each round's sync marks them flushed.
    #[test]
    fn a_round_planned_while_the_last_syncs_follows_it_and_stays_unflushed() {
        let mut ring = Ring::new(4096, 0, 0, Arc::new(RingView::default()));
        for i in 0..3 {
            stage(&mut ring, &rec(i, 100 + i as i64));
        }
        ring.publish();
        let first = ring.flush_plan(0, 1 << 20);
        ring.mark_planned(&first);
        let first_bytes = ring.unflushed_bytes();
        assert_eq!(ring.unplanned_bytes(), 0);
        assert!(
            ring.flush_plan(0, 1 << 20).is_empty(),
            "nothing is planned twice"
        );
        for i in 3..5 {
            stage(&mut ring, &rec(i, 100 + i as i64));
        }
        ring.publish();
        let second = ring.flush_plan(0, 1 << 20);
        ring.mark_planned(&second);
        let d = second[0].description;
        assert_eq!(
            (second[0].from, d.first_offset, d.record_count),
            (first[0].to, 3, 2)
        );
        let second_bytes = second[0].to - second[0].from;
        assert_eq!(ring.unplanned_bytes(), 0);
        assert_eq!(ring.unflushed_bytes(), first_bytes + second_bytes);
        ring.mark_flushed(&first);
        assert_eq!(ring.unflushed_bytes(), second_bytes);
        ring.mark_flushed(&second);
        assert_eq!(ring.unflushed_bytes(), 0);
    }

    #[test]
    fn only_flushed_sealed_windows_are_evicted() {
        let view = Arc::new(RingView::default());
        // Budget of two windows; records big enough to fill a window in a few.
        let mut ring = Ring::new(4096, 8192, 0, view.clone());
        let payload = vec![7u8; 1000];
        for i in 0..12 {
            let mut r = rec(i, i as i64 + 1);
            r.payload = &payload;
            stage(&mut ring, &r);
            ring.publish();
        }
        assert!(view.windows().len() >= 3, "several windows opened");
        assert_eq!(ring.evicted_below(), 0, "nothing flushed, nothing evicted");
        let plan = ring.flush_plan(0, 1 << 20);
        ring.mark_planned(&plan);
        assert_eq!(ring.evict(), 0, "planned but not flushed, nothing evicted");
        ring.mark_flushed(&plan);
        let evicted = ring.evict();
        assert!(evicted > 0 && ring.capacity_bytes() <= 8192 + 4096);
        assert_eq!(view.first_offset(), Some(evicted));
    }
}
