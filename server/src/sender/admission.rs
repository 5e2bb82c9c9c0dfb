//! The response budget and the backlog readers' places: what a response
//! holds from before it is built until the transport has written it.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::SubscriberLimits;
use crate::metrics::ServerMetrics;

/// Budget units are KiB, so a u32 permit count covers any budget.
const UNIT: usize = 1024;

/// The budget units that cover `bytes`: whole units, so a part of the
/// budget held for each of many small things counts more than their sum.
pub(crate) fn budget_units(bytes: usize) -> usize {
    bytes.div_ceil(UNIT)
}

/// The bytes `units` of the budget cover.
pub(crate) fn budget_bytes(units: usize) -> usize {
    units * UNIT
}

/// The shared admission state of backlog readers.
pub(crate) struct Admission {
    readers: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    budget_units: usize,
    /// Counts streams waiting for a place or for bytes, and holding a place.
    metrics: Arc<ServerMetrics>,
}

impl Admission {
    pub fn new(limits: &SubscriberLimits, metrics: Arc<ServerMetrics>) -> Admission {
        let budget_units = budget_units(limits.response_budget_bytes).max(1);
        Admission {
            readers: Arc::new(Semaphore::new(limits.backlog_readers.max(1))),
            bytes: Arc::new(Semaphore::new(budget_units)),
            budget_units,
            metrics,
        }
    }

    /// Waits for a backlog reader's place.
    pub(crate) async fn place(self: &Arc<Self>) -> Place {
        let _waiting = Waiting::new(&self.metrics);
        let permit = self
            .readers
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        self.metrics.backlog_reader_admitted();
        Place {
            _permit: permit,
            admission: self.clone(),
        }
    }

    /// `bytes` of the budget if they are spare: free now, and half the
    /// budget still free after them (what a cache may take without ever
    /// making a stream wait).
    pub(super) fn try_spare(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let units = budget_units(bytes).clamp(1, self.budget_units);
        if self.bytes.available_permits() < units + self.budget_units / 2 {
            return None;
        }
        self.bytes.clone().try_acquire_many_owned(units as u32).ok()
    }

    /// Grows `held` to `want` units of the budget if that many are free
    /// now (never waits); false if not. For what a stream holds outside its
    /// response queue (a cluster stream's merge).
    pub(crate) fn try_cover(&self, held: &mut Option<OwnedSemaphorePermit>, want: usize) -> bool {
        let have = held.as_ref().map_or(0, |p| p.num_permits());
        if want <= have {
            return true;
        }
        let Ok(more) = self
            .bytes
            .clone()
            .try_acquire_many_owned((want - have) as u32)
        else {
            return false;
        };
        match held {
            Some(permit) => permit.merge(more),
            None => *held = Some(more),
        }
        true
    }

    /// Budget units free now.
    pub(crate) fn free_units(&self) -> usize {
        self.bytes.available_permits()
    }

    /// Returns once a unit of the budget is free (and leaves it free), in
    /// turn with the readers waiting for budget.
    pub(crate) async fn unit_freed(&self) {
        let _unit = self.bytes.acquire().await;
    }

    /// Splits `want` units off `held` (all of it if it holds fewer), for a
    /// response to hold until the transport has written it: what a cluster
    /// stream's merge held for the events it sends.
    pub(crate) fn carve(
        held: &mut Option<OwnedSemaphorePermit>,
        want: usize,
    ) -> Option<OwnedSemaphorePermit> {
        let permit = held.as_mut()?;
        if permit.num_permits() <= want {
            return held.take();
        }
        permit.split(want)
    }

    /// The server's metrics (a cluster stream counts its give-backs there).
    pub(crate) fn metrics(&self) -> &ServerMetrics {
        &self.metrics
    }

    /// Gives back what `held` holds beyond `want` units.
    pub(crate) fn trim(held: &mut Option<OwnedSemaphorePermit>, want: usize) {
        if let Some(permit) = held {
            let have = permit.num_permits();
            if have > want {
                drop(permit.split(have - want));
            }
        }
    }

    /// Waits until `bytes` (at most half the budget) are free to read.
    ///
    /// At most half: the encodings groups keep for live streams
    /// (`Shared`) hold up to half the budget and are never waited for, so a
    /// reservation of more could wait on them for ever. (It was once there
    /// also because a stream kept its last response's budget while its
    /// sender waited: with `response_budget_bytes` below `batch_max_bytes`
    /// every stream stalled after its first response, found by
    /// `server/cli/tests/it/cluster_stream_within_budget.rs`.)
    pub(crate) async fn bytes(&self, bytes: usize) -> OwnedSemaphorePermit {
        let most = (self.budget_units / 2).max(1);
        let units = budget_units(bytes).clamp(1, most) as u32;
        let _waiting = Waiting::new(&self.metrics);
        self.bytes
            .clone()
            .acquire_many_owned(units)
            .await
            .expect("the semaphore is never closed")
    }
}

/// A backlog reader's place; given back when dropped.
pub(crate) struct Place {
    _permit: OwnedSemaphorePermit,
    admission: Arc<Admission>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.admission.metrics.backlog_reader_finished();
    }
}

/// Counts a waiter for as long as it waits.
struct Waiting<'a>(&'a ServerMetrics);

impl<'a> Waiting<'a> {
    fn new(metrics: &'a ServerMetrics) -> Waiting<'a> {
        metrics.backlog_reader_waiting();
        Waiting(metrics)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.backlog_reader_stopped_waiting();
    }
}

/// Gives back the part of a byte reservation a response did not use.
pub(crate) fn trim(mut permit: OwnedSemaphorePermit, used: usize) -> OwnedSemaphorePermit {
    let keep = budget_units(used).max(1);
    if permit.num_permits() > keep {
        drop(permit.split(permit.num_permits() - keep));
    }
    permit
}
