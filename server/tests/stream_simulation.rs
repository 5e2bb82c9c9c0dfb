//! The stream simulation (issue 17, docs/design.md 2.10) in CI's short mode:
//! clients follow simulated shards through the server's real stream code,
//! reading fast, slowly or not at all, disconnecting, superseded and shut
//! down; the oracle checks every response they read and how each stream
//! ends. One seed in three runs a crowd (30 clients on a response budget of
//! two responses), which must catch up as surely as the others. Long mode and replays: `ringfeed-bench simulate` runs it for every
//! seed after the shard simulation.

use ringfeed_engine::sim::{Fault, SimConfig};
use ringfeed_server::sim;

const SEEDS: u64 = 30;
const STEPS: u64 = 4_000;

fn config() -> SimConfig {
    SimConfig {
        shards: 3,
        steps: STEPS,
        faults: Fault::ALL.to_vec(),
    }
}

#[test]
fn every_stream_ends_as_it_must() {
    let mut total = sim::StreamOutcome::default();
    for seed in 0..SEEDS {
        let outcome = sim::run(seed, &config()).unwrap_or_else(|failure| {
            panic!(
                "{failure}\nreplay: ringfeed-bench simulate --seed {seed} --steps {STEPS} --faults all\nlast steps:\n{}",
                failure.trace[failure.trace.len().saturating_sub(40)..].join("\n")
            )
        });
        total.streams += outcome.streams;
        total.events += outcome.events;
        total.heartbeats += outcome.heartbeats;
        total.cancelled += outcome.cancelled;
        total.unavailable += outcome.unavailable;
        total.out_of_range += outcome.out_of_range;
        total.clean_ends += outcome.clean_ends;
        total.shared_responses += outcome.shared_responses;
    }
    eprintln!("{total:?}");
    // Every way a stream ends really happened: a simulation that never
    // supersedes, shuts down or reaches an end time checks nothing of 2.10.
    assert!(
        total.events > SEEDS * 1_000,
        "only {} events read",
        total.events
    );
    assert!(total.heartbeats > 0, "no heartbeat read");
    assert!(total.cancelled > 0, "no stream ended superseded");
    assert!(total.unavailable > 0, "no stream ended by a shutdown");
    assert!(total.out_of_range > 0, "no stream ended below retention");
    assert!(total.clean_ends > 0, "no stream reached its until_ns");
    assert!(
        total.shared_responses > 0,
        "no stream was sent another's encoding: encode once for all went unchecked"
    );
}

#[test]
fn a_seed_replays_to_the_same_streams() {
    for seed in [3, 11] {
        let run = || sim::run(seed, &config()).unwrap_or_else(|f| panic!("{f}"));
        assert_eq!(run(), run(), "seed {seed}");
    }
}
