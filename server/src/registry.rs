//! Connected subscription streams and client identities.
//!
//! A client that names itself with a non-zero `client_id` has at most one
//! stream per `(client_name, client_id)`: a new stream with a higher
//! `client_epoch` cancels the old one at once (the old stream's task is woken
//! through its [`Notify`] and ends with CANCELLED), and one with an equal or
//! lower epoch is refused. Anonymous clients (`client_id` 0) are never
//! superseded. The registry also holds what `ListSubscribers` shows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, MutexGuard};

use ringfeed_proto::tonic::Status;
use ringfeed_proto::v1::SubscriberInfo;
use tokio::sync::Notify;

/// The subscription streams connected now, by client identity.
#[derive(Default)]
pub struct Registry {
    state: Mutex<State>,
    /// Most bytes the filters of all connected streams may hold (0: no
    /// bound). A filter lives as long as its stream, so without a bound a
    /// storm of subscribers with large filters would hold memory no
    /// response budget counts.
    filter_budget: usize,
}

#[derive(Default)]
struct State {
    next_id: u64,
    streams: HashMap<u64, Stream>,
    /// `(client_name, client_id)` → `(epoch, stream id)` of its connected stream.
    clients: HashMap<ClientKey, (u64, u64)>,
    /// What the connected streams' filters hold, summed.
    filter_bytes: usize,
}

/// A stream's entry. Its info has a lock of its own, so a stream refreshing
/// its position on every response never contends with other streams.
struct Stream {
    info: Arc<Entry>,
    client: ClientKey,
    cancel: Arc<Notify>,
}

/// A stream's entry as both the registry and the stream hold it.
#[derive(Default)]
struct Entry {
    shown: Mutex<Shown>,
    /// The stream waits at the live edge with nothing at hand (every event
    /// committed before its last wake-up was delivered or filtered out):
    /// it is caught up, whatever its last shown position says. Set and
    /// cleared without the lock, around each wait.
    idle: AtomicBool,
}

/// What a stream last showed of itself, and what its lag is computed from
/// when it is listed.
#[derive(Default)]
struct Shown {
    info: SubscriberInfo,
    /// Each shard's next offset to deliver, by shard id, as of `at_ns`; empty
    /// for a stream whose lag is not measured against this node's shards (a
    /// cluster stream), which is then listed with the lag it showed.
    next: Vec<u64>,
    /// When the stream last showed itself.
    at_ns: i64,
    /// `events_sent` and the time at the previous sample (rates).
    sampled: (i64, u64),
}

impl Shown {
    /// The stream's info as of `now_ns`, with the shards committed up to
    /// `committed` (by shard id). A stream that stopped sending (its client
    /// stopped reading: the send waits) does not refresh its lag, so the
    /// lag is computed here: the events committed past its position, and,
    /// while any are, the lag it showed grown by the time since (nothing
    /// it delivered since then moved its watermark). A stream with nothing
    /// pending keeps the lag it showed; one waiting at the edge is caught
    /// up.
    fn listed(&self, now_ns: i64, committed: &[u64], idle: bool) -> SubscriberInfo {
        let mut info = self.info.clone();
        (info.lag_events, info.lag_seconds) = self.lag(now_ns, committed, idle);
        info
    }

    /// `(lag_events, lag_seconds)` as [`Shown::listed`] shows them. An idle
    /// stream (waiting at the edge) is caught up, `(0, 0.0)`: the events
    /// committed past its shown position were filtered out (a stream shows
    /// itself only when it sends), and the lag it showed at its last send
    /// no longer holds (it read everything since).
    fn lag(&self, now_ns: i64, committed: &[u64], idle: bool) -> (u64, f64) {
        let info = &self.info;
        if self.next.is_empty() {
            return (info.lag_events, info.lag_seconds);
        }
        if idle {
            return (0, 0.0);
        }
        let events = self
            .next
            .iter()
            .zip(committed)
            .map(|(&next, &committed)| committed.saturating_sub(next))
            .sum();
        let mut seconds = info.lag_seconds;
        if events > 0 && self.at_ns > 0 {
            seconds += (now_ns - self.at_ns).max(0) as f64 / 1e9;
        }
        (events, seconds)
    }
}

