//! A shard's on-disk log: its segments, the chunk index over them, and the
//! one writer that appends chunks, syncs and rotates.
//!
//! Invariants kept here: offsets are dense and stamps strictly increase across
//! every chunk of every segment; no more than the segment's
//! `max_unsynced_bytes` are ever written past the last completed sync (so
//! recovery knows how far residue can reach); a segment is synced in full
//! before its successor is created; and after any failed write or sync the log
//! latches and acknowledges nothing more until reopened. A full disk found
//! while making the next segment's file is not such a failure: nothing was
//! written, so the log refuses the round ([`LogError::NoSpace`]) and takes
//! it when space returns.

use crate::chunk::{
    align_up, ChunkBuilder, ChunkDescription, ChunkHeader, CHUNK_HEADER_LEN, FLAG_SEAL,
};
use crate::generation::{GenerationStart, Generations};
use crate::producer::ProducerTable;
use crate::segment::error::{LogError, RecoveryError};
use crate::segment::index::{ChunkEntry, SegmentIndex};
use crate::segment::recovery::{scan_segment, TornTail};
use crate::segment::{
    parse_segment_name, segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK, TEMP_SUFFIX,
};
use crate::storage::{Storage, StorageFile};

use std::rc::Rc;

/// How a shard's log is laid out on disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogConfig {
    pub shard: u32,
    /// Size each new segment is preallocated to.
    pub segment_bytes: u64,
    /// Most bytes written past the last completed sync; the writer syncs
    /// before exceeding it. Also the largest chunk. Bounds recovery's scan.
    pub max_unsynced_bytes: u64,
}

impl LogConfig {
    pub fn new(shard: u32) -> LogConfig {
        LogConfig {
            shard,
            segment_bytes: 256 << 20,
            max_unsynced_bytes: 32 << 20,
        }
    }
}

/// A chunk to write whose records are framed elsewhere. The shard field of
/// the description is ignored: the log writes its own.
#[derive(Clone, Copy, Debug)]
pub struct ChunkImage<'a> {
    pub description: ChunkDescription,
    /// The records, back to back.
    pub body: &'a [u8],
}

/// A chunk's place in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkLocation {
    /// First offset of the segment holding the chunk (its name).
    pub segment: u64,
    pub entry: ChunkEntry,
}

/// What opening the log found and did.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub segments: usize,
    pub chunks: usize,
    pub records: u64,
    /// The torn tail cut off the last segment, if any.
    pub truncated: Option<(String, TornTail)>,
    /// Leftovers of an interrupted segment creation that were removed.
    pub removed: Vec<String>,
    /// The log had been closed cleanly.
    pub clean_close: bool,
    pub next_offset: u64,
    /// The shard's generation history; its last entry is the generation this
    /// open started.
    pub generations: Option<Generations>,
    /// Opened with [`Log::open_read_only`]: `removed` and `truncated` say
    /// what an open would do; nothing was changed.
    pub read_only: bool,
    /// Idempotent producers found in the records kept, and the time spent
    /// entering their stamps in the table (the stamps are read in the walk
    /// that verifies each chunk's records, which the open time counts).
    pub producers: usize,
    pub producer_rebuild: std::time::Duration,
}

pub(crate) struct Segment<F> {
    pub(crate) name: String,
    pub(crate) header: SegmentHeader,
    pub(crate) index: SegmentIndex,
    /// Shared with a [`SyncTicket`] while a sync of it runs.
    pub(crate) file: Rc<F>,
}

/// A sync of the active segment begun with [`Log::begin_sync`]: it covers
/// every write completed before it began. It runs without the log
/// ([`SyncTicket::run`]), so the log can write its next round meanwhile, and
/// its outcome goes back through [`Log::finish_sync`].
pub struct SyncTicket<F> {
    file: Rc<F>,
    /// The segment synced, by its first offset.
    segment: u64,
    /// Bytes of the segment written when the sync began.
    pos: u64,
    /// Offset of the first record not written when the sync began.
    offset: u64,
}

impl<F: StorageFile> SyncTicket<F> {
    /// The fdatasync.
    pub async fn run(&self) -> std::io::Result<()> {
        self.file.sync().await
    }
}

/// One shard's log. The last segment is the one being written.
pub struct Log<S: Storage> {
    pub(crate) storage: S,
    config: LogConfig,
    pub(crate) segments: Vec<Segment<S::File>>,
    write_pos: u64,
    synced_pos: u64,
    /// Every byte of the active segment below this has been written (chunks,
    /// or zeros written ahead). Only ever raised, and only by this log's own
    /// writes: after an open it is 0 until the first write, so it may lag
    /// `write_pos`, which bounds it from below where it is used.
    zeroed_to: u64,
    next_offset: u64,
    synced_offset: u64,
    last_ts: Option<i64>,
    latched: Option<String>,
    /// The next segment's file, made ahead of need ([`Log::prepare_next`]).
    spare: Option<Spare<S::File>>,
    /// Why the next segment's file could not be made, while it cannot: the
    /// disk is full.
    no_space: Option<String>,
    generations: Generations,
    producers: ProducerTable,
}

