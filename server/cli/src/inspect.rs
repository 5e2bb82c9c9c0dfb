//! `ringfeed inspect`: a data dir's segments, chunks and generations,
//! read-only.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use glommio::{LocalExecutorBuilder, Placement};
use ringfeed_engine::storage::DmaStorage;
use ringfeed_engine::{Log, LogConfig};
use ringfeed_server::producers_line;

/// The `shard-NNN` directories of a data dir, by shard.
pub(crate) fn shard_dirs(data_dir: &Path) -> Result<Vec<(u32, PathBuf)>> {
    if !data_dir.is_dir() {
        bail!("{} is not a directory", data_dir.display());
    }
    let mut shard_dirs = Vec::new();
    for entry in std::fs::read_dir(data_dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(n) = name
            .strip_prefix("shard-")
            .and_then(|n| n.parse::<u32>().ok())
        {
            shard_dirs.push((n, entry.path()));
        }
    }
    shard_dirs.sort();
    if shard_dirs.is_empty() {
        bail!("{} holds no shard-NNN directories", data_dir.display());
    }
    Ok(shard_dirs)
}

/// What the object store at `url` holds: each shard's manifest and its
/// segments, each checked to be in the bucket at its size.
pub async fn bucket(url: String) -> Result<()> {
    let bucket = ringfeed_server::bucket::Bucket::open(&url).map_err(|e| anyhow::anyhow!(e))?;
    let manifests = bucket.manifests().await.map_err(|e| anyhow::anyhow!(e))?;
    println!("object store {url}: {} shard manifest(s)", manifests.len());
    let mut problems = 0;
    for m in &manifests {
        let records: u64 = m
            .segments
            .iter()
            .map(|s| s.next_offset - s.first_offset)
            .sum();
        let bytes: u64 = m.segments.iter().map(|s| s.bytes).sum();
        println!(
            "node {} shard {}: {} segment(s), offsets {}..{}, {records} record(s), {bytes} bytes, feed {}",
            m.node,
            m.shard,
            m.segments.len(),
            m.segments.first().map_or(0, |s| s.first_offset),
            m.uploaded_below(),
            m.feed_id
        );
        for s in &m.segments {
            let size = bucket
                .size(m.node, m.shard, &s.name)
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            let index = ringfeed_server::bucket::index_name(&s.name);
            let index_size = bucket
                .size(m.node, m.shard, &index)
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            let state = match (size, index_size) {
                (Some(size), _) if size != s.bytes => {
                    problems += 1;
                    format!(
                        " -- the object has {size} bytes, the manifest says {}",
                        s.bytes
                    )
                }
                (None, _) => {
                    problems += 1;
                    " -- MISSING from the bucket".to_owned()
                }
                (_, Some(size)) if size == s.index_bytes => String::new(),
                (_, Some(size)) => {
                    problems += 1;
                    format!(
                        " -- its chunk index {index} has {size} bytes, the manifest says {}",
                        s.index_bytes
                    )
                }
                (_, None) => {
                    problems += 1;
                    format!(" -- its chunk index {index} is MISSING from the bucket")
                }
            };
            println!(
                "  {}: offsets {}..{}, {} bytes, {} .. {}, generations {}..{}, crc32c {:08x}{state}",
                s.name,
                s.first_offset,
                s.next_offset,
                s.bytes,
                crate::output::format_ts(s.first_ts_ns),
                crate::output::format_ts(s.last_ts_ns),
                s.min_generation,
                s.max_generation,
                s.crc32c
            );
        }
    }
    println!("(read-only: nothing in the bucket was changed)");
    if problems > 0 {
        bail!("{problems} object(s) the manifests name are missing or of another size");
    }
    Ok(())
}

pub fn run(data_dir: &Path) -> Result<()> {
    let shard_dirs = shard_dirs(data_dir)?;
    // Read-only either way; a running server may append and cut while this
    // reads, so say so (a torn tail seen now may be its unfinished write).
    if let Some(pid) = ringfeed_engine::lock::DataDirLock::holder(data_dir) {
        let pid = pid.map(|p| format!(" (pid {p})")).unwrap_or_default();
        println!(
            "a running server{pid} holds {}: what follows is a moment of a log it may be \
             writing",
            data_dir.display()
        );
    }
    let data_dir_shown = data_dir.display().to_string();
    LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            for (shard, dir) in shard_dirs {
                let storage = DmaStorage::open_read_only(&dir)
                    .map_err(|e| format!("{}: {e}", dir.display()))?;
                let (log, report) = Log::open_read_only(storage, LogConfig::new(shard))
                    .await
                    .map_err(|e| format!("shard {shard}: {e}"))?;
                println!(
                    "shard {shard}: next offset {}, retained {:?}, generations {}",
                    report.next_offset,
                    log.retained(),
                    log.generations()
                );
                for name in &report.removed {
                    println!("  {name}: a leftover a server's open would remove");
                }
                if report.producers > 0 {
                    println!("  {}", producers_line(&report).trim_start_matches(", "));
                }
                if let Some((name, torn)) = &report.truncated {
                    println!(
                        "  {name}: torn tail at byte {} ({}); a server's open would cut it there",
                        torn.position, torn.reason
                    );
                }
                for name in log.segment_names() {
                    let first: u64 =
                        ringfeed_engine::segment::parse_segment_name(&name).unwrap_or(0);
                    let chunks: Vec<_> = log.chunks().filter(|c| c.segment == first).collect();
                    let records: u64 = chunks.iter().map(|c| u64::from(c.entry.record_count)).sum();
                    println!("  {name}: {} chunk(s), {records} record(s)", chunks.len());
                }
            }
            println!("(read-only: nothing in {data_dir_shown} was changed)");
            Ok::<(), String>(())
        })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?
        .map_err(|e| anyhow::anyhow!(e))
}
