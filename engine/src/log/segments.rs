//! The log's segments: the next segment's file made ahead of need (where a
//! full disk shows), rotation, and the creation of a segment from it.

use super::{ChunkImage, Log, Segment};
use crate::chunk::{align_up, CHUNK_HEADER_LEN};
use crate::segment::error::LogError;
use crate::segment::index::SegmentIndex;
use crate::segment::{segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK};
use crate::storage::{Storage, StorageFile};

use std::rc::Rc;

/// The next segment's file, under [`SPARE`]: created, and allocated in full
/// unless a failed allocation left it and its removal failed too.
pub(super) struct Spare<F> {
    file: F,
    allocated: bool,
}

/// The name of the next segment's file until it becomes a segment. Open
/// removes it with every other `.seg.tmp`: it never holds data.
const SPARE: &str = "next.seg.tmp";
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

impl<S: Storage> Log<S> {
    /// Before a round is written: makes the next segment's file if the round
    /// will need it (then a full disk refuses the round before any of it is
    /// written: [`LogError::NoSpace`]), or if little of the active segment is
    /// left (then a full disk is only recorded, [`Log::no_space`], and the
    /// round is written where it fits).
    pub(super) async fn prepare_for(&mut self, chunks: &[ChunkImage<'_>]) -> Result<(), LogError> {
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

    /// Makes the current segment durable in full, then starts the next one.
    pub(super) async fn rotate(&mut self) -> Result<(), LogError> {
        self.sync().await?;
        self.create_segment().await
    }

    /// Creates the segment starting at `next_offset`: the file made ahead
    /// ([`Log::prepare_next`], under a temporary name, allocated), its header
    /// written and synced, renamed, directory synced.
    /// A crash at any step leaves either a `.seg.tmp` (removed at open) or a
    /// complete, empty segment.
    pub(super) async fn create_segment(&mut self) -> Result<(), LogError> {
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
