//! Tokens scoped to paths (issue 21, first part; docs/security.md).
//!
//! `serve --token-file FILE` reads a TOML file of `[[token]]` tables:
//!
//! ```toml
//! [[token]]
//! name = "sync tool"                 # optional, for people and logs
//! sha256 = "9f86d0..."               # hex SHA-256 of the token: never the token itself
//! append = ["/buckets/a"]            # path prefixes it may append under
//! read = ["/"]                       # path prefixes it may read
//! admin = false                      # status, subscribers, nodes
//! ```
//!
//! Requests carry `authorization: Bearer TOKEN`. A missing, malformed or
//! unknown token is UNAUTHENTICATED (the message never repeats what was
//! sent); a known token out of its scope is PERMISSION_DENIED naming the
//! path. `ringfeed token new` makes a random token and prints its table.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use base64::Engine as _;
use ringfeed_proto::tonic::{metadata::MetadataMap, Status};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The metadata key requests carry their token in.
pub const AUTHORIZATION: &str = "authorization";
/// Longest `authorization` value looked at; longer is refused unread.
const MAX_AUTHORIZATION: usize = 4096;
/// Random bytes in a new token.
const TOKEN_BYTES: usize = 32;
/// What new tokens start with (so a leaked one is recognisable in logs and
/// by secret scanners).
const TOKEN_PREFIX: &str = "rf_";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    token: Vec<EntryToml>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryToml {
    #[serde(default)]
    name: String,
    sha256: String,
    #[serde(default)]
    append: Vec<String>,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    admin: bool,
}

/// What one token may do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Grant {
    /// The token's SHA-256, hex: who presents a request (never the token).
    pub id: String,
    /// For people and logs (may be empty).
    pub name: String,
    /// Path prefixes it may append under (normalized: no trailing `/`).
    pub append: Vec<String>,
    /// Path prefixes it may read.
    pub read: Vec<String>,
    /// Status, subscribers, nodes.
    pub admin: bool,
}

/// The tokens of a token file, by the SHA-256 of each.
#[derive(Debug, Default)]
pub struct Tokens {
    by_hash: HashMap<[u8; 32], Arc<Grant>>,
}

impl Tokens {
    /// Reads a token file; errors name the file and the entry.
    pub fn load(path: &Path) -> Result<Tokens> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading token file {}", path.display()))?;
        Tokens::parse(&text).with_context(|| format!("token file {}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Tokens> {
        let file: FileToml =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.message().trim()))?;
        let mut by_hash = HashMap::new();
        for (i, entry) in file.token.into_iter().enumerate() {
            let what = || format!("[[token]] number {}", i + 1);
            let hash = parse_sha256(&entry.sha256).with_context(what)?;
            let grant = Grant {
                id: entry.sha256.trim().to_ascii_lowercase(),
                name: entry.name,
                append: normalized(entry.append, "append").with_context(what)?,
                read: normalized(entry.read, "read").with_context(what)?,
                admin: entry.admin,
            };
            if by_hash.insert(hash, Arc::new(grant)).is_some() {
                bail!("{}: the same sha256 as an earlier token", what());
            }
        }
        Ok(Tokens { by_hash })
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }

    /// The grant of the token a request carries.
    pub fn check(&self, metadata: &MetadataMap) -> Result<Arc<Grant>, Status> {
        let value = metadata
            .get(AUTHORIZATION)
            .ok_or_else(|| unauthenticated("no token (send `authorization: Bearer TOKEN`)"))?;
        let bytes = value.as_bytes();
        if bytes.len() > MAX_AUTHORIZATION {
            return Err(unauthenticated("the authorization header is too long"));
        }
        let token = bytes
            .strip_prefix(b"Bearer ")
            .ok_or_else(|| unauthenticated("the authorization header is not `Bearer TOKEN`"))?;
        if token.is_empty() {
            return Err(unauthenticated("an empty token"));
        }
        let hash: [u8; 32] = Sha256::digest(token).into();
        self.by_hash
            .get(&hash)
            .cloned()
            .ok_or_else(|| unauthenticated("an unknown token"))
    }
}

