//! The data dir's meta file, `DATA/ringfeed.meta`: its format version,
//! shard count, node id and feed id, read and checked at open, written
//! durably.

use std::path::Path;

use super::EngineError;
use crate::segment::FORMAT_VERSION;

pub(super) const META_FILE: &str = "ringfeed.meta";

/// The lines of `DATA/ringfeed.meta` as read, before they are checked.
#[derive(Debug, Default, PartialEq, Eq)]
struct MetaLines {
    version: Option<u16>,
    shards: Option<u32>,
    node: Option<u32>,
    feed: Option<u64>,
}

impl MetaLines {
    /// Reads `key=value` lines; unknown lines are skipped. A `node=` or
    /// `feed=` line that is not a number (a nonzero hex one for the feed)
    /// is refused, naming the line.
    fn parse(text: &str) -> Result<MetaLines, &'static str> {
        let mut lines = MetaLines::default();
        for line in text.lines() {
            match line.split_once('=') {
                Some(("format", v)) => lines.version = v.trim().parse::<u16>().ok(),
                Some(("shards", v)) => lines.shards = v.trim().parse::<u32>().ok(),
                Some(("node", v)) => {
                    lines.node = Some(v.trim().parse::<u32>().map_err(|_| "bad node= line")?)
                }
                Some(("feed", v)) => {
                    lines.feed = Some(
                        u64::from_str_radix(v.trim(), 16)
                            .ok()
                            .filter(|&id| id != 0)
                            .ok_or("bad feed= line")?,
                    )
                }
                _ => {}
            }
        }
        Ok(lines)
    }
}

/// What `DATA/ringfeed.meta` says of the data dir beyond its format.
pub(super) struct Meta {
    pub(super) node_id: Option<u32>,
    pub(super) feed_id: u64,
}

/// Creates `DATA/ringfeed.meta` on first open; afterwards refuses a different
/// shard count, format version or node id. Returns the node id (the
/// configured one, else the recorded one) and the feed id. A meta without a
/// node id (a data dir made before node ids, or by a node without one) takes
/// the configured id, once; a meta without a feed id (made before feed ids)
/// draws one, once.
pub(super) fn check_meta(
    data_dir: &Path,
    shards: u32,
    node_id: Option<u32>,
) -> Result<Meta, EngineError> {
    let path = data_dir.join(META_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let bad = |reason: &str| EngineError::BadMeta {
                path: path.clone(),
                reason: reason.into(),
            };
            let MetaLines {
                version,
                shards: found,
                node: recorded,
                feed,
            } = MetaLines::parse(&text).map_err(&bad)?;
            let version = version.ok_or_else(|| bad("no format= line"))?;
            if version != FORMAT_VERSION {
                return Err(bad(&format!(
                    "format {version}, this build reads format {FORMAT_VERSION}"
                )));
            }
            let found = found.ok_or_else(|| bad("no shards= line"))?;
            if found != shards {
                return Err(EngineError::ShardCountMismatch {
                    path,
                    found,
                    configured: shards,
                });
            }
            let node_id = match (recorded, node_id) {
                (Some(found), Some(configured)) if found != configured => {
                    return Err(EngineError::NodeIdMismatch {
                        path,
                        found,
                        configured,
                    })
                }
                (recorded, configured) => configured.or(recorded),
            };
            let feed_id = match feed {
                Some(id) => id,
                None => new_feed_id(&path)?,
            };
            if feed.is_none() || node_id != recorded {
                write_meta(data_dir, shards, node_id, feed_id)?;
            }
            Ok(Meta { node_id, feed_id })
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let feed_id = new_feed_id(&path)?;
            write_meta(data_dir, shards, node_id, feed_id)?;
            Ok(Meta { node_id, feed_id })
        }
        Err(source) => Err(EngineError::Io {
            what: format!("reading {}", path.display()),
            source,
        }),
    }
}

/// A new data dir's feed id: 64 random bits from the kernel, never 0 (0 is
/// "no id" in a cursor).
fn new_feed_id(meta: &Path) -> Result<u64, EngineError> {
    let mut bytes = [0u8; 8];
    loop {
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .and_then(|mut f| f.read_exact(&mut bytes))
            .map_err(|source| EngineError::Io {
                what: format!("drawing a feed id for {}", meta.display()),
                source,
            })?;
        let id = u64::from_le_bytes(bytes);
        if id != 0 {
            return Ok(id);
        }
    }
}

/// Writes `DATA/ringfeed.meta` durably (a synced temporary file renamed over
/// it, then the directory synced).
pub(super) fn write_meta(
    data_dir: &Path,
    shards: u32,
    node_id: Option<u32>,
    feed_id: u64,
) -> Result<(), EngineError> {
    let path = data_dir.join(META_FILE);
    let io = |what: &str| {
        let what = format!("{what} {}", path.display());
        move |source| EngineError::Io { what, source }
    };
    let temp = data_dir.join(format!("{META_FILE}.tmp"));
    let mut text = format!(
        "# ringfeed data dir; do not edit\nformat={FORMAT_VERSION}\nshards={shards}\nfeed={}\n",
        ringfeed_core::FeedId(feed_id)
    );
    if let Some(node) = node_id {
        text.push_str(&format!("node={node}\n"));
    }
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&temp).map_err(io("writing"))?;
        f.write_all(text.as_bytes()).map_err(io("writing"))?;
        f.sync_all().map_err(io("syncing"))?;
    }
    std::fs::rename(&temp, &path).map_err(io("renaming"))?;
    std::fs::File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(io("syncing the directory of"))?;
    Ok(())
}

/// Edits of valid encodings shared by the fuzzing tests.
#[cfg(test)]
use ringfeed_testkit::mutation;

#[cfg(test)]
mod tests {
    proptest::proptest! {
        /// The meta file is read from disk (issue 36): a valid one with
        /// bytes set, flipped, inserted or cut, and arbitrary text, parse to
        /// lines or a refusal, never a panic.
        #[test]
        fn any_meta_text_parses_or_is_refused(
            edits in super::mutation::edits(),
            text in ".{0,200}",
        ) {
            let mut bytes = b"# ringfeed data dir; do not edit\nformat=1\nshards=2\nfeed=00ab12cd34ef5678\nnode=3\n".to_vec();
            super::mutation::apply(&mut bytes, &edits);
            for text in [String::from_utf8_lossy(&bytes).into_owned(), text] {
                let _ = super::MetaLines::parse(&text);
            }
        }
    }

    #[test]
    fn the_meta_lines_are_read() {
        let lines =
            super::MetaLines::parse("format=1\nshards=2\nnode=3\nfeed=ab\nother=x\n").unwrap();
        assert_eq!(
            lines,
            super::MetaLines {
                version: Some(1),
                shards: Some(2),
                node: Some(3),
                feed: Some(0xab)
            }
        );
        assert_eq!(super::MetaLines::parse("feed=0\n"), Err("bad feed= line"));
        assert_eq!(super::MetaLines::parse("node=x\n"), Err("bad node= line"));
    }
}
