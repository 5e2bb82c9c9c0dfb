//! Mending a shard's log whose synced data was damaged (`ringfeed repair`).
//!
//! An open refuses a log with a damaged chunk where synced data must be
//! (a flipped bit, a zeroed block, a lost write: [`RecoveryError::Corruption`])
//! rather than drop what follows. Repair keeps every event it can:
//!
//! 1. It walks the damaged segment and every later one, verifying each
//!    chunk, and steps over what fails one alignment block at a time until a
//!    chunk verifies again and continues the offsets and stamps (in the last
//!    segment, only a chunk written after the damaged bytes had been synced
//!    counts: what follows a torn tail was never acknowledged). Each run of
//!    offsets it never finds is a hole; the events after the first hole are
//!    the survivors.
//! 2. Offsets are dense in a log, so the survivors cannot keep theirs: they
//!    are appended again, in order, with their stamps, payloads and producer
//!    stamps, from the first lost offset on, under a new generation. That is
//!    exactly a crash's story: the old generation kept the offsets below the
//!    hole, and a cursor past them is refused as truncated (resumed with
//!    `resume_truncated`, it gets the survivors at their new offsets).
//!
//! Crash safety: before anything changes, a marker (`repair.next`, holding
//! the first lost offset) is written and synced, the damaged segment is
//! copied and every later one renamed aside (`NAME.repair`); only then is
//! the damaged segment cut at the hole, the log opened (a new generation) and
//! the survivors appended from the copies. An interrupted repair leaves the
//! marker: [`Log::open`] refuses the shard until repair runs again, which
//! skips the survivors already appended (the log's end tells how many) and
//! finishes. A second repair of a mended log finds nothing to do.

use std::ops::Range;

use thiserror::Error;

use crate::chunk::{self, ChunkHeader};
use crate::generation::Generations;
use crate::log::{Log, LogConfig};
use crate::record::Record;
use crate::segment::error::{LogError, RecoveryError};
use crate::segment::recovery::Reader;
use crate::segment::{parse_segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK};
use crate::storage::{Storage, StorageFile};

/// What an interrupted repair leaves in a shard's directory (kept in `log`,
/// whose open refuses a shard that holds it).
pub use crate::log::REPAIR_MARKER as MARKER;
/// The suffix of a segment (or a copy of one) set aside by a repair.
pub const ASIDE_SUFFIX: &str = ".repair";

/// Offsets the walk never found, and where it stepped over bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hole {
    /// The segment the damage starts in, and its bytes that failed (to the
    /// end of the segment when the damage runs into the next one).
    pub segment: String,
    pub bytes: Range<u64>,
    /// The offsets lost (as numbered before the repair).
    pub offsets: Range<u64>,
    /// The stamps around them: of the last event before, the first after.
    pub after_ts: Option<i64>,
    pub before_ts: Option<i64>,
}

/// What repair found in, or did to, one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardRepair {
    pub shard: u32,
    /// Why an open refused the shard.
    pub damage: String,
    pub holes: Vec<Hole>,
    /// The events after the first hole, appended again from `renumbered_from`.
    pub survivors: u64,
    pub renumbered_from: u64,
    /// The generation they were appended under (`None` in a dry run).
    pub generation: Option<u32>,
}

#[derive(Debug, Error)]
pub enum RepairError {
    #[error("shard {shard}: {source}")]
    Recovery {
        shard: u32,
        #[source]
        source: RecoveryError,
    },
    #[error("shard {shard}: {what}: {source}")]
    Io {
        shard: u32,
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("shard {shard}: writing the survivors: {source}")]
    Log {
        shard: u32,
        #[source]
        source: LogError,
    },
    #[error("shard {shard}: {reason}")]
    Unrepairable { shard: u32, reason: String },
}

