//! Opening a log: the scan of its segments that recovers it (or only reads
//! it), the generation it starts, and the report of what the open found.

use super::{Log, LogConfig, Segment, REPAIR_MARKER};
use crate::chunk::CHUNK_HEADER_LEN;
use crate::generation::{GenerationStart, Generations};
use crate::producer::ProducerTable;
use crate::segment::error::RecoveryError;
use crate::segment::recovery::{scan_segment, TornTail};
use crate::segment::{parse_segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK, TEMP_SUFFIX};
use crate::storage::{Storage, StorageFile};

use std::rc::Rc;

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
