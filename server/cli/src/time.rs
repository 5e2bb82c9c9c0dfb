//! Time arguments: `--since 1h` (a duration back from now) or an RFC 3339
//! time, as ns since the Unix epoch.

use std::time::UNIX_EPOCH;

use anyhow::{anyhow, bail, Context, Result};

/// `--since`: a duration back from `now_ns`, or an RFC 3339 time.
pub(super) fn parse_since(text: &str, now_ns: i64) -> Result<i64> {
    parse_when(text, now_ns, "--since")
}

/// A time flag (`flag`, for the error): a duration back from `now_ns`
/// ("1h", "30m"), or an RFC 3339 time.
pub(super) fn parse_when(text: &str, now_ns: i64, flag: &str) -> Result<i64> {
    if let Ok(back) = humantime::parse_duration(text.trim()) {
        let back = i64::try_from(back.as_nanos()).unwrap_or(i64::MAX);
        return Ok(now_ns.saturating_sub(back).max(0));
    }
    parse_timestamp(text).with_context(|| {
        format!("{flag} {text:?} is neither a duration (\"1h\", \"30m\") nor an RFC 3339 time")
    })
}

/// An RFC 3339 time ("2026-11-29T10:00:00.5Z", "2026-11-29 10:00:00+02:00")
/// as ns since the Unix epoch. humantime reads only UTC, so a numeric offset
/// is split off and applied here.
pub(super) fn parse_timestamp(text: &str) -> Result<i64> {
    let text = text.trim();
    let (utc, offset_s) = split_utc_offset(text)?;
    let time = humantime::parse_rfc3339_weak(utc)
        .map_err(|e| anyhow!("{text:?} is not an RFC 3339 time: {e}"))?;
    let since_epoch = time
        .duration_since(UNIX_EPOCH)
        .map_err(|_| anyhow!("{text:?} is before 1970"))?;
    let ns = i64::try_from(since_epoch.as_nanos())
        .map_err(|_| anyhow!("{text:?} is too far in the future"))?;
    Ok(ns - offset_s * 1_000_000_000)
}

/// Splits `2026-11-29T12:00:00+02:00` into the time and +7200 s. A trailing
/// `Z` (or nothing, which humantime's weak parser reads as UTC) is offset 0.
pub(super) fn split_utc_offset(text: &str) -> Result<(&str, i64)> {
    let bytes = text.as_bytes();
    // The date part is 10 bytes; an offset is the last 6 after it.
    if bytes.len() > 16 {
        let at = bytes.len() - 6;
        let sign = match bytes[at] {
            b'+' => 1,
            b'-' => -1,
            _ => return Ok((text.strip_suffix(['Z', 'z']).unwrap_or(text), 0)),
        };
        let (hours, minutes) = (&text[at + 1..at + 3], &text[at + 4..]);
        if bytes[at + 3] != b':' {
            bail!("{text:?}: a UTC offset is written +HH:MM");
        }
        let hours: i64 = hours
            .parse()
            .with_context(|| format!("{text:?}: bad UTC offset"))?;
        let minutes: i64 = minutes
            .parse()
            .with_context(|| format!("{text:?}: bad UTC offset"))?;
        return Ok((&text[..at], sign * (hours * 3600 + minutes * 60)));
    }
    Ok((text.strip_suffix(['Z', 'z']).unwrap_or(text), 0))
}
