//! The system tests, one binary: the real `ringfeed` binary, and the
//! server library in process beside it (a module per behaviour; helpers in
//! [`common`], [`serve_binary`], [`cluster_nodes`], [`browser`] and [`weed`]).
//! `follower_allocates_nothing_per_event` keeps a binary of its own: it
//! installs a counting global allocator. (The stream simulation is the
//! server crate's own test: it needs its `sim` feature.)

mod append_flood_acked_or_refused;
mod append_stream;
mod append_stream_group_failure;
mod browser;
mod cli_round_trip;
mod cli_subscribers;
mod cluster_chunk_mode;
mod cluster_cursor_any_ordering;
mod cluster_feed_is_exact;
mod cluster_membership_in_etcd;
mod cluster_nodes;
mod cluster_peer_down_late_not_lost;
mod cluster_peer_stalled_gray_failure;
mod cluster_resume_truncated;
mod cluster_shares_peer_feeds;
mod cluster_stream_within_budget;
mod cluster_tail_cli;
mod common;
mod data_dir_names_are_synced;
mod fake_filer;
mod filer_api_weed_clients;
mod filters_at_scale;
mod final_status_never_lost;
mod follow_filer_exactly_once;
mod follow_filer_hostile_upstream;
mod follow_filer_log_gap;
mod follower_resumes_after_ok_end;
mod follower_steps_report_watermarks;
mod grpc_append_and_subscribe;
mod grpc_bad_input;
mod idempotent_append_cli;
mod inspect_is_read_only;
mod many_subscribers_small_budget;
mod metrics_endpoint;
mod node_id_is_kept;
mod object_store_read;
mod object_store_upload;
mod python_client;
mod reconnect_storm;
mod requests_survive_mutation;
mod serve_binary;
mod serve_guards_the_data_dir;
mod sigkill_truncates_live_follower;
mod sigterm_keeps_durable_acks;
mod static_peers_are_listed;
mod status_page_in_browser;
mod subscribers_at_scale;
mod tail_cursor_file;
mod tail_says_when_it_reconnects;
mod tail_slow_reader_keeps_its_stream;
mod tls_round_trip;
mod tokens_scope_requests;
mod tokens_scoped_reads;
mod tune_profile_is_served;
mod weed;
