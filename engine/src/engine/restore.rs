//! A data dir made to continue a feed whose history is elsewhere (the
//! server's object store, issue 40): a node whose disk was lost restarts on
//! an empty data dir with the same node id, and its shards go on from where
//! the stored history ends, in a new generation.
//!
//! Nothing of the history is copied here. Each shard gets an empty segment
//! starting at its stored history's end (so its log, and its oldest local
//! offset, start there), and a generation history: the stored one, cut at
//! that end, plus [`LOST_GENERATIONS`] generations that kept nothing past it
//! (a generation the lost disk ran after the history was last stored is
//! one of them, so a cursor naming it is refused as truncated, not as
//! unknown). The open that follows starts the next generation. The meta
//! file, written last, names the feed: cursors of the old disk stay this
//! feed's. A crash before it leaves a data dir the next start restores again.

use std::io::Write;
use std::path::Path;

use super::config::shard_config;
use super::meta::{write_meta, META_FILE};
use super::{shard_dir, sync_dir, EngineConfig, EngineError};
use crate::generation::{GenerationStart, Generations, GENERATIONS_FILE};
use crate::segment::{segment_name, SegmentHeader, SEGMENT_HEADER_BLOCK};

/// Generations past the stored history that a restore records as having
/// kept nothing: how many times the lost disk may have been opened since
/// its history was last stored for their cursors to be told "truncated".
pub const LOST_GENERATIONS: u32 = 256;

/// Whether `data_dir` holds a feed (its meta file): a restore writes only
/// one that does not.
pub fn holds_feed(data_dir: &Path) -> bool {
    data_dir.join(META_FILE).exists()
}

/// What one shard continues from.
#[derive(Clone, Debug)]
pub struct RestoredShard {
    /// Where the stored history ends: the shard's next offset.
    pub next_offset: u64,
    /// Its generation history as last stored.
    pub generations: Generations,
}

/// Makes the empty data dir of `config` continue feed `feed_id` from
/// `shards` (one per shard, in order). Refuses a data dir that holds a
/// feed already.
pub fn restore(
    config: &EngineConfig,
    feed_id: u64,
    shards: &[RestoredShard],
) -> Result<(), EngineError> {
    let data_dir = &config.data_dir;
    let io = |what: String| move |source| EngineError::Io { what, source };
    if holds_feed(data_dir) {
        return Err(EngineError::BadMeta {
            path: data_dir.join(META_FILE),
            reason: "a restore writes only an empty data dir".into(),
        });
    }
    if shards.len() != config.shards as usize {
        return Err(EngineError::BadMeta {
            path: data_dir.join(META_FILE),
            reason: format!(
                "{} shard(s) stored, {} configured",
                shards.len(),
                config.shards
            ),
        });
    }
    for (id, shard) in shards.iter().enumerate() {
        let dir = shard_dir(data_dir, id as u32);
        std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
        // A restore interrupted before: start over.
        for entry in std::fs::read_dir(&dir).map_err(io(format!("listing {}", dir.display())))? {
            let path = entry
                .map_err(io(format!("listing {}", dir.display())))?
                .path();
            std::fs::remove_file(&path).map_err(io(format!("removing {}", path.display())))?;
        }
        let log = shard_config(config, id as u32).log;
        let header = SegmentHeader {
            shard: id as u32,
            alignment: SEGMENT_HEADER_BLOCK as u32,
            first_offset: shard.next_offset,
            created_ns: crate::clock::now_ns(),
            segment_bytes: log.segment_bytes,
            max_unsynced_bytes: log.max_unsynced_bytes,
        };
        let mut block = vec![0u8; SEGMENT_HEADER_BLOCK];
        header.encode(&mut block);
        write_synced(
            &dir.join(segment_name(shard.next_offset)),
            &block,
            log.segment_bytes,
        )?;
        let history =
            history(&shard.generations, shard.next_offset).ok_or_else(|| EngineError::BadMeta {
                path: dir.join(GENERATIONS_FILE),
                reason: "the stored generation numbers are used up".into(),
            })?;
        write_synced(
            &dir.join(GENERATIONS_FILE),
            &history.encode(SEGMENT_HEADER_BLOCK),
            0,
        )?;
        sync_dir(&dir)?;
    }
    sync_dir(data_dir)?;
    write_meta(data_dir, config.shards, config.node_id, feed_id)
}

/// The stored history cut at `next`, then the generations that may have
/// run on the lost disk, each keeping nothing past `next`.
fn history(stored: &Generations, next: u64) -> Option<Generations> {
    let mut entries = stored.cut_at(next).entries().to_vec();
    let last = stored.current();
    for lost in 1..=LOST_GENERATIONS {
        entries.push(GenerationStart {
            generation: last.checked_add(lost)?,
            first_offset: next,
        });
    }
    Generations::from_entries(entries)
}

fn write_synced(path: &Path, bytes: &[u8], len: u64) -> Result<(), EngineError> {
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| EngineError::Io { what, source }
    };
    let mut f = std::fs::File::create(path).map_err(io("creating"))?;
    f.write_all(bytes).map_err(io("writing"))?;
    if len > bytes.len() as u64 {
        f.set_len(len).map_err(io("sizing"))?;
    }
    f.sync_all().map_err(io("syncing"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_generation_is_truncated_at_the_stored_end() {
        let stored = Generations::from_entries(vec![
            GenerationStart {
                generation: 1,
                first_offset: 0,
            },
            GenerationStart {
                generation: 2,
                first_offset: 500,
            },
            // Started after the history's end was stored: kept nothing of it.
            GenerationStart {
                generation: 3,
                first_offset: 900,
            },
        ])
        .unwrap();
        let h = history(&stored, 800).unwrap();
        use crate::generation::CursorCheck;
        assert_eq!(h.check(1, 400), CursorCheck::Valid);
        assert_eq!(h.check(2, 800), CursorCheck::Valid);
        assert_eq!(
            h.check(2, 850),
            CursorCheck::Truncated { surviving_end: 800 }
        );
        assert_eq!(
            h.check(3, 950),
            CursorCheck::Truncated { surviving_end: 800 }
        );
        // A generation run after the history was stored, never listed in it.
        assert_eq!(
            h.check(4 + 100, 801),
            CursorCheck::Truncated { surviving_end: 800 }
        );
        assert_eq!(h.current(), 3 + LOST_GENERATIONS);
    }
}
