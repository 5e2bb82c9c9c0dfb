//! History in an object store (issue 40; docs/object-store.md): each shard's
//! sealed segments are uploaded to a bucket, under
//! `PREFIX/node-N/shard-KKK/`, with a manifest per shard naming the
//! segments the bucket holds. An upload counts only once the manifest names
//! it: a crash in between leaves an object nothing trusts, uploaded again.
//!
//! Retention waits for the bucket: with an object store, a shard removes
//! only segments wholly below what its manifest holds
//! (`RetentionPolicy::keep_until_uploaded`).
//!
//! Reads: a subscriber below a shard's local log reads the bucket's
//! segments through the engine's cold store ([`BucketReader`]).
//!
//! Rebuild: a node started on an empty data dir with the same node id and
//! store continues its feed from the bucket's manifests
//! ([`restore_if_empty`]).
//!
//! Bucket retention ([`BucketRetention`]): the uploader drops a shard's
//! oldest segments from its manifest, then deletes their objects.

mod index;
mod manifest;
mod read;
mod restore;
mod retention;
mod upload;

use std::sync::{Arc, Mutex};

use object_store::path::Path;
use object_store::ObjectStore;
use ringfeed_proto::v1;

pub use index::index_name;
pub use manifest::{feed_hex, parse_feed_hex, Manifest, ManifestSegment};
pub use read::{BucketReader, ReadLimits};
pub use restore::restore_if_empty;
pub use retention::BucketRetention;
pub use upload::{spawn_uploader, Uploader};

/// Most bytes of a manifest read from a bucket (a million segments' worth).
const MAX_MANIFEST_BYTES: usize = 256 << 20;

/// What the uploader shows in `status` (and the status page), as of its
/// last pass. Each shard's uploaded offset is not kept here: the status
/// reads it from the shard ([`ringfeed_engine::ShardShared::uploaded_below`]),
/// where retention reads it too.
#[derive(Debug)]
pub struct UploadState(Mutex<v1::ObjectStoreStatus>);

impl UploadState {
    pub fn new(url: &str) -> UploadState {
        UploadState(Mutex::new(v1::ObjectStoreStatus {
            url: url.to_owned(),
            ..Default::default()
        }))
    }

