//! cargo-fuzz target: see `fuzz_targets::wal` (crates/fuzz/src/wal.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::wal(data));
