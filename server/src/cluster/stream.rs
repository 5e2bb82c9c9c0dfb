//! The stream's task: pulls from this node and its peers into the merge,
//! sends what it delivers, and waits for news, budget, heartbeats or the
//! end.

use std::time::Duration;

use ringfeed_proto::tonic::Status;
use tokio::sync::watch;

use super::ClusterStream;

impl ClusterStream {
    pub(super) async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        self.show(self.cursor().to_bytes().into());
        let registered = self.registered.clone();
        let (stalls, admission) = (self.outbox.stalls(), self.admission.clone());
        let stall_timeout = self.stall_timeout;
        let outcome = tokio::select! {
            biased;
            superseded = registered.superseded() => {
                Err(ringfeed_proto::wire::superseded_status(superseded.0))
            }
            outcome = self.feed(&mut shutdown) => outcome,
            // A client that stopped reading gives its queue and budget back
            // after stall_timeout, as a node stream's does.
            stalled = stalls.stalled(stall_timeout) => {
                let who = registered.update(|i| format!("{:?} at {}", i.client_name, i.peer));
                Err(stalls.give_back(stalled, &who, admission.metrics()))
            }
        };
        if let Err(status) = outcome {
            // After everything queued, even with the queue full.
            self.outbox.fail(status);
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.started.elapsed().as_nanos() as u64
    }

    async fn feed(&mut self, shutdown: &mut watch::Receiver<bool>) -> Result<(), Status> {
        if self.chunks {
            self.ship_chunks(shutdown).await?;
        }
        loop {
            // Listen before looking, so news in between is not missed.
            let changed = self.local.changed();
            let more_local = self.pull_local()?;
            self.take_from_peers()?;
            self.pull_shared()?;
            let short = self.short_of_budget();
            let full = self.full_when(short, false);
            let admission = self.admission.clone();
            if self.send_ready(shutdown).await? {
                continue;
            }
            // The local pull stopped short and could go on now (budget came
            // back meanwhile): no news of events would wake it.
            if more_local && !self.full(true) {
                continue;
            }
            // The same for what is left of a peer's step.
            if !full && !self.held.is_empty() {
                continue;
            }
            // until_ns: once every node (skipped ones too) is past it and
            // nothing is queued, the stream ends OK.
            let until = self.peer_request.until_ns;
            if until != 0 && self.merge.queued() == 0 && self.merge.watermark() >= until {
                return Ok(());
            }
            // This node's shards hold the merge: ask them to claim up to the
            // stamp it waits for (an idle shard answers at once, and the
            // answer wakes `changed`). Peers' claims come with their
            // heartbeats.
            if let Some(ts) = self.merge.held_at() {
                let this = self.nodes[0].id;
                if self.merge.holding().any(|s| s.node == this) {
                    self.local.request_claims(ts);
                }
            }
            let hold = sleep_until(
                self.merge
                    .deadline()
                    .map(|at| self.started + Duration::from_nanos(at)),
            );
            let heartbeat = sleep_until(self.heartbeat.map(|every| self.last_sent + every));
            tokio::select! {
                biased;
                _ = shutdown.changed() => {
                    return Err(Status::unavailable("the server is shutting down"));
                }
                _ = self.outbox.closed() => return Ok(()),
                _ = changed => {}
                // The stream's own responses may hold the budget it waits
                // for: once the transport has written them nothing else
                // need happen, so it listens for budget coming back. (It
                // waited for news of events instead, and a stream that had
                // read everything stood still until the next append.)
                _ = admission.unit_freed(), if short => {}
                _ = self.changes.changed() => self.join_new_peers()?,
                from = self.peer_rx.recv(), if !full => match from {
                    Some(from) => {
                        self.held = from;
                        self.take_from_peers()?;
                    }
                    None => return Err(Status::internal("the peers' tasks ended")),
                },
                _ = self.wake.notified(), if !full => {}
                _ = hold => {}
                _ = heartbeat => self.send_heartbeat(shutdown).await?,
            }
            // Held or skipped nodes show in ListSubscribers while quiet too.
            self.show(self.cursor().to_bytes().into());
        }
    }
}

/// Sleeps until `at`; never, without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
