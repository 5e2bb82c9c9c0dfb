//! `ringfeed repair`: mend a data dir the open refuses for damage, saying
//! what was lost.

use std::path::Path;

use anyhow::Result;
use glommio::{LocalExecutorBuilder, Placement};
use ringfeed_engine::storage::DmaStorage;

use crate::inspect::shard_dirs;

pub fn run(data_dir: &Path, dry_run: bool) -> Result<()> {
    use ringfeed_engine::repair::repair_shard;
    let shard_dirs = shard_dirs(data_dir)?;
    // Held for the whole repair: no server opens the data dir meanwhile.
    let _lock = ringfeed_engine::lock::DataDirLock::take(data_dir)
        .map_err(|e| anyhow::anyhow!("{e}; stop the server before repairing"))?;
    let reports = LocalExecutorBuilder::new(Placement::Unbound)
        .spawn(move || async move {
            let mut reports = Vec::new();
            for (shard, dir) in shard_dirs {
                let storage = if dry_run {
                    DmaStorage::open_read_only(&dir)
                } else {
                    DmaStorage::open(&dir)
                }
                .map_err(|e| format!("{}: {e}", dir.display()))?;
                let report = repair_shard(storage, shard, dry_run)
                    .await
                    .map_err(|e| e.to_string())?;
                reports.push((shard, report));
            }
            Ok::<_, String>(reports)
        })
        .map_err(|e| anyhow::anyhow!("starting the executor: {e}"))?
        .join()
        .map_err(|e| anyhow::anyhow!("executor: {e:?}"))?
        .map_err(|e| anyhow::anyhow!(e))?;
    let stamp = |ts: Option<i64>| {
        ts.and_then(|ns| u64::try_from(ns).ok())
            .map(|ns| {
                humantime::format_rfc3339_nanos(
                    std::time::UNIX_EPOCH + std::time::Duration::from_nanos(ns),
                )
                .to_string()
            })
            .unwrap_or_else(|| "-".to_owned())
    };
    let (mut mended, mut lost, mut moved) = (0, 0, 0);
    for (shard, report) in reports {
        let Some(r) = report else {
            println!("shard {shard}: no damage");
            continue;
        };
        mended += 1;
        // The open's own words, without its advice to run this command.
        let damage = r
            .damage
            .split(" `ringfeed repair")
            .next()
            .unwrap_or_default();
        println!("shard {shard}: {damage}");
        for hole in &r.holes {
            let n = hole.offsets.end - hole.offsets.start;
            lost += n;
            let bytes = if hole.bytes.start == u64::MAX {
                String::new()
            } else {
                format!(
                    " (bytes {}..{} of {})",
                    hole.bytes.start, hole.bytes.end, hole.segment
                )
            };
            println!(
                "  {} offsets {}..{}: {n} event(s) stamped after {} and before {}{bytes}",
                if dry_run { "would lose" } else { "lost" },
                hole.offsets.start,
                hole.offsets.end,
                stamp(hole.after_ts),
                stamp(hole.before_ts),
            );
        }
        moved += r.survivors;
        let kept = r.renumbered_from..r.renumbered_from + r.survivors;
        match r.generation {
            Some(generation) => println!(
                "  kept {} event(s) after the damage, now at offsets {}..{} (generation {generation}); \
                 a cursor past offset {} is refused as truncated: resume it with \
                 --resume-truncated, or from a time",
                r.survivors, kept.start, kept.end, r.renumbered_from
            ),
            None => println!(
                "  would keep {} event(s) after the damage, at offsets {}..{} under a new generation",
                r.survivors, kept.start, kept.end
            ),
        }
    }
    if dry_run {
        println!(
            "dry run: {mended} shard(s) to repair, {lost} event(s) to lose, {moved} to renumber; \
             nothing in {} was changed",
            data_dir.display()
        );
    } else {
        println!("repaired {mended} shard(s): {lost} event(s) lost, {moved} renumbered");
    }
    Ok(())
}
