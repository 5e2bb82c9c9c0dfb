//! Shard generations: offsets are never silently reused.
//!
//! Readers see memory-acknowledged events before they are durable, and a crash
//! loses whatever was not synced, so after an unclean stop a shard hands the
//! lost offsets out again to new events. Every open of a shard therefore
//! starts a new *generation*, recorded durably (file `generations` in the
//! shard's directory, written to a temporary name, synced, renamed, directory
//! synced) before the shard serves anything, and written into every chunk
//! header. The history `(generation, first offset)` says where each
//! generation's events start; a generation's surviving events end where the
//! next one starts, because a generation starts at the offset recovery kept.
//!
//! A cursor records, per shard, the generation of the last event it covers.
//! [`Generations::check`] tells a cursor that lies beyond what its generation
//! kept (its subscriber saw events a crash destroyed) from a valid one.
//!
//! Why every open and not only unclean ones: a bump costs one small synced
//! write at open, and it makes correctness independent of detecting a clean
//! close (a lost or misread seal can never let offsets be reused).
//!
//! File layout (little-endian): `"RFGN" | u16 version | u16 0 | u32 count |
//! count × (u32 generation, u64 first offset) | u32 crc32c of all before`,
//! zero-padded to the storage's alignment.

use std::fmt;

use crate::record::{read_u16, read_u32, read_u64};
use crate::storage::{Storage, StorageFile};

/// The file holding a shard's generation history.
pub const GENERATIONS_FILE: &str = "generations";
const TEMP_FILE: &str = "generations.tmp";
const MAGIC: &[u8; 4] = b"RFGN";
const VERSION: u16 = 1;
const HEADER: usize = 12;
const ENTRY: usize = 12;

/// One generation: its number and the offset its first event got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerationStart {
    pub generation: u32,
    pub first_offset: u64,
}

/// A shard's generation history, oldest first; the last entry is the
/// generation running now. Immutable while the shard runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Generations {
    entries: Vec<GenerationStart>,
}

/// What a cursor's `(generation, next offset)` means for this shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorCheck {
    /// Every event the cursor covers still exists.
    Valid,
    /// The cursor's generation lost its events from `surviving_end` on in a
    /// crash: its subscriber saw `next - surviving_end` events that no longer
    /// exist (and new events may since have taken their offsets).
    Truncated { surviving_end: u64 },
    /// No such generation was ever run by this shard.
    Unknown,
}

impl Generations {
    /// The history of a shard whose log has never been opened with
    /// generations: generation 0 covers whatever it holds.
    pub fn legacy() -> Generations {
        Generations {
            entries: vec![GenerationStart {
                generation: 0,
                first_offset: 0,
            }],
        }
    }

    /// A history from its entries (ascending in both fields).
    // Checks the entries `decode` read from disk: no panicking shortcut either.
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn from_entries(entries: Vec<GenerationStart>) -> Option<Generations> {
        let ordered = entries
            .iter()
            .zip(entries.iter().skip(1))
            .all(|(a, b)| a.generation < b.generation && a.first_offset <= b.first_offset);
        (ordered && !entries.is_empty()).then_some(Generations { entries })
    }

    pub fn entries(&self) -> &[GenerationStart] {
        &self.entries
    }

    /// The generation running now.
    pub fn current(&self) -> u32 {
        self.entries.last().map_or(0, |e| e.generation)
    }

    /// The history with a new generation above both its own and `at_least`,
    /// starting at `next_offset`. `None` if no such history can exist: the
    /// numbers are used up, or the log now ends below where the newest
    /// generation started (records below a generation's start were durable
    /// when it began, so that is damage, not a crash).
    pub fn next(&self, next_offset: u64, at_least: u32) -> Option<Generations> {
        let generation = self.current().max(at_least).checked_add(1)?;
        let mut entries = self.entries.clone();
        entries.push(GenerationStart {
            generation,
            first_offset: next_offset,
        });
        Generations::from_entries(entries)
    }

    /// The generation that wrote the event at `offset` (any offset at or past
    /// the current generation's start belongs to the current one).
    pub fn of_offset(&self, offset: u64) -> u32 {
        // The last generation starting at or before `offset`: earlier ones
        // with the same start kept no event.
        let i = self.entries.partition_point(|e| e.first_offset <= offset);
        self.entries[i.saturating_sub(1)].generation
    }