/// Finds and (unless `dry_run`) mends the damage in shard `shard`'s log in
/// `storage`. `None` when an open finds nothing to mend (a torn tail is an
/// open's to cut, not damage).
pub async fn repair_shard<S: Storage + Clone>(
    storage: S,
    shard: u32,
    dry_run: bool,
) -> Result<Option<ShardRepair>, RepairError> {
    let io = |what: &str| io_error(shard, what);
    let names = storage.list().await.map_err(io("listing the shard"))?;
    if names.iter().any(|n| n == MARKER) {
        if dry_run {
            return Err(RepairError::Unrepairable {
                shard,
                reason: "a repair was interrupted here; run it again without --dry-run".into(),
            });
        }
        return resume(storage, shard).await.map(Some);
    }
    let mut segments: Vec<(u64, String)> = names
        .iter()
        .filter_map(|n| parse_segment_name(n).map(|first| (first, n.clone())))
        .collect();
    segments.sort();
    let index = |name: &str| {
        segments
            .iter()
            .position(|(_, n)| n == name)
            .expect("a segment an open names is listed")
    };
    let (damage, from) = match Log::open_read_only(storage.clone(), LogConfig::new(shard)).await {
        Ok(_) => return Ok(None),
        Err(e) => match &e {
            RecoveryError::Corruption { segment, .. } => (e.to_string(), index(segment)),
            // A segment that ends early (its last chunks lost: zeroed in a
            // segment synced in full) shows as the next one's gap.
            RecoveryError::Gap { segment, .. } if index(segment) > 0 => {
                (e.to_string(), index(segment) - 1)
            }
            _ => return Err(RepairError::Recovery { shard, source: e }),
        },
    };
    let walked: Vec<String> = segments[from..].iter().map(|(_, n)| n.clone()).collect();
    let first = segments[from].0;
    let header = read_header_of(&storage, shard, &walked[0]).await?;
    let mut walk = Walk::new(shard, first, &walked);
    walk.run(&storage, &walked, |_, _| Ok(())).await?;
    // Offsets below where the log ended at its last open were durable:
    // missing at the end, they are a hole too.
    let durable_end = Generations::load(&storage, true)
        .await
        .map_err(io("the generation history"))?
        .map_or(0, |h| h.durable_end());
    if walk.expected < durable_end {
        let last = walked.last().expect("walked segments").clone();
        let (segment, at, end) = walk.tail.clone().unwrap_or((last, u64::MAX, u64::MAX));
        walk.holes.push(Hole {
            segment,
            bytes: at..end,
            offsets: walk.expected..durable_end,
            after_ts: walk.last_ts,
            before_ts: None,
        });
    }
    let Some(hole) = walk.holes.first().cloned() else {
        return Err(RepairError::Unrepairable {
            shard,
            reason: format!(
                "{damage}; but every chunk after it verifies and continues the offsets: \
                 nothing to mend"
            ),
        });
    };
    let mut report = ShardRepair {
        shard,
        damage,
        holes: walk.holes.clone(),
        survivors: walk.events_after(hole.offsets.end),
        renumbered_from: hole.offsets.start,
        generation: None,
    };
    if dry_run {
        return Ok(Some(report));
    }

    // From the hole's segment on, everything is set aside and walked again.
    let at = walked
        .iter()
        .position(|n| *n == hole.segment)
        .expect("the hole is in a walked segment");
    let marker = Marker {
        renumber_from: hole.offsets.start,
        cut_at: hole.bytes.start,
        segments: walked[at..].to_vec(),
    };
    write_marker(&storage, shard, &marker).await?;
    let config = LogConfig {
        shard,
        segment_bytes: header.segment_bytes,
        max_unsynced_bytes: header.max_unsynced_bytes,
    };
    let (generation, appended) = apply(&storage, shard, &marker, config).await?;
    report.generation = Some(generation);
    debug_assert_eq!(appended, report.survivors);
    Ok(Some(report))
}

/// What a repair is doing, written (and synced) before it changes anything:
/// where the survivors start, where the hole's segment is cut, and the
/// segments set aside (the hole's first). Every step after it can be done
/// again, so a repair cut short is finished by the next.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Marker {
    renumber_from: u64,
    cut_at: u64,
    segments: Vec<String>,
}