/// A client's identity: whose token it presents (empty on an open server),
/// its name and id. Only the same identity supersedes a stream, so a
/// token cannot end (or learn the epoch of) another token's streams.
type ClientKey = (String, String, u64);

/// What a superseded stream learns: the epoch that replaced it.
pub(crate) struct Superseded(pub u64);

/// A stream's place in the registry; dropping it (however the stream ends)
/// removes the stream and, if it still owns it, its client identity.
pub(crate) struct Registered {
    registry: Arc<Registry>,
    id: u64,
    info: Arc<Entry>,
    cancel: Arc<Notify>,
    /// What its filter holds, counted against the filter budget.
    filter_bytes: usize,
}

impl Registry {
    /// A registry whose streams' filters hold at most `bytes` together.
    pub fn with_filter_budget(bytes: usize) -> Registry {
        Registry {
            filter_budget: bytes,
            ..Registry::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// RESOURCE_EXHAUSTED if a filter of `bytes` does not fit beside the
    /// filters held.
    fn filter_room(&self, state: &State, bytes: usize) -> Result<(), Status> {
        if self.filter_budget > 0 && state.filter_bytes + bytes > self.filter_budget {
            return Err(Status::resource_exhausted(format!(
                "the filters of connected subscribers hold {} of the {} bytes they may \
                 (filter_budget_bytes), and this one needs {bytes}; subscribe with \
                 fewer paths, or later",
                state.filter_bytes, self.filter_budget
            )));
        }
        Ok(())
    }

    /// Holds `bytes` of the filter budget for a stream this registry does
    /// not list (the filer API's), until the hold is dropped; refused with
    /// RESOURCE_EXHAUSTED as [`Registry::register`] is.
    pub(crate) fn hold_filter(self: &Arc<Self>, bytes: usize) -> Result<FilterHold, Status> {
        let mut state = self.lock();
        self.filter_room(&state, bytes)?;
        state.filter_bytes += bytes;
        Ok(FilterHold {
            registry: self.clone(),
            bytes,
        })
    }

    /// Registers a stream, superseding an older stream of the same client.
    /// Returns the superseded stream's epoch, if any, with the registration.
    /// `owner`: who presents the stream (a token's id; empty on an open
    /// server). `filter_bytes`: what its filter holds while it lives
    /// ([`filter_bytes`]); past the filter budget the stream is refused
    /// with RESOURCE_EXHAUSTED.
    pub(crate) fn register(
        self: &Arc<Self>,
        info: SubscriberInfo,
        owner: &str,
        filter_bytes: usize,
    ) -> Result<(Registered, Option<u64>), Status> {
        let mut state = self.lock();
        self.filter_room(&state, filter_bytes)?;
        let id = state.next_id;
        let key = (owner.to_owned(), info.client_name.clone(), info.client_id);
        let mut superseded = None;
        if info.client_id != 0 {
            if let Some(&(epoch, old)) = state.clients.get(&key) {
                if info.client_epoch <= epoch {
                    return Err(Status::already_exists(format!(
                        "client {:?} id {} is connected with epoch {epoch}; \
                         reconnect with a higher client_epoch to replace that stream",
                        info.client_name, info.client_id
                    )));
                }
                if let Some(stream) = state.streams.get(&old) {
                    stream.cancel.notify_one();
                    superseded = Some(epoch);
                }
            }
            state.clients.insert(key.clone(), (info.client_epoch, id));
        }
        state.next_id += 1;
        state.filter_bytes += filter_bytes;
        let cancel = Arc::new(Notify::new());
        let info = Arc::new(Entry {
            shown: Mutex::new(Shown {
                info,
                ..Shown::default()
            }),
            idle: AtomicBool::new(false),
        });
        state.streams.insert(
            id,
            Stream {
                info: info.clone(),
                client: key,
                cancel: cancel.clone(),
            },
        );
        Ok((
            Registered {
                registry: self.clone(),
                id,
                info,
                cancel,
                filter_bytes,
            },
            superseded,
        ))
    }

    pub fn len(&self) -> usize {
        self.lock().streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The streams' entries, so each is then locked without the registry's lock.
    fn entries(&self) -> Vec<Arc<Entry>> {
        self.lock()
            .streams
            .values()
            .map(|s| s.info.clone())
            .collect()
    }

    /// Every connected stream as of `now_ns`, oldest first, its lag measured
    /// against the shards committed up to `committed` (by shard id).
    pub fn list(&self, now_ns: i64, committed: &[u64]) -> Vec<SubscriberInfo> {
        let mut all: Vec<SubscriberInfo> = self
            .entries()
            .iter()
            .map(|entry| entry.listed(now_ns, committed))
            .collect();
        all.sort_by_key(|s| s.connected_since_ns);
        all
    }

    /// The largest lag in seconds among connected streams as [`Registry::list`]
    /// would list them (0 with none), without copying their infos.
    pub fn worst_lag_seconds(&self, now_ns: i64, committed: &[u64]) -> f64 {
        self.entries()
            .iter()
            .map(|entry| entry.lag(now_ns, committed).1)
            .fold(0.0, f64::max)
    }

    /// Takes a rate sample at `now_ns`: each stream's events per second since
    /// the previous sample (shown as `events_per_second`).
    pub fn sample_rates(&self, now_ns: i64) {
        for entry in self.entries() {
            let mut shown = lock(&entry.shown);
            let sent = shown.info.events_sent;
            let (then, sent_then) = shown.sampled;
            if then > 0 && now_ns > then {
                shown.info.events_per_second =
                    sent.saturating_sub(sent_then) as f64 * 1e9 / (now_ns - then) as f64;
            }
            shown.sampled = (now_ns, sent);
        }
    }
}

impl Registered {
    /// Updates what `ListSubscribers` shows for this stream.
    pub fn update<T>(&self, f: impl FnOnce(&mut SubscriberInfo) -> T) -> T {
        f(&mut lock(&self.info.shown).info)
    }

    /// Updates what `ListSubscribers` shows for this stream at `now_ns`,
    /// positioned at `next` (each shard's next offset, by shard id): from
    /// then on its lag is measured against the shards' committed offsets.
    pub fn show_at(
        &self,
        now_ns: i64,
        next: impl Iterator<Item = u64>,
        f: impl FnOnce(&mut SubscriberInfo),
    ) {
        let mut shown = lock(&self.info.shown);
        shown.at_ns = now_ns;
        shown.next.clear();
        shown.next.extend(next);
        f(&mut shown.info);
    }

    /// Marks the stream idle (waiting at the live edge with nothing at
    /// hand) until the guard is dropped.
    pub fn idle(&self) -> Idle<'_> {
        self.info.idle.store(true, AtomicOrdering::Relaxed);
        Idle(self)
    }

    /// Completes when a newer epoch of the same client replaced this stream.
    pub async fn superseded(&self) -> Superseded {
        self.cancel.notified().await;
        let state = self.registry.lock();
        let epoch = state
            .streams
            .get(&self.id)
            .and_then(|s| state.clients.get(&s.client))
            .map_or(0, |&(epoch, _)| epoch);
        Superseded(epoch)
    }
}

/// A stream waiting at the live edge; see [`Registered::idle`].
pub struct Idle<'a>(&'a Registered);

impl Drop for Idle<'_> {
    fn drop(&mut self) {
        self.0.info.idle.store(false, AtomicOrdering::Relaxed);
    }
}

