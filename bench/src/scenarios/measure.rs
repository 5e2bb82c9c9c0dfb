//! What a run costs, measured on the system's processes (CPU, memory) and
//! on this one (the subscribers' side).

use crate::results::Row;
use crate::systems::System;

/// CPU seconds so far of the system's serving process (0 against a
/// `--target`): the server a comparison measures (SeaweedFS's filer, not
/// its master and volume server, which are reported beside it).
pub(super) fn cpu(system: &dyn System) -> f64 {
    system
        .processes()
        .get(system.serving())
        .map_or(0.0, |p| p.cpu_seconds())
}

/// CPU seconds of each of the system's processes so far, in their order.
pub(super) fn cpu_each(system: &dyn System) -> Vec<f64> {
    system.processes().iter().map(|p| p.cpu_seconds()).collect()
}

/// Resets every process's peak RSS to its RSS now, so the next row's peak is
/// its own and not a pre-load's or an earlier row's.
pub(super) fn reset_peaks(system: &dyn System) {
    for p in system.processes() {
        p.reset_peak();
    }
}

/// A `/proc/PID/status` memory line of the system's serving process, MiB
/// (0 against a `--target`).
pub(super) fn memory_mib(system: &dyn System, key: &str) -> f64 {
    system
        .processes()
        .get(system.serving())
        .map_or(0.0, |p| p.memory(key) as f64)
        / f64::from(1 << 20)
}

/// What the subscribers' side (this process: the system's client library
/// and the bench's reading of each event) has used since `now`.
pub(super) struct ClientCost {
    cpu_ticks: u64,
    allocations: usize,
}

impl ClientCost {
    pub(super) fn now() -> ClientCost {
        let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
        ClientCost {
            cpu_ticks: crate::util::stat_cpu_ticks(&stat),
            allocations: crate::ALLOCATOR.stats().allocations
                + crate::ALLOCATOR.stats().reallocations,
        }
    }

    /// Client CPU (µs) and allocations per event delivered.
    pub(super) fn figures(&self, row: &mut Row, delivered: u64) {
        let now = ClientCost::now();
        let events = delivered.max(1) as f64;
        let cpu_s =
            (now.cpu_ticks - self.cpu_ticks) as f64 / crate::util::CLOCK_TICKS_PER_SECOND as f64;
        row.figure("client CPU µs/event", cpu_s * 1e6 / events);
        row.figure(
            "client allocs/event",
            (now.allocations - self.allocations) as f64 / events,
        );
    }
}

/// Adds the serving process's CPU (since `each_before`, from [`cpu_each`];
/// `cpu_s`, from [`cpu`], without it) and peak memory, when the bench started
/// it; for a system of several processes also each one's, from the same
/// reading, and their totals, labelled as such (peaks reached at different
/// moments, added).
pub(super) fn server_figures(row: &mut Row, system: &dyn System, cpu_s: f64, each_before: &[f64]) {
    let processes = system.processes();
    if processes.is_empty() {
        return;
    }
    // Each process read once: the serving process's figures and its share
    // by name are the same reading (read twice, a tick could fall between).
    let cpu_after = cpu_each(system);
    let peaks: Vec<f64> = processes
        .iter()
        .map(|p| p.memory("VmHWM") as f64 / f64::from(1 << 20))
        .collect();
    let spent = |i: usize| each_before.get(i).map(|before| cpu_after[i] - before);
    let serving = system.serving();
    row.figure("server CPU s", spent(serving).unwrap_or(cpu_s));
    row.figure(
        "server peak RSS MiB",
        peaks.get(serving).copied().unwrap_or(0.0),
    );
    // A system of several processes: each one's share, by name.
    if processes.len() > 1 {
        let all: f64 = (0..processes.len()).filter_map(spent).sum();
        row.figure("all processes CPU s", all);
        row.figure("sum of process peaks RSS MiB", peaks.iter().sum());
        for (i, p) in processes.iter().enumerate() {
            if let Some(cpu) = spent(i) {
                row.figure(&format!("{} CPU s", p.name), cpu);
            }
            row.figure(&format!("{} peak RSS MiB", p.name), peaks[i]);
        }
    }
}
