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

use std::collections::HashMap;

use thiserror::Error;

use crate::path::path_problem;
use crate::record::RecordHeader;

/// Most bytes of paths one filter may hold (prefixes, directories and
/// exclusions together). A filter lives in memory for its subscription's
/// life; past this a request is refused, not truncated.
pub const MAX_FILTER_PATH_BYTES: usize = 64 << 10;

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
        let bytes = self.path_bytes();
        if bytes > MAX_FILTER_PATH_BYTES {
            return Err(FilterError {
                field: "filter",
                problem: format!(
                    "its paths total {bytes} bytes, more than the {MAX_FILTER_PATH_BYTES} a \
                     subscription may hold; subscribe to a common parent, or split the \
                     subscribers"
                ),
            });
        }
        Ok(self)
    }

    /// The bytes of all its paths: what [`MAX_FILTER_PATH_BYTES`] bounds.
    pub fn path_bytes(&self) -> usize {
        [&self.prefixes, &self.directories, &self.exclude_prefixes]
            .into_iter()
            .flatten()
            .map(String::len)
            .sum()
    }

    /// The filter made ready to match: see [`Selector`].
    pub fn selector(&self) -> Selector {
        Selector::new(self)
    }

    /// True if the filter delivers every event (lets readers skip matching).
    pub fn is_everything(&self) -> bool {
        self.directories.is_empty()
            && self.exclude_prefixes.is_empty()
            && self.signature.is_none()
            && (self.prefixes.is_empty() || self.prefixes.iter().any(|p| p == "/"))
    }
}

/// A filter made ready to match: its paths in a tree of path components,
/// so matching an event costs one lookup per component of its paths (up to
/// the depth of the filter's deepest path), however many paths the filter
/// holds. A linear scan made one subscriber with 200,000 prefixes read
/// about 1,000 events/s.
#[derive(Clone, Debug)]
pub struct Selector {
    /// Node 0 is the root `/`.
    nodes: Vec<Node>,
    include_all: bool,
    signature: Option<i32>,
    bytes: usize,
}

#[derive(Clone, Debug, Default)]
struct Node {
    children: Children,
    /// An include prefix ends here.
    include: bool,
    /// An exclude prefix ends here.
    exclude: bool,
    /// A watched directory ends here.
    watched: bool,
}

/// A node's children by path component: compared in a short list while
/// there are few (most nodes of most filters: a lookup is then one or two
/// slice comparisons), hashed past that with a fast hash seeded per
/// process (a subscriber cannot choose paths that collide).
#[derive(Clone, Debug, Default)]
struct Children {
    few: Vec<(Box<[u8]>, u32)>,
    many: HashMap<Box<[u8]>, u32, foldhash::fast::RandomState>,
}

/// Children kept in the list; past this they move to the table.
const FEW: usize = 8;

impl Children {
    fn get(&self, component: &[u8]) -> Option<u32> {
        if self.many.is_empty() {
            self.few
                .iter()
                .find(|(c, _)| **c == *component)
                .map(|&(_, child)| child)
        } else {
            self.many.get(component).copied()
        }
    }

    fn insert(&mut self, component: &[u8], child: u32) {
        if self.many.is_empty() && self.few.len() < FEW {
            self.few.push((component.into(), child));
            return;
        }
        self.many.extend(self.few.drain(..));
        self.many.insert(component.into(), child);
    }
}

/// What the walk to one path met.
#[derive(Default)]
struct Met {
    included: bool,
    excluded: bool,
    watched: bool,
}

impl Selector {
    fn new(filter: &Filter) -> Selector {
        let mut selector = Selector {
            nodes: vec![Node::default()],
            include_all: filter.prefixes.is_empty() && filter.directories.is_empty(),
            signature: filter.signature,
            bytes: std::mem::size_of::<Selector>() + std::mem::size_of::<Node>(),
        };
        for p in &filter.prefixes {
            selector.node(p).include = true;
        }
        for p in &filter.exclude_prefixes {
            selector.node(p).exclude = true;
        }
        for d in &filter.directories {
            selector.node(d).watched = true;
        }
        selector
    }

    /// The node of the normalized path `path`, made if missing.
    fn node(&mut self, path: &str) -> &mut Node {
        let mut at = 0usize;
        for component in components(path.as_bytes()).into_iter().flatten() {
            at = match self.nodes[at].children.get(component) {
                Some(child) => child as usize,
                None => {
                    let child = self.nodes.len();
                    self.nodes.push(Node::default());
                    // The node, its key in the parent's table and the table
                    // entry (key, index, a control byte), table slack aside.
                    self.bytes += std::mem::size_of::<Node>() + component.len() + 32;
                    self.nodes[at].children.insert(component, child as u32);
                    child
                }
            };
        }
        &mut self.nodes[at]
    }

    /// The memory it holds, roughly: what a server counts against its
    /// subscribers' filter budget.
    pub fn memory_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether the event whose record header is `h` is delivered.
    pub fn matches(&self, h: &RecordHeader<'_>) -> bool {
        if self.signature.is_some_and(|s| h.has_signature(s)) {
            return false;
        }
        h.paths().any(|(dir, name)| {
            let met = self.walk(dir, name);
            !met.excluded && (self.include_all || met.included || met.watched)
        })
    }

    /// Walks from the root along the path `dir/name` as long as the tree
    /// has its components: the prefixes it lies under, and whether `dir`
    /// itself is watched.
    fn walk(&self, dir: &[u8], name: &[u8]) -> Met {
        let root = &self.nodes[0];
        let mut met = Met {
            included: root.include,
            excluded: root.exclude,
            watched: false,
        };
        // The path is `dir` + '/' + `name`, with no second '/' after a root
        // `dir` ("" counts as one too: the path is then "/name").
        let Some(dir_components) = components(dir) else {
            return met; // relative: under no prefix but the root
        };
        let mut at = 0usize;
        for component in dir_components {
            if !self.descend(&mut at, component, &mut met) {
                return met;
            }
        }
        met.watched = self.nodes[at].watched && !dir.is_empty();
        for component in name.split(|&b| b == b'/') {
            if !self.descend(&mut at, component, &mut met) {
                return met;
            }
        }
        met
    }

    /// Moves `at` to its child `component`, noting the prefixes that end
    /// there; false when the tree has no such child.
    fn descend(&self, at: &mut usize, component: &[u8], met: &mut Met) -> bool {
        let Some(child) = self.nodes[*at].children.get(component) else {
            return false;
        };
        *at = child as usize;
        let node = &self.nodes[*at];
        met.included |= node.include;
        met.excluded |= node.exclude;
        true
    }
}

/// The components of an absolute path (none for the root, or for an empty
/// directory, which joins a name as the root does); `None` for a relative
/// one.
fn components(path: &[u8]) -> Option<impl Iterator<Item = &[u8]>> {
    let rest = match path {
        b"" | b"/" => b"".as_slice(),
        [b'/', rest @ ..] => rest,
        _ => return None,
    };
    Some(
        (!rest.is_empty())
            .then(|| rest.split(|&b| b == b'/'))
            .into_iter()
            .flatten(),
    )
}

#[cfg(test)]
mod tests;
