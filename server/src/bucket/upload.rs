//! The uploader: a task on the tokio side that uploads each shard's sealed
//! segments, oldest first, and names each in the shard's manifest once it
//! is whole in the bucket. Segment files are read on blocking threads,
//! chunk by chunk (each verified), never by a shard.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use object_store::buffered::BufWriter;
use ringfeed_engine::segment::sealed::{read_sealed, SealedFile, SealedSegment};
use ringfeed_engine::Engine;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, watch};

use super::{index, Bucket, Manifest, ManifestSegment, UploadState};
use crate::metrics::ServerMetrics;

/// How often the uploader looks for newly sealed segments.
const POLL: Duration = Duration::from_secs(1);
/// Backoff after a failed pass: doubling from POLL up to this.
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// Bytes an upload buffers before it switches to a multipart upload (S3's
/// smallest part is 5 MiB); the parts in flight are bounded by the store.
const UPLOAD_BUFFER: usize = 8 << 20;
/// Parts of a multipart upload sent at once (the store's default is 8).
/// What one upload holds: this many parts, the buffer, and two pieces of
/// the file ([`ringfeed_engine::segment::sealed::PIECE_BYTES`]): about 26 MiB.
const PARTS_IN_FLIGHT: usize = 2;

/// What the uploader works with.
pub struct Uploader {
    pub engine: Arc<Engine>,
    /// The engine's data dir.
    pub data_dir: PathBuf,
    /// This node's id (0 outside a cluster).
    pub node: u32,
    pub bucket: Arc<Bucket>,
    /// A sealed segment is uploaded once it is this old.
    pub upload_after: Duration,
    pub metrics: Arc<ServerMetrics>,
    /// What `status` shows of the uploads.
    pub state: Arc<UploadState>,
    /// Told every manifest read or written, for readers below the local log.
    pub reader: Arc<super::BucketReader>,
    /// What of the bucket's history goes.
    pub retention: super::BucketRetention,
    /// Per shard, its manifest as read at start
    /// ([`super::BucketReader::load_manifests`]): `None` to read it here.
    pub manifests: Vec<Option<Manifest>>,
}

/// Uploads the sealed segments of every shard to the bucket, until
/// `shutdown`.
pub fn spawn_uploader(
    uploader: Uploader,
    mut shutdown: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let Uploader {
        engine,
        data_dir,
        node,
        bucket,
        upload_after,
        metrics,
        state,
        reader,
        retention,
        manifests,
    } = uploader;
    tokio::spawn(async move {
        let feed_id = super::feed_hex(engine.feed_id());
        let mut shards: Vec<ShardUpload> = (0..engine.shard_count())
            .map(|shard| ShardUpload {
                shard,
                manifest: manifests.get(shard as usize).cloned().flatten(),
            })
            .collect();
        let mut failures = 0u32;
        loop {
            let mut lag = Lag::default();
            let mut failed = None;
            for s in &mut shards {
                let pass = Pass {
                    engine: &engine,
                    data_dir: &data_dir,
                    node,
                    feed_id: &feed_id,
                    bucket: &bucket,
                    upload_after,
                    metrics: &metrics,
                    state: &state,
                    reader: &reader,
                    retention,
                };
                if let Err(e) = s.pass(&pass, &mut lag).await {
                    metrics.bucket_upload_failed();
                    tracing::warn!(shard = s.shard, bucket = bucket.url(), "upload: {e}");
                    failed = Some(format!("shard {}: {e}", s.shard));
                }
            }
            metrics.set_bucket_upload_lag(lag.segments, lag.bytes, lag.oldest.as_secs());
            state.update(|st| {
                st.lag_segments = lag.segments;
                st.lag_bytes = lag.bytes;
                st.lag_seconds = lag.oldest.as_secs_f64();
                st.errors += u64::from(failed.is_some());
                st.error = failed.clone().unwrap_or_default();
            });
            failures = if failed.is_some() {
                failures.saturating_add(1)
            } else {
                0
            };
            let wait = match failures {
                0 => POLL,
                n => (POLL * 2u32.saturating_pow(n.min(16))).min(MAX_BACKOFF),
            };
            tokio::select! {
                _ = shutdown.changed() => return,
                _ = tokio::time::sleep(wait) => {}
            }
        }
    })
}

/// What one pass over the shards needs.
struct Pass<'a> {
    engine: &'a Engine,
    data_dir: &'a Path,
    node: u32,
    feed_id: &'a str,
    bucket: &'a Arc<Bucket>,
    upload_after: Duration,
    metrics: &'a ServerMetrics,
    state: &'a UploadState,
    reader: &'a super::BucketReader,
    retention: super::BucketRetention,
}

