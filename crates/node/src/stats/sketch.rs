//! The fixed-size summaries of a stream of key accesses, all fed from one 64-bit hash of
//! the key:
//!
//! - [`CountMin`]: per-key access counts (a count-min sketch with conservative update);
//! - [`CountSketch`]: the sum of squared per-key counts (one row of a count sketch, the
//!   AMS "tug-of-war" estimator);
//! - [`Hll`]: the number of distinct keys (HyperLogLog).
//!
//! Each has a per-period form that the hot path updates and that is summed (or, for
//! [`Hll`], maxed) into the sliding window's totals when the period closes; the counters
//! are linear, so the window's sketch is exactly the sketch of the window's accesses.

/// Rows of the count-min sketch.
pub const CM_DEPTH: usize = 4;
/// Bits of the hash that choose a counter in a row of the count-min sketch.
const CM_BITS: u32 = 10;
/// Counters per row of the count-min sketch.
pub const CM_WIDTH: usize = 1 << CM_BITS;
/// Counters of the count sketch estimating Σ count² (a power of two).
pub const F2_WIDTH: usize = 2048;
/// Index bits of the HyperLogLog: 2^10 = 1,024 one-byte registers.
pub const HLL_BITS: u32 = 10;
/// Registers of the HyperLogLog.
pub const HLL_REGISTERS: usize = 1 << HLL_BITS;

