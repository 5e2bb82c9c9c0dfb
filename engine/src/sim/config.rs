//! What to simulate: the shards, the steps and the kinds of fault injected.

/// A kind of fault the simulator may inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// The process dies; everything written stays, synced or not.
    Crash,
    /// The machine loses power: each unsynced block keeps its new contents or
    /// its old ones, independently.
    PowerLoss,
    /// A write fails (EIO) and changes nothing.
    WriteError,
    /// A sync fails and makes nothing durable.
    SyncError,
    /// A write stores only a prefix, fails, and the disk stops answering.
    TornWrite,
    /// The wall clock jumps backwards or forwards.
    ClockStep,
    /// A producer sends an earlier batch again, same id and sequences.
    Retry,
    /// A shard's fdatasync takes a long time (up to hundreds of steps) to
    /// return, while appends, claims and subscribers go on.
    StalledSync,
    /// A caller gives up on an append still queued for its shard (a
    /// cancelled stream, a passed deadline).
    Cancel,
    /// A shard's disk fills for up to hundreds of steps: making the next
    /// segment fails with ENOSPC; appends must be refused, nothing taken
    /// lost, and the shard must go on by itself once space returns.
    DiskFull,
    /// The shards have an object store (in half the seeds that allow it):
    /// sealed segments are uploaded now and then, some uploads are lost
    /// before the manifest names them, local retention keeps what the store
    /// lacks, and readers below the local log fetch from it, slowly, with
    /// fetches that fail and start over and a cache that drops chunks.
    Bucket,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::Crash,
        Fault::PowerLoss,
        Fault::WriteError,
        Fault::SyncError,
        Fault::TornWrite,
        Fault::ClockStep,
        Fault::Retry,
        Fault::StalledSync,
        Fault::Cancel,
        Fault::DiskFull,
        Fault::Bucket,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Crash => "crash",
            Fault::PowerLoss => "power-loss",
            Fault::WriteError => "write-error",
            Fault::SyncError => "sync-error",
            Fault::TornWrite => "torn-write",
            Fault::ClockStep => "clock-step",
            Fault::Retry => "retry",
            Fault::StalledSync => "stalled-sync",
            Fault::Cancel => "cancel",
            Fault::DiskFull => "disk-full",
            Fault::Bucket => "bucket",
        }
    }

    /// `all`, `none`, or a comma-separated list of names.
    pub fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        match text.trim() {
            "all" => return Ok(Fault::ALL.to_vec()),
            "none" | "" => return Ok(Vec::new()),
            _ => {}
        }
        let mut faults = Vec::new();
        for name in text.split(',').map(str::trim) {
            let fault = Fault::ALL
                .into_iter()
                .find(|f| f.name() == name)
                .ok_or_else(|| {
                    let names: Vec<_> = Fault::ALL.iter().map(|f| f.name()).collect();
                    format!(
                        "unknown fault {name:?}: expected all, none or a list of {}",
                        names.join(", ")
                    )
                })?;
            if !faults.contains(&fault) {
                faults.push(fault);
            }
        }
        faults.sort();
        Ok(faults)
    }
}

/// What to simulate.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub shards: u32,
    pub steps: u64,
    pub faults: Vec<Fault>,
}
