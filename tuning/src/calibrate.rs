//! `ringfeed tune calibrate`: measures the data dir's disk the way ringfeed
//! uses it, within a time budget. Every file is preallocated with fallocate and
//! written sequentially with O_DIRECT from the start, like a fresh segment, so
//! fdatasync pays for the extent conversions a real segment pays for. Files are
//! removed when a step ends, also on errors.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::direct_io::{statx_dio, TempFile};
use crate::error::TuneError;
use crate::host::existing_dir;
use crate::render::{bytes, KvList};
use crate::sys::{self, AlignedBuf};

/// The write sizes measured, from a small window to a large group commit.
pub const WRITE_SIZES: [u64; 4] = [64 << 10, 256 << 10, 1 << 20, 4 << 20];
/// Size of one write in the fdatasync latency test.
pub const FSYNC_WRITE_BYTES: u64 = 4 << 10;
const FSYNC_MAX_SAMPLES: u64 = 200;
const FSYNC_MIN_SAMPLES: u64 = 3;
/// The most one bandwidth step writes (the brief's 32-64 MiB), less when the disk is nearly full.
const STEP_MAX_BYTES: u64 = 64 << 20;
const READ_BYTES: u64 = 1 << 20;

/// Latency of one small write followed by fdatasync, the cost floor of a durable ack.
#[derive(Clone, Debug, Serialize)]
pub struct FsyncLatency {
    pub write_bytes: u64,
    pub samples: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    pub mean_us: u64,
}

/// Bytes moved in a measured time. MB/s is decimal (10^6 bytes per second).
#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    pub bytes: u64,
    pub ops: u64,
    pub elapsed_us: u64,
    pub mb_per_s: f64,
}

impl Throughput {
    fn new(bytes: u64, ops: u64, elapsed: Duration) -> Throughput {
        let us = elapsed.as_micros().max(1) as u64;
        Throughput {
            bytes,
            ops,
            elapsed_us: us,
            mb_per_s: bytes as f64 / us as f64,
        }
    }
}

/// Sequential O_DIRECT writes of one size.
#[derive(Clone, Debug, Serialize)]
pub struct WriteBandwidth {
    pub write_bytes: u64,
    /// fdatasync after every write: the durable rate when each write is a group commit.
    pub sync_each_write: Throughput,
    /// One fdatasync after the last write (timed): the raw streaming rate.
    pub sync_at_end: Throughput,
}

/// Everything `ringfeed tune calibrate` reports.
#[derive(Clone, Debug, Serialize)]
pub struct Calibration {
    /// The data dir as asked for.
    pub data_dir: PathBuf,
    /// Where the files were written: the data dir or its nearest existing ancestor.
    pub measured_dir: PathBuf,
    /// Alignment used for offsets and buffers (statx, else 4096).
    pub alignment: u64,
    pub budget_ms: u64,
    pub elapsed_ms: u64,
    pub fsync: FsyncLatency,
    /// One entry per size in `WRITE_SIZES`.
    pub writes: Vec<WriteBandwidth>,
    /// Sequential 1 MiB O_DIRECT reads of data just written.
    pub read: Throughput,
    pub notes: Vec<String>,
}

impl Calibration {
    /// The measured size with the best durable (fdatasync per write) rate.
    pub fn best_synced(&self) -> Option<&WriteBandwidth> {
        self.writes.iter().max_by(|a, b| {
            a.sync_each_write
                .mb_per_s
                .total_cmp(&b.sync_each_write.mb_per_s)
        })
    }
}

