//! ringfeed's feed as SeaweedFS's `SubscribeMetadata` shows it: which events
//! a request wants, matched as a SeaweedFS 4.48 filer matches them, and each
//! event as a `SubscribeMetadataResponse`.
//!
//! A filer's event goes out as the notification it was stored with (checked
//! strictly when ingested, so its decoding is the one every decoder reads),
//! this server's signature added when it is not there yet. An event appended
//! through ringfeed's own API goes out as the notification a filer would
//! have logged for it.

use std::collections::{BTreeSet, HashMap};

use ringfeed_proto::bytes::{BufMut, Bytes, BytesMut};
use ringfeed_proto::filer_pb;
use ringfeed_proto::prost::Message as _;
use ringfeed_proto::raw::RawFilerResponse;
use ringfeed_proto::v1;

use super::log_files::LOG_DIR;
use super::merge::Timed;

/// What a `SubscribeMetadata` request selects. Matching an event costs
/// O(length of its paths), however many prefixes and directories the
/// request names (a linear scan let one request of 200,000 prefixes slow its
/// stream to about 1,000 events/s).
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Matcher {
    path_prefix: String,
    path_prefixes: Prefixes,
    directories: BTreeSet<String>,
    /// Events carrying it are the subscriber's own: not sent back (0: none).
    signature: i32,
}

/// The parts of one event matching reads.
#[derive(Clone, Copy, Debug)]
pub struct Paths<'a> {
    pub directory: &'a str,
    pub old_name: Option<&'a str>,
    pub new_name: Option<&'a str>,
    pub new_parent_path: &'a str,
}

impl Matcher {
    pub fn new(request: &filer_pb::SubscribeMetadataRequest) -> Matcher {
        Matcher {
            path_prefix: request.path_prefix.clone(),
            path_prefixes: Prefixes::new(&request.path_prefixes),
            directories: request.directories.iter().cloned().collect(),
            signature: request.signature,
        }
    }

    /// About what the matcher holds in memory: its paths, each string's
    /// and table entry's bookkeeping, and the prefix lengths' table.
    pub fn memory_bytes(&self) -> usize {
        /// A `String` and its place in a map or set, or in the hashed
        /// prefixes' list and table.
        const PER_PATH: usize = 64;
        let prefixes = &self.path_prefixes;
        self.path_prefix.len()
            + prefixes
                .list
                .iter()
                .map(|p| p.len() + PER_PATH)
                .sum::<usize>()
            + prefixes.ends.len()
            + self
                .directories
                .iter()
                .map(|d| d.len() + PER_PATH)
                .sum::<usize>()
    }

    /// Whether the subscriber gets the event. As SeaweedFS: its signature
    /// drops it; the filer's own log directory is never sent; then the
    /// source path, or for an event with a new entry the target path,
    /// matches any of `path_prefixes`, `directories` (the parent exactly) or
    /// `path_prefix` (an empty one matches every path).
    pub fn wants(&self, route: &Route, signatures: &[i32]) -> bool {
        if self.signature != 0 && signatures.contains(&self.signature) {
            return false;
        }
        if route.in_log_dir {
            return false;
        }
        self.matches(&route.source, &route.directory)
            || route
                .target
                .as_ref()
                .is_some_and(|(path, directory)| self.matches(path, directory))
    }

    fn matches(&self, full_path: &str, directory: &str) -> bool {
        self.path_prefixes.any_starts(full_path)
            || self.directories.contains(directory)
            || full_path.starts_with(self.path_prefix.as_str())
    }
}

/// String prefixes (SeaweedFS's `strings.HasPrefix`, no path boundary),
/// found by hashing a path's leading bytes once: every length at which a
/// prefix ends is looked up by the hash of the path up to there, and a hit
/// is checked byte by byte.
#[derive(Clone, Debug, Default)]
struct Prefixes {
    /// The request's, in its order (what two matchers compare).
    list: Vec<String>,
    /// `ends[n]`: a prefix is `n` bytes long.
    ends: Vec<bool>,
    /// The hash of each prefix → the prefixes (indexes in `list`) with it.
    by_hash: HashMap<u64, Vec<u32>>,
}

impl Prefixes {
    fn new(list: &[String]) -> Prefixes {
        let mut prefixes = Prefixes {
            list: list.to_vec(),
            ends: vec![false; list.iter().map(String::len).max().map_or(0, |n| n + 1)],
            by_hash: HashMap::new(),
        };
        for (i, p) in list.iter().enumerate() {
            prefixes.ends[p.len()] = true;
            let hash = p.bytes().fold(FNV_OFFSET, fnv);
            prefixes.by_hash.entry(hash).or_default().push(i as u32);
        }
        prefixes
    }