/// The repair's steps, each of which a repair cut short may have done
/// already: copy the hole's segment aside and rename the later ones aside;
/// cut the hole's segment (unless the log already opens: then it was cut,
/// and maybe survivors appended); append the survivors not yet appended;
/// remove what was set aside and the marker.
async fn apply<S: Storage + Clone>(
    storage: &S,
    shard: u32,
    marker: &Marker,
    config: LogConfig,
) -> Result<(u32, u64), RepairError> {
    let io = |what: &str| io_error(shard, what);
    let names = storage.list().await.map_err(io("listing the shard"))?;
    let has = |name: &str| names.iter().any(|n| n == name);
    let damaged = &marker.segments[0];
    let copy = format!("{damaged}{ASIDE_SUFFIX}");
    if !has(&copy) {
        let partial = format!("{copy}.tmp");
        if has(&partial) {
            storage.remove(&partial).await.map_err(io(&partial))?;
        }
        copy_file(storage, shard, damaged, &partial).await?;
        storage.rename(&partial, &copy).await.map_err(io(&copy))?;
    }
    for name in &marker.segments[1..] {
        let aside = format!("{name}{ASIDE_SUFFIX}");
        if has(name) && !has(&aside) {
            storage.rename(name, &aside).await.map_err(io(name))?;
        }
    }
    storage
        .sync_dir()
        .await
        .map_err(io("the shard directory"))?;
    match Log::open_read_only(storage.clone(), LogConfig::new(shard)).await {
        Ok(_) => {}
        Err(RecoveryError::Corruption { .. }) => {
            cut(storage, shard, damaged, marker.cut_at).await?
        }
        Err(source) => return Err(RepairError::Recovery { shard, source }),
    }
    let result = append_survivors(
        storage.clone(),
        config,
        &marker.segments,
        marker.renumber_from,
    )
    .await?;
    finish(storage, shard, &marker.segments).await?;
    Ok(result)
}

/// Finishes a repair a crash interrupted (see [`apply`]).
async fn resume<S: Storage + Clone>(storage: S, shard: u32) -> Result<ShardRepair, RepairError> {
    let marker = read_marker(&storage, shard).await?;
    let first = &marker.segments[0];
    let copy = format!("{first}{ASIDE_SUFFIX}");
    let names = storage.list().await.map_err(|source| RepairError::Io {
        shard,
        what: "listing the shard".into(),
        source,
    })?;
    let source = if names.contains(&copy) {
        copy
    } else {
        first.clone()
    };
    let header = read_header_of(&storage, shard, &source).await?;
    let config = LogConfig {
        shard,
        segment_bytes: header.segment_bytes,
        max_unsynced_bytes: header.max_unsynced_bytes,
    };
    let (generation, appended) = apply(&storage, shard, &marker, config).await?;
    Ok(ShardRepair {
        shard,
        damage: "a repair was interrupted; finished".into(),
        holes: Vec::new(),
        survivors: appended,
        renumbered_from: marker.renumber_from,
        generation: Some(generation),
    })
}

