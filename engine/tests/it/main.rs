//! The engine's integration tests, one binary: a module per behaviour,
//! helpers in [`common`]. Two tests keep binaries of their own:
//! `idle_shards_never_wake` counts the wake-ups of every shard thread of its
//! process, and `decoders_survive_mutation` installs a counting global
//! allocator.

mod abandoned_appends_are_not_applied;
mod append_timeout_counts_from_arrival;
mod appends_stay_live_under_load;
mod committed_fixtures_open;
mod common;
mod cursor_truncated_by_crash;
mod data_dir_meta_and_reopen;
mod dma_backend_round_trip;
mod durable_acks_survive_power_loss;
mod engine_open_close_stress;
mod executor_never_parks_with_work;
mod flush_before_evict;
mod idempotent_producers;
mod io_failure_latches;
mod io_failure_latches_shard;
mod lookups_by_offset_and_stamp;
mod merge_survives_clock_step_back;
mod mid_log_corruption;
mod power_loss_keeps_synced;
mod queued_appends_are_bounded;
mod readers_never_pass_committed;
mod readers_see_exact_appends;
mod record_chunk_roundtrip;
mod recovery_never_hides_damage;
mod retention_whole_segments;
mod rotation_crash_recovers;
mod sigkill_keeps_acked_events;
#[cfg(feature = "sim")]
mod simulation;
mod since_skips_seal_chunks;
mod stamps_increase_when_clock_steps_back;
mod subscribe_backlog_then_live;
mod subscribe_filters;
mod subscribe_merge_live_concurrent;
mod subscribe_model_property;
mod subscribe_resume_exact;
mod subscribe_skip_to_shared;
mod subscribe_slow_reader_and_disk;
mod subscribe_until_and_retention;
mod tasks_run_on_shard_executors;
mod torn_tail_truncated;
