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

    /// A subscription is allowed. Reads scoped to paths (rename rewriting,
    /// scope-filtered chunks) are not built yet: only a token that may read
    /// everything subscribes, so nothing outside a scope can leak.
    pub fn read(&self, metadata: &MetadataMap) -> Result<(), Status> {
        match self.grant(metadata)? {
            Some(grant) if !grant.reads_everything() => Err(Status::permission_denied(
                "this token may not read everything, and reads scoped to paths are not \
                 supported yet: subscribe with a token whose read list has \"/\"",
            )),
            _ => Ok(()),
        }
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
    let join = |dir: &str, name: &str| match dir {
        "/" => format!("/{name}"),
        _ => format!("{dir}/{name}"),
    };
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
    use ringfeed_proto::tonic::metadata::{MetadataMap, MetadataValue};

    fn with(value: &[u8]) -> MetadataMap {
        let mut m = MetadataMap::new();
        if let Ok(v) = MetadataValue::try_from(value) {
            m.insert(AUTHORIZATION, v);
        }
        m
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