/// The next segment's file, under [`SPARE`]: created, and allocated in full
/// unless a failed allocation left it and its removal failed too.
struct Spare<F> {
    file: F,
    allocated: bool,
}

/// The name of the next segment's file until it becomes a segment. Open
/// removes it with every other `.seg.tmp`: it never holds data.
const SPARE: &str = "next.seg.tmp";
/// What an interrupted repair leaves in a shard's directory: the shard does
/// not open until `ringfeed repair` has run again (`crate::repair`).
pub const REPAIR_MARKER: &str = "repair.next";

/// The next segment is made once less than this share of the active one is
/// left (a quarter: 64 MiB of 256), so a full disk is found while the
/// events already taken still fit where they go, and appends are refused
/// from then on (see [`Log::prepare_next`]).
const PREPARE_WHEN_LEFT_DIVISOR: u64 = 4;

/// ENOSPC or EDQUOT: there is no room, and nothing else is wrong.
fn is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

fn recovery_io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> RecoveryError {
    let what = what.into();
    move |source| RecoveryError::Io { what, source }
}

impl<S: Storage> Log<S> {
    /// Opens (recovering) or creates the log in `storage`.
    pub async fn open(
        storage: S,
        config: LogConfig,
    ) -> Result<(Log<S>, RecoveryReport), RecoveryError> {
        Log::open_mode(storage, config, false, false).await
    }

    /// [`Log::open`] of a shard a repair is mending (its marker is there):
    /// for the repair only.
    pub(crate) async fn open_repairing(
        storage: S,
        config: LogConfig,
    ) -> Result<(Log<S>, RecoveryReport), RecoveryError> {
        Log::open_mode(storage, config, false, true).await
    }

    /// Reads the log as [`Log::open`] would recover it, changing nothing: no
    /// leftover is removed, no torn tail zeroed, nothing synced, no
    /// generation started. The report says what an open would do
    /// (`removed`, `truncated`). The log refuses every write (it is latched).
    pub async fn open_read_only(
        storage: S,
        config: LogConfig,
    ) -> Result<(Log<S>, RecoveryReport), RecoveryError> {
        Log::open_mode(storage, config, true, false).await
    }