    /// Whether `path` starts with one of the prefixes.
    fn any_starts(&self, path: &str) -> bool {
        let mut hash = FNV_OFFSET;
        let bytes = path.as_bytes();
        for n in 0..self.ends.len().min(bytes.len() + 1) {
            if self.ends[n] {
                let hit = self.by_hash.get(&hash).is_some_and(|found| {
                    found
                        .iter()
                        .any(|&i| bytes.starts_with(self.list[i as usize].as_bytes()))
                });
                if hit {
                    return true;
                }
            }
            if let Some(&b) = bytes.get(n) {
                hash = fnv(hash, b);
            }
        }
        false
    }
}

// Two matchers of the same request are alike: the index is made from
// `list` alone.
impl PartialEq for Prefixes {
    fn eq(&self, other: &Prefixes) -> bool {
        self.list == other.list
    }
}

impl Eq for Prefixes {}

impl std::hash::Hash for Prefixes {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.list.hash(state);
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// One byte of FNV-1a.
fn fnv(hash: u64, byte: u8) -> u64 {
    (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
}

/// The paths of one event a request is matched on, joined once for every
/// subscriber: the source path and its directory, and for an event with a
/// new entry the target path and its directory.
#[derive(Clone, Debug)]
pub struct Route {
    source: String,
    directory: String,
    target: Option<(String, String)>,
    /// The source path is under the filer's own log directory.
    in_log_dir: bool,
}

impl Route {
    pub fn new(paths: &Paths<'_>) -> Route {
        let source_name = paths.old_name.or(paths.new_name).unwrap_or("");
        let target = paths.new_name.map(|new_name| {
            let directory = if paths.new_parent_path.is_empty() {
                paths.directory
            } else {
                paths.new_parent_path
            };
            (join(directory, new_name), directory.to_owned())
        });
        let source = join(paths.directory, source_name);
        Route {
            in_log_dir: source.starts_with(LOG_DIR),
            source,
            directory: paths.directory.to_owned(),
            target,
        }
    }
}

/// `directory` and `name` joined and cleaned, as Go's `filepath.Join`.
pub fn join(directory: &str, name: &str) -> String {
    let joined = match (directory.is_empty(), name.is_empty()) {
        (true, true) => return String::new(),
        (true, false) => name.to_owned(),
        (false, true) => directory.to_owned(),
        (false, false) => format!("{directory}/{name}"),
    };
    clean(&joined)
}

/// Go's `path.Clean`: one slash between elements, no `.`, `..` resolved
/// (above the root it stays the root), no trailing slash but on the root.
fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            part => parts.push(part),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".to_owned(),
        (false, false) => body,
    }
}

/// One event as a filer's log holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct FilerEvent {
    pub directory: String,
    pub ts_ns: i64,
    pub notification: filer_pb::EventNotification,
}

impl FilerEvent {
    /// A stored event as SeaweedFS clients see it: a filer's with its
    /// bytes and time; one of ringfeed's own as the notification a filer
    /// would log, at `stamp_ns` (ringfeed's time for it).
    pub fn of(event: &v1::Event, stamp_ns: i64) -> Result<FilerEvent, String> {
        if let Some(s) = &event.seaweedfs {
            let notification = filer_pb::EventNotification::decode(s.event_notification.clone())
                .map_err(|e| format!("a stored filer notification does not decode: {e}"))?;
            return Ok(FilerEvent {
                directory: event.directory.clone(),
                ts_ns: s.ts_ns,
                notification,
            });
        }
        let entry = |e: &v1::Entry| filer_pb::Entry {
            name: e.name.clone(),
            is_directory: e.is_directory,
            attributes: Some(filer_pb::FuseAttributes {
                file_size: e.size,
                mtime: e.mtime_ns.div_euclid(1_000_000_000),
                mtime_ns: e.mtime_ns.rem_euclid(1_000_000_000) as i32,
                file_mode: e.mode,
                ..Default::default()
            }),
            ..Default::default()
        };
        // A filer names the new entry's directory on every event with one.
        let new_parent_path = match &event.new_entry {
            Some(_) if event.new_parent_path.is_empty() => event.directory.clone(),
            _ => event.new_parent_path.clone(),
        };
        let notification = filer_pb::EventNotification {
            old_entry: event.old_entry.as_ref().map(entry),
            new_entry: event.new_entry.as_ref().map(entry),
            new_parent_path,
            signatures: event.signatures.clone(),
            ..Default::default()
        };
        Ok(FilerEvent {
            directory: event.directory.clone(),
            ts_ns: stamp_ns,
            notification,
        })
    }

