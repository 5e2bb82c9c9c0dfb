//! Plain-text tables, cursor text and the small formatting rules the commands share.

use std::fmt::Write as _;
use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

#[derive(Clone, Copy)]
pub(super) enum Align {
    Left,
    Right,
}

/// Columns padded to their widest cell, two spaces apart.
pub(super) fn table(headers: &[(&str, Align)], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|(h, _)| h.chars().count()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header: Vec<String> = headers.iter().map(|(h, _)| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, ((cell, width), (_, align))) in row.iter().zip(&widths).zip(headers).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let _ = match align {
                Align::Left => write!(line, "{cell:<width$}"),
                Align::Right => write!(line, "{cell:>width$}"),
            };
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

pub(super) fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// An RFC 3339 UTC time (microseconds), or "-" for 0 ("none").
pub(super) fn format_ts(ns: i64) -> String {
    match u64::try_from(ns) {
        Ok(ns) if ns > 0 => {
            humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
        }
        _ => "-".to_owned(),
    }
}

/// Writes `text` and flushes.
pub(super) fn write_out(out: &mut impl Write, text: impl AsRef<[u8]>) -> io::Result<()> {
    out.write_all(text.as_ref()).and_then(|()| out.flush())
}