    /// Whether a cursor whose last covered event was written by `generation`
    /// and whose next offset is `next` covers only events that still exist.
    pub fn check(&self, generation: u32, next: u64) -> CursorCheck {
        if next == 0 {
            // Covers no event, so none of them can be gone, whatever
            // generation it names (one the history may not list: a legacy
            // log's 0, rebuilt from chunks that hold no record).
            return CursorCheck::Valid;
        }
        let Some(i) = self.entries.iter().position(|e| e.generation == generation) else {
            return CursorCheck::Unknown;
        };
        match self.entries.get(i + 1) {
            Some(later) if next > later.first_offset => CursorCheck::Truncated {
                surviving_end: later.first_offset,
            },
            _ => CursorCheck::Valid,
        }
    }

    /// Where the log ended when it was last opened: the newest generation
    /// starts there, and the open had synced every event below it first. A
    /// log that ends below it now lost durable events at its end.
    pub fn durable_end(&self) -> u64 {
        self.entries.last().map_or(0, |e| e.first_offset)
    }

    /// The history of a log cut at offset `end` (by a repair): a generation
    /// that started past `end` starts at `end` instead, having kept nothing,
    /// so a cursor past `end` of any generation is truncated there, and no
    /// generation number is handed out again.
    pub fn cut_at(&self, end: u64) -> Generations {
        let entries = self
            .entries
            .iter()
            .map(|e| GenerationStart {
                generation: e.generation,
                first_offset: e.first_offset.min(end),
            })
            .collect();
        Generations::from_entries(entries).expect("clamping keeps the order")
    }

    // `encode` and `store` write bytes of their own; the lints are denied on
    // `decode`, which reads the file.

    /// The file's bytes, padded to `alignment`.
    pub fn encode(&self, alignment: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + ENTRY * self.entries.len() + 4);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&0u16.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        for e in &self.entries {
            out.extend_from_slice(&e.generation.to_le_bytes());
            out.extend_from_slice(&e.first_offset.to_le_bytes());
        }
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_le_bytes());
        out.resize(out.len().div_ceil(alignment) * alignment, 0);
        out
    }

    /// Parses the file's bytes (padding allowed after the checksum).
    // Bytes from disk or the network: hostile until checked (engine/fuzz runs this).
    #[deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::indexing_slicing,
        clippy::panic,
        clippy::unreachable
    )]
    pub fn decode(bytes: &[u8]) -> Result<Generations, String> {
        if bytes.first_chunk() != Some(MAGIC) {
            return Err("no generations magic".into());
        }
        // A file too short to hold a version reads as version 0, unknown.
        let version = read_u16(bytes, 4).unwrap_or(0);
        if version != VERSION {
            return Err(format!("unknown generations file version {version}"));
        }
        let count = read_u32(bytes, 8).ok_or("truncated")? as usize;
        // The count is the file's word: checked against its length before it
        // sizes anything.
        let end = count
            .checked_mul(ENTRY)
            .and_then(|n| n.checked_add(HEADER))
            .filter(|&end| end.checked_add(4).is_some_and(|e| e <= bytes.len()))
            .ok_or("truncated")?;
        let (covered, after) = bytes.split_at_checked(end).ok_or("truncated")?;
        let stored = read_u32(after, 0).ok_or("truncated")?;
        if crc32c::crc32c(covered) != stored {
            return Err("checksum mismatch".into());
        }
        let body = covered.get(HEADER..).ok_or("truncated")?;
        let mut entries = Vec::with_capacity(count);
        for entry in body.chunks_exact(ENTRY) {
            entries.push(GenerationStart {
                generation: read_u32(entry, 0).ok_or("truncated")?,
                first_offset: read_u64(entry, 4).ok_or("truncated")?,
            });
        }
        Generations::from_entries(entries).ok_or_else(|| "entries out of order".into())
    }

    /// Reads the history from `storage`; `None` if the file does not exist.
    /// Unless `read_only`, removes the leftover of an interrupted
    /// [`Generations::store`].
    pub async fn load<S: Storage>(
        storage: &S,
        read_only: bool,
    ) -> std::io::Result<Option<Generations>> {
        let names = storage.list().await?;
        if !read_only && names.iter().any(|n| n == TEMP_FILE) {
            // A write that did not finish: the renamed file (if any) is the truth.
            storage.remove(TEMP_FILE).await?;
        }
        if !names.iter().any(|n| n == GENERATIONS_FILE) {
            return Ok(None);
        }
        let file = storage.open(GENERATIONS_FILE).await?;
        let len = file.len().await? as usize;
        let bytes = file.read_at(0, len).await?;
        Generations::decode(&bytes)
            .map(Some)
            .map_err(|reason| std::io::Error::other(format!("{GENERATIONS_FILE}: {reason}")))
    }

    /// Replaces the history in `storage` durably: temporary file, sync,
    /// rename, directory sync. A crash leaves the old history or the new one.
    pub async fn store<S: Storage>(&self, storage: &S) -> std::io::Result<()> {
        let file = storage.create(TEMP_FILE).await?;
        let bytes = self.encode(file.alignment());
        let mut buf = file.alloc(bytes.len());
        buf.as_mut()[..bytes.len()].copy_from_slice(&bytes);
        file.write_at(buf, bytes.len(), 0).await?;
        file.sync().await?;
        drop(file);
        storage.rename(TEMP_FILE, GENERATIONS_FILE).await?;
        storage.sync_dir().await
    }
}