/// Sealed segments not in the bucket yet, over all shards.
#[derive(Default)]
struct Lag {
    segments: u64,
    /// The bytes they hold (up to their last chunks).
    bytes: u64,
    /// How long ago the oldest of them was sealed.
    oldest: Duration,
}

impl Lag {
    /// `waiting` (sealed segments of `shard` with their ages, oldest first)
    /// are not in the bucket.
    fn add(&mut self, shard: &ringfeed_engine::ShardShared, waiting: &[(SealedFile, Duration)]) {
        self.segments += waiting.len() as u64;
        self.bytes += waiting
            .iter()
            .filter_map(|(f, _)| shard.segment_bytes(f.first_offset))
            .sum::<u64>();
        if let Some((_, age)) = waiting.first() {
            self.oldest = self.oldest.max(*age);
        }
    }
}

struct ShardUpload {
    shard: u32,
    /// The shard's manifest as the bucket holds it, once read.
    manifest: Option<Manifest>,
}

impl ShardUpload {
    async fn pass(&mut self, p: &Pass<'_>, lag: &mut Lag) -> Result<(), String> {
        let shard = self.shard;
        let shared = p.engine.shard(shard);
        let dir = ringfeed_engine::shard_dir(p.data_dir, shard);
        let listed = dir.clone();
        let files = tokio::task::spawn_blocking(move || sealed_with_age(&listed))
            .await
            .map_err(|e| format!("listing {}: {e}", dir.display()))?
            .map_err(|e| format!("listing {}: {e}", dir.display()))?;
        if self.manifest.is_none() {
            // Until the manifest is read, every sealed segment at or above
            // what is known uploaded waits (the lag says so while the store
            // cannot be read). The files are in offset order.
            let below = shared.uploaded_below();
            let unread = &files[files.partition_point(|f| f.0.first_offset < below)..];
            let manifest = match p.bucket.manifest(p.node, shard).await {
                Err(e) => {
                    lag.add(shared, unread);
                    return Err(e);
                }
                Ok(Some(m)) if m.feed_id != p.feed_id => {
                    lag.add(shared, unread);
                    return Err(format!(
                        "the bucket's manifest of shard {shard} comes from another data dir \
                         (feed {}, this one's is {}): nothing of this shard is uploaded, and \
                         its local retention keeps every segment",
                        m.feed_id, p.feed_id
                    ));
                }
                Ok(Some(m)) => m,
                Ok(None) => Manifest::new(p.node, shard, p.feed_id.to_owned()),
            };
            p.reader.set_manifest(shard, &manifest);
            self.manifest = Some(manifest);
        }
        let manifest = self.manifest.as_mut().expect("read above");
        let below = manifest.uploaded_below();
        shared.set_uploaded_below(below);
        let mut pending = Vec::new();
        for (file, age) in files {
            match manifest.segments.iter().find(|s| s.name == file.name) {
                // In the bucket already: the same offsets, or another
                // segment under its name.
                Some(s) if s.next_offset == file.next_offset => {}
                Some(s) => {
                    return Err(format!(
                        "local segment {} holds offsets {}..{}, the bucket's {}..{}",
                        file.name,
                        file.first_offset,
                        file.next_offset,
                        s.first_offset,
                        s.next_offset
                    ))
                }
                None if file.first_offset < below => {
                    return Err(format!(
                        "local segment {} (offsets {}..{}) overlaps what the bucket holds \
                         (below offset {below}) and is not in its manifest",
                        file.name, file.first_offset, file.next_offset
                    ))
                }
                None => pending.push((file, age)),
            }
        }
        let mut done = 0;
        let mut result = Ok(());
        for (file, age) in &pending {
            if *age < p.upload_after {
                break;
            }
            let found = match upload(p.bucket, p.node, shard, &dir, file).await {
                Ok(found) => found,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            let index = index::encode(&found.chunks);
            let index_path = p
                .bucket
                .shard_dir(p.node, shard)
                .child(index::index_name(&file.name));
            if let Err(e) = p.bucket.put(&index_path, index.clone()).await {
                result = Err(e);
                break;
            }
            manifest.segments.push(entry(file, &found, &index));
            manifest.set_history(shared.generations());
            if let Err(e) = p.bucket.put_manifest(manifest).await {
                // The bucket's manifest is still the one before.
                manifest.segments.pop();
                result = Err(e);
                break;
            }
            p.reader.set_manifest(shard, manifest);
            shared.set_uploaded_below(file.next_offset);
            p.metrics.bucket_segment_uploaded(found.bytes);
            p.state.update(|st| {
                st.segments_uploaded += 1;
                st.bytes_uploaded += found.bytes;
            });
            tracing::debug!(shard, segment = %file.name, bytes = found.bytes, "uploaded");
            done += 1;
        }
        lag.add(shared, &pending[done..]);
        result?;
        self.expire(p).await
    }

    /// Bucket retention: drops the shard's expired segments from its
    /// manifest (one PUT), then deletes their objects. A crash in between
    /// leaves objects no manifest names, never a name without its object.
    async fn expire(&mut self, p: &Pass<'_>) -> Result<(), String> {
        let manifest = self.manifest.as_mut().expect("read by the pass");
        let gone = p
            .retention
            .expired(&manifest.segments, ringfeed_engine::clock::now_ns());
        if gone == 0 {
            return Ok(());
        }
        let mut kept = manifest.clone();
        let removed: Vec<ManifestSegment> = kept.segments.drain(..gone).collect();
        p.bucket.put_manifest(&kept).await?;
        *manifest = kept;
        p.reader.set_manifest(self.shard, manifest);
        for s in &removed {
            p.bucket.delete(p.node, self.shard, &s.name).await?;
            p.bucket
                .delete(p.node, self.shard, &index::index_name(&s.name))
                .await?;
            p.metrics.bucket_segment_expired();
        }
        tracing::info!(
            shard = self.shard,
            segments = gone,
            below = manifest.segments.first().map_or(0, |s| s.first_offset),
            "bucket retention removed the oldest segments"
        );
        Ok(())
    }
}

/// The shard directory's sealed segments, each with how long ago it was
/// sealed (its file's last write).
fn sealed_with_age(dir: &Path) -> std::io::Result<Vec<(SealedFile, Duration)>> {
    let now = SystemTime::now();
    let mut out = Vec::new();
    for file in ringfeed_engine::segment::sealed::sealed_files(dir)? {
        let modified = match std::fs::metadata(dir.join(&file.name)) {
            Ok(meta) => meta.modified()?,
            // Retention removed it since the listing: it was in the bucket
            // (only such segments go), nothing to upload.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        out.push((file, now.duration_since(modified).unwrap_or_default()));
    }
    Ok(out)
}

/// Uploads sealed segment `file` of `dir` as it reads it; nothing is
/// completed in the bucket unless every chunk of it read and verified.
async fn upload(
    bucket: &Bucket,
    node: u32,
    shard: u32,
    dir: &Path,
    file: &SealedFile,
) -> Result<SealedSegment, String> {
    let path = bucket.shard_dir(node, shard).child(file.name.as_str());
    // One piece waiting while one is sent.
    let (tx, mut rx) = mpsc::channel::<Vec<u8>>(1);
    let (dir, file) = (dir.to_owned(), file.clone());
    let reader = tokio::task::spawn_blocking(move || {
        read_sealed(&dir, &file, |part| {
            tx.blocking_send(part)
                .map_err(|_| std::io::Error::other("the upload stopped"))
        })
    });
    let mut writer = BufWriter::with_capacity(bucket.store.clone(), path.clone(), UPLOAD_BUFFER)
        .with_max_concurrency(PARTS_IN_FLIGHT);
    let mut failed = None;
    while let Some(part) = rx.recv().await {
        if let Err(e) = writer.put(part.into()).await {
            failed = Some(format!("uploading {path}: {e}"));
            break;
        }
    }
    drop(rx);
    let read = reader
        .await
        .map_err(|e| format!("reading {path}'s file: {e}"))
        .and_then(|r| r.map_err(|e| format!("reading the segment for {path}: {e}")));
    match (failed, read) {
        (None, Ok(found)) => {
            writer
                .shutdown()
                .await
                .map_err(|e| format!("uploading {path}: {e}"))?;
            Ok(found)
        }
        (Some(e), _) | (None, Err(e)) => {
            // Nothing half-written is completed (a multipart upload is
            // aborted; a small one was never sent).
            let _ = writer.abort().await;
            Err(e)
        }
    }
}

fn entry(file: &SealedFile, found: &SealedSegment, index: &[u8]) -> ManifestSegment {
    let (min_generation, max_generation) = found.generations.unwrap_or((0, 0));
    ManifestSegment {
        name: file.name.clone(),
        first_offset: file.first_offset,
        next_offset: file.next_offset,
        first_ts_ns: found.first_ts.unwrap_or(0),
        last_ts_ns: found.last_ts.unwrap_or(0),
        bytes: found.bytes,
        crc32c: found.crc32c,
        min_generation,
        max_generation,
        index_bytes: index.len() as u64,
        index_crc32c: crc32c::crc32c(index),
    }
}