/// Measures fdatasync latency and O_DIRECT bandwidth in `data_dir` (or its
/// nearest existing ancestor), spending about `budget` in total (each step runs
/// at least one operation, so a tiny budget is exceeded a little). `progress`
/// gets one line per step.
pub fn calibrate(
    data_dir: &Path,
    budget: Duration,
    progress: &mut dyn FnMut(&str),
) -> Result<Calibration, TuneError> {
    let started = Instant::now();
    let (dir, exists) = existing_dir(data_dir)?;
    let mut notes = Vec::new();
    if !exists {
        notes.push(format!(
            "{} does not exist yet; measured in its nearest existing ancestor {}",
            data_dir.display(),
            dir.display()
        ));
    }
    let free = sys::statfs(&dir)
        .map_err(|e| TuneError::io("statfs", &dir, e))?
        .avail_bytes;
    // Leave most of the disk alone: a step may take a quarter of what is free.
    let step_cap = (free / 4).min(STEP_MAX_BYTES) / (4 << 20) * (4 << 20);
    if step_cap < (4 << 20) {
        return Err(TuneError::NoSpace {
            path: dir,
            needed: 16 << 20,
            free,
        });
    }
    if step_cap < STEP_MAX_BYTES {
        notes.push(format!(
            "little free space: each step writes at most {}",
            bytes(step_cap)
        ));
    }

    // Alignment: what statx says for a file here, at least 4096 (all sizes are multiples of it).
    let probe_file = create(&dir, "calibrate")?;
    let alignment = match statx_dio(probe_file.path()) {
        Ok(Some(s)) => u64::from(s.offset_align.max(s.mem_align)).max(4096),
        _ => 4096,
    };
    drop(probe_file);

    let mut buf = AlignedBuf::new(
        *WRITE_SIZES.iter().max().unwrap_or(&(4 << 20)) as usize,
        alignment as usize,
    )
    .map_err(|e| TuneError::io("allocate aligned buffer", &dir, e))?;
    fill_pattern(buf.as_mut_slice());

    // A fifth of the budget for latency, the rest shared by the nine bandwidth steps.
    let fsync_slice = budget / 5;
    let step_slice = (budget - fsync_slice) / (WRITE_SIZES.len() as u32 * 2 + 1);

    let fsync = fsync_latency(&dir, &buf, fsync_slice)?;
    progress(&format!(
        "calibrate: fdatasync latency: {} x {} write+fdatasync: p50 {} us, p99 {} us, max {} us",
        fsync.samples,
        bytes(fsync.write_bytes),
        fsync.p50_us,
        fsync.p99_us,
        fsync.max_us
    ));

    let mut writes = Vec::new();
    let mut read_source: Option<(TempFile, u64)> = None;
    for &size in &WRITE_SIZES {
        let cap = step_cap / size * size;
        let (synced, _) = write_step(&dir, &buf, size, cap, true, step_slice)?;
        progress(&format!(
            "calibrate: write {} + fdatasync each: {:.0} MB/s ({} in {} writes)",
            bytes(size),
            synced.mb_per_s,
            bytes(synced.bytes),
            synced.ops
        ));
        let (unsynced, file) = write_step(&dir, &buf, size, cap, false, step_slice)?;
        progress(&format!(
            "calibrate: write {} + one fdatasync at the end: {:.0} MB/s ({} in {} writes)",
            bytes(size),
            unsynced.mb_per_s,
            bytes(unsynced.bytes),
            unsynced.ops
        ));
        if read_source
            .as_ref()
            .is_none_or(|(_, n)| unsynced.bytes >= *n)
        {
            read_source = Some((file, unsynced.bytes));
        }
        writes.push(WriteBandwidth {
            write_bytes: size,
            sync_each_write: synced,
            sync_at_end: unsynced,
        });
    }

    let (file, written) = read_source.ok_or_else(|| {
        TuneError::io(
            "calibrate",
            &dir,
            std::io::Error::other("no write step left data to read"),
        )
    })?;
    let read = read_step(&file, written, &mut buf, step_slice)?;
    drop(file);
    progress(&format!(
        "calibrate: read {} sequential: {:.0} MB/s ({} in {} reads)",
        bytes(READ_BYTES),
        read.mb_per_s,
        bytes(read.bytes),
        read.ops
    ));

    Ok(Calibration {
        data_dir: data_dir.to_path_buf(),
        measured_dir: dir,
        alignment,
        budget_ms: budget.as_millis() as u64,
        elapsed_ms: started.elapsed().as_millis() as u64,
        fsync,
        writes,
        read,
        notes,
    })
}

fn create(dir: &Path, purpose: &str) -> Result<TempFile, TuneError> {
    TempFile::create(dir, purpose, true).map_err(|e| {
        if e.raw_os_error() == Some(libc::EINVAL) {
            TuneError::DirectIoUnsupported {
                path: dir.to_path_buf(),
                source: e,
            }
        } else {
            TuneError::io("create O_DIRECT file", dir, e)
        }
    })
}

/// Preallocates like a segment; a filesystem without fallocate gets a sparse file.
fn preallocate(file: &TempFile, len: u64) -> Result<(), TuneError> {
    match sys::fallocate(file.file(), len) {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => file
            .file()
            .set_len(len)
            .map_err(|e| TuneError::io("set_len", file.path(), e)),
        Err(e) => Err(TuneError::io("fallocate", file.path(), e)),
    }
}

fn fsync_latency(dir: &Path, buf: &AlignedBuf, slice: Duration) -> Result<FsyncLatency, TuneError> {
    let file = create(dir, "fsync")?;
    preallocate(&file, FSYNC_MAX_SAMPLES * FSYNC_WRITE_BYTES)?;
    let data = &buf.as_slice()[..FSYNC_WRITE_BYTES as usize];
    let started = Instant::now();
    let mut samples: Vec<u64> = Vec::new();
    for i in 0..FSYNC_MAX_SAMPLES {
        if i >= FSYNC_MIN_SAMPLES && started.elapsed() >= slice {
            break;
        }
        let t = Instant::now();
        write_all(&file, data, i * FSYNC_WRITE_BYTES)?;
        file.file()
            .sync_data()
            .map_err(|e| TuneError::io("fdatasync", file.path(), e))?;
        samples.push(t.elapsed().as_micros() as u64);
    }
    let mean = samples.iter().sum::<u64>() / samples.len() as u64;
    samples.sort_unstable();
    Ok(FsyncLatency {
        write_bytes: FSYNC_WRITE_BYTES,
        samples: samples.len() as u64,
        p50_us: percentile(&samples, 50.0),
        p99_us: percentile(&samples, 99.0),
        max_us: *samples.last().unwrap_or(&0),
        mean_us: mean,
    })
}

