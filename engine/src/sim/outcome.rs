//! What a run reports: the outcome of one that held every invariant, or
//! the invariant it broke.

/// What a run that held every invariant did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimOutcome {
    pub steps: u64,
    /// Events stored (acknowledged or not), over all lives of the shards.
    pub stored: u64,
    pub durable_acks: u64,
    pub duplicates: u64,
    pub restarts: u64,
    /// Events delivered to subscribers, each checked.
    pub delivered: u64,
    /// Times a subscriber was refused below the retained range and skipped.
    pub retention_skips: u64,
    /// Deliveries read from disk below the ring: the shard had evicted them
    /// without waiting for that subscriber (2.8).
    pub behind_ring: u64,
    /// Rounds written while the round before them was being synced.
    pub writes_beside_sync: u64,
    /// Appends refused because their shard's disk was full.
    pub disk_full_refusals: u64,
    /// Rounds handed back to the ring because the next segment did not fit.
    pub rounds_refused: u64,
    /// Chunks fetched from the object store for readers below the local
    /// log, fetches that failed and started over, and uploads lost before
    /// their manifest named them (all 0 in a seed without a store).
    pub bucket_fetches: u64,
    pub bucket_fetch_failures: u64,
    pub uploads_lost: u64,
    /// A hash of every step's outcome: the same seed gives the same digest.
    pub digest: u64,
}

/// A broken invariant.
#[derive(Clone, Debug)]
pub struct SimFailure {
    pub seed: u64,
    /// The step it broke at (0-based).
    pub step: u64,
    /// The invariant, as docs/design.md section 2 names it.
    pub invariant: &'static str,
    pub detail: String,
    /// Every step up to the failure, one line each.
    pub trace: Vec<String>,
}

impl std::fmt::Display for SimFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "seed {} step {}: {}: {}",
            self.seed, self.step, self.invariant, self.detail
        )
    }
}

/// A broken invariant: its docs/design.md name and what was seen.
pub type Broken = (&'static str, String);
