//! `ringfeed tune profile`: a configuration for `ringfeed serve --config`,
//! each value with the reason it was chosen. A pure function of a few numbers
//! (`ProfileInputs`) taken from a probe and a calibration, so it is tested on
//! synthetic machines. Whatever the inputs, the output satisfies the engine's
//! config checks: `max_event_bytes <= window_bytes / 4`,
//! `ring_bytes >= max_unflushed_bytes / 3 * 4 + 2 * window_bytes`,
//! `max_unflushed_bytes >= max_event_bytes`,
//! `segment_bytes >= 4 * window_bytes + 8192`, window 4 KiB..=64 MiB.

use serde::Serialize;

use crate::calibrate::Calibration;
use crate::host::split_cores;
use crate::probe::Probe;
use crate::render::{bytes, KvList};

const KIB: u64 = 1 << 10;
const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// The keys `ringfeed serve --config` accepts, in the order the profile writes them.
pub const CONFIG_KEYS: [&str; 12] = [
    "data_dir",
    "listen",
    "shards",
    "io_threads",
    "cpus",
    "window_bytes",
    "ring_bytes",
    "max_unflushed_bytes",
    "flush_interval_ms",
    "append_timeout_ms",
    "segment_bytes",
    "max_event_bytes",
];

/// Window size bounds the profile keeps to. The engine accepts 4 KiB..=64 MiB;
/// below 256 KiB `max_event_bytes` (at most a quarter window) would drop under 64 KiB.
const WINDOW_MIN: u64 = 256 * KIB;
const WINDOW_MAX: u64 = 64 * MIB;
const DEFAULT_MAX_EVENT: u64 = 256 * KIB;
const DEFAULT_SEGMENT: u64 = 256 * MIB;

/// The numbers the profile is computed from.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileInputs {
    pub data_dir: String,
    /// CPUs ringfeed may use (affinity mask and cgroup quota).
    pub usable_cpus: usize,
    /// Their ids, for pinning.
    pub allowed_cpus: Vec<u32>,
    pub numa_nodes: usize,
    /// Memory ringfeed may plan to use (MemAvailable, capped by the cgroup).
    pub memory_bytes: u64,
    /// Free space on the data dir's filesystem.
    pub free_disk_bytes: u64,
    pub fsync_p99_us: u64,
    pub fsync_max_us: u64,
    /// `(write size, MB/s with fdatasync after each write)`.
    pub synced_write_mb_per_s: Vec<(u64, f64)>,
}

impl ProfileInputs {
    pub fn from_reports(probe: &Probe, calibration: &Calibration) -> ProfileInputs {
        ProfileInputs {
            data_dir: probe.data_dir.to_string_lossy().into_owned(),
            usable_cpus: probe.cpus.usable(),
            allowed_cpus: probe.cpus.allowed.clone(),
            numa_nodes: probe.cpus.numa_nodes.len().max(1),
            memory_bytes: probe.memory.usable_bytes(),
            free_disk_bytes: probe.filesystem.free_bytes,
            fsync_p99_us: calibration.fsync.p99_us,
            fsync_max_us: calibration.fsync.max_us,
            synced_write_mb_per_s: calibration
                .writes
                .iter()
                .map(|w| (w.write_bytes, w.sync_each_write.mb_per_s))
                .collect(),
        }
    }
}

/// A TOML value of the config.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Value {
    Str(String),
    Int(u64),
    IntList(Vec<u32>),
}

