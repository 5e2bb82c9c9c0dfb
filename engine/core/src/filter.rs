//! Which events a subscription delivers, decided on record headers alone.
//!
//! An event has one or two paths: the old entry's (`directory/old_name`) and
//! the new entry's (`new_parent or directory/new_name`); a rename has both.
//! A path is *selected* when it lies under an include prefix (at a directory
//! boundary: `/a/b` covers `/a/b` and `/a/b/x`, never `/a/bc`) and under no
//! exclude prefix. An event is delivered when one of its paths is selected, or
//! when its directory (or, for a move, its new parent) is a watched directory
//! and that path is not excluded; and never when it carries the subscriber's
//! signature. No include prefix and no watched directory means everything,
//! as does the prefix `/`.

use thiserror::Error;

use crate::path::path_problem;
use crate::record::RecordHeader;

/// A subscription's filter. `Default` delivers every event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Filter {
    /// Deliver events under any of these paths.
    pub prefixes: Vec<String>,
    /// Deliver events whose entries sit directly in any of these directories.
    pub directories: Vec<String>,
    /// Never deliver events whose paths all lie under these.
    pub exclude_prefixes: Vec<String>,
    /// Skip events carrying this signature (a sync tool's own writes).
    pub signature: Option<i32>,
}

/// A filter path that is not an absolute, normalized path.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
#[error("{field}: {problem}")]
pub struct FilterError {
    pub field: &'static str,
    pub problem: String,
}

impl Filter {
    /// Everything under `prefix`.
    pub fn prefix(prefix: &str) -> Filter {
        Filter {
            prefixes: vec![prefix.to_string()],
            ..Filter::default()
        }
    }

    /// Accepts one trailing '/' on each path (`/a/` is `/a`); refuses
    /// relative, unnormalized or NUL-carrying paths, naming the field.
    pub fn normalized(mut self) -> Result<Filter, FilterError> {
        for (field, paths) in [
            ("path_prefixes", &mut self.prefixes),
            ("directories", &mut self.directories),
            ("exclude_prefixes", &mut self.exclude_prefixes),
        ] {
            for path in paths.iter_mut() {
                if path.len() > 1 && path.ends_with('/') {
                    path.pop();
                }
                if let Some(problem) = path_problem(path) {
                    return Err(FilterError { field, problem });
                }
            }
        }
        Ok(self)
    }

    /// True if the filter delivers every event (lets readers skip matching).
    pub fn is_everything(&self) -> bool {
        self.directories.is_empty()
            && self.exclude_prefixes.is_empty()
            && self.signature.is_none()
            && (self.prefixes.is_empty() || self.prefixes.iter().any(|p| p == "/"))
    }

    /// Whether the event whose record header is `h` is delivered.
    pub fn matches(&self, h: &RecordHeader<'_>) -> bool {
        if self.signature.is_some_and(|s| h.has_signature(s)) {
            return false;
        }
        let include_all = self.prefixes.is_empty() && self.directories.is_empty();
        let old = (!h.old_name.is_empty()).then_some((h.directory, h.old_name));
        let new_dir = if h.new_parent.is_empty() {
            h.directory
        } else {
            h.new_parent
        };
        let new = (!h.new_name.is_empty()).then_some((new_dir, h.new_name));
        [old, new].into_iter().flatten().any(|(dir, name)| {
            if self
                .exclude_prefixes
                .iter()
                .any(|p| under(dir, name, p.as_bytes()))
            {
                return false;
            }
            include_all
                || self.prefixes.iter().any(|p| under(dir, name, p.as_bytes()))
                || self.directories.iter().any(|d| d.as_bytes() == dir)
        })
    }
}

/// Whether the path `dir/name` is `prefix` or lies below it.
fn under(dir: &[u8], name: &[u8], prefix: &[u8]) -> bool {
    if prefix == b"/" {
        return true;
    }
    // The path is dir + sep + name, with no separator after the root.
    let sep: &[u8] = if dir == b"/" { b"" } else { b"/" };
    let path_len = dir.len() + sep.len() + name.len();
    if path_len < prefix.len() {
        return false;
    }
    // Compare the prefix against the path's bytes piece by piece.
    let mut rest = prefix;
    for part in [dir, sep, name] {
        let n = part.len().min(rest.len());
        if part[..n] != rest[..n] {
            return false;
        }
        rest = &rest[n..];
    }
    // A whole-path match, or the prefix ends at a directory boundary.
    path_len == prefix.len() || path_byte(dir, sep, name, prefix.len()) == b'/'
}

fn path_byte(dir: &[u8], sep: &[u8], name: &[u8], at: usize) -> u8 {
    if at < dir.len() {
        dir[at]
    } else if at < dir.len() + sep.len() {
        sep[at - dir.len()]
    } else {
        name[at - dir.len() - sep.len()]
    }
}
