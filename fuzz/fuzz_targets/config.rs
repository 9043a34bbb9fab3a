//! cargo-fuzz target: see `fuzz_targets::config` (crates/fuzz/src/config.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::config(data));
