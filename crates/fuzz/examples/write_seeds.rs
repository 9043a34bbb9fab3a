//! Rewrites the hand-made seeds of `crates/fuzz/corpus/` from `seeds.rs` (regression
//! inputs, `regress-*`, stay): `cargo run -p fuzz-targets --example write_seeds`. The test
//! `seeds_are_current` fails until this is run after a seed or a format changed.

use std::path::Path;

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    for (target, seeds) in fuzz_targets::seeds::all() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        for (name, bytes) in seeds {
            std::fs::write(dir.join(format!("seed-{name}")), bytes)?;
        }
    }
    Ok(())
}