/// Opens the cut log (a new generation) and appends the survivors (events
/// at or after `lost.end` in the segments set aside) from `lost.start` on,
/// skipping those an interrupted repair appended already. Returns the
/// generation and how many it appended now.
async fn append_survivors<S: Storage + Clone>(
    storage: S,
    config: LogConfig,
    walked: &[String],
    renumber_from: u64,
) -> Result<(u32, u64), RepairError> {
    let shard = config.shard;
    let log_err = |source| RepairError::Log { shard, source };
    // The history of the cut log: generations that started past the cut
    // start there, so their cursors are truncated there.
    let io = |source| io_error(shard, "the generation history")(source);
    if let Some(history) = Generations::load(&storage, false).await.map_err(io)? {
        history
            .cut_at(renumber_from)
            .store(&storage)
            .await
            .map_err(io)?;
    }
    let (mut log, _) = Log::open_repairing(storage.clone(), config.clone())
        .await
        .map_err(|source| RepairError::Recovery { shard, source })?;
    let generation = log.generations().current();
    let mut skip = log
        .next_offset()
        .checked_sub(renumber_from)
        .ok_or_else(|| RepairError::Unrepairable {
            shard,
            reason: format!(
                "the cut log ends at offset {}, below the first lost offset {}",
                log.next_offset(),
                renumber_from
            ),
        })?;
    let mut appended = 0u64;
    let mut builder: Option<chunk::ChunkBuilder<_>> = None;
    // As large as the log takes: within the unsynced bound and a segment.
    let chunk_bytes = (1usize << 20)
        .min(config.max_unsynced_bytes as usize)
        .min(config.segment_bytes as usize - SEGMENT_HEADER_BLOCK)
        - 4096;
    let first = read_header_of(&storage, shard, &format!("{}{ASIDE_SUFFIX}", walked[0]))
        .await?
        .first_offset;
    let mut walk = Walk::new(shard, first, walked);
    walk.aside = true;
    let mut pending: Vec<Vec<u8>> = Vec::new();
    // The walk hands chunks over synchronously; their records are appended
    // between segments (each segment's records at most one segment's bytes).
    for name in walked {
        let one = [name.clone()];
        walk.run(&storage, &one, |h, bytes| {
            // The survivors: what comes after the first hole.
            if h.first_offset < renumber_from {
                return Ok(());
            }
            chunk::verify_each(bytes, |record| pending.push(record.to_vec())).map(drop)
        })
        .await?;
        for bytes in pending.drain(..) {
            if skip > 0 {
                skip -= 1;
                continue;
            }
            let (record, _) = Record::decode(&bytes).map_err(|e| RepairError::Unrepairable {
                shard,
                reason: format!("a record of a verified chunk does not decode: {e}"),
            })?;
            loop {
                let b = builder.get_or_insert_with(|| log.chunk_builder(chunk_bytes));
                let renumbered = Record {
                    offset: b.next_offset(),
                    ..record
                };
                match b.push(&renumbered) {
                    Ok(()) => break,
                    Err(chunk::ChunkError::Full) if !b.is_empty() => {
                        let full = builder.take().expect("just used");
                        log.append(full).await.map_err(log_err)?;
                    }
                    Err(e) => {
                        return Err(RepairError::Unrepairable {
                            shard,
                            reason: format!("a survivor cannot be written again: {e}"),
                        })
                    }
                }
            }
            appended += 1;
        }
    }
    if let Some(b) = builder.take().filter(|b| !b.is_empty()) {
        log.append(b).await.map_err(log_err)?;
    }
    log.sync().await.map_err(log_err)?;
    log.close().await.map_err(log_err)?;
    Ok((generation, appended))
}

/// Removes what the repair set aside, then its marker.
async fn finish<S: Storage>(storage: &S, shard: u32, walked: &[String]) -> Result<(), RepairError> {
    let io = |what: String| io_error(shard, &what);
    for name in walked {
        let aside = format!("{name}{ASIDE_SUFFIX}");
        storage.remove(&aside).await.map_err(io(aside.clone()))?;
    }
    storage
        .sync_dir()
        .await
        .map_err(io("the shard directory".into()))?;
    storage.remove(MARKER).await.map_err(io(MARKER.into()))?;
    storage
        .sync_dir()
        .await
        .map_err(io("the shard directory".into()))
}

/// `RepairError::Io` of `what` in shard `shard`.
fn io_error(shard: u32, what: &str) -> impl FnOnce(std::io::Error) -> RepairError {
    let what = what.to_owned();
    move |source| RepairError::Io {
        shard,
        what,
        source,
    }
}

/// The tolerant walk over segments (see the module docs).
struct Walk {
    shard: u32,
    /// The last segment of the whole walk (runs may take one at a time).
    last: String,
    /// Read `NAME.repair` for each `NAME`.
    aside: bool,
    expected: u64,
    last_ts: Option<i64>,
    /// Where bytes started failing, while they do: (segment, byte).
    failing: Option<(String, u64, u64)>,
    holes: Vec<Hole>,
    /// (first offset, events) of each chunk visited.
    chunks: Vec<(u64, u64)>,
    /// Where bytes started failing to the end of the walk, if they did.
    tail: Option<(String, u64, u64)>,
}

