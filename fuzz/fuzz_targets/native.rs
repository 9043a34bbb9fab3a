//! cargo-fuzz target: see `fuzz_targets::native` (crates/fuzz/src/native.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::native(data));