    pub fn paths(&self) -> Paths<'_> {
        let n = &self.notification;
        Paths {
            directory: &self.directory,
            old_name: n.old_entry.as_ref().map(|e| e.name.as_str()),
            new_name: n.new_entry.as_ref().map(|e| e.name.as_str()),
            new_parent_path: &n.new_parent_path,
        }
    }

    /// The `SubscribeMetadataResponse` for it, `signature` (this server's)
    /// added to the notification's signatures when it is not among them.
    pub fn response(self, signature: i32) -> filer_pb::SubscribeMetadataResponse {
        let mut notification = self.notification;
        if !notification.signatures.contains(&signature) {
            notification.signatures.push(signature);
        }
        filer_pb::SubscribeMetadataResponse {
            directory: self.directory,
            event_notification: Some(notification),
            ts_ns: self.ts_ns,
            ..Default::default()
        }
    }
}

/// One stored event as every stream of the view sends it, prepared once:
/// its time, its source, its paths joined, and its response encoded.
#[derive(Debug)]
pub struct Prepared {
    pub ts_ns: i64,
    /// Which of the view's sources it comes from.
    pub source: usize,
    pub route: Route,
    /// The signatures it was stored with (a subscriber's own drops it).
    pub signatures: Vec<i32>,
    /// The `SubscribeMetadataResponse`, this server's signature added, as
    /// one gRPC frame.
    pub frame: Bytes,
}

impl Prepared {
    pub fn new(
        event: &v1::Event,
        stamp_ns: i64,
        source: usize,
        signature: i32,
    ) -> Result<Prepared, String> {
        let event = FilerEvent::of(event, stamp_ns)?;
        let route = Route::new(&event.paths());
        let signatures = event.notification.signatures.clone();
        let ts_ns = event.ts_ns;
        Ok(Prepared {
            ts_ns,
            source,
            route,
            signatures,
            frame: RawFilerResponse::frame(&event.response(signature)),
        })
    }

    /// About the bytes it holds: its frame and its paths.
    pub fn size(&self) -> usize {
        let route = &self.route;
        self.frame.len()
            + route.source.len()
            + route.directory.len()
            + route.target.as_ref().map_or(0, |(p, d)| p.len() + d.len())
            + self.signatures.len() * 4
    }

    /// The response's encoding (its frame without the prefix).
    pub fn message(&self) -> &[u8] {
        &self.frame[GRPC_PREFIX..]
    }
}

impl Timed for Prepared {
    fn ts_ns(&self) -> i64 {
        self.ts_ns
    }
}

/// A gRPC message's prefix: a compression flag and a 4-byte length.
const GRPC_PREFIX: usize = 5;
/// `SubscribeMetadataResponse.events` (field 4, length-delimited).
const EVENTS_KEY: u8 = (4 << 3) | 2;

/// Appends, as one gRPC frame, the batched `SubscribeMetadataResponse` of
/// `events` (at least one) to `out`: the first event's fields with the
/// others in `events`, as a filer batches them. Built from the prepared
/// encodings (an embedded message is its encoding after its length).
pub fn append_batch(out: &mut BytesMut, events: &[std::sync::Arc<Prepared>]) {
    let Some((first, rest)) = events.split_first() else {
        return;
    };
    let len = first.message().len()
        + rest
            .iter()
            .map(|e| 1 + varint_len(e.message().len()) + e.message().len())
            .sum::<usize>();
    out.reserve(GRPC_PREFIX + len);
    out.put_u8(0);
    out.put_u32(u32::try_from(len).expect("a batch is far below 4 GiB"));
    out.put_slice(first.message());
    for e in rest {
        out.put_u8(EVENTS_KEY);
        ringfeed_proto::prost::encoding::encode_varint(e.message().len() as u64, out);
        out.put_slice(e.message());
    }
}