impl Entry {
    fn listed(&self, now_ns: i64, committed: &[u64]) -> SubscriberInfo {
        let idle = self.idle.load(AtomicOrdering::Relaxed);
        lock(&self.shown).listed(now_ns, committed, idle)
    }

    fn lag(&self, now_ns: i64, committed: &[u64]) -> (u64, f64) {
        let idle = self.idle.load(AtomicOrdering::Relaxed);
        lock(&self.shown).lag(now_ns, committed, idle)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut state = self.registry.lock();
        state.filter_bytes -= self.filter_bytes;
        if let Some(stream) = state.streams.remove(&self.id) {
            let owned = state.clients.get(&stream.client);
            if owned.is_some_and(|&(_, id)| id == self.id) {
                state.clients.remove(&stream.client);
            }
        }
    }
}

/// Filter budget held by a stream the registry does not list.
pub(crate) struct FilterHold {
    registry: Arc<Registry>,
    bytes: usize,
}

impl Drop for FilterHold {
    fn drop(&mut self) {
        self.registry.lock().filter_bytes -= self.bytes;
    }
}

/// What a stream's filter holds while it lives: the filter made ready to
/// match, and its paths twice (the engine request's and the listing's).
pub fn filter_bytes(filter: &ringfeed_engine::Filter) -> usize {
    filter.selector().memory_bytes() + 2 * filter.path_bytes()
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(name: &str) -> SubscriberInfo {
        SubscriberInfo {
            client_name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_stream_that_stops_showing_itself_is_listed_with_its_lag_growing() {
        let registry = Arc::new(Registry::default());
        let (stalled, _) = registry.register(info("stalled"), "", 0).unwrap();
        let (caught_up, _) = registry.register(info("caught up"), "", 0).unwrap();
        let s = 1_000_000_000;
        // Both showed themselves at t = 10 s, 0.5 s behind, at offsets 5 and 7.
        for stream in [&stalled, &caught_up] {
            stream.show_at(10 * s, [5, 7].into_iter(), |i| {
                i.lag_seconds = 0.5;
                i.events_sent = 12;
            });
        }
        assert!((registry.worst_lag_seconds(13 * s, &[9, 7]) - 3.5).abs() < 1e-9);
        let by_name = |list: Vec<SubscriberInfo>, name: &str| {
            list.into_iter()
                .find(|i| i.client_name == name)
                .expect("listed")
        };
        // At t = 13 s the shards have committed up to 9 and 7: the stalled
        // one is 4 events behind, and 3 s more than it showed.
        let list = registry.list(13 * s, &[9, 7]);
        let stalled_now = by_name(list.clone(), "stalled");
        assert_eq!(stalled_now.lag_events, 4);
        assert!((stalled_now.lag_seconds - 3.5).abs() < 1e-9);
        // With nothing committed past its position a stream keeps the lag
        // it showed (its heartbeats refresh it).
        let list = registry.list(13 * s, &[5, 7]);
        let idle = by_name(list, "caught up");
        assert_eq!((idle.lag_events, idle.lag_seconds), (0, 0.5));
        // Waiting at the edge, the stalled one is caught up: what was
        // committed past its position was filtered out.
        {
            let _idle = stalled.idle();
            let waiting = by_name(registry.list(13 * s, &[9, 7]), "stalled");
            assert_eq!((waiting.lag_events, waiting.lag_seconds), (0, 0.0));
        }
        assert_eq!(
            by_name(registry.list(13 * s, &[9, 7]), "stalled").lag_events,
            4
        );
        // A stream that shows no position (a cluster stream) is listed as it
        // showed itself.
        let (cluster, _) = registry.register(info("cluster"), "", 0).unwrap();
        cluster.update(|i| {
            i.lag_events = 3;
            i.lag_seconds = 0.25;
        });
        let listed = by_name(registry.list(13 * s, &[100, 100]), "cluster");
        assert_eq!((listed.lag_events, listed.lag_seconds), (3, 0.25));
    }

    #[test]
    fn rates_are_events_sent_per_second_between_samples() {
        let registry = Arc::new(Registry::default());
        let (stream, _) = registry.register(info("a"), "", 0).unwrap();
        let s = 1_000_000_000;
        registry.sample_rates(10 * s);
        stream.update(|i| i.events_sent = 300);
        registry.sample_rates(12 * s);
        let listed = registry.list(12 * s, &[]);
        assert_eq!(listed[0].events_per_second, 150.0);
        drop(stream);
        assert!(registry.list(12 * s, &[]).is_empty());
    }
}