impl fmt::Display for Generations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.entries.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{}@{}", e.generation, e.first_offset)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(pairs: &[(u32, u64)]) -> Generations {
        Generations::from_entries(
            pairs
                .iter()
                .map(|&(generation, first_offset)| GenerationStart {
                    generation,
                    first_offset,
                })
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_cursor_past_its_generations_surviving_end_is_truncated() {
        // Generation 1 wrote 0..150 but kept 0..100 (crash); 2 opened at 100,
        // kept nothing past 100 either; 3 runs now.
        let h = history(&[(1, 0), (2, 100), (3, 100)]);
        assert_eq!(h.check(1, 100), CursorCheck::Valid);
        assert_eq!(h.check(1, 40), CursorCheck::Valid);
        assert_eq!(
            h.check(1, 150),
            CursorCheck::Truncated { surviving_end: 100 }
        );
        assert_eq!(
            h.check(2, 101),
            CursorCheck::Truncated { surviving_end: 100 }
        );
        assert_eq!(h.check(3, 1_000), CursorCheck::Valid);
        assert_eq!(h.check(9, 1), CursorCheck::Unknown);
        assert_eq!(h.of_offset(99), 1);
        assert_eq!(h.of_offset(100), 3);
        assert_eq!(h.of_offset(5_000), 3);
    }

    /// Review finding: a cursor at offset 0 naming a generation the history
    /// does not hold (gen 0 of a legacy log with no records, whose history
    /// was rebuilt without it) was refused; it covers nothing, so it is valid.
    #[test]
    fn a_cursor_that_covers_nothing_is_valid_in_any_generation() {
        let history = Generations::from_entries(vec![GenerationStart {
            generation: 1,
            first_offset: 0,
        }])
        .unwrap();
        assert_eq!(history.check(0, 0), CursorCheck::Valid);
        assert_eq!(history.check(0, 1), CursorCheck::Unknown);
    }

    #[test]
    fn an_impossible_next_generation_is_refused_not_panicked_on() {
        let h = history(&[(1, 0), (2, 100)]);
        assert_eq!(h.next(150, 0).unwrap().current(), 3);
        assert_eq!(
            h.next(150, 7).unwrap().current(),
            8,
            "above every chunk's generation"
        );
        assert!(
            h.next(99, 0).is_none(),
            "the log ends below the newest start"
        );
        assert!(h.next(150, u32::MAX).is_none(), "numbers used up");
    }

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let h = history(&[(0, 0), (1, 7), (2, 9)]);
        let bytes = h.encode(512);
        assert_eq!(bytes.len(), 512);
        assert_eq!(Generations::decode(&bytes).unwrap(), h);
        for i in 0..HEADER + 3 * ENTRY + 4 {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            assert!(Generations::decode(&bad).is_err(), "flip at {i} accepted");
        }
        assert!(Generations::decode(&bytes[..20]).is_err());
    }

    #[test]
    fn out_of_order_entries_are_refused() {
        assert!(Generations::from_entries(vec![
            GenerationStart {
                generation: 2,
                first_offset: 0
            },
            GenerationStart {
                generation: 1,
                first_offset: 5
            },
        ])
        .is_none());
        assert!(Generations::from_entries(Vec::new()).is_none());
    }
}
