//! cargo-fuzz target: see `fuzz_targets::resp` (crates/fuzz/src/resp.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::resp(data));