    pub fn snapshot(&self) -> v1::ObjectStoreStatus {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn update(&self, f: impl FnOnce(&mut v1::ObjectStoreStatus)) {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// An object store and the prefix ringfeed's objects live under.
pub struct Bucket {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// As given (for messages; it holds no secret: credentials come from
    /// the environment or the config's `object_store_options`).
    url: String,
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bucket({})", self.url)
    }
}

impl Bucket {
    /// The store `url` names: `s3://BUCKET/PREFIX` (endpoint, region and
    /// credentials from the standard `AWS_*` environment variables) or
    /// `file:///DIR` (a local directory, made if missing).
    pub fn open(url: &str) -> Result<Bucket, String> {
        Bucket::open_with(url, &[])
    }

    /// [`Bucket::open`] with S3 settings given here besides the environment
    /// (`object_store`'s names: `aws_endpoint`, `aws_access_key_id`, ...).
    pub fn open_with(url: &str, options: &[(&str, &str)]) -> Result<Bucket, String> {
        let bad = |why: &str| format!("object_store {url:?}: {why}");
        let (store, prefix): (Arc<dyn ObjectStore>, &str) = if let Some(rest) = url
            .strip_prefix("s3://")
            .or_else(|| url.strip_prefix("s3a://"))
        {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(bad("no bucket name (s3://BUCKET/PREFIX)"));
            }
            let mut builder =
                object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
            for (key, value) in options {
                let key = key.parse().map_err(|_| {
                    bad(&format!("{key:?} is not an S3 setting object_store knows"))
                })?;
                builder = builder.with_config(key, *value);
            }
            let store = builder.build().map_err(|e| bad(&e.to_string()))?;
            (Arc::new(store), prefix)
        } else if let Some(dir) = url.strip_prefix("file://") {
            if !options.is_empty() {
                return Err(bad("a local directory takes no S3 settings"));
            }
            if !dir.starts_with('/') {
                return Err(bad("a local directory is file:///ABSOLUTE/PATH"));
            }
            std::fs::create_dir_all(dir).map_err(|e| bad(&e.to_string()))?;
            let store = object_store::local::LocalFileSystem::new_with_prefix(dir)
                .map_err(|e| bad(&e.to_string()))?;
            (Arc::new(store), "")
        } else {
            return Err(bad("not s3://BUCKET/PREFIX or file:///DIR"));
        };
        let prefix = Path::parse(prefix.trim_matches('/')).map_err(|e| bad(&e.to_string()))?;
        Ok(Bucket {
            store,
            prefix,
            url: url.to_owned(),
        })
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Where shard `shard` of node `node` keeps its objects.
    fn shard_dir(&self, node: u32, shard: u32) -> Path {
        let mut path = self.prefix.clone();
        for part in [format!("node-{node}"), format!("shard-{shard:03}")] {
            path = path.child(part);
        }
        path
    }

    /// The manifest of shard `shard` of node `node`, if the bucket holds one.
    pub async fn manifest(&self, node: u32, shard: u32) -> Result<Option<Manifest>, String> {
        let path = self.shard_dir(node, shard).child(manifest::MANIFEST);
        let got = match self.store.get(&path).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(format!("reading {path}: {e}")),
        };
        if got.meta.size > MAX_MANIFEST_BYTES as u64 {
            return Err(format!(
                "{path}: {} bytes, more than a manifest holds",
                got.meta.size
            ));
        }
        let bytes = got
            .bytes()
            .await
            .map_err(|e| format!("reading {path}: {e}"))?;
        let manifest = Manifest::parse(&bytes).map_err(|e| format!("{path}: {e}"))?;
        manifest
            .check(node, shard)
            .map_err(|e| format!("{path}: {e}"))?;
        Ok(Some(manifest))
    }

    /// Every shard's manifest the bucket holds, by node then shard (for
    /// `ringfeed inspect --object-store`).
    pub async fn manifests(&self) -> Result<Vec<Manifest>, String> {
        let listed = |at: Path| async move {
            self.store
                .list_with_delimiter(Some(&at))
                .await
                .map(|l| l.common_prefixes)
                .map_err(|e| format!("listing {at}: {e}"))
        };
        let number = |dir: &Path, prefix: &str| -> Option<u32> {
            dir.filename()?.strip_prefix(prefix)?.parse().ok()
        };
        let mut found = Vec::new();
        for node_dir in listed(self.prefix.clone()).await? {
            let Some(node) = number(&node_dir, "node-") else {
                continue;
            };
            for shard_dir in listed(node_dir).await? {
                let Some(shard) = number(&shard_dir, "shard-") else {
                    continue;
                };
                if let Some(manifest) = self.manifest(node, shard).await? {
                    found.push(manifest);
                }
            }
        }
        found.sort_by_key(|m| (m.node, m.shard));
        Ok(found)
    }

    /// The size of the object `name` of shard `shard` of node `node`, if the
    /// bucket holds it.
    pub async fn size(&self, node: u32, shard: u32, name: &str) -> Result<Option<u64>, String> {
        let path = self.shard_dir(node, shard).child(name);
        match self.store.head(&path).await {
            Ok(meta) => Ok(Some(meta.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(format!("reading {path}: {e}")),
        }
    }

    /// The object `name` of shard `shard` of node `node`, whole.
    pub async fn get(&self, node: u32, shard: u32, name: &str) -> Result<Vec<u8>, String> {
        let path = self.shard_dir(node, shard).child(name);
        let got = self
            .store
            .get(&path)
            .await
            .map_err(|e| format!("reading {path}: {e}"))?;
        let bytes = got
            .bytes()
            .await
            .map_err(|e| format!("reading {path}: {e}"))?;
        Ok(bytes.to_vec())
    }

    /// Writes `bytes` to `path` (one PUT).
    async fn put(&self, path: &Path, bytes: Vec<u8>) -> Result<(), String> {
        self.store
            .put(path, bytes.into())
            .await
            .map(|_| ())
            .map_err(|e| format!("writing {path}: {e}"))
    }

    /// Deletes the object `name` of shard `shard` of node `node` (one
    /// already gone is not an error).
    async fn delete(&self, node: u32, shard: u32, name: &str) -> Result<(), String> {
        let path = self.shard_dir(node, shard).child(name);
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(format!("deleting {path}: {e}")),
        }
    }

    /// Replaces the manifest of its shard (a single PUT: readers see the old
    /// one or the new one).
    async fn put_manifest(&self, manifest: &Manifest) -> Result<(), String> {
        let path = self
            .shard_dir(manifest.node, manifest.shard)
            .child(manifest::MANIFEST);
        self.put(&path, manifest.to_json()).await
    }
}
