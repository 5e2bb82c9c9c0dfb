//! The tree-walking [`Selector`] against the linear scan it replaced (kept
//! here as the model), on random paths of a small alphabet that makes
//! prefixes, boundaries, relative and unnormalized record paths collide
//! often.

use super::*;

/// Whether the path `dir/name` is `prefix` or lies below it, compared
/// byte by byte: the definition the tree must agree with.
fn under(dir: &[u8], name: &[u8], prefix: &[u8]) -> bool {
    if prefix == b"/" {
        return true;
    }
    let sep: &[u8] = if dir == b"/" { b"" } else { b"/" };
    let path = [dir, sep, name].concat();
    path.starts_with(prefix) && (path.len() == prefix.len() || path[prefix.len()] == b'/')
}

fn model(filter: &Filter, h: &RecordHeader<'_>) -> bool {
    if filter.signature.is_some_and(|s| h.has_signature(s)) {
        return false;
    }
    let include_all = filter.prefixes.is_empty() && filter.directories.is_empty();
    h.paths().any(|(dir, name)| {
        if filter
            .exclude_prefixes
            .iter()
            .any(|p| under(dir, name, p.as_bytes()))
        {
            return false;
        }
        include_all
            || filter
                .prefixes
                .iter()
                .any(|p| under(dir, name, p.as_bytes()))
            || filter.directories.iter().any(|d| d.as_bytes() == dir)
    })
}

/// xorshift64*: a fixed sequence, so a failure replays.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len() as u64) as usize]
    }

    /// A normalized absolute path of up to three components.
    fn filter_path(&mut self) -> String {
        let depth = self.below(4);
        if depth == 0 {
            return "/".into();
        }
        (0..depth)
            .map(|_| format!("/{}", self.pick(&["a", "b", "ab", "a.b"])))
            .collect()
    }

    /// A record's directory: mostly normalized, sometimes not.
    fn record_dir(&mut self) -> String {
        match self.below(10) {
            0 => self.pick(&["", "a", "a/b", "//a", "/a/", "/a//b"]).into(),
            _ => self.filter_path(),
        }
    }

    fn record_name(&mut self) -> String {
        self.pick(&["", "a", "b", "ab", "a.b", "b/a", "a/"]).into()
    }
}

#[test]
fn the_selector_agrees_with_the_linear_scan() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut delivered = 0;
    let cases = 20_000;
    for _ in 0..cases {
        let paths = |n: u64, rng: &mut Rng| {
            let count = rng.below(n);
            (0..count).map(|_| rng.filter_path()).collect::<Vec<_>>()
        };
        let filter = Filter {
            prefixes: paths(4, &mut rng),
            directories: paths(3, &mut rng),
            exclude_prefixes: paths(3, &mut rng),
            signature: (rng.below(4) == 0).then_some(7),
        };
        let selector = filter.selector();
        for _ in 0..8 {
            let (directory, old_name, new_name, new_parent) = (
                rng.record_dir(),
                rng.record_name(),
                rng.record_name(),
                if rng.below(3) == 0 {
                    rng.record_dir()
                } else {
                    String::new()
                },
            );
            let signatures: &[u8] = if rng.below(4) == 0 {
                &[7, 0, 0, 0]
            } else {
                &[]
            };
            let h = RecordHeader {
                len: 0,
                offset: 0,
                ts: 0,
                kind: 1,
                producer: None,
                signatures,
                directory: directory.as_bytes(),
                old_name: old_name.as_bytes(),
                new_name: new_name.as_bytes(),
                new_parent: new_parent.as_bytes(),
                payload_at: 0,
            };
            let want = model(&filter, &h);
            assert_eq!(
                selector.matches(&h),
                want,
                "{filter:?} on {directory:?} {old_name:?} -> {new_parent:?} {new_name:?}"
            );
            delivered += usize::from(want);
        }
    }
    // Both answers are common, so the agreement says something.
    assert!(delivered > cases && delivered < cases * 7, "{delivered}");
}

#[test]
fn a_filter_past_its_bound_is_refused_naming_the_bound() {
    let fits = Filter {
        prefixes: vec![format!("/{}", "a".repeat(MAX_FILTER_PATH_BYTES - 1))],
        ..Filter::default()
    };
    assert!(fits.normalized().is_ok());
    let over = Filter {
        prefixes: (0..200_000).map(|i| format!("/p/{i}")).collect(),
        ..Filter::default()
    };
    let e = over.normalized().unwrap_err();
    assert_eq!(e.field, "filter");
    assert!(e.problem.contains("more than the 65536"), "{e}");
}

#[test]
fn the_selector_counts_its_memory_as_it_grows() {
    let small = Filter::prefix("/a").selector().memory_bytes();
    let many = Filter {
        prefixes: (0..1000).map(|i| format!("/p/{i}")).collect(),
        ..Filter::default()
    }
    .selector()
    .memory_bytes();
    assert!(small < 1024, "{small}");
    assert!(many > 1000 * 64, "{many}");
}
