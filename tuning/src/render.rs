//! Human rendering shared by the reports: aligned `key: value` lines and
//! binary byte sizes.

/// Lines of `key: value` with the values aligned in one column.
#[derive(Default)]
pub struct KvList {
    rows: Vec<(String, String)>,
}

impl KvList {
    pub fn new() -> KvList {
        KvList::default()
    }

    pub fn push(&mut self, key: &str, value: impl Into<String>) {
        self.rows.push((format!("{key}:"), value.into()));
    }

    /// A line in the value column under the previous row, with no key.
    pub fn note(&mut self, text: impl Into<String>) {
        self.rows.push((String::new(), text.into()));
    }

    pub fn render(&self) -> String {
        let width = self.rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        let mut out = String::new();
        for (k, v) in &self.rows {
            out.push_str(&format!("{k:<width$} {v}\n"));
        }
        out
    }
}

/// `1536` → `1.5 KiB`, `268435456` → `256 MiB`.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else if (v - v.round()).abs() < 0.05 {
        format!("{:.0} {}", v, UNITS[unit])
    } else {
        format!("{:.1} {}", v, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_read_naturally() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(256 << 20), "256 MiB");
        assert_eq!(bytes(1 << 30), "1 GiB");
    }

    #[test]
    fn values_align() {
        let mut kv = KvList::new();
        kv.push("a", "1");
        kv.push("long key", "2");
        kv.note("why");
        assert_eq!(kv.render(), "a:        1\nlong key: 2\n          why\n");
    }
}