impl Walk {
    fn new(shard: u32, expected: u64, walked: &[String]) -> Walk {
        Walk {
            shard,
            last: walked.last().cloned().unwrap_or_default(),
            aside: false,
            expected,
            last_ts: None,
            failing: None,
            holes: Vec::new(),
            chunks: Vec::new(),
            tail: None,
        }
    }

    /// Events of the chunks visited at or after offset `from`.
    fn events_after(&self, from: u64) -> u64 {
        self.chunks
            .iter()
            .filter(|(first, _)| *first >= from)
            .map(|(_, n)| n)
            .sum()
    }

    async fn run<S: Storage>(
        &mut self,
        storage: &S,
        names: &[String],
        mut visit: impl FnMut(&ChunkHeader, &[u8]) -> Result<(), chunk::ChunkError>,
    ) -> Result<(), RepairError> {
        let shard = self.shard;
        for name in names {
            let last = *name == self.last;
            let file_name = if self.aside {
                format!("{name}{ASIDE_SUFFIX}")
            } else {
                name.clone()
            };
            let io = |source| io_error(shard, &file_name)(source);
            let file = storage.open(&file_name).await.map_err(io)?;
            let file_len = file.len().await.map_err(io)?;
            let header = match file.read_at(0, SEGMENT_HEADER_BLOCK).await {
                Ok(block) => SegmentHeader::decode(&block).ok(),
                Err(source) => return Err(io(source)),
            };
            let Some(header) = header else {
                // Its header is gone: all of it is lost.
                self.failing.get_or_insert((name.clone(), 0, file_len));
                continue;
            };
            let alignment = header.alignment as usize;
            let mut reader = Reader::new(&file, &file_name, file_len);
            let mut stamps = Vec::new();
            let mut pos = SEGMENT_HEADER_BLOCK as u64;
            while pos < file_len {
                let found = reader.chunk(pos, shard, alignment, &mut stamps).await;
                let found = found.map_err(|source| RepairError::Recovery { shard, source })?;
                let fits = |h: &ChunkHeader| {
                    h.first_offset >= self.expected
                        && (h.record_count == 0 || self.last_ts.is_none_or(|t| h.first_ts > t))
                        // In the last segment, past bytes that fail, only a
                        // chunk written after they were synced is real data.
                        && match &self.failing {
                            Some((segment, at, _)) if last && segment == name => {
                                h.synced_through > *at
                            }
                            _ => true,
                        }
                };
                match found {
                    Ok((h, disk_len)) if fits(&h) => {
                        if let Some((segment, at, end)) = self.failing.take() {
                            if h.first_offset > self.expected {
                                let end = if segment == *name { pos } else { end };
                                self.holes.push(Hole {
                                    segment,
                                    bytes: at..end,
                                    offsets: self.expected..h.first_offset,
                                    after_ts: self.last_ts,
                                    before_ts: Some(h.first_ts),
                                });
                            }
                        }
                        if h.record_count > 0 {
                            let bytes = reader
                                .get(pos, disk_len)
                                .await
                                .map_err(|source| RepairError::Recovery { shard, source })?;
                            visit(&h, bytes).map_err(|e| RepairError::Unrepairable {
                                shard,
                                reason: format!("a verified chunk does not verify again: {e}"),
                            })?;
                            self.chunks
                                .push((h.first_offset, u64::from(h.record_count)));
                            self.expected = h.end_offset();
                            self.last_ts = Some(h.last_ts);
                        }
                        pos += disk_len as u64;
                    }
                    _ => {
                        self.failing.get_or_insert((name.clone(), pos, file_len));
                        pos += alignment as u64;
                    }
                }
            }
        }
        if names.last() == Some(&self.last) {
            // What fails to the end is a tail (never-written or torn), not a
            // hole, unless the log was known to reach further (see `durable_end`).
            self.tail = self.failing.take();
        }
        Ok(())
    }
}

async fn read_header_of<S: Storage>(
    storage: &S,
    shard: u32,
    name: &str,
) -> Result<SegmentHeader, RepairError> {
    let io = |source| io_error(shard, name)(source);
    let file = storage.open(name).await.map_err(io)?;
    let block = file.read_at(0, SEGMENT_HEADER_BLOCK).await.map_err(io)?;
    SegmentHeader::decode(&block).map_err(|e| RepairError::Unrepairable {
        shard,
        reason: format!("{name}: the damaged segment's own header is damaged ({e})"),
    })
}