    async fn open_mode(
        storage: S,
        config: LogConfig,
        read_only: bool,
        repairing: bool,
    ) -> Result<(Log<S>, RecoveryReport), RecoveryError> {
        let mut report = RecoveryReport {
            read_only,
            ..RecoveryReport::default()
        };
        let mut names = Vec::new();
        for name in storage
            .list()
            .await
            .map_err(recovery_io("the segment directory"))?
        {
            if name == REPAIR_MARKER && !read_only && !repairing {
                return Err(RecoveryError::InterruptedRepair);
            }
            if name.ends_with(TEMP_SUFFIX) {
                // A segment creation that did not finish: it never held data.
                if !read_only {
                    storage
                        .remove(&name)
                        .await
                        .map_err(recovery_io(name.clone()))?;
                }
                report.removed.push(name);
            } else if let Some(first) = parse_segment_name(&name) {
                names.push((first, name));
            }
        }
        names.sort();

        let mut log = Log {
            storage,
            config,
            segments: Vec::new(),
            write_pos: 0,
            synced_pos: 0,
            zeroed_to: 0,
            next_offset: 0,
            synced_offset: 0,
            last_ts: None,
            latched: None,
            spare: None,
            no_space: None,
            generations: Generations::legacy(),
            producers: ProducerTable::default(),
        };
        let count = names.len();
        for (i, (first, name)) in names.into_iter().enumerate() {
            let is_last = i + 1 == count;
            let file = log
                .storage
                .open(&name)
                .await
                .map_err(recovery_io(name.clone()))?;
            let block = file
                .read_at(0, SEGMENT_HEADER_BLOCK + CHUNK_HEADER_LEN)
                .await
                .map_err(recovery_io(name.clone()))?;
            let header = match SegmentHeader::decode(&block) {
                Ok(h) => h,
                Err(reason) => {
                    let no_chunks = block
                        .get(SEGMENT_HEADER_BLOCK..)
                        .is_none_or(|c| c.iter().all(|&b| b == 0));
                    if is_last && no_chunks {
                        if !read_only {
                            log.storage
                                .remove(&name)
                                .await
                                .map_err(recovery_io(name.clone()))?;
                        }
                        report.removed.push(name);
                        continue;
                    }
                    return Err(RecoveryError::BadSegmentHeader {
                        segment: name,
                        reason,
                    });
                }
            };
            if header.shard != log.config.shard {
                return Err(RecoveryError::ShardMismatch {
                    segment: name,
                    expected: log.config.shard,
                    found: header.shard,
                });
            }
            if header.first_offset != first || (i > 0 && first != log.next_offset) {
                return Err(RecoveryError::Gap {
                    segment: name,
                    expected: if i > 0 { log.next_offset } else { first },
                    found: header.first_offset,
                });
            }
            let producers = &mut log.producers;
            let rebuild = &mut report.producer_rebuild;
            let scanned = scan_segment(&file, &name, header, !is_last, |stamps| {
                let started = std::time::Instant::now();
                for &(stamp, offset, ts) in stamps {
                    producers.record(stamp, offset, ts);
                }
                *rebuild += started.elapsed();
            })
            .await?;
            report.chunks += scanned.index.chunks().len();
            report.records += scanned.next_offset - header.first_offset;
            log.next_offset = scanned.next_offset;
            log.last_ts = scanned.last_ts.or(log.last_ts);
            log.write_pos = scanned.write_pos;
            report.clean_close = scanned.clean_close;
            if let Some(torn) = scanned.torn {
                // Zeroed below, once the history has shown it is no damage.
                report.truncated = Some((name.clone(), torn));
            }
            log.segments.push(Segment {
                name,
                header,
                index: scanned.index,
                file: Rc::new(file),
            });
        }
        report.removed.sort();
        // The log ended at the newest generation's start when it was last
        // opened, and the open had synced everything below it: a log that
        // ends below it now lost durable events at its end, which the scan
        // alone takes for a torn tail (nothing valid follows to prove it).
        if let Some(history) = Generations::load(&log.storage, true)
            .await
            .map_err(recovery_io("the generation history"))?
        {
            if log.next_offset < history.durable_end() {
                let segment = log
                    .segments
                    .last()
                    .map_or_else(String::new, |s| s.name.clone());
                return Err(RecoveryError::Corruption {
                    segment,
                    position: report
                        .truncated
                        .as_ref()
                        .map_or(log.write_pos, |t| t.1.position),
                    reason: crate::chunk::ChunkError::Inconsistent(
                        "durable events are missing at the end of the log",
                    ),
                    evidence: format!(
                        "the log ended at offset {} when it was last opened (generation {} \
                         started there, after everything below it was synced); it ends at {} now",
                        history.durable_end(),
                        history.current(),
                        log.next_offset
                    ),
                });
            }
        }
        if let (Some((name, torn)), false) = (&report.truncated, read_only) {
            let active = log.segments.last().expect("a torn tail is in a segment");
            zero_range(&*active.file, torn.position, torn.dirty_end)
                .await
                .map_err(recovery_io(name.clone()))?;
        }
        report.producers = log.producers.len();
        if read_only {
            log.generations = log.load_generations(true).await?;
            report.generations = Some(log.generations.clone());
            log.latched = Some("opened read-only".into());
            report.segments = log.segments.len();
            report.next_offset = log.next_offset;
            return Ok((log, report));
        }
        // Always, not only after a removal: a rename (`.seg.tmp` -> `.seg`)
        // whose directory sync a crash cut off is visible now but not durable,
        // and acknowledged appends into that segment must not be undone by a
        // later power loss.
        log.storage
            .sync_dir()
            .await
            .map_err(recovery_io("the segment directory"))?;
        match log.segments.last() {
            Some(active) => {
                // What was kept may have been written but not synced (process crash):
                // make it durable before anything is built on it.
                let len = active.header.segment_bytes;
                active
                    .file
                    .allocate(len)
                    .await
                    .map_err(recovery_io(active.name.clone()))?;
                active
                    .file
                    .sync()
                    .await
                    .map_err(recovery_io(active.name.clone()))?;
            }
            None => log.create_segment().await.map_err(|e| RecoveryError::Io {
                what: "the first segment".into(),
                source: std::io::Error::other(e.to_string()),
            })?,
        }
        log.synced_pos = log.write_pos;
        log.synced_offset = log.next_offset;
        // Everything kept is durable now: start a new generation there, and
        // make it durable before any event of it can be seen.
        let history = log.load_generations(false).await?;
        // Above every generation a chunk names too: chunks of a generation
        // the history does not know (its file was replaced) must never see
        // that number handed out again.
        let highest_chunk = log.chunks().map(|c| c.entry.generation).max().unwrap_or(0);
        let next = history
            .next(log.next_offset, highest_chunk)
            .ok_or_else(|| RecoveryError::Io {
                what: "the generation history".into(),
                source: std::io::Error::other(format!(
                    "no new generation can follow [{history}] at offset {} \
                     (the log ends below the newest generation's start, or the numbers are used up)",
                    log.next_offset
                )),
            })?;
        next.store(&log.storage)
            .await
            .map_err(recovery_io("the generation history"))?;
        log.generations = next;
        report.generations = Some(log.generations.clone());
        report.segments = log.segments.len();
        report.next_offset = log.next_offset;
        Ok((log, report))
    }