impl Value {
    fn to_toml(&self) -> String {
        match self {
            Value::Str(s) => toml_string(s),
            Value::Int(n) => n.to_string(),
            Value::IntList(v) => format!(
                "[{}]",
                v.iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }

    fn to_human(&self, key: &str) -> String {
        match self {
            Value::Int(n) if key.ends_with("_bytes") => format!("{n} ({})", bytes(*n)),
            other => other.to_toml(),
        }
    }
}

/// One config key: its value (`None`: left out on purpose) and why.
#[derive(Clone, Debug, Serialize)]
pub struct Entry {
    pub key: &'static str,
    pub value: Option<Value>,
    pub why: String,
}

/// A recommended configuration.
#[derive(Clone, Debug, Serialize)]
pub struct Profile {
    pub entries: Vec<Entry>,
    /// What the profile was computed from, written as the TOML's header comments.
    pub basis: Vec<String>,
}

/// The recommended configuration for this machine.
pub fn profile(probe: &Probe, calibration: &Calibration) -> Profile {
    let mut p = profile_from(&ProfileInputs::from_reports(probe, calibration));
    p.basis.insert(
        0,
        format!(
            "kernel {}, {} on {}, O_DIRECT alignment {}",
            probe.kernel.release,
            probe
                .filesystem
                .mount_type
                .as_deref()
                .unwrap_or(&probe.filesystem.fs_type),
            probe.disk.as_ref().map_or("?", |d| d.name.as_str()),
            probe.direct_io.offset_align
        ),
    );
    p
}

/// The profile for synthetic or measured inputs.
pub fn profile_from(inp: &ProfileInputs) -> Profile {
    let mut entries = Vec::new();
    let mut push = |key: &'static str, value: Option<Value>, why: String| {
        entries.push(Entry { key, value, why })
    };

    push(
        "data_dir",
        Some(Value::Str(inp.data_dir.clone())),
        "the directory probed and calibrated".into(),
    );
    push(
        "listen",
        Some(Value::Str("127.0.0.1:7070".into())),
        "loopback only until you choose otherwise; 0.0.0.0:7070 serves other hosts (needs --insecure until TLS exists)".into(),
    );

    let cpus = inp.usable_cpus.max(1);
    let (shards, io_threads) = split_cores(cpus);
    let split_why = match cpus {
        1 => "1 usable CPU: one shard and one network thread share it".to_string(),
        2 => "2 usable CPUs: one shard executor and one network thread, each with a core".to_string(),
        3 => "3 usable CPUs: two shard executors and one network thread".to_string(),
        n => format!("{n} usable CPUs: about three quarters shard executors ({shards}), the rest network threads ({io_threads})"),
    };
    push(
        "shards",
        Some(Value::Int(u64::from(shards))),
        split_why.clone(),
    );
    push(
        "io_threads",
        Some(Value::Int(u64::from(io_threads))),
        split_why,
    );

    // Pin only when shards get cores of their own; skip CPU 0 and the lowest
    // ids, which take more interrupts, leaving them to the network threads.
    let pinned: Option<Vec<u32>> = (cpus >= 4
        && inp.allowed_cpus.len() >= (shards + io_threads) as usize)
        .then(|| inp.allowed_cpus[inp.allowed_cpus.len() - shards as usize..].to_vec());
    let cpus_why = match &pinned {
        Some(_) if inp.numa_nodes > 1 => format!(
            "shards pinned to the highest {shards} allowed CPUs, leaving the lowest (more interrupts) to network threads; {} NUMA nodes: prefer the CPUs of the data disk's node",
            inp.numa_nodes
        ),
        Some(_) => format!("shards pinned to the highest {shards} allowed CPUs, leaving the lowest (more interrupts) to network threads"),
        None => "left out: with fewer than 4 usable CPUs shards and network threads share cores, and the scheduler places them better than fixed pins".into(),
    };
    push("cpus", pinned.map(Value::IntList), cpus_why);

    // Window: the smallest write size within 90% of the best durable rate.
    let mut measured: Vec<(u64, f64)> = inp
        .synced_write_mb_per_s
        .iter()
        .copied()
        .filter(|(s, r)| *s > 0 && r.is_finite() && *r > 0.0)
        .collect();
    measured.sort_by_key(|m| m.0);
    let best = measured.iter().map(|m| m.1).fold(0.0, f64::max);
    let (window, window_rate, window_why) = match measured.iter().find(|m| m.1 >= 0.9 * best) {
        Some(&(size, rate)) => {
            let w = size
                .clamp(WINDOW_MIN, WINDOW_MAX)
                .next_power_of_two()
                .min(WINDOW_MAX);
            let why = if w == size {
                format!(
                    "smallest measured write size reaching 90% of the best durable rate: {} with fdatasync each writes {rate:.0} MB/s (best {best:.0} MB/s)",
                    bytes(size)
                )
            } else {
                format!(
                    "{} reached 90% of the best durable rate ({rate:.0} of {best:.0} MB/s), clamped to {}..{}",
                    bytes(size),
                    bytes(WINDOW_MIN),
                    bytes(WINDOW_MAX)
                )
            };
            (w, rate, why)
        }
        None => (
            MIB,
            0.0,
            "no write bandwidth measured: the 1 MiB default".into(),
        ),
    };
    push("window_bytes", Some(Value::Int(window)), window_why);

    // Durable bytes per second at that window size.
    let rate_bytes = (window_rate * 1e6) as u64;
    let max_event = DEFAULT_MAX_EVENT.min(window / 4);
    let floor_unflushed = (4 * MIB).max(2 * window).max(max_event);
    let cap_unflushed = (64 * MIB).max(2 * window);
    let unflushed = if rate_bytes > 0 {
        (rate_bytes / 10).div_ceil(MIB) * MIB
    } else {
        16 * MIB
    }
    .clamp(floor_unflushed, cap_unflushed);
    let unflushed_why = if rate_bytes > 0 {
        format!(
            "about 100 ms of durable bandwidth ({:.0} MB/s at the window size), kept within {}..{} and at least two windows",
            window_rate,
            bytes(floor_unflushed),
            bytes(cap_unflushed)
        )
    } else {
        "no bandwidth measured: the 16 MiB default".into()
    };

    // fsync p99 sets how long a quiet shard may hold memory-acked events.
    let flush_ms = if inp.fsync_p99_us > 0 {
        (4 * inp.fsync_p99_us).div_ceil(1000).clamp(2, 50)
    } else {
        10
    };
    let flush_why = if inp.fsync_p99_us > 0 {
        format!(
            "4 x the fdatasync p99 ({} us), within 2..50 ms: flushing more often than a sync completes only queues syncs",
            inp.fsync_p99_us
        )
    } else {
        "no fdatasync latency measured: the 10 ms default".into()
    };

    // Ring: a sixteenth of memory per shard up to 1 GiB, never below what the
    // unflushed bound needs.
    let needed_ring = unflushed / 3 * 4 + 2 * window;
    let target_ring = (inp.memory_bytes / 16 / u64::from(shards)).min(GIB);
    let ring = target_ring.max(needed_ring).div_ceil(window) * window;
    let ring_why = if target_ring >= needed_ring {
        format!(
            "1/16 of {} available memory per shard ({shards}), at most 1 GiB: the more the ring holds, the more catch-up reads skip the disk",
            bytes(inp.memory_bytes)
        )
    } else {
        format!(
            "raised to the minimum for the unflushed bound ({} = max_unflushed_bytes/3*4 + 2 windows); 1/16 of memory per shard would be {}",
            bytes(needed_ring),
            bytes(target_ring)
        )
    };
    push("ring_bytes", Some(Value::Int(ring)), ring_why);
    push(
        "max_unflushed_bytes",
        Some(Value::Int(unflushed)),
        unflushed_why,
    );
    push("flush_interval_ms", Some(Value::Int(flush_ms)), flush_why);

    let fsync_max_ms = inp.fsync_max_us.div_ceil(1000);
    let timeout_ms = (20 * fsync_max_ms).clamp(5000, 60_000);
    push(
        "append_timeout_ms",
        Some(Value::Int(timeout_ms)),
        if timeout_ms > 5000 {
            format!("20 x the slowest fdatasync seen ({fsync_max_ms} ms), so a slow sync does not fail appends")
        } else {
            format!("the 5 s default; the slowest fdatasync seen took {fsync_max_ms} ms")
        },
    );

    // Segments: 256 MiB unless that would leave fewer than 8 per shard on the free space.
    let min_segment = (4 * window + 8192).div_ceil(MIB) * MIB;
    let per_shard_eighth = inp.free_disk_bytes / u64::from(shards) / 8;
    let (segment, segment_why) = if per_shard_eighth >= DEFAULT_SEGMENT {
        (
            DEFAULT_SEGMENT.max(min_segment),
            format!(
                "the 256 MiB default; {} free leaves room for {} segments per shard",
                bytes(inp.free_disk_bytes),
                inp.free_disk_bytes / u64::from(shards) / DEFAULT_SEGMENT
            ),
        )
    } else {
        let fit = if per_shard_eighth >= MIB {
            1u64 << (63 - per_shard_eighth.leading_zeros())
        } else {
            0
        };
        (
            fit.max(min_segment),
            format!(
                "only {} free: segments sized for 8 per shard, at least four windows plus headers ({})",
                bytes(inp.free_disk_bytes),
                bytes(min_segment)
            ),
        )
    };
    push("segment_bytes", Some(Value::Int(segment)), segment_why);
    push(
        "max_event_bytes",
        Some(Value::Int(max_event)),
        if max_event == DEFAULT_MAX_EVENT {
            "the 256 KiB default, within a quarter window".to_string()
        } else {
            format!(
                "a quarter of the window ({}), the most the engine accepts",
                bytes(window)
            )
        },
    );

    let mut basis = vec![format!(
        "{} usable CPUs, {} memory available, {} free on the data dir",
        cpus,
        bytes(inp.memory_bytes),
        bytes(inp.free_disk_bytes)
    )];
    if inp.fsync_p99_us > 0 {
        basis.push(format!(
            "fdatasync p99 {} us, max {} us; best durable write rate {best:.0} MB/s",
            inp.fsync_p99_us, inp.fsync_max_us
        ));
    }
    Profile { entries, basis }
}

impl Profile {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|e| e.key == key)?.value.as_ref()
    }

    pub fn int(&self, key: &str) -> Option<u64> {
        match self.get(key)? {
            Value::Int(n) => Some(*n),
            _ => None,
        }
    }

    /// A TOML document for `ringfeed serve --config`: flat keys, each with a
    /// `# why` comment above it. A key left out (`cpus` unpinned) keeps only its comment.
    pub fn to_toml(&self) -> String {
        let mut out = String::from("# ringfeed configuration written by `ringfeed tune profile`\n");
        for b in &self.basis {
            out.push_str(&format!("# measured: {}\n", one_line(b)));
        }
        for e in &self.entries {
            out.push('\n');
            out.push_str(&format!("# {}\n", one_line(&e.why)));
            match &e.value {
                Some(v) => out.push_str(&format!("{} = {}\n", e.key, v.to_toml())),
                None => out.push_str(&format!("# {} is not set\n", e.key)),
            }
        }
        out
    }

    pub fn render_human(&self) -> String {
        let mut kv = KvList::new();
        for e in &self.entries {
            let value = e
                .value
                .as_ref()
                .map_or_else(|| "(not set)".to_string(), |v| v.to_human(e.key));
            kv.push(e.key, value);
            kv.note(format!("  {}", e.why));
        }
        let mut out = String::new();
        for b in &self.basis {
            out.push_str(&format!("measured: {b}\n"));
        }
        out.push_str(&kv.render());
        out
    }
}