impl Grant {
    /// Every path of an event (`paths`) is under one of the append
    /// prefixes; else PERMISSION_DENIED naming the first that is not.
    pub fn check_append<'a>(&self, paths: impl IntoIterator<Item = &'a str>) -> Result<(), Status> {
        for path in paths {
            if !self.append.iter().any(|p| path_under(path, p)) {
                return Err(Status::permission_denied(format!(
                    "this token may not append under {path}"
                )));
            }
        }
        Ok(())
    }

    /// Whether it may read everything (no path outside its scope exists).
    pub fn reads_everything(&self) -> bool {
        self.read.iter().any(|p| p == "/")
    }

    pub fn check_admin(&self, what: &str) -> Result<(), Status> {
        if self.admin {
            Ok(())
        } else {
            Err(Status::permission_denied(format!(
                "{what} needs an admin token"
            )))
        }
    }
}

/// The server's tokens, replaced whole on reload (SIGHUP); none: an open
/// server, every request allowed.
#[derive(Debug, Default)]
pub struct Auth {
    tokens: std::sync::RwLock<Option<Arc<Tokens>>>,
}

impl Auth {
    pub fn new(tokens: Option<Tokens>) -> Auth {
        Auth {
            tokens: std::sync::RwLock::new(tokens.map(Arc::new)),
        }
    }

    /// Takes `tokens` for every later request (streams already open keep
    /// going).
    pub fn replace(&self, tokens: Tokens) {
        *self.tokens.write().expect("tokens lock") = Some(Arc::new(tokens));
    }

    /// The grant of a request's token; `None` on an open server.
    pub fn grant(&self, metadata: &MetadataMap) -> Result<Option<Arc<Grant>>, Status> {
        let tokens = self.tokens.read().expect("tokens lock").clone();
        tokens.map(|t| t.check(metadata)).transpose()
    }

    /// An admin request (`what`) is allowed.
    pub fn admin(&self, metadata: &MetadataMap, what: &str) -> Result<(), Status> {
        match self.grant(metadata)? {
            Some(grant) => grant.check_admin(what),
            None => Ok(()),
        }
    }

    /// What a subscription under `grant` may read: `None` everything (an
    /// open server, or a token that reads "/"), else its token's read scope.
    pub fn read_scope(grant: Option<&Grant>) -> Result<Option<ReadScope>, Status> {
        match grant {
            Some(grant) if !grant.reads_everything() => {
                if grant.read.is_empty() {
                    return Err(Status::permission_denied("this token may not read"));
                }
                Ok(Some(ReadScope {
                    prefixes: grant.read.clone(),
                }))
            }
            _ => Ok(None),
        }
    }
}

/// What a token scoped to path prefixes may read. A subscription under it
/// gets its filter narrowed to the scope, and every event as the scope shows
/// it: a rename out of the scope is a delete of the old entry, a rename into
/// it a create of the new one, so no path outside the scope is ever sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ReadScope {
    prefixes: Vec<String>,
}

/// An event as a scope shows it.
#[derive(Debug, PartialEq)]
pub enum Shown {
    /// Every path of it is in the scope: sent as it is.
    Same,
    /// It crosses the scope's edge: sent as this event instead.
    Rewritten(ringfeed_proto::bytes::Bytes),
    /// Nothing of it is in the scope (a narrowed filter never delivers one;
    /// this is the last guard).
    Hidden,
}

impl ReadScope {
    pub fn covers(&self, path: &str) -> bool {
        self.prefixes.iter().any(|p| path_under(path, p))
    }

