//! What the merge holds against the response budget: when it is full, and
//! what an event counts.

use super::ClusterStream;
use crate::sender::budget_units;

/// Most events the merge holds queued: past it nothing more is pulled from
/// this node's subscription or the peers' channels until the merge moves
/// (a held merge moves at the latest after `peer_hold`).
const MAX_QUEUED: usize = 65_536;

/// What an event queued in the merge counts against the response budget
/// besides its payload (its cursor and bookkeeping).
const EVENT_OVERHEAD: usize = 96;

/// What an event in the merge counts against the response budget, in whole
/// units: at least what the response that sends it will hold for it.
pub(super) fn event_units(payload: &[u8]) -> usize {
    budget_units(payload.len() + EVENT_OVERHEAD)
}

impl ClusterStream {
    /// Whether the merge holds [`MAX_QUEUED`] events or is short of budget
    /// ([`Self::short_of_budget`]), and neither this node (`local`) nor the
    /// peers (`!local`) hold it: a source that holds the merge has nothing
    /// queued, and taking its events is what moves it (a held merge moves
    /// at the latest after `peer_hold`, so a stream over budget never
    /// stalls for good).
    pub(super) fn full(&mut self, local: bool) -> bool {
        let short = self.short_of_budget();
        self.full_when(short, local)
    }

    /// [`Self::full`], the budget already looked at (`short`).
    pub(super) fn full_when(&self, short: bool, local: bool) -> bool {
        let this = self.nodes[0].id;
        let over = self.merge.queued() >= MAX_QUEUED || short;
        over && !self.merge.holding().any(|s| (s.node == this) == local)
    }

    /// Whether the response budget cannot cover what the merge holds and a
    /// unit more for the next event. (Covering only what it held, an empty
    /// merge always looked covered, so with no budget free it still took
    /// one event at a time and sent each in a response that held none. An
    /// event larger than a unit, or a unit another stream took first, is
    /// covered short until the next look: the most a stream's merge holds
    /// beyond the budget is one event.)
    pub(super) fn short_of_budget(&mut self) -> bool {
        !self
            .admission
            .try_cover(&mut self.budget, self.queued_units)
            || self.admission.free_units() == 0
    }
}
