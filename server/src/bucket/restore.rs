//! A node rebuilt from the bucket: `serve` on an empty data dir, with the
//! node id and object store of a node whose disk was lost, continues that
//! node's feed. The bucket's manifests give each shard's feed id, where its
//! stored history ends and its generation history; the engine makes the
//! data dir continue from there ([`ringfeed_engine::restore`]), and
//! subscribers read everything below from the bucket.

use anyhow::{bail, Context, Result};
use ringfeed_engine::{EngineConfig, Generations, RestoredShard};

use super::Bucket;

/// If `engine`'s data dir holds no feed yet and the bucket holds this
/// node's manifests, makes the data dir continue their feed. What it did,
/// to print: one line per shard, or nothing.
///
/// An empty data dir whose store cannot be read is an error: starting a new
/// feed instead would leave the bucket's history behind for good.
pub async fn restore_if_empty(bucket: &Bucket, engine: &EngineConfig) -> Result<Vec<String>> {
    if ringfeed_engine::holds_feed(&engine.data_dir) {
        return Ok(Vec::new());
    }
    let node = engine.node_id.unwrap_or(0);
    let mut manifests = Vec::new();
    for shard in 0..engine.shards {
        let manifest = bucket.manifest(node, shard).await.map_err(|e| {
            anyhow::anyhow!(
                "the data dir {} is empty and the object store cannot be read ({e}): \
                 starting a new feed would leave what the store holds of node {node} \
                 behind, so serve stops",
                engine.data_dir.display()
            )
        })?;
        manifests.push(manifest);
    }
    if manifests.iter().all(Option::is_none) {
        return Ok(Vec::new());
    }
    if bucket
        .manifest(node, engine.shards)
        .await
        .ok()
        .flatten()
        .is_some()
    {
        bail!(
            "the object store holds more than {} shard(s) of node {node}: start with the \
             node's shard count",
            engine.shards
        );
    }
    let feeds: std::collections::BTreeSet<&str> = manifests
        .iter()
        .flatten()
        .map(|m| m.feed_id.as_str())
        .collect();
    let [feed] = feeds.into_iter().collect::<Vec<_>>()[..] else {
        bail!("the object store's manifests of node {node} name several feeds");
    };
    let feed_id =
        super::parse_feed_hex(feed).with_context(|| format!("the manifests' feed id {feed:?}"))?;
    let first = || {
        Generations::from_entries(vec![ringfeed_engine::GenerationStart {
            generation: 1,
            first_offset: 0,
        }])
        .expect("one entry")
    };
    let shards: Vec<RestoredShard> = manifests
        .iter()
        .map(|m| match m {
            Some(m) => RestoredShard {
                next_offset: m.uploaded_below(),
                generations: m.history().unwrap_or_else(first),
            },
            None => RestoredShard {
                next_offset: 0,
                generations: first(),
            },
        })
        .collect();
    let config = engine.clone();
    let restored = shards.clone();
    tokio::task::spawn_blocking(move || ringfeed_engine::restore(&config, feed_id, &restored))
        .await
        .context("restoring")??;
    Ok(shards
        .iter()
        .enumerate()
        .map(|(shard, s)| {
            format!(
                "shard {shard}: restored from the object store; offsets below {} are read \
                 from it, new events continue from there",
                s.next_offset
            )
        })
        .collect())
}
