//! Reading a peer's shared live feed (one per peer for all cluster streams
//! of the same shape) once at its edge, and leaving it when left behind.

use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1;

use super::peers::peer_follower;
use super::{ClusterStream, Source};
use crate::peer_feed::{Gone, READ_AT_ONCE};

impl ClusterStream {
    /// If node `node`'s shared feed covers where the stream is on it, the
    /// stream leaves its own follower and reads the feed.
    pub(super) fn maybe_share(&mut self, node: usize) {
        let wake = self.wake.clone();
        let n = &mut self.nodes[node];
        if let Source::Own { unchecked, .. } = &mut n.source {
            *unchecked = 0;
        }
        let (Some(feed), Some(fed)) = (&n.feed, &n.fed) else {
            return;
        };
        let Some(seq) = feed.covers(fed) else {
            return;
        };
        if let Source::Own { task, .. } = &n.source {
            task.abort();
        }
        feed.listen(&wake);
        n.source = Source::Shared { seq };
        tracing::debug!(node = n.id, "a cluster stream reads the peer's shared feed");
    }

    /// Takes what the shared feeds the stream reads have; a stream that
    /// fell behind a feed (or whose feed failed) follows that peer on its
    /// own again from where it is.
    pub(super) fn pull_shared(&mut self) -> Result<(), Status> {
        let mut items = Vec::new();
        for node in 1..self.nodes.len() {
            while matches!(self.nodes[node].source, Source::Shared { .. }) {
                if self.full(false) {
                    return Ok(());
                }
                let n = &mut self.nodes[node];
                let (Source::Shared { seq }, Some(feed)) = (&mut n.source, &n.feed) else {
                    break;
                };
                match feed.read(seq, READ_AT_ONCE, &mut items) {
                    Ok(()) if items.is_empty() => break,
                    Ok(()) => {
                        for item in items.drain(..) {
                            self.take(node, item)?;
                        }
                    }
                    Err(gone) => {
                        self.leave_feed(node, gone)?;
                        break;
                    }
                }
            }
        }
        Ok(())
    }

    /// Node `node`'s shared feed left the stream behind (or failed): its
    /// own follower takes over from where the stream is.
    fn leave_feed(&mut self, node: usize, gone: Gone) -> Result<(), Status> {
        let request = self.peer_request();
        let n = &mut self.nodes[node];
        tracing::info!(node = n.id, why = ?gone, "a cluster stream leaves the peer's shared feed");
        if let Some(feed) = n.feed.take() {
            feed.unlisten(&self.wake);
            n.feed = match gone {
                Gone::Passed => Some(feed),
                // A new one (this one is done).
                Gone::Failed => self
                    .membership
                    .peer_feeds
                    .get(n.id, &n.address, &request, |r| {
                        peer_follower(&self.membership, &n.address, r)
                    })
                    .ok(),
            };
        }
        let fed = n
            .fed
            .as_ref()
            .expect("a stream reads a feed only from a known position");
        let start = v1::subscribe_request::Start::Cursor(fed.to_bytes().into());
        self.follow_own(node, start, true)
    }
}
