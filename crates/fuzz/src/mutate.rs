//! Deterministic mutations for the short runs in `cargo test` (libFuzzer does its own in
//! the long runs): bit flips, interesting bytes, insertions, deletions, duplicated and
//! spliced ranges, cuts.

use fastrand::Rng;

/// Bytes worth trying at any position: boundaries of lengths and counts, RESP and
/// protobuf punctuation.
const INTERESTING: &[u8] = &[
    0, 1, 0x7f, 0x80, 0xff, b'\r', b'\n', b'*', b'$', b'-', b'"', b' ',
];

/// A mutation of `input`, perhaps spliced with `other`.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..rng.usize(1..=4) {
        let len = out.len();
        match rng.u8(..7) {
            0 if len > 0 => {
                let i = rng.usize(..len);
                out[i] ^= 1 << rng.u8(..8);
            }
            1 if len > 0 => {
                let i = rng.usize(..len);
                out[i] = INTERESTING[rng.usize(..INTERESTING.len())];
            }
            2 => {
                let i = rng.usize(..=len);
                out.insert(i, rng.u8(..));
            }
            3 if len > 0 => {
                let i = rng.usize(..len);
                let n = rng.usize(1..=(len - i).min(16));
                out.drain(i..i + n);
            }
            4 if len > 0 => {
                let i = rng.usize(..len);
                let n = rng.usize(1..=(len - i).min(32));
                let copy = out[i..i + n].to_vec();
                let at = rng.usize(..=len);
                out.splice(at..at, copy);
            }
            5 if !other.is_empty() => {
                let i = rng.usize(..other.len());
                let n = rng.usize(1..=(other.len() - i).min(64));
                let at = rng.usize(..=len);
                out.splice(at..at, other[i..i + n].iter().copied());
            }
            _ if len > 0 => out.truncate(rng.usize(..len)),
            _ => out.push(rng.u8(..)),
        }
    }
    out
}