    /// Narrows the request's filter to the scope: its prefixes to their
    /// overlaps with the scope's (the scope itself when it has no prefix or
    /// directory), its directories to those in the scope. PERMISSION_DENIED
    /// when nothing it asks for lies in the scope (the message names no path).
    pub fn narrow(&self, r: &mut ringfeed_proto::v1::SubscribeRequest) -> Result<(), Status> {
        let mut asked: Vec<String> = r.path_prefixes.clone();
        if !r.path_prefix.is_empty() {
            asked.push(r.path_prefix.clone());
        }
        let (prefixes, directories) = if asked.is_empty() && r.directories.is_empty() {
            (self.prefixes.clone(), Vec::new())
        } else {
            let mut prefixes = Vec::new();
            for p in &asked {
                let p = p.trim_end_matches('/');
                let p = if p.is_empty() { "/" } else { p };
                for s in &self.prefixes {
                    let overlap = if path_under(p, s) {
                        p
                    } else if path_under(s, p) {
                        s.as_str()
                    } else {
                        continue;
                    };
                    if !prefixes.iter().any(|q: &String| q == overlap) {
                        prefixes.push(overlap.to_owned());
                    }
                }
            }
            let directories: Vec<String> = r
                .directories
                .iter()
                .filter(|d| self.covers(d.trim_end_matches('/')) || self.covers(d))
                .cloned()
                .collect();
            (prefixes, directories)
        };
        if prefixes.is_empty() && directories.is_empty() {
            return Err(Status::permission_denied(
                "nothing this subscription asks for lies in this token's read scope",
            ));
        }
        r.path_prefix.clear();
        r.path_prefixes = prefixes;
        r.directories = directories;
        Ok(())
    }

    /// How the scope shows the event whose payload is `event`.
    pub fn show(&self, event: &[u8]) -> Shown {
        use ringfeed_proto::prost::Message;
        let Ok(mut e) = ringfeed_proto::v1::Event::decode(event) else {
            return Shown::Hidden;
        };
        let old = e.old_entry.as_ref().map(|o| join(&e.directory, &o.name));
        let new_dir = if e.new_parent_path.is_empty() {
            e.directory.clone()
        } else {
            e.new_parent_path.clone()
        };
        let new = e.new_entry.as_ref().map(|n| join(&new_dir, &n.name));
        let old_in = old.as_deref().map(|p| self.covers(p));
        let new_in = new.as_deref().map(|p| self.covers(p));
        // A new parent without a new entry (not a rename) names a path
        // too: outside the scope, it is left out.
        if e.new_entry.is_none()
            && !e.new_parent_path.is_empty()
            && !self.covers(&e.new_parent_path)
        {
            e.new_parent_path.clear();
            let shown = old_in.unwrap_or_else(|| self.covers(&e.directory));
            return match shown {
                true => Shown::Rewritten(e.encode_to_vec().into()),
                false => Shown::Hidden,
            };
        }
        match (old_in, new_in) {
            (Some(true) | None, Some(true) | None) if old_in.or(new_in) == Some(true) => {
                Shown::Same
            }
            (None, None) if self.covers(&e.directory) => Shown::Same,
            (Some(true), Some(false)) => {
                // Moved out: a delete of the old entry.
                e.new_entry = None;
                e.new_parent_path.clear();
                Shown::Rewritten(e.encode_to_vec().into())
            }
            (Some(false), Some(true)) => {
                // Moved in: a create of the new entry.
                e.old_entry = None;
                e.directory = new_dir;
                e.new_parent_path.clear();
                Shown::Rewritten(e.encode_to_vec().into())
            }
            _ => Shown::Hidden,
        }
    }

    /// [`ReadScope::show`] for an event whose record header the engine has:
    /// decoded only when it may cross the scope's edge.
    pub fn show_record(
        &self,
        h: &ringfeed_engine::record::RecordHeader<'_>,
        payload: &[u8],
    ) -> Shown {
        let text = |b: &[u8]| {
            std::str::from_utf8(b)
                .map(str::to_owned)
                .unwrap_or_default()
        };
        let dir = text(h.directory);
        let new_dir = if h.new_parent.is_empty() {
            dir.clone()
        } else {
            text(h.new_parent)
        };
        let old_in = (!h.old_name.is_empty()).then(|| self.covers(&join(&dir, &text(h.old_name))));
        let new_in =
            (!h.new_name.is_empty()).then(|| self.covers(&join(&new_dir, &text(h.new_name))));
        match (old_in, new_in) {
            (Some(true), Some(true)) | (None, Some(true)) => Shown::Same,
            // No new entry: a new parent may still name a path.
            (Some(true), None) if h.new_parent.is_empty() => Shown::Same,
            _ => self.show(payload),
        }
    }
}