    /// The idempotent producers' table rebuilt from the records kept; the
    /// shard takes it over (the log keeps an empty one).
    pub fn take_producers(&mut self) -> ProducerTable {
        std::mem::take(&mut self.producers)
    }

    /// Starts a chunk for the next records, in a buffer of `capacity` bytes
    /// (rounded up to the alignment) suitable for a direct write.
    pub fn chunk_builder(&self, capacity: usize) -> ChunkBuilder<<S::File as StorageFile>::Buf> {
        let active = self.active();
        let capacity = align_up(
            capacity.max(CHUNK_HEADER_LEN),
            active.header.alignment as usize,
        );
        ChunkBuilder::new(
            active.file.alloc(capacity),
            self.config.shard,
            self.next_offset,
        )
        .with_generation(self.generations.current())
    }

    /// The shard's generation history; the last entry is the one writing now.
    pub fn generations(&self) -> &Generations {
        &self.generations
    }

    /// The stored generation history, or for a log without one (written
    /// before generations existed) the history its chunk headers tell.
    async fn load_generations(&self, read_only: bool) -> Result<Generations, RecoveryError> {
        Ok(Generations::load(&self.storage, read_only)
            .await
            .map_err(recovery_io("the generation history"))?
            .unwrap_or_else(|| self.generations_from_chunks()))
    }

    /// The history as the chunk headers tell it (generation 0 in chunks
    /// written before generations existed).
    fn generations_from_chunks(&self) -> Generations {
        let mut entries: Vec<GenerationStart> = Vec::new();
        for c in self.chunks() {
            if entries
                .last()
                .is_none_or(|e| e.generation < c.entry.generation)
            {
                entries.push(GenerationStart {
                    generation: c.entry.generation,
                    first_offset: c.entry.first_offset,
                });
            }
        }
        Generations::from_entries(entries).unwrap_or_else(Generations::legacy)
    }

    /// Writes a chunk. It is durable once a later [`Log::sync`] returns.
    pub async fn append(
        &mut self,
        chunk: ChunkBuilder<<S::File as StorageFile>::Buf>,
    ) -> Result<ChunkEntry, LogError> {
        self.check_latched()?;
        let (Some(first_ts), false) = (chunk.first_ts(), chunk.is_empty()) else {
            return Err(LogError::EmptyChunk);
        };
        if chunk.first_offset() != self.next_offset || self.last_ts.is_some_and(|t| first_ts <= t) {
            return Err(LogError::OutOfOrder {
                expected: self.next_offset,
                found: chunk.first_offset(),
                last_ts: self.last_ts,
                found_ts: first_ts,
            });
        }
        self.make_room(chunk.len()).await?;
        let active = self
            .segments
            .last_mut()
            .expect("the log always has a segment");
        let (buf, header, len) = chunk.finish(self.synced_pos, active.header.alignment as usize);
        let position = self.write_pos;
        self.write_at_end(buf, len, "writing a chunk").await?;
        let entry = ChunkEntry::new(&header, position, len);
        let active = self
            .segments
            .last_mut()
            .expect("the log always has a segment");
        active.index.push(entry);
        self.write_pos += len as u64;
        self.next_offset = header.end_offset();
        self.last_ts = Some(header.last_ts);
        Ok(entry)
    }

