//! The short fuzz runs of `make test`: every target over its seed corpus
//! (`corpus/<target>/`: hand-made inputs and every crash found, kept as regression tests)
//! and a bounded number of deterministic mutations of it.
//!
//! `LKV_FUZZ_MUTATIONS` sets the mutations per target (default below); a failure names
//! the target, the input's file or mutation number, and the input in hex.

use std::path::{Path, PathBuf};

use fuzz_targets::{mutate::mutate, seeds, TARGETS};

/// Mutations per target in a default run (a few seconds per target in a debug build).
const MUTATIONS: usize = 150;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir(target))
        .unwrap_or_else(|e| panic!("corpus/{target}: {e}"))
        .map(|e| e.expect("a corpus entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("a corpus file"))
        })
        .collect()
}

fn run_one(target: &str, f: fn(&[u8]), what: &str, input: &[u8]) {
    let r = std::panic::catch_unwind(|| f(input));
    if let Err(e) = r {
        let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
        panic!("fuzz target {target} failed on {what}: {e:?}\ninput: {hex}");
    }
}

fn short_run(target: &str) {
    let f = TARGETS
        .iter()
        .find(|(name, _)| *name == target)
        .map(|(_, f)| *f)
        .expect("a target");
    let inputs = corpus(target);
    assert!(!inputs.is_empty(), "corpus/{target} is empty");
    for (name, input) in &inputs {
        run_one(target, f, name, input);
    }
    let n = std::env::var("LKV_FUZZ_MUTATIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MUTATIONS);
    let mut rng = fastrand::Rng::with_seed(0x1a77_1ce0 ^ target.len() as u64);
    let mut pool: Vec<Vec<u8>> = inputs.into_iter().map(|(_, i)| i).collect();
    for i in 0..n {
        let a = &pool[rng.usize(..pool.len())];
        let b = &pool[rng.usize(..pool.len())];
        let input = mutate(&mut rng, a, b);
        run_one(target, f, &format!("mutation {i}"), &input);
        // Mutations build on mutations, as a fuzzer's corpus grows.
        if i % 4 == 0 && pool.len() < 256 {
            pool.push(input);
        }
    }
}

#[test]
fn native() {
    short_run("native");
}

#[test]
fn resp() {
    short_run("resp");
}

#[test]
fn peer() {
    short_run("peer");
}

#[test]
fn wal() {
    short_run("wal");
}

#[test]
fn config() {
    short_run("config");
}

/// The seeds in `corpus/` are those `seeds.rs` makes (so they stay valid as formats move).
#[test]
fn seeds_are_current() {
    for (target, seeds) in seeds::all() {
        for (name, bytes) in seeds {
            let path = corpus_dir(target).join(format!("seed-{name}"));
            let on_disk = std::fs::read(&path).unwrap_or_default();
            assert!(
                on_disk == bytes,
                "{} is stale: run `cargo run -p fuzz-targets --example write_seeds`",
                path.display()
            );
        }
    }
}
