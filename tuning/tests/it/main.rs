//! The tuning crate's integration tests, one binary: a module per
//! behaviour, helpers in [`common`].

mod calibrate_tiny_budget;
mod common;
mod dio_alignment_is_enforced;
mod probe_reports_this_machine;
mod profile_toml_round_trip;