    /// Writes chunks whose records were framed elsewhere (a shard's windows),
    /// as few aligned writes as the segment and the unsynced bound allow:
    /// group commit. Durable once a later [`Log::sync`] returns.
    pub async fn append_chunks(&mut self, chunks: &[ChunkImage<'_>]) -> Result<(), LogError> {
        self.check_latched()?;
        let mut expected = self.next_offset;
        let mut last_ts = self.last_ts;
        for c in chunks {
            let d = &c.description;
            if d.record_count == 0 {
                return Err(LogError::EmptyChunk);
            }
            assert_eq!(
                d.body_len,
                c.body.len(),
                "a chunk image's description matches its body"
            );
            if d.first_offset != expected || last_ts.is_some_and(|t| d.first_ts <= t) {
                return Err(LogError::OutOfOrder {
                    expected,
                    found: d.first_offset,
                    last_ts,
                    found_ts: d.first_ts,
                });
            }
            expected = d.first_offset + u64::from(d.record_count);
            last_ts = Some(d.last_ts);
        }
        self.prepare_for(chunks).await?;
        let mut i = 0;
        while i < chunks.len() {
            let made_room = self
                .make_room(CHUNK_HEADER_LEN + chunks[i].body.len())
                .await;
            let mut total = match made_room {
                // Part of the round is written: refusing the rest is not
                // "nothing was written". Only a round larger than a segment
                // rotates twice and gets here.
                Err(LogError::NoSpace { cause }) if i > 0 => {
                    let source = std::io::Error::new(std::io::ErrorKind::StorageFull, cause);
                    return Err(self.latch("creating a segment", source));
                }
                made_room => made_room?,
            };
            let header = self.active().header;
            let bound = header
                .max_unsynced_bytes
                .min(self.config.max_unsynced_bytes);
            let alignment = header.alignment as usize;
            let mut end = i + 1;
            while let Some(next) = chunks.get(end) {
                let len = align_up(CHUNK_HEADER_LEN + next.body.len(), alignment) as u64;
                let stop = self.write_pos + total + len;
                if stop > header.segment_bytes || stop - self.synced_pos > bound {
                    break;
                }
                total += len;
                end += 1;
            }
            let (position, synced_through, shard) =
                (self.write_pos, self.synced_pos, self.config.shard);
            let generation = self.generations.current();
            let active = self
                .segments
                .last_mut()
                .expect("the log always has a segment");
            let mut buf = active.file.alloc(total as usize);
            let mut at = 0;
            let mut entries = Vec::with_capacity(end - i);
            for c in &chunks[i..end] {
                let out = &mut buf.as_mut()[at..];
                out[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + c.body.len()].copy_from_slice(c.body);
                let description = ChunkDescription {
                    shard,
                    generation,
                    ..c.description
                };
                let (h, len) = description.frame(out, synced_through, alignment);
                entries.push(ChunkEntry::new(&h, position + at as u64, len));
                at += len;
            }
            self.write_at_end(buf, total as usize, "writing chunks")
                .await?;
            let active = self
                .segments
                .last_mut()
                .expect("the log always has a segment");
            for entry in entries {
                active.index.push(entry);
                self.next_offset = entry.end_offset();
                self.last_ts = Some(entry.last_ts);
            }
            self.write_pos += total;
            i = end;
        }
        Ok(())
    }

    /// Before a round is written: makes the next segment's file if the round
    /// will need it (then a full disk refuses the round before any of it is
    /// written: [`LogError::NoSpace`]), or if little of the active segment is
    /// left (then a full disk is only recorded, [`Log::no_space`], and the
    /// round is written where it fits).
    async fn prepare_for(&mut self, chunks: &[ChunkImage<'_>]) -> Result<(), LogError> {
        if self.spare.as_ref().is_some_and(|s| s.allocated) {
            return Ok(());
        }
        let header = self.active().header;
        let alignment = header.alignment as usize;
        let round: u64 = chunks
            .iter()
            .map(|c| align_up(CHUNK_HEADER_LEN + c.body.len(), alignment) as u64)
            .sum();
        let left = header.segment_bytes.saturating_sub(self.write_pos);
        if round > left {
            return self.prepare_next().await;
        }
        if left < header.segment_bytes / PREPARE_WHEN_LEFT_DIVISOR {
            match self.prepare_next().await {
                Err(LogError::NoSpace { .. }) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Makes the next segment's file ahead of need (created under a
    /// temporary name and allocated in full), so a full disk shows here,
    /// where nothing of the log is written, not halfway through a round.
    /// On ENOSPC or EDQUOT: [`LogError::NoSpace`], the log is not latched,
    /// what was made is removed (so the space shows as free to whoever
    /// frees more), and [`Log::no_space`] says why until a call succeeds.
    /// Any other failure latches.
    pub async fn prepare_next(&mut self) -> Result<(), LogError> {
        self.check_latched()?;
        let bytes = self.config.segment_bytes;
        let made = match self.spare.take() {
            Some(spare) => Ok(spare),
            None => self.storage.create(SPARE).await.map(|file| Spare {
                file,
                allocated: false,
            }),
        };
        let result = match made {
            Ok(mut spare) => match spare.file.allocate(bytes).await {
                Ok(()) => {
                    spare.allocated = true;
                    self.spare = Some(spare);
                    Ok(())
                }
                Err(e) => {
                    drop(spare.file);
                    if self.storage.remove(SPARE).await.is_err() {
                        // Kept, to be allocated again rather than created.
                        if let Ok(file) = self.storage.open(SPARE).await {
                            self.spare = Some(Spare {
                                file,
                                allocated: false,
                            });
                        }
                    }
                    Err(e)
                }
            },
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                self.no_space = None;
                Ok(())
            }
            Err(source) if is_no_space(&source) => {
                let cause = format!("no room for the next segment: {source}");
                self.no_space = Some(cause.clone());
                Err(LogError::NoSpace { cause })
            }
            Err(source) => Err(self.latch("creating a segment", source)),
        }
    }

    /// Why the next segment cannot be made (the disk is full), while the
    /// last attempt failed for want of space; `None` once one succeeded.
    pub fn no_space(&self) -> Option<&str> {
        self.no_space.as_deref()
    }

    /// Writes the first `len` bytes of `buf` at the end of the active segment
    /// (`write_pos`, which the caller then moves), and beside them, when the
    /// medium asks for it ([`StorageFile::zero_ahead`]), zeros ahead of them;
    /// latches on failure (`what` says which write).
    async fn write_at_end(
        &mut self,
        buf: <S::File as StorageFile>::Buf,
        len: usize,
        what: &'static str,
    ) -> Result<(), LogError> {
        let position = self.write_pos;
        let round = position..position + len as u64;
        let active = self.active();
        let zeros = zeros_ahead(
            active.file.zero_ahead() as u64,
            self.zeroed_to,
            round.clone(),
            active.header.segment_bytes,
        );
        let write = active.file.write_at(buf, len, position);
        let written = match zeros.clone() {
            // Beside the round, so it waits for the longer of the two
            // writes, not for both in turn.
            Some(ahead) => {
                let zeros_len = (ahead.end - ahead.start) as usize;
                let mut zeros = active.file.alloc(zeros_len);
                zeros.as_mut()[..zeros_len].fill(0);
                let ahead = active.file.write_at(zeros, zeros_len, ahead.start);
                let (round, ahead) = futures_lite::future::zip(write, ahead).await;
                round.and(ahead)
            }
            None => write.await,
        };
        if let Err(source) = written {
            return Err(self.latch(what, source));
        }
        self.zeroed_to = zeros.map_or(round.end, |z| z.end).max(self.zeroed_to);
        Ok(())
    }

    /// Rotates and syncs as needed so a chunk of `framed_len` bytes (header and
    /// body) can be written next; returns its length on disk.
    async fn make_room(&mut self, framed_len: usize) -> Result<u64, LogError> {
        let header = self.active().header;
        let disk_len = align_up(framed_len, header.alignment as usize) as u64;
        let bound = header
            .max_unsynced_bytes
            .min(self.config.max_unsynced_bytes);
        if disk_len > bound || disk_len + SEGMENT_HEADER_BLOCK as u64 > self.config.segment_bytes {
            return Err(LogError::ChunkTooLarge {
                len: disk_len as usize,
                segment_bytes: self.config.segment_bytes,
                max_unsynced: bound,
            });
        }
        if self.write_pos + disk_len > self.active().header.segment_bytes {
            self.rotate().await?;
        }
        if self.write_pos + disk_len - self.synced_pos > bound {
            self.sync().await?;
        }
        Ok(disk_len)
    }

    /// fdatasync of the active segment. Returns the offset below which every
    /// record is durable.
    pub async fn sync(&mut self) -> Result<u64, LogError> {
        if self.write_pos <= self.synced_pos {
            // Nothing written since the last completed sync.
            self.check_latched()?;
            return Ok(self.synced_offset);
        }
        let ticket = self.begin_sync()?;
        let result = ticket.run().await;
        self.finish_sync(ticket, result)
    }

    /// Begins a sync of what has been written so far; run it with
    /// [`SyncTicket::run`] and hand its outcome to [`Log::finish_sync`].
    /// Writes may go on meanwhile: they are not covered by it, and the bound
    /// on bytes written past a sync still counts from the last completed one.
    pub fn begin_sync(&self) -> Result<SyncTicket<S::File>, LogError> {
        self.check_latched()?;
        let active = self.active();
        Ok(SyncTicket {
            file: active.file.clone(),
            segment: active.header.first_offset,
            pos: self.write_pos,
            offset: self.next_offset,
        })
    }

    /// A sync begun with [`Log::begin_sync`] returned: on success every record
    /// written before it began is durable; returns the offset below which
    /// every record is. A failure latches the log; so does one that came
    /// first (a write that failed while the sync ran).
    pub fn finish_sync(
        &mut self,
        ticket: SyncTicket<S::File>,
        result: std::io::Result<()>,
    ) -> Result<u64, LogError> {
        self.check_latched()?;
        if let Err(source) = result {
            return Err(self.latch("syncing", source));
        }
        if ticket.segment == self.active().header.first_offset {
            self.synced_pos = self.synced_pos.max(ticket.pos);
        }
        // Otherwise the log rotated meanwhile, and rotating synced that
        // segment in full: nothing of the active one is covered.
        self.synced_offset = self.synced_offset.max(ticket.offset);
        Ok(self.synced_offset)
    }

    /// Syncs, then writes and syncs a seal chunk marking a clean close, so a
    /// later open treats damage to the tail as corruption rather than a torn write.
    pub async fn close(mut self) -> Result<(), LogError> {
        self.sync().await?;
        let active = self.active();
        let alignment = active.header.alignment as usize;
        if self.write_pos + alignment as u64 <= active.header.segment_bytes {
            let seal = ChunkHeader {
                flags: FLAG_SEAL,
                shard: self.config.shard,
                record_count: 0,
                first_offset: self.next_offset,
                first_ts: 0,
                last_ts: 0,
                body_len: 0,
                body_crc: crc32c::crc32c(&[]),
                synced_through: self.write_pos,
                generation: self.generations.current(),
            };
            let mut buf = active.file.alloc(alignment);
            let mut header = [0u8; CHUNK_HEADER_LEN];
            seal.encode(&mut header);
            buf.as_mut()[..alignment].fill(0);
            buf.as_mut()[..CHUNK_HEADER_LEN].copy_from_slice(&header);
            let pos = self.write_pos;
            if let Err(source) = active.file.write_at(buf, alignment, pos).await {
                return Err(self.latch("writing the seal", source));
            }
            self.write_pos += alignment as u64;
            if let Err(source) = self.active().file.sync().await {
                return Err(self.latch("syncing the seal", source));
            }
        }
        Ok(())
    }

    /// The offset the next record will get.
    pub fn next_offset(&self) -> u64 {
        self.next_offset
    }

    /// Every record below this offset is durable.
    pub fn synced_offset(&self) -> u64 {
        self.synced_offset
    }

    /// The stamp of the last record written.
    pub fn last_ts(&self) -> Option<i64> {
        self.last_ts
    }

    /// The error that latched the log, if one did.
    pub fn latched(&self) -> Option<&str> {
        self.latched.as_deref()
    }

    /// The oldest retained record's offset and stamp; `None` when the log holds no record.
    pub fn retained(&self) -> Option<(u64, i64)> {
        self.segments
            .iter()
            .find_map(|s| s.index.first())
            .map(|c| (c.first_offset, c.first_ts))
    }

    /// Names of the segment files, oldest first; the last is being written.
    pub fn segment_names(&self) -> Vec<String> {
        self.segments.iter().map(|s| s.name.clone()).collect()
    }

    /// Every chunk of the log, in offset order.
    pub fn chunks(&self) -> impl Iterator<Item = ChunkLocation> + '_ {
        self.segments.iter().flat_map(|s| {
            s.index.chunks().iter().map(|&entry| ChunkLocation {
                segment: s.header.first_offset,
                entry,
            })
        })
    }

    /// The chunk holding `offset`.
    pub fn locate_offset(&self, offset: u64) -> Option<ChunkLocation> {
        let (segment, entry) = crate::segment::index::locate_offset(
            &self.segments,
            |s| s.header.first_offset,
            |s| &s.index,
            offset,
        )?;
        Some(ChunkLocation { segment, entry })
    }

    /// The first chunk holding a record stamped at or after `ts`.
    pub fn locate_ts(&self, ts: i64) -> Option<ChunkLocation> {
        let (segment, entry) = crate::segment::index::locate_ts(
            &self.segments,
            |s| s.header.first_offset,
            |s| &s.index,
            ts,
        )?;
        Some(ChunkLocation { segment, entry })
    }

    /// Each segment's first offset and chunk index, in offset order: what a
    /// shard publishes for its readers (`LogIndex::sync_from`).
    pub fn segment_indexes(&self) -> impl Iterator<Item = (u64, &SegmentIndex)> + '_ {
        self.segments
            .iter()
            .map(|s| (s.header.first_offset, &s.index))
    }

    /// Reads and verifies a chunk. The buffer starts at the chunk header.
    pub async fn read_chunk(
        &self,
        location: &ChunkLocation,
    ) -> Result<<S::File as StorageFile>::ReadBuf, LogError> {
        let segment = self
            .segments
            .iter()
            .find(|s| s.header.first_offset == location.segment)
            .ok_or(LogError::NotRetained {
                offset: location.entry.first_offset,
                retained_from: self.retained().map_or(self.next_offset, |r| r.0),
                next: self.next_offset,
            })?;
        let entry = &location.entry;
        let buf = segment
            .file
            .read_at(entry.position, entry.disk_len as usize)
            .await
            .map_err(|source| LogError::Io {
                op: "reading a chunk",
                source,
            })?;
        crate::chunk::verify(&buf).map_err(|reason| LogError::BadRead {
            segment: segment.name.clone(),
            position: entry.position,
            reason,
        })?;
        Ok(buf)
    }

    fn active(&self) -> &Segment<S::File> {
        self.segments.last().expect("the log always has a segment")
    }

    fn check_latched(&self) -> Result<(), LogError> {
        match &self.latched {
            Some(cause) => Err(LogError::Latched {
                cause: cause.clone(),
            }),
            None => Ok(()),
        }
    }

    fn latch(&mut self, op: &'static str, source: std::io::Error) -> LogError {
        self.latched = Some(format!("{op}: {source}"));
        LogError::Io { op, source }
    }

    /// Makes the current segment durable in full, then starts the next one.
    async fn rotate(&mut self) -> Result<(), LogError> {
        self.sync().await?;
        self.create_segment().await
    }

    /// Creates the segment starting at `next_offset`: the file made ahead
    /// ([`Log::prepare_next`], under a temporary name, allocated), its header
    /// written and synced, renamed, directory synced.
    /// A crash at any step leaves either a `.seg.tmp` (removed at open) or a
    /// complete, empty segment.
    async fn create_segment(&mut self) -> Result<(), LogError> {
        self.check_latched()?;
        let first = self.next_offset;
        let name = segment_name(first);
        self.prepare_next().await?;
        let Spare { file, .. } = self.spare.take().expect("prepared above");
        let result: std::io::Result<(S::File, SegmentHeader)> = async {
            let alignment = file.alignment();
            if !alignment.is_power_of_two() || alignment > SEGMENT_HEADER_BLOCK {
                return Err(std::io::Error::other(format!(
                    "unsupported O_DIRECT alignment {alignment}"
                )));
            }
            let header = SegmentHeader {
                shard: self.config.shard,
                alignment: alignment as u32,
                first_offset: first,
                created_ns: crate::clock::now_ns(),
                segment_bytes: self.config.segment_bytes,
                max_unsynced_bytes: self.config.max_unsynced_bytes,
            };
            let mut buf = file.alloc(SEGMENT_HEADER_BLOCK);
            header.encode(buf.as_mut());
            file.write_at(buf, SEGMENT_HEADER_BLOCK, 0).await?;
            file.sync().await?;
            self.storage.rename(SPARE, &name).await?;
            self.storage.sync_dir().await?;
            Ok((file, header))
        }
        .await;
        let (file, header) = result.map_err(|source| self.latch("creating a segment", source))?;
        self.segments.push(Segment {
            name,
            header,
            index: SegmentIndex::default(),
            file: Rc::new(file),
        });
        self.write_pos = SEGMENT_HEADER_BLOCK as u64;
        self.synced_pos = self.write_pos;
        self.zeroed_to = self.write_pos;
        Ok(())
    }
}

/// The range to write zeros over beside a round written at `round`, every
/// byte below `zeroed` being written already: the next `step` bytes past
/// both, within the segment, when the round is small (a quarter of `step` or
/// less: a larger one spreads its own extent conversion over enough bytes)
/// and fewer than half of `step` written bytes are left past its end.
fn zeros_ahead(
    step: u64,
    zeroed: u64,
    round: std::ops::Range<u64>,
    segment_bytes: u64,
) -> Option<std::ops::Range<u64>> {
    let from = zeroed.max(round.end);
    if step == 0 || round.end - round.start > step / 4 || from - round.end >= step / 2 {
        return None;
    }
    let to = (from + step).min(segment_bytes);
    (from < to).then_some(from..to)
}

/// Writes zeros over `[from, to)` (aligned) and syncs, so residue of a torn
/// tail can never be mistaken for data later.
async fn zero_range<F: StorageFile>(file: &F, from: u64, to: u64) -> std::io::Result<()> {
    const STEP: usize = 1 << 20;
    let alignment = file.alignment() as u64;
    let mut pos = from;
    while pos < to {
        let len = ((to - pos).div_ceil(alignment) * alignment).min(STEP as u64) as usize;
        let mut buf = file.alloc(len);
        buf.as_mut()[..len].fill(0);
        file.write_at(buf, len, pos).await?;
        pos += len as u64;
    }
    file.sync().await
}

#[cfg(test)]
mod zeros_ahead_tests {
    use super::zeros_ahead;

    const STEP: u64 = 256 << 10;
    const SEGMENT: u64 = 1 << 20;

    #[test]
    fn a_small_round_near_the_written_end_zeros_the_next_step() {
        assert_eq!(
            zeros_ahead(STEP, 4096, 4096..8192, SEGMENT),
            Some(8192..8192 + STEP)
        );
        // Written bytes left ahead, but fewer than half a step: from there on.
        let zeroed = 8192 + STEP / 2 - 4096;
        assert_eq!(
            zeros_ahead(STEP, zeroed, 4096..8192, SEGMENT),
            Some(zeroed..zeroed + STEP)
        );
    }

    #[test]
    fn nothing_while_half_a_step_is_written_ahead() {
        assert_eq!(
            zeros_ahead(STEP, 8192 + STEP / 2, 4096..8192, SEGMENT),
            None
        );
    }

    #[test]
    fn nothing_beside_a_large_round_or_when_the_medium_does_not_need_it() {
        assert_eq!(
            zeros_ahead(STEP, 4096, 4096..4096 + STEP / 4 + 4096, SEGMENT),
            None
        );
        assert_eq!(zeros_ahead(0, 4096, 4096..8192, SEGMENT), None);
    }

    #[test]
    fn never_past_the_segment() {
        let end = SEGMENT - 4096;
        assert_eq!(
            zeros_ahead(STEP, end, end - 4096..end, SEGMENT),
            Some(end..SEGMENT)
        );
        assert_eq!(
            zeros_ahead(STEP, SEGMENT, SEGMENT - 4096..SEGMENT, SEGMENT),
            None
        );
    }
}