/// Writes `file` (a new file) as a copy of `from`, and syncs it.
async fn copy_file<S: Storage>(
    storage: &S,
    shard: u32,
    from: &str,
    to: &str,
) -> Result<(), RepairError> {
    const STEP: usize = 4 << 20;
    let io = |what: &str| io_error(shard, what);
    let source = storage.open(from).await.map_err(io(from))?;
    let len = source.len().await.map_err(io(from))?;
    if storage
        .list()
        .await
        .map_err(io(to))?
        .iter()
        .any(|n| n == to)
    {
        storage.remove(to).await.map_err(io(to))?;
    }
    let copy = storage.create(to).await.map_err(io(to))?;
    copy.allocate(len).await.map_err(io(to))?;
    let mut pos = 0;
    while pos < len {
        let n = (len - pos).min(STEP as u64) as usize;
        let bytes = source.read_at(pos, n).await.map_err(io(from))?;
        let mut buf = copy.alloc(n);
        buf.as_mut()[..n].copy_from_slice(&bytes[..n]);
        copy.write_at(buf, n, pos).await.map_err(io(to))?;
        pos += n as u64;
    }
    copy.sync().await.map_err(io(to))
}

/// Zeros `name` from byte `at` (aligned) to its end, and syncs it.
async fn cut<S: Storage>(storage: &S, shard: u32, name: &str, at: u64) -> Result<(), RepairError> {
    const STEP: usize = 1 << 20;
    let io = |source| io_error(shard, name)(source);
    let file = storage.open(name).await.map_err(io)?;
    let len = file.len().await.map_err(io)?;
    let mut pos = at;
    while pos < len {
        let n = (len - pos).min(STEP as u64) as usize;
        let mut buf = file.alloc(n);
        buf.as_mut()[..n].fill(0);
        file.write_at(buf, n, pos).await.map_err(io)?;
        pos += n as u64;
    }
    file.sync().await.map_err(io)
}

/// Writes the marker (whole aligned blocks, zero padded) and syncs it and
/// the directory.
async fn write_marker<S: Storage>(
    storage: &S,
    shard: u32,
    marker: &Marker,
) -> Result<(), RepairError> {
    let io = |source| io_error(shard, MARKER)(source);
    let text = format!(
        "renumber_from={}\ncut_at={}\nsegments={}\n",
        marker.renumber_from,
        marker.cut_at,
        marker.segments.join(",")
    );
    let file = storage.create(MARKER).await.map_err(io)?;
    let block = file.alignment().max(512);
    let len = text.len().div_ceil(block) * block;
    let mut buf = file.alloc(len);
    buf.as_mut()[..len].fill(0);
    buf.as_mut()[..text.len()].copy_from_slice(text.as_bytes());
    file.write_at(buf, len, 0).await.map_err(io)?;
    file.sync().await.map_err(io)?;
    storage.sync_dir().await.map_err(io)
}

async fn read_marker<S: Storage>(storage: &S, shard: u32) -> Result<Marker, RepairError> {
    let io = |source| io_error(shard, MARKER)(source);
    let file = storage.open(MARKER).await.map_err(io)?;
    let len = file.len().await.map_err(io)?;
    let bytes = file.read_at(0, len as usize).await.map_err(io)?;
    let text = String::from_utf8_lossy(&bytes);
    let field = |key: &str| {
        text.trim_end_matches('\0')
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
            .map(str::to_owned)
    };
    let bad = || RepairError::Unrepairable {
        shard,
        reason: format!("{MARKER} is damaged: restore the shard from a backup"),
    };
    let marker = Marker {
        renumber_from: field("renumber_from")
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)?,
        cut_at: field("cut_at")
            .and_then(|v| v.parse().ok())
            .ok_or_else(bad)?,
        segments: field("segments")
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .filter(|s| !s.is_empty())
            .ok_or_else(bad)?,
    };
    Ok(marker)
}
