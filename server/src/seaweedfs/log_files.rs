//! Where a filer's own metadata log begins: its oldest log file. A SeaweedFS
//! filer flushes its in-memory log about once a minute into
//! `/topics/.system/log/YYYY-MM-DD/HH-MM.<filer id>` (UTC, the minute of the
//! first event in the file), and answers a subscription from a time older
//! than its oldest file with the oldest file, silently. Pruning those files
//! (by hand, or a TTL) is how a filer's log loses what a follower still
//! needs; this finds it before a stream is opened.

use std::time::{Duration, UNIX_EPOCH};

use ringfeed_proto::filer_pb;
use ringfeed_proto::filer_pb::seaweed_filer_client::SeaweedFilerClient;
use ringfeed_proto::tonic::transport::Channel;
use ringfeed_proto::tonic::Code;

/// The directory a SeaweedFS filer flushes its metadata log into.
pub const LOG_DIR: &str = "/topics/.system/log";

/// The most day directories looked into for a file (empty ones are skipped).
const MAX_DAYS: usize = 64;

/// The filer's oldest log file: its path and the start of its minute (ns).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OldestLog {
    pub path: String,
    pub starts_ns: i64,
}

/// The oldest log file the filer keeps; `None` when it has flushed none
/// (a new filer, or its whole log removed: then nothing says what it lost).
pub async fn oldest(channel: Channel) -> Result<Option<OldestLog>, String> {
    let mut filer = SeaweedFilerClient::new(channel);
    let mut after = String::new();
    for _ in 0..MAX_DAYS {
        let Some(day) = first_entry(&mut filer, LOG_DIR, &after).await? else {
            return Ok(None);
        };
        let directory = format!("{LOG_DIR}/{day}");
        if let Some(file) = first_entry(&mut filer, &directory, "").await? {
            let starts_ns = minute_start(&day, &file)
                .ok_or_else(|| format!("{directory}/{file}: not a log file name"))?;
            return Ok(Some(OldestLog {
                path: format!("{directory}/{file}"),
                starts_ns,
            }));
        }
        after = day;
    }
    Ok(None)
}

/// The first entry of `directory` (by name) after `after`.
async fn first_entry(
    filer: &mut SeaweedFilerClient<Channel>,
    directory: &str,
    after: &str,
) -> Result<Option<String>, String> {
    let request = filer_pb::ListEntriesRequest {
        directory: directory.into(),
        start_from_file_name: after.into(),
        inclusive_start_from: false,
        limit: 1,
        ..Default::default()
    };
    let listed = match filer.list_entries(request).await {
        Ok(listed) => listed,
        Err(s) if s.code() == Code::NotFound => return Ok(None),
        Err(s) => return Err(format!("listing {directory}: {}", s.message())),
    };
    let mut stream = listed.into_inner();
    match stream.message().await {
        Ok(Some(response)) => Ok(response.entry.map(|e| e.name)),
        Ok(None) => Ok(None),
        Err(s) if s.code() == Code::NotFound => Ok(None),
        Err(s) => Err(format!("listing {directory}: {}", s.message())),
    }
}

/// `2026-12-06` and `19-43.2afff66d` → 2026-12-06T19:43:00Z in ns.
fn minute_start(day: &str, file: &str) -> Option<i64> {
    let minute = file.split('.').next()?;
    let (hour, minute) = minute.split_once('-')?;
    if hour.len() != 2 || minute.len() != 2 || day.len() != 10 {
        return None;
    }
    let at = humantime::parse_rfc3339(&format!("{day}T{hour}:{minute}:00Z")).ok()?;
    let since_epoch = at.duration_since(UNIX_EPOCH).ok()?;
    i64::try_from(since_epoch.as_nanos()).ok()
}

/// `ns` as an RFC 3339 time, for messages.
pub fn format_ns(ns: i64) -> String {
    let at = UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64);
    humantime::format_rfc3339_nanos(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_file_name_is_the_utc_minute_it_starts() {
        assert_eq!(
            minute_start("2026-12-06", "19-43.2afff66d"),
            Some(1_796_586_180_000_000_000)
        );
        assert_eq!(
            minute_start("2026-12-06", "00-00"),
            Some(1_796_515_200_000_000_000)
        );
        for (day, file) in [
            ("2026-12-06", "1943.2afff66d"),
            ("2026-12-06", "25-00.x"),
            ("2026-12-6", "19-43.x"),
            ("today", "19-43.x"),
            ("2026-12-06", ""),
        ] {
            assert_eq!(minute_start(day, file), None, "{day}/{file}");
        }
    }
}
