//! cargo-fuzz target: see `fuzz_targets::peer` (crates/fuzz/src/peer.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_targets::peer(data));
