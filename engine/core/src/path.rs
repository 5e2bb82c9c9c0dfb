//! The path rules producers and subscribers are held to.

/// What is wrong with a directory-like path, if anything: it must be
/// absolute, normalized (no trailing '/', '//', '.' or '..'; `/` is the root)
/// and free of NUL.
pub fn path_problem(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return Some(format!("{path:?} is not absolute"));
    }
    if path.contains('\0') {
        return Some("contains NUL".into());
    }
    if path != "/"
        && (path.ends_with('/')
            || path
                .split('/')
                .skip(1)
                .any(|c| c.is_empty() || c == "." || c == ".."))
    {
        return Some(format!(
            "{path:?} is not normalized (no trailing '/', '//', '.' or '..')"
        ));
    }
    None
}