/// The path of entry `name` in directory `dir`.
fn join(dir: &str, name: &str) -> String {
    match dir {
        "/" => format!("/{name}"),
        _ => format!("{dir}/{name}"),
    }
}

fn unauthenticated(why: &str) -> Status {
    Status::unauthenticated(why.to_owned())
}

fn parse_sha256(hex: &str) -> Result<[u8; 32]> {
    let hex = hex.trim();
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("sha256: 64 hex digits expected (the SHA-256 of the token, as `ringfeed token new` prints it)");
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
    }
    Ok(out)
}

/// Prefixes as filters take them: absolute, no trailing `/` (but the root).
fn normalized(prefixes: Vec<String>, key: &str) -> Result<Vec<String>> {
    prefixes
        .into_iter()
        .map(|mut p| {
            if !p.starts_with('/') {
                bail!("{key}: {p:?} is not an absolute path");
            }
            if p.len() > 1 && p.ends_with('/') {
                p.pop();
            }
            Ok(p)
        })
        .collect()
}

/// Whether `path` is `prefix` or below it (`/a` covers `/a` and `/a/x`, not
/// `/ab`).
pub fn path_under(path: &str, prefix: &str) -> bool {
    prefix == "/"
        || path == prefix
        || (path.starts_with(prefix) && path.as_bytes().get(prefix.len()) == Some(&b'/'))
}

/// The paths an event touches: the old entry's and the new entry's (a
/// rename has both), or its directory when it names no entry.
pub fn event_paths(
    directory: &str,
    old_name: &str,
    new_name: &str,
    new_parent: &str,
) -> Vec<String> {
    let mut paths = Vec::new();
    if !old_name.is_empty() {
        paths.push(join(directory, old_name));
    }
    if !new_name.is_empty() {
        let dir = if new_parent.is_empty() {
            directory
        } else {
            new_parent
        };
        paths.push(join(dir, new_name));
    } else if !new_parent.is_empty() {
        // A new parent without a new entry still names a path.
        paths.push(new_parent.to_owned());
    }
    if paths.is_empty() {
        paths.push(directory.to_owned());
    }
    paths
}