impl std::fmt::Display for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render_human())
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '\r'], " ")
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\u{:04X}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(
        cpus: usize,
        memory: u64,
        free: u64,
        p99: u64,
        rates: &[(u64, f64)],
    ) -> ProfileInputs {
        ProfileInputs {
            data_dir: "/var/lib/ringfeed".into(),
            usable_cpus: cpus,
            allowed_cpus: (0..cpus as u32).collect(),
            numa_nodes: if cpus >= 64 { 2 } else { 1 },
            memory_bytes: memory,
            free_disk_bytes: free,
            fsync_p99_us: p99,
            fsync_max_us: p99 * 3,
            synced_write_mb_per_s: rates.to_vec(),
        }
    }

    /// The engine's config checks (engine/src/engine.rs `validate`), restated.
    fn check(p: &Profile, inp: &ProfileInputs) -> Result<(), String> {
        let int = |k: &str| p.int(k).ok_or(format!("{k} missing"));
        let (shards, io) = (int("shards")?, int("io_threads")?);
        let window = int("window_bytes")?;
        let ring = int("ring_bytes")?;
        let unflushed = int("max_unflushed_bytes")?;
        let segment = int("segment_bytes")?;
        let max_event = int("max_event_bytes")?;
        let ensure = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
        ensure((1..=1024).contains(&shards), "shards in 1..=1024")?;
        ensure(io >= 1, "io_threads >= 1")?;
        ensure(
            shards + io <= (inp.usable_cpus as u64).max(2),
            "shards + io_threads <= cpus",
        )?;
        ensure(
            (4 * KIB..=64 * MIB).contains(&window),
            "window_bytes in 4 KiB..=64 MiB",
        )?;
        ensure(
            max_event <= window / 4,
            "max_event_bytes <= window_bytes / 4",
        )?;
        ensure(max_event >= 1, "max_event_bytes >= 1")?;
        ensure(
            ring >= unflushed / 3 * 4 + 2 * window,
            "ring_bytes >= max_unflushed/3*4 + 2*window",
        )?;
        ensure(
            unflushed >= max_event,
            "max_unflushed_bytes >= max_event_bytes",
        )?;
        ensure(
            segment >= 4 * window + 8192,
            "segment_bytes >= 4*window + 8192",
        )?;
        ensure(segment % 4096 == 0, "segment_bytes a multiple of 4 KiB")?;
        ensure(int("flush_interval_ms")? >= 1, "flush_interval_ms >= 1")?;
        ensure(int("append_timeout_ms")? >= 1, "append_timeout_ms >= 1")?;
        if let Some(v) = p.get("cpus") {
            let Value::IntList(ids) = v else {
                return Err("cpus not a list".into());
            };
            ensure(ids.len() == shards as usize, "one pinned cpu per shard")?;
            ensure(
                ids.iter()
                    .all(|c| inp.allowed_cpus.binary_search(c).is_ok()),
                "pinned cpus allowed",
            )?;
        }
        for e in &p.entries {
            ensure(CONFIG_KEYS.contains(&e.key), "only known keys")?;
            ensure(!e.why.is_empty(), "every key has a reason")?;
        }
        Ok(())
    }

    #[test]
    fn constraints_hold_over_a_grid_of_machines() {
        let rates: [&[(u64, f64)]; 6] = [
            &[],
            &[
                (64 * KIB, 110.0),
                (256 * KIB, 350.0),
                (MIB, 700.0),
                (4 * MIB, 900.0),
            ],
            &[
                (64 * KIB, 500.0),
                (256 * KIB, 500.0),
                (MIB, 500.0),
                (4 * MIB, 500.0),
            ],
            &[
                (64 * KIB, 3.0),
                (256 * KIB, 9.0),
                (MIB, 20.0),
                (4 * MIB, 60.0),
            ],
            &[
                (64 * KIB, 9000.0),
                (256 * KIB, 20000.0),
                (MIB, 60000.0),
                (4 * MIB, 64000.0),
            ],
            &[(64 * KIB, 0.0), (4 * MIB, f64::NAN), (128 * MIB, 5000.0)],
        ];
        let mut checked = 0;
        for cpus in [1, 2, 3, 4, 5, 8, 64, 1000] {
            for memory in [0, 64 * MIB, 2 * GIB, 24 * GIB, 1 << 40] {
                for free in [0, 100 * MIB, 2 * GIB, 70 * GIB, 1 << 42] {
                    for p99 in [0, 50, 900, 20_000, 10_000_000] {
                        for r in rates {
                            let inp = inputs(cpus, memory, free, p99, r);
                            let p = profile_from(&inp);
                            if let Err(e) = check(&p, &inp) {
                                panic!("{e} for {inp:?}:\n{}", p.to_toml());
                            }
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 8 * 5 * 5 * 5 * 6);
    }

    #[test]
    fn window_is_the_smallest_size_near_the_best_rate() {
        let inp = inputs(
            2,
            24 * GIB,
            70 * GIB,
            900,
            &[
                (64 * KIB, 110.0),
                (256 * KIB, 350.0),
                (MIB, 850.0),
                (4 * MIB, 900.0),
            ],
        );
        assert_eq!(profile_from(&inp).int("window_bytes"), Some(MIB));
        let flat = inputs(
            2,
            24 * GIB,
            70 * GIB,
            900,
            &[
                (64 * KIB, 500.0),
                (256 * KIB, 500.0),
                (MIB, 500.0),
                (4 * MIB, 500.0),
            ],
        );
        // 64 KiB reaches the best rate, but the window is clamped up to 256 KiB.
        assert_eq!(profile_from(&flat).int("window_bytes"), Some(256 * KIB));
    }

    #[test]
    fn cores_split_as_documented() {
        assert_eq!(split_cores(0), (1, 1));
        assert_eq!(split_cores(1), (1, 1));
        assert_eq!(split_cores(2), (1, 1));
        assert_eq!(split_cores(3), (2, 1));
        assert_eq!(split_cores(4), (3, 1));
        assert_eq!(split_cores(8), (6, 2));
        assert_eq!(split_cores(16), (12, 4));
    }

    #[test]
    fn two_cpus_are_not_pinned_and_eight_are() {
        let rates = [(MIB, 500.0)];
        assert!(profile_from(&inputs(2, GIB, GIB, 500, &rates))
            .get("cpus")
            .is_none());
        assert_eq!(
            profile_from(&inputs(8, GIB, GIB, 500, &rates)).get("cpus"),
            Some(&Value::IntList(vec![2, 3, 4, 5, 6, 7]))
        );
    }

    #[test]
    fn flush_interval_follows_fsync_p99() {
        let rates = [(MIB, 500.0)];
        let at = |p99| profile_from(&inputs(2, GIB, GIB, p99, &rates)).int("flush_interval_ms");
        assert_eq!(at(100), Some(2));
        assert_eq!(at(900), Some(4));
        assert_eq!(at(5_000), Some(20));
        assert_eq!(at(100_000), Some(50));
    }

    #[test]
    fn strings_escape_for_toml() {
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(toml_string("x\u{1}"), "\"x\\u0001\"");
    }
}