/// A second, independent-looking 64-bit hash derived from the first (the finaliser of
/// splitmix64), for the sketches whose bits must not overlap the count-min rows'.
#[inline]
pub(crate) fn remix(h: u64) -> u64 {
    let mut z = h.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The counter of row `row` for hash `h`: each row takes its own 10 bits of the hash
/// (bits 0–39), so two keys share all their counters only if 40 bits of their hashes match.
/// (Double hashing, `h1 + i·h2` masked to a power of two, would use only the low bits of
/// both halves: keys matching in 20 bits would collide in every row.)
#[inline]
fn cm_index(h: u64, row: usize) -> usize {
    row * CM_WIDTH + ((h >> (row as u32 * CM_BITS)) as usize & (CM_WIDTH - 1))
}

/// A count-min sketch of one period, with conservative update: an access raises only the
/// counters below the key's new estimate, so estimates stay upper bounds of the true counts
/// while growing less than a plain count-min sketch's.
pub(crate) struct CountMin {
    cells: Box<[u32]>,
}

impl CountMin {
    pub(crate) fn new() -> CountMin {
        CountMin {
            cells: vec![0; CM_DEPTH * CM_WIDTH].into_boxed_slice(),
        }
    }

    /// Counts `weight` accesses of the key hashed `h`; returns its new estimate.
    #[inline]
    pub(crate) fn add(&mut self, h: u64, weight: u32) -> u32 {
        let idx: [usize; CM_DEPTH] = std::array::from_fn(|r| cm_index(h, r));
        let mut min = u32::MAX;
        for &i in &idx {
            min = min.min(self.cells[i]);
        }
        let new = min.saturating_add(weight);
        for &i in &idx {
            let c = &mut self.cells[i];
            if *c < new {
                *c = new;
            }
        }
        new
    }

    pub(crate) fn clear(&mut self) {
        self.cells.fill(0);
    }
}

/// The window's count-min sketch: the sum of its periods' sketches.
pub(crate) struct CountMinSum {
    cells: Box<[u64]>,
}

impl CountMinSum {
    pub(crate) fn new() -> CountMinSum {
        CountMinSum {
            cells: vec![0; CM_DEPTH * CM_WIDTH].into_boxed_slice(),
        }
    }

    /// Adds (`sign` true) or removes a period's sketch.
    pub(crate) fn apply(&mut self, period: &CountMin, add: bool) {
        for (s, &c) in self.cells.iter_mut().zip(period.cells.iter()) {
            *s = if add {
                s.saturating_add(u64::from(c))
            } else {
                s.saturating_sub(u64::from(c))
            };
        }
    }

    /// The estimated count of the key hashed `h`: never below the true count; above it by
    /// at most e/[`CM_WIDTH`] of the window's accesses with probability 1 − e^−[`CM_DEPTH`].
    pub(crate) fn estimate(&self, h: u64) -> u64 {
        (0..CM_DEPTH)
            .map(|r| self.cells[cm_index(h, r)])
            .min()
            .unwrap_or(0)
    }
}

/// The bucket and sign of a key in the count sketch (bits of the remixed hash).
#[inline]
fn f2_slot(g: u64) -> (usize, bool) {
    ((g as usize) & (F2_WIDTH - 1), g >> 63 == 1)
}

/// One row of a count sketch of one period: each access adds its key's sign (±1) to its
/// key's bucket. The same row summed over the window gives Σ_b c_b², an unbiased estimate
/// of Σ count² (the cross terms of colliding keys cancel in expectation).
pub(crate) struct CountSketch {
    cells: Box<[i32]>,
}

impl CountSketch {
    pub(crate) fn new() -> CountSketch {
        CountSketch {
            cells: vec![0; F2_WIDTH].into_boxed_slice(),
        }
    }

    /// Counts `weight` accesses of the key whose remixed hash is `g`.
    #[inline]
    pub(crate) fn add(&mut self, g: u64, weight: u32) {
        let (i, negative) = f2_slot(g);
        let w = weight.min(i32::MAX as u32) as i32;
        let c = &mut self.cells[i];
        *c = if negative {
            c.saturating_sub(w)
        } else {
            c.saturating_add(w)
        };
    }

    pub(crate) fn clear(&mut self) {
        self.cells.fill(0);
    }
}

/// The window's count sketch: the sum of its periods'.
pub(crate) struct CountSketchSum {
    cells: Box<[i64]>,
}

impl CountSketchSum {
    pub(crate) fn new() -> CountSketchSum {
        CountSketchSum {
            cells: vec![0; F2_WIDTH].into_boxed_slice(),
        }
    }

    /// Adds or removes a period's row.
    pub(crate) fn apply(&mut self, period: &CountSketch, add: bool) {
        for (s, &c) in self.cells.iter_mut().zip(period.cells.iter()) {
            let c = i64::from(c);
            *s = if add { *s + c } else { *s - c };
        }
    }

    /// The estimate of Σ count² over the window's keys: unbiased, with a standard
    /// deviation of at most √(2/[`F2_WIDTH`]) ≈ 3.1% of the true value.
    pub(crate) fn sum_squares(&self) -> u64 {
        let s: f64 = self.cells.iter().map(|&c| (c as f64) * (c as f64)).sum();
        s.min(u64::MAX as f64) as u64
    }
}

/// HyperLogLog registers of one period (or of the window, merged by maximum).
#[derive(Clone)]
pub(crate) struct Hll {
    registers: Box<[u8]>,
}

impl Hll {
    pub(crate) fn new() -> Hll {
        Hll {
            registers: vec![0; HLL_REGISTERS].into_boxed_slice(),
        }
    }

    /// Notes the key whose remixed hash is `g` (its top bits choose the register; the rank
    /// is taken from bits the count sketch does not use).
    #[inline]
    pub(crate) fn add(&mut self, g: u64) {
        let i = (g >> (64 - HLL_BITS)) as usize;
        // Bits 11..53 (43 bits; bit 63 is the count sketch's sign, bits 0..10 its bucket).
        let rest = (g >> 11) << 21 | (1 << 20);
        let rank = rest.leading_zeros() as u8 + 1;
        let r = &mut self.registers[i];
        if *r < rank {
            *r = rank;
        }
    }

    /// Takes, register by register, the maximum of this and `other` (the union of the two
    /// sets of keys).
    pub(crate) fn merge(&mut self, other: &Hll) {
        for (a, &b) in self.registers.iter_mut().zip(other.registers.iter()) {
            *a = (*a).max(b);
        }
    }

    pub(crate) fn clear(&mut self) {
        self.registers.fill(0);
    }

    /// The estimated number of distinct keys: HyperLogLog with linear counting below
    /// 2.5 × registers; standard error 1.04/√1024 ≈ 3.3%.
    pub(crate) fn estimate(&self) -> u64 {
        let m = HLL_REGISTERS as f64;
        let mut sum = 0.0;
        let mut zeros = 0usize;
        for &r in self.registers.iter() {
            sum += (-(f64::from(r))).exp2();
            if r == 0 {
                zeros += 1;
            }
        }
        let alpha = 0.7213 / (1.0 + 1.079 / m);
        let raw = alpha * m * m / sum;
        let e = if raw <= 2.5 * m && zeros > 0 {
            m * (m / zeros as f64).ln()
        } else {
            raw
        };
        e.round() as u64
    }
}

/// Bytes of one period's sketches.
pub(crate) const PERIOD_SKETCH_BYTES: usize =
    CM_DEPTH * CM_WIDTH * 4 + F2_WIDTH * 4 + HLL_REGISTERS;

/// Bytes of the window's sums (and the merged HyperLogLog).
pub(crate) const WINDOW_SKETCH_BYTES: usize =
    CM_DEPTH * CM_WIDTH * 8 + F2_WIDTH * 8 + HLL_REGISTERS;