/// A new random token and the `[[token]]` table that grants it `append`,
/// `read` and `admin`.
pub fn new_token(append: &[String], read: &[String], admin: bool) -> Result<(String, String)> {
    let append = normalized(append.to_vec(), "--append")?;
    let read = normalized(read.to_vec(), "--read")?;
    let mut random = [0u8; TOKEN_BYTES];
    getrandom::getrandom(&mut random).map_err(|e| anyhow::anyhow!("reading random bytes: {e}"))?;
    let token = format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random)
    );
    let hash: String = Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let list = |v: &[String]| {
        let quoted: Vec<String> = v.iter().map(|p| format!("{p:?}")).collect();
        format!("[{}]", quoted.join(", "))
    };
    let table = format!(
        "[[token]]\nsha256 = \"{hash}\"\nappend = {}\nread = {}\nadmin = {admin}\n",
        list(&append),
        list(&read)
    );
    Ok((token, table))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ringfeed_proto::tonic::metadata::MetadataMap;

    /// Metadata whose `authorization` is `value` as HTTP allows it (bytes
    /// 0x80-0xff too, which are not UTF-8).
    fn with(value: &[u8]) -> MetadataMap {
        let mut headers = ringfeed_proto::tonic::codegen::http::HeaderMap::new();
        let value = ringfeed_proto::tonic::codegen::http::HeaderValue::from_bytes(value)
            .expect("a value HTTP allows");
        headers.insert(AUTHORIZATION, value);
        MetadataMap::from_headers(headers)
    }

    proptest::proptest! {
        /// The token file is read from disk (issue 36): a valid table with
        /// bytes set, flipped, inserted or cut, and arbitrary text, parse
        /// to tokens or an error, never a panic; what parses answers checks.
        #[test]
        fn any_token_file_parses_or_is_refused(
            edits in crate::mutation::edits(),
            text in ".{0,200}",
        ) {
            let (_, table) = new_token(&["/a/".into()], &["/".into()], true).unwrap();
            let mut bytes = table.into_bytes();
            crate::mutation::apply(&mut bytes, &edits);
            for text in [String::from_utf8_lossy(&bytes).into_owned(), text] {
                if let Ok(tokens) = Tokens::parse(&text) {
                    let _ = tokens.check(&with(b"Bearer rf_x"));
                }
            }
        }
    }

    #[test]
    fn a_new_token_is_known_by_its_table_and_nothing_else_is() {
        let (token, table) = new_token(&["/a/".into()], &["/".into()], true).unwrap();
        assert!(token.starts_with(TOKEN_PREFIX));
        assert!(!table.contains(&token), "the table never holds the token");
        let tokens = Tokens::parse(&table).unwrap();
        let grant = tokens
            .check(&with(format!("Bearer {token}").as_bytes()))
            .unwrap();
        assert_eq!(grant.append, vec!["/a".to_owned()]);
        assert!(grant.reads_everything() && grant.admin);
        let other = new_token(&[], &[], false).unwrap().0;
        for bad in [
            format!("Bearer {other}").into_bytes(),
            b"Bearer ".to_vec(),
            b"".to_vec(),
            format!("bearer {token}").into_bytes(),
            format!("Basic {token}").into_bytes(),
            token.clone().into_bytes(),
            vec![b'x'; 100_000],
            b"Bearer \xff\xfe".to_vec(),
        ] {
            let status = tokens.check(&with(&bad)).unwrap_err();
            assert_eq!(status.code(), ringfeed_proto::tonic::Code::Unauthenticated);
            assert!(!status.message().contains(&token));
        }
        assert_eq!(
            tokens.check(&MetadataMap::new()).unwrap_err().code(),
            ringfeed_proto::tonic::Code::Unauthenticated
        );
    }

    #[test]
    fn append_scope_covers_whole_path_components() {
        let grant = Grant {
            id: String::new(),
            name: String::new(),
            append: vec!["/a".into()],
            read: vec![],
            admin: false,
        };
        assert!(grant.check_append(["/a", "/a/x", "/a/x/y"]).is_ok());
        let denied = grant.check_append(["/a/x", "/ab"]).unwrap_err();
        assert_eq!(denied.code(), ringfeed_proto::tonic::Code::PermissionDenied);
        assert!(denied.message().contains("/ab"));
        assert!(grant.check_append(["/"]).is_err());
        assert!(grant.check_admin("status").is_err());
        assert_eq!(
            event_paths("/a", "x", "y", "/b"),
            vec!["/a/x".to_owned(), "/b/y".to_owned()]
        );
        assert_eq!(event_paths("/", "", "f", ""), vec!["/f".to_owned()]);
        assert_eq!(event_paths("/d", "", "", ""), vec!["/d".to_owned()]);
        // A new parent without a new entry names a path too.
        assert_eq!(
            event_paths("/a", "x", "", "/b"),
            vec!["/a/x".to_owned(), "/b".to_owned()]
        );
        assert!(grant.check_append(["/a/x", "/b"]).is_err());
    }

    fn scope(prefixes: &[&str]) -> ReadScope {
        ReadScope {
            prefixes: prefixes.iter().map(|p| p.to_string()).collect(),
        }
    }

    fn event(dir: &str, old: Option<&str>, new: Option<&str>, new_parent: &str) -> Vec<u8> {
        use ringfeed_proto::prost::Message;
        let entry = |name: &str| ringfeed_proto::v1::Entry {
            name: name.into(),
            ..Default::default()
        };
        ringfeed_proto::v1::Event {
            directory: dir.into(),
            old_entry: old.map(entry),
            new_entry: new.map(entry),
            new_parent_path: new_parent.into(),
            signatures: vec![7],
            seaweedfs: None,
        }
        .encode_to_vec()
    }

    #[test]
    fn renames_across_the_scope_become_deletes_and_creates() {
        let a = scope(&["/a"]);
        // In scope: as it is.
        assert_eq!(a.show(&event("/a", None, Some("x"), "")), Shown::Same);
        assert_eq!(
            a.show(&event("/a", Some("x"), Some("y"), "/a/d")),
            Shown::Same
        );
        // Out: /a/x -> /b/x is a delete of /a/x.
        let out = a.show(&event("/a", Some("x"), Some("x"), "/b"));
        assert_eq!(
            out,
            Shown::Rewritten(event("/a", Some("x"), None, "").into())
        );
        // In: /b/y -> /a/y is a create of /a/y.
        let into = a.show(&event("/b", Some("y"), Some("y"), "/a"));
        assert_eq!(
            into,
            Shown::Rewritten(event("/a", None, Some("y"), "").into())
        );
        // Nothing in it, or /ab (not under /a): hidden.
        assert_eq!(
            a.show(&event("/b", Some("x"), Some("y"), "")),
            Shown::Hidden
        );
        assert_eq!(a.show(&event("/ab", None, Some("x"), "")), Shown::Hidden);
        assert_eq!(a.show(b"\xff\xff not an event"), Shown::Hidden);
        // A delete that names a new parent outside the scope: without it.
        assert_eq!(
            a.show(&event("/a", Some("x"), None, "/b")),
            Shown::Rewritten(event("/a", Some("x"), None, "").into())
        );
        // No rewritten event names a path outside the scope.
        for (dir, old, new, parent) in [("/a", "x", "x", "/b"), ("/b", "y", "y", "/a")] {
            let Shown::Rewritten(bytes) = a.show(&event(dir, Some(old), Some(new), parent)) else {
                panic!("rewritten");
            };
            assert!(!String::from_utf8_lossy(&bytes).contains("/b"));
        }
    }

    #[test]
    fn a_filter_is_narrowed_to_the_scope() {
        use ringfeed_proto::v1::SubscribeRequest;
        let a = scope(&["/a", "/c/d"]);
        let mut everything = SubscribeRequest::default();
        a.narrow(&mut everything).unwrap();
        assert_eq!(everything.path_prefixes, vec!["/a", "/c/d"]);
        let mut wide = SubscribeRequest {
            path_prefix: "/c".into(),
            path_prefixes: vec!["/a/x/".into(), "/e".into()],
            ..Default::default()
        };
        a.narrow(&mut wide).unwrap();
        assert_eq!(wide.path_prefixes, vec!["/a/x", "/c/d"]);
        assert!(wide.path_prefix.is_empty());
        let mut dirs = SubscribeRequest {
            directories: vec!["/a/q".into(), "/e".into()],
            ..Default::default()
        };
        a.narrow(&mut dirs).unwrap();
        assert!(dirs.path_prefixes.is_empty());
        assert_eq!(dirs.directories, vec!["/a/q"]);
        let mut outside = SubscribeRequest {
            path_prefix: "/e".into(),
            directories: vec!["/f".into()],
            ..Default::default()
        };
        let denied = a.narrow(&mut outside).unwrap_err();
        assert_eq!(denied.code(), ringfeed_proto::tonic::Code::PermissionDenied);
        assert!(!denied.message().contains("/e") && !denied.message().contains("/a"));
    }

    #[test]
    fn bad_token_files_are_refused_naming_the_entry() {
        for (text, says) in [
            ("[[token]]\nsha256 = \"abc\"\n", "64 hex digits"),
            ("[[token]]\nsha256 = \"%s\"\nappend = [\"a\"]\n", "absolute"),
            ("[[token]]\nsha256 = \"%s\"\nwrite = []\n", "unknown field"),
            (
                "[[token]]\nsha256 = \"%s\"\n[[token]]\nsha256 = \"%s\"\n",
                "same sha256",
            ),
        ] {
            let text = text.replace("%s", &"ab".repeat(32));
            let err = format!("{:#}", Tokens::parse(&text).unwrap_err());
            assert!(err.contains(says), "{text}: {err}");
        }
        assert!(Tokens::parse("").unwrap().is_empty());
    }
}
