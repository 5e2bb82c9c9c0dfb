#![no_main]

#[path = "../../tests/fuzz_targets/mod.rs"]
mod fuzz_targets;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::record(data));