/// Nearest-rank percentile of sorted `v`.
fn percentile(v: &[u64], p: f64) -> u64 {
    if v.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    v[rank.clamp(1, v.len()) - 1]
}

/// Writes `size`-byte chunks sequentially until `cap` bytes or `slice` time,
/// at least one write; fdatasync after each write or once at the end.
fn write_step(
    dir: &Path,
    buf: &AlignedBuf,
    size: u64,
    cap: u64,
    sync_each: bool,
    slice: Duration,
) -> Result<(Throughput, TempFile), TuneError> {
    let file = create(dir, "bandwidth")?;
    preallocate(&file, cap)?;
    let data = &buf.as_slice()[..size as usize];
    let started = Instant::now();
    let mut pos = 0;
    while pos + size <= cap && (pos == 0 || started.elapsed() < slice) {
        write_all(&file, data, pos)?;
        pos += size;
        if sync_each {
            sync(&file)?;
        }
    }
    if !sync_each {
        sync(&file)?;
    }
    Ok((Throughput::new(pos, pos / size, started.elapsed()), file))
}

fn read_step(
    file: &TempFile,
    written: u64,
    buf: &mut AlignedBuf,
    slice: Duration,
) -> Result<Throughput, TuneError> {
    let dst = &mut buf.as_mut_slice()[..READ_BYTES as usize];
    let started = Instant::now();
    let mut pos = 0;
    while pos + READ_BYTES <= written && (pos == 0 || started.elapsed() < slice) {
        let n = file
            .file()
            .read_at(dst, pos)
            .map_err(|e| TuneError::io("O_DIRECT read", file.path(), e))?;
        if n == 0 {
            break;
        }
        pos += n as u64;
    }
    Ok(Throughput::new(
        pos,
        pos.div_ceil(READ_BYTES),
        started.elapsed(),
    ))
}

fn write_all(file: &TempFile, data: &[u8], pos: u64) -> Result<(), TuneError> {
    let n = file
        .file()
        .write_at(data, pos)
        .map_err(|e| TuneError::io("O_DIRECT write", file.path(), e))?;
    if n != data.len() {
        return Err(TuneError::io(
            "O_DIRECT write",
            file.path(),
            std::io::Error::other(format!("short write: {n} of {} bytes", data.len())),
        ));
    }
    Ok(())
}

fn sync(file: &TempFile) -> Result<(), TuneError> {
    file.file()
        .sync_data()
        .map_err(|e| TuneError::io("fdatasync", file.path(), e))
}

/// Incompressible bytes, so thin-provisioned or compressing storage cannot
/// shortcut zeros.
fn fill_pattern(buf: &mut [u8]) {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for chunk in buf.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

impl Calibration {
    pub fn render_human(&self) -> String {
        let mut kv = KvList::new();
        kv.push("measured in", self.measured_dir.display().to_string());
        kv.push("alignment", bytes(self.alignment));
        kv.push(
            "time",
            format!("{} ms (budget {} ms)", self.elapsed_ms, self.budget_ms),
        );
        let f = &self.fsync;
        kv.push(
            "fdatasync latency",
            format!(
                "p50 {} us, p99 {} us, max {} us, mean {} us ({} x {} write+fdatasync)",
                f.p50_us,
                f.p99_us,
                f.max_us,
                f.mean_us,
                f.samples,
                bytes(f.write_bytes)
            ),
        );
        for w in &self.writes {
            kv.push(
                &format!("write {}", bytes(w.write_bytes)),
                format!(
                    "{:>7.0} MB/s with fdatasync each, {:>7.0} MB/s with one at the end",
                    w.sync_each_write.mb_per_s, w.sync_at_end.mb_per_s
                ),
            );
        }
        kv.push(
            &format!("read {}", bytes(READ_BYTES)),
            format!("{:>7.0} MB/s sequential", self.read.mb_per_s),
        );
        let mut out = kv.render();
        for n in &self.notes {
            out.push_str(&format!("note: {n}\n"));
        }
        out
    }
}

impl std::fmt::Display for Calibration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render_human())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), 50);
        assert_eq!(percentile(&v, 99.0), 99);
        assert_eq!(percentile(&v, 100.0), 100);
        assert_eq!(percentile(&[7], 99.0), 7);
        assert_eq!(percentile(&[], 50.0), 0);
    }
}
