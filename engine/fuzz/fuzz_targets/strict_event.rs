#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ringfeed_proto::strict::fuzz_event(data));