fn varint_len(n: usize) -> usize {
    ringfeed_proto::prost::encoding::encoded_len_varint(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(prefix: &str, prefixes: &[&str], directories: &[&str]) -> Matcher {
        Matcher::new(&filer_pb::SubscribeMetadataRequest {
            path_prefix: prefix.into(),
            path_prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
            directories: directories.iter().map(|p| p.to_string()).collect(),
            ..Default::default()
        })
    }

    fn create(directory: &'static str, name: &'static str) -> Paths<'static> {
        Paths {
            directory,
            old_name: None,
            new_name: Some(name),
            new_parent_path: directory,
        }
    }

    #[test]
    fn paths_join_as_go_joins_them() {
        for (directory, name, joined) in [
            ("/", "a", "/a"),
            ("/d", "a", "/d/a"),
            ("/d/", "a", "/d/a"),
            ("/d", "", "/d"),
            ("", "", ""),
            ("", "a", "a"),
            ("/d//e/./f/..", "g", "/d/e/g"),
            ("/", "..", "/"),
        ] {
            assert_eq!(join(directory, name), joined, "{directory:?} {name:?}");
        }
    }

    #[test]
    fn a_request_matches_as_seaweedfs_matches() {
        let created = create("/photos", "cat.jpg");
        // An empty prefix matches everything, whatever else is asked.
        assert!(request("", &[], &[]).wants(&Route::new(&created), &[]));
        assert!(request("", &["/other"], &["/other"]).wants(&Route::new(&created), &[]));
        assert!(request("/pho", &[], &[]).wants(&Route::new(&created), &[]));
        assert!(request("/photos/cat", &[], &[]).wants(&Route::new(&created), &[]));
        assert!(!request("/video", &[], &[]).wants(&Route::new(&created), &[]));
        assert!(request("/video", &["/photos/"], &[]).wants(&Route::new(&created), &[]));
        assert!(request("/video", &[], &["/photos"]).wants(&Route::new(&created), &[]));
        // Directories match the parent exactly, not an ancestor.
        assert!(!request("/video", &[], &["/"]).wants(&Route::new(&created), &[]));
        // A move matches by its source or its target.
        let moved = Paths {
            directory: "/inbox",
            old_name: Some("a"),
            new_name: Some("b"),
            new_parent_path: "/done",
        };
        assert!(request("/inbox/a", &[], &[]).wants(&Route::new(&moved), &[]));
        assert!(request("/done/b", &[], &[]).wants(&Route::new(&moved), &[]));
        assert!(request("/x", &[], &["/done"]).wants(&Route::new(&moved), &[]));
        assert!(!request("/inbox/b", &[], &[]).wants(&Route::new(&moved), &[]));
        // A delete has no target.
        let deleted = Paths {
            directory: "/inbox",
            old_name: Some("a"),
            new_name: None,
            new_parent_path: "",
        };
        assert!(!request("/done", &[], &[]).wants(&Route::new(&deleted), &[]));
        // The subscriber's own signature drops an event; 0 is no signature.
        let mut own = request("/", &[], &[]);
        own.signature = 7;
        assert!(!own.wants(&Route::new(&created), &[3, 7]));
        assert!(own.wants(&Route::new(&created), &[3]));
        own.signature = 0;
        assert!(own.wants(&Route::new(&created), &[0]));
        // The filer's own log is never sent.
        assert!(!request("/", &[], &[]).wants(
            &Route::new(&create("/topics/.system/log/2026-12-06", "10-00.a")),
            &[]
        ));
    }

    #[test]
    fn prefixes_match_as_a_scan_of_has_prefix() {
        // Prefixes that nest, share bytes and stop mid-name, and paths
        // around them; each answer against Go's strings.HasPrefix in a loop.
        let list: Vec<String> = ["", "/a", "/a/b", "/ab", "/a/bc/d", "/é", "/b/"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let paths = [
            "",
            "/",
            "/a",
            "/a/",
            "/a/b",
            "/a/bc",
            "/a/bc/d/e",
            "/ab",
            "/abc",
            "/b",
            "/b/x",
            "/é/x",
            "/e",
        ];
        for take in 0..list.len() {
            for skip in 0..list.len() {
                let chosen: Vec<String> = list.iter().skip(skip).take(take).cloned().collect();
                let prefixes = Prefixes::new(&chosen);
                for path in paths {
                    let scan = chosen.iter().any(|p| path.starts_with(p.as_str()));
                    assert_eq!(prefixes.any_starts(path), scan, "{chosen:?} {path:?}");
                }
            }
        }
        // 200,000 prefixes: one path costs its length in lookups.
        let many: Vec<String> = (0..200_000).map(|i| format!("/p/{i}/")).collect();
        let prefixes = Prefixes::new(&many);
        assert!(prefixes.any_starts("/p/199999/x"));
        assert!(!prefixes.any_starts("/p/200000/x"));
    }

    #[test]
    fn a_filer_event_goes_out_with_its_bytes_and_this_servers_signature() {
        let notification = filer_pb::EventNotification {
            new_entry: Some(filer_pb::Entry {
                name: "f".into(),
                ..Default::default()
            }),
            new_parent_path: "/d".into(),
            signatures: vec![5],
            ..Default::default()
        };
        let bytes = notification.encode_to_vec();
        let stored = v1::Event {
            directory: "/d".into(),
            seaweedfs: Some(v1::SeaweedfsEvent {
                filer: "127.0.0.1:8888".into(),
                ts_ns: 42,
                event_notification: bytes.clone().into(),
            }),
            ..Default::default()
        };
        let event = FilerEvent::of(&stored, 99).unwrap();
        let sent = event.clone().response(9);
        assert_eq!((sent.directory.as_str(), sent.ts_ns), ("/d", 42));
        let mut signed = notification.clone();
        signed.signatures.push(9);
        assert_eq!(sent.event_notification, Some(signed));
        // Already signed by this server: the notification goes out as stored.
        let sent = event.response(5);
        assert_eq!(sent.event_notification.unwrap().encode_to_vec(), bytes);
    }

    #[test]
    fn a_native_event_is_what_a_filer_would_log() {
        let stored = v1::Event {
            directory: "/inbox".into(),
            old_entry: Some(v1::Entry {
                name: "a".into(),
                ..Default::default()
            }),
            new_entry: Some(v1::Entry {
                name: "b".into(),
                size: 3,
                mtime_ns: 1_700_000_000_250_000_000,
                mode: 0o644,
                ..Default::default()
            }),
            new_parent_path: "/done".into(),
            signatures: vec![1],
            seaweedfs: None,
        };
        let event = FilerEvent::of(&stored, 77).unwrap();
        let sent = event.response(9);
        assert_eq!((sent.directory.as_str(), sent.ts_ns), ("/inbox", 77));
        let n = sent.event_notification.unwrap();
        assert_eq!(n.old_entry.unwrap().name, "a");
        let new = n.new_entry.unwrap();
        let attributes = new.attributes.unwrap();
        assert_eq!((new.name.as_str(), attributes.file_size), ("b", 3));
        assert_eq!(
            (attributes.mtime, attributes.mtime_ns),
            (1_700_000_000, 250_000_000)
        );
        assert_eq!(attributes.file_mode, 0o644);
        assert_eq!(n.new_parent_path, "/done");
        assert_eq!(n.signatures, vec![1, 9]);
        // A create names its own directory as the new parent, as a filer does.
        let created = v1::Event {
            directory: "/d".into(),
            new_entry: Some(v1::Entry {
                name: "x".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            FilerEvent::of(&created, 1)
                .unwrap()
                .notification
                .new_parent_path,
            "/d"
        );
    }

    #[test]
    fn a_batch_of_prepared_events_decodes_as_a_filer_batch() {
        let prepared: Vec<std::sync::Arc<Prepared>> = (0..3)
            .map(|i| {
                let event = v1::Event {
                    directory: format!("/d{i}"),
                    new_entry: Some(v1::Entry {
                        name: format!("f{i}"),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
                std::sync::Arc::new(Prepared::new(&event, 10 + i, 0, 9).unwrap())
            })
            .collect();
        let one = |p: &Prepared| filer_pb::SubscribeMetadataResponse::decode(p.message()).unwrap();
        let mut out = BytesMut::new();
        append_batch(&mut out, &prepared);
        append_batch(&mut out, &prepared[2..]);
        append_batch(&mut out, &[]);
        let messages = RawFilerResponse::messages(&out).expect("whole frames");
        assert_eq!(messages.len(), 2);
        let batch = filer_pb::SubscribeMetadataResponse::decode(messages[0]).unwrap();
        let mut expected = one(&prepared[0]);
        expected.events = prepared[1..].iter().map(|p| one(p)).collect();
        assert_eq!(batch, expected);
        assert_eq!((batch.ts_ns, batch.events[1].ts_ns), (10, 12));
        let alone = filer_pb::SubscribeMetadataResponse::decode(messages[1]).unwrap();
        assert_eq!(alone, one(&prepared[2]));
        assert_eq!(alone.event_notification.unwrap().signatures, vec![9]);
    }
}
