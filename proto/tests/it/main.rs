//! The proto crate's integration tests, one binary: a module per behaviour.

mod filer_frames_over_tonic;
mod json_mapping;
mod raw_append_request_keeps_event_bytes;
mod raw_subscribe_response_decodes_as_generated;
mod subscribe_over_tonic;
