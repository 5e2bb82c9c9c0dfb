//! The engine micro-benchmarks: durable chunk appends against raw O_DIRECT
//! (`log-append`), log recovery (`log-recovery`), in-process shard appends
//! (`shard-append`) and a tuning profile against the defaults
//! (`profile-compare`).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use glommio::io::DmaFile;
use hdrhistogram::Histogram;
use ringfeed_engine::storage::DmaStorage;
use ringfeed_engine::{Kind, Log, LogConfig, Record, Signatures};

use crate::util::{fresh_dir, machine, median, on_glommio};

/// Durable appends under the configuration `serve` runs with by default and
/// under `config`, alternating per repetition: median MB/s and p99 ack latency
/// of each, and their ratios.
pub(crate) fn profile_compare(
    dir: &Path,
    config: &Path,
    batches: &[usize],
    producers: usize,
    duration: Duration,
    reps: usize,
    event_bytes: usize,
) -> Result<()> {
    use ringfeed_engine::{Durability, Engine, EngineConfig};
    use ringfeed_server::FileConfig;
    let data = dir.join("engine");
    let engine_config = |file: FileConfig| -> Result<EngineConfig> {
        Ok(EngineConfig {
            data_dir: data.clone(),
            ..file.resolve()?.engine
        })
    };
    let sides = [
        ("default", engine_config(FileConfig::default())?),
        ("profile", engine_config(FileConfig::load(config)?)?),
    ];
    println!(
        "# profile-compare: {}; {producers} producer threads (closed loop), durable acks, {event_bytes}-byte payloads, {:.1} s per run, {reps} alternating runs per side",
        machine(),
        duration.as_secs_f64()
    );
    for (name, c) in &sides {
        println!(
            "# {name}: shards {}, cpus {:?}, window {} KiB, ring {} MiB, max unflushed {} MiB, flush interval {} ms, segment {} MiB",
            c.shards,
            c.cpus,
            c.window_bytes >> 10,
            c.ring_bytes >> 20,
            c.max_unflushed_bytes >> 20,
            c.flush_interval.as_millis(),
            c.segment_bytes >> 20
        );
    }
    println!("| batch | MB/s default | MB/s profile | ratio | p99 ack µs default | p99 ack µs profile | ratio |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for &batch in batches {
        let mut mb_s = [Vec::new(), Vec::new()];
        let mut p99 = [Vec::new(), Vec::new()];
        for rep in 0..reps {
            // ABBA order, so a drift in the machine's load weighs on both sides.
            let order = if rep % 2 == 0 { [0, 1] } else { [1, 0] };
            for side in order {
                let _ = std::fs::remove_dir_all(&data);
                let engine = Engine::open(sides[side].1.clone())?;
                let run = run_appends(
                    &engine,
                    batch,
                    producers,
                    duration,
                    event_bytes,
                    Durability::Durable,
                )?;
                engine.shutdown()?;
                mb_s[side].push(run.bytes as f64 / run.elapsed.as_secs_f64() / 1e6);
                p99[side].push(run.latency.value_at_quantile(0.99) as f64);
            }
        }
        let [mb_default, mb_profile] = mb_s.map(median);
        let [p99_default, p99_profile] = p99.map(median);
        println!(
            "| {batch} | {mb_default:.1} | {mb_profile:.1} | {:.2} | {p99_default:.0} | {p99_profile:.0} | {:.2} |",
            mb_profile / mb_default,
            p99_profile / p99_default
        );
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}

struct Run {
    bytes: u64,
    elapsed: Duration,
    /// Per-write latency (write + fdatasync), microseconds.
    latency: Histogram<u64>,
}

impl Run {
    fn mb_s(&self) -> f64 {
        self.bytes as f64 / self.elapsed.as_secs_f64() / 1e6
    }
}

/// Raw: one preallocated file, `size`-byte O_DIRECT writes, fdatasync after each.
async fn raw_run(dir: &Path, size: usize, total: u64) -> Result<Run> {
    let path = dir.join("raw.dat");
    let _ = std::fs::remove_file(&path);
    let file = DmaFile::create(&path)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    file.pre_allocate(total + size as u64, false)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut latency = Histogram::new(3)?;
    let mut timed = Duration::ZERO;
    let mut pos = 0;
    while pos < total {
        // Filling the buffer is outside the timed region, as building the
        // records is for the framed run: both time write + fdatasync only.
        let mut buf = file.alloc_dma_buffer(size);
        buf.as_bytes_mut().fill(0x5a);
        let t = Instant::now();
        file.write_at(buf, pos)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        file.fdatasync().await.map_err(|e| anyhow::anyhow!("{e}"))?;
        let dt = t.elapsed();
        timed += dt;
        latency.record(dt.as_micros() as u64)?;
        pos += size as u64;
    }
    let elapsed = timed;
    file.close().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    std::fs::remove_file(&path)?;
    Ok(Run {
        bytes: pos,
        elapsed,
        latency,
    })
}

/// Framed: the engine's log, chunks of `size` bytes filled with records,
/// `append` + `sync` per chunk. Building the records (which the shard does at
/// append time, into its window) is outside the timed region; chunk header,
/// body checksum, write, sync and index are inside.
async fn framed_run(dir: &Path, size: usize, total: u64, event_bytes: usize) -> Result<(Run, u64)> {
    let log_dir = dir.join("log");
    fresh_dir(&log_dir)?;
    let config = LogConfig {
        shard: 0,
        segment_bytes: (total + (64 << 20)).next_multiple_of(1 << 20),
        max_unsynced_bytes: (size as u64).max(32 << 20),
    };
    let (mut log, _) = Log::open(DmaStorage::open(&log_dir)?, config).await?;
    let payload = vec![0x42u8; event_bytes];
    let mut latency = Histogram::new(3)?;
    let mut timed = Duration::ZERO;
    let mut written = 0u64;
    let mut records = 0u64;
    let mut ts = 1i64;
    while written < total {
        let mut chunk = log.chunk_builder(size);
        fill_chunk(&mut chunk, &mut ts, &payload);
        records += u64::from(chunk.record_count());
        let t = Instant::now();
        let entry = log.append(chunk).await?;
        log.sync().await?;
        let dt = t.elapsed();
        timed += dt;
        latency.record(dt.as_micros() as u64)?;
        written += u64::from(entry.disk_len);
    }
    drop(log);
    std::fs::remove_dir_all(&log_dir)?;
    Ok((
        Run {
            bytes: written,
            elapsed: timed,
            latency,
        },
        records,
    ))
}

/// Fills a chunk with update records carrying `payload`, stamped from `ts` on.
fn fill_chunk<B: AsRef<[u8]> + AsMut<[u8]>>(
    chunk: &mut ringfeed_engine::chunk::ChunkBuilder<B>,
    ts: &mut i64,
    payload: &[u8],
) {
    loop {
        let rec = Record {
            ts: *ts,
            offset: chunk.next_offset(),
            kind: Kind::Update,
            signatures: Signatures::new(&[]),
            directory: "/bench/dir",
            old_name: "file",
            new_name: "file",
            new_parent: "",
            payload,
            producer: None,
        };
        if chunk.push(&rec).is_err() {
            return;
        }
        *ts += 1;
    }
}

pub(crate) async fn log_append(
    dir: &Path,
    sizes_kib: &[usize],
    total: u64,
    reps: usize,
    event_bytes: usize,
) -> Result<()> {
    fresh_dir(dir)?;
    println!("# log-append: {} MiB per size and rep, {reps} reps interleaved, write + fdatasync per chunk (only those timed), {event_bytes}-byte payloads", total >> 20);
    println!("# dir: {} ({})", dir.canonicalize()?.display(), machine());
    println!(
        "{:>8} | {:>10} {:>9} {:>9} | {:>10} {:>9} {:>9} {:>10} | {:>6}",
        "chunk",
        "raw MB/s",
        "p50 us",
        "p99 us",
        "log MB/s",
        "p50 us",
        "p99 us",
        "events/s",
        "ratio"
    );
    for &kib in sizes_kib {
        let size = kib << 10;
        let (mut raw, mut framed, mut eps) = (Vec::new(), Vec::new(), Vec::new());
        let (mut raw_lat, mut log_lat) = (Histogram::<u64>::new(3)?, Histogram::<u64>::new(3)?);
        for rep in 0..reps {
            // Alternate which goes first, so drift of the shared disk hits both.
            let (r, (f, records)) = if rep % 2 == 0 {
                let r = raw_run(dir, size, total).await?;
                (r, framed_run(dir, size, total, event_bytes).await?)
            } else {
                let f = framed_run(dir, size, total, event_bytes).await?;
                (raw_run(dir, size, total).await?, f)
            };
            raw.push(r.mb_s());
            framed.push(f.mb_s());
            eps.push(records as f64 / f.elapsed.as_secs_f64());
            raw_lat.add(&r.latency)?;
            log_lat.add(&f.latency)?;
        }
        let (raw_m, framed_m) = (median(raw), median(framed));
        println!(
            "{:>6}Ki | {:>10.0} {:>9} {:>9} | {:>10.0} {:>9} {:>9} {:>10.0} | {:>6.3}",
            kib,
            raw_m,
            raw_lat.value_at_quantile(0.5),
            raw_lat.value_at_quantile(0.99),
            framed_m,
            log_lat.value_at_quantile(0.5),
            log_lat.value_at_quantile(0.99),
            median(eps),
            framed_m / raw_m
        );
    }
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

pub(crate) async fn log_recovery(
    dir: &Path,
    total: u64,
    segment_bytes: u64,
    reps: usize,
) -> Result<()> {
    fresh_dir(dir)?;
    let config = LogConfig {
        shard: 0,
        segment_bytes,
        max_unsynced_bytes: 32 << 20,
    };
    let (mut log, _) = Log::open(DmaStorage::open(dir)?, config.clone()).await?;
    let payload = vec![0x42u8; 200];
    let mut ts = 1i64;
    let chunk_bytes = 1 << 20;
    let started = Instant::now();
    let mut data = 0u64;
    while data < total {
        let mut chunk = log.chunk_builder(chunk_bytes);
        fill_chunk(&mut chunk, &mut ts, &payload);
        data += u64::from(log.append(chunk).await?.disk_len);
    }
    log.sync().await?;
    let records = log.next_offset();
    // No clean close: measure recovery as after a crash (residue scan included).
    drop(log);
    eprintln!(
        "# wrote {} MiB ({records} records) in {:.1} s",
        total >> 20,
        started.elapsed().as_secs_f64()
    );
    println!("# log-recovery (after a crash, no clean close): {} MiB of 1 MiB chunks, {} MiB segments, {records} records ({})", total >> 20, segment_bytes >> 20, machine());
    let mut times = Vec::new();
    for rep in 0..reps {
        let t = Instant::now();
        let (log, report) = Log::open(DmaStorage::open(dir)?, config.clone()).await?;
        let dt = t.elapsed().as_secs_f64();
        if report.records != records {
            bail!("recovered {} records, wrote {records}", report.records);
        }
        println!(
            "open {rep}: {:.3} s, {} segments, {} chunks verified, {:.2} GB/s",
            dt,
            report.segments,
            report.chunks,
            total as f64 / dt / 1e9
        );
        times.push(dt);
        drop(log);
    }
    println!(
        "median open: {:.3} s for {} MiB",
        median(times),
        total >> 20
    );
    std::fs::remove_dir_all(dir)?;
    Ok(())
}

struct AppendRun {
    events: u64,
    bytes: u64,
    elapsed: Duration,
    latency: Histogram<u64>,
}

/// Producers append closed-loop for `duration`; returns totals and ack latency (µs).
fn run_appends(
    engine: &ringfeed_engine::Engine,
    batch: usize,
    producers: usize,
    duration: Duration,
    event_bytes: usize,
    durability: ringfeed_engine::Durability,
) -> Result<AppendRun> {
    let payload = ringfeed_proto::bytes::Bytes::from(vec![0x61u8; event_bytes]);
    let start = Instant::now();
    let results: Vec<Result<(u64, u64, Histogram<u64>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let payload = &payload;
                scope.spawn(move || -> Result<(u64, u64, Histogram<u64>)> {
                    let mut latency = Histogram::<u64>::new(3)?;
                    let (mut events, mut bytes, mut n) = (0u64, 0u64, 0u64);
                    while start.elapsed() < duration {
                        let events_in: Vec<_> = (0..batch)
                            .map(|_| {
                                n += 1;
                                ringfeed_engine::NewEvent {
                                    // Spread directories so every shard gets work.
                                    directory: format!("/bench/p{p}/d{}", n % 64),
                                    new_name: "file".into(),
                                    payload: payload.clone(),
                                    ..Default::default()
                                }
                            })
                            .collect();
                        let b: usize = events_in.iter().map(|e| e.record_len()).sum();
                        let t = Instant::now();
                        engine
                            .append_blocking(events_in, durability)
                            .map_err(|e| anyhow::anyhow!("append: {e}"))?;
                        latency.record(t.elapsed().as_micros() as u64)?;
                        events += batch as u64;
                        bytes += b as u64;
                    }
                    Ok((events, bytes, latency))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("producer thread"))
            .collect()
    });
    let elapsed = start.elapsed();
    let mut run = AppendRun {
        events: 0,
        bytes: 0,
        elapsed,
        latency: Histogram::new(3)?,
    };
    for r in results {
        let (e, b, l) = r?;
        run.events += e;
        run.bytes += b;
        run.latency.add(&l)?;
    }
    Ok(run)
}

pub(crate) fn shard_append(
    dir: &Path,
    batches: &[usize],
    shards: &[u32],
    producers: usize,
    duration: Duration,
    event_bytes: usize,
) -> Result<()> {
    use ringfeed_engine::{Durability, Engine, EngineConfig};
    println!(
        "# shard-append: {producers} producer threads (closed loop), {event_bytes}-byte payloads, {:.1} s per row ({})",
        duration.as_secs_f64(),
        machine()
    );
    // The disk's own limits, in the same run.
    let raw_dir = dir.join("raw");
    let raw = {
        let raw_dir = raw_dir.clone();
        on_glommio(move || async move {
            fresh_dir(&raw_dir)?;
            let big = raw_run(&raw_dir, 1 << 20, 256 << 20).await?;
            let small = raw_run(&raw_dir, 4096, 8 << 20).await?;
            std::fs::remove_dir_all(&raw_dir)?;
            Ok((
                big.mb_s(),
                small.latency.value_at_quantile(0.5),
                small.latency.value_at_quantile(0.99),
            ))
        })?
    };
    println!(
        "# raw O_DIRECT: 1 MiB write + fdatasync {:.0} MB/s; 4 KiB write + fdatasync p50 {} us, p99 {} us",
        raw.0, raw.1, raw.2
    );
    println!(
        "{:>7} {:>6} {:>6} | {:>12} {:>12} {:>9} | {:>8} {:>8} {:>8} {:>8}",
        "ack",
        "shards",
        "batch",
        "events/s",
        "ev/s/shard",
        "MB/s",
        "p50 us",
        "p99 us",
        "p99.9 us",
        "max us"
    );
    for durability in [Durability::Memory, Durability::Durable] {
        for &shard_count in shards {
            for &batch in batches {
                let data = dir.join("engine");
                let _ = std::fs::remove_dir_all(&data);
                let engine = Engine::open(EngineConfig {
                    data_dir: data.clone(),
                    shards: shard_count,
                    ..EngineConfig::default()
                })?;
                let run =
                    run_appends(&engine, batch, producers, duration, event_bytes, durability)?;
                let (mut rounds, mut flushed, mut busy, mut stamped, mut stamp_ns) =
                    (0, 0, 0, 0, 0);
                for s in 0..engine.shard_count() {
                    use std::sync::atomic::Ordering::Relaxed;
                    let st = engine.shard(s).stats();
                    rounds += st.rounds.load(Relaxed);
                    flushed += st.bytes.load(Relaxed);
                    busy += st.busy_ns.load(Relaxed);
                    stamped += st.appended.load(Relaxed);
                    stamp_ns += st.append_ns.load(Relaxed);
                }
                engine.shutdown()?;
                std::fs::remove_dir_all(&data)?;
                if std::env::var_os("RINGFEED_BENCH_VERBOSE").is_some() {
                    eprintln!(
                        "  flush: {rounds} rounds, {:.1} KiB/round, {:.2} ms/round, {:.0} MB/s while busy",
                        flushed as f64 / rounds.max(1) as f64 / 1024.0,
                        busy as f64 / rounds.max(1) as f64 / 1e6,
                        flushed as f64 / (busy.max(1) as f64 / 1e9) / 1e6
                    );
                }
                // The shard's own cost: the non-yielding stamp-copy-publish step.
                let shard_ns = stamp_ns as f64 / stamped.max(1) as f64;
                let eps = run.events as f64 / run.elapsed.as_secs_f64();
                println!(
                    "{:>7} {:>6} {:>6} | {:>12.0} {:>12.0} {:>9.1} | {:>8} {:>8} {:>8} {:>8} | {:>8.0} {:>10.1}",
                    format!("{durability:?}").to_lowercase(),
                    shard_count,
                    batch,
                    eps,
                    eps / f64::from(shard_count),
                    run.bytes as f64 / run.elapsed.as_secs_f64() / 1e6,
                    run.latency.value_at_quantile(0.5),
                    run.latency.value_at_quantile(0.99),
                    run.latency.value_at_quantile(0.999),
                    run.latency.max(),
                    shard_ns,
                    1e3 / shard_ns.max(1e-9)
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(dir);
    Ok(())
}
