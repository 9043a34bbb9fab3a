//! Distinct keys accessed at least twice in the window, in bounded memory: the keys a cache
//! keeps (the memory node promotes a key on its second fetch; the paper's memory tier held
//! keys accessed more than P = 2 times), so the storage rule can size the memory tier by
//! them instead of by every key touched once (`docs/elasticity.md`, "A cache's storage is
//! its working set").
//!
//! Spatially hashed sampling with a fixed size (SHARDS, Waldspurger et al., FAST 2015): a
//! key is tracked when the top 32 bits of its hash are below a threshold, i.e. a fixed
//! pseudo-random subset of the key space at rate threshold / 2³²; a tracked key keeps the
//! periods of its last two accesses. The count of tracked keys whose last two accesses lie
//! in the window, divided by the rate, estimates the keys accessed twice or more (unbiased;
//! relative standard error about 1/√(tracked keys counted)). When more than
//! [`MAX_TRACKED`] keys are tracked, the threshold halves and the keys above it are
//! forgotten; when fewer than a quarter are, it doubles at a period's close. Keys admitted
//! by a higher threshold have no history yet, so the window is estimated at the lowest
//! threshold any of its periods had.
//!
//! Hot path: one comparison for a key that is not sampled; a lookup in a table of at most
//! [`MAX_TRACKED`] entries for one that is (every key while fewer than [`MAX_TRACKED`]
//! distinct keys are accessed in a window).

use std::collections::VecDeque;
use std::hash::{BuildHasherDefault, Hasher};

/// Most keys tracked at once.
pub(crate) const MAX_TRACKED: usize = 4096;

/// The sampling threshold that tracks every key.
const ALL: u64 = 1 << 32;

/// The `prev` stamp of a key accessed once: its age is at least 2³¹ periods, never inside
/// a window (at most [`super::MAX_PERIODS`]).
const FAR: u32 = 1 << 31;

/// Bytes the table takes at most: hashbrown's buckets for [`MAX_TRACKED`] + 1 entries (a
/// power of two at 7/8 load: 8,192) of 16 bytes, a control byte each and one group of
/// control bytes more; plus the thresholds of at most 61 periods.
pub(crate) const REUSE_BYTES: usize = 8192 * (16 + 1) + 16 + (super::MAX_PERIODS as usize + 1) * 8;

/// The periods of a tracked key's last two accesses (`prev` is `last − FAR` after one).
#[derive(Clone, Copy)]
struct Stamps {
    last: u32,
    prev: u32,
}

/// Hashes a key's hash once more with a multiply: the map's keys are xxh3 hashes whose top
/// bits are small (below the threshold), and hashbrown takes its tag from the top bits.
#[derive(Default)]
struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, h: u64) {
        self.0 = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The keys accessed twice, estimated from a hash sample (see the module docs).
pub(crate) struct Reuse {
    keys: hashbrown::HashMap<u64, Stamps, BuildHasherDefault<MixHasher>>,
    /// A key is tracked when `h >> 32 < threshold`.
    threshold: u64,
    /// The open period's number (wraps; only differences of at most a window are used).
    period: u32,
    /// The lowest threshold of each closed period in the window, oldest first.
    window: VecDeque<u64>,
    /// The lowest threshold of the open period.
    open_min: u64,
}

impl Reuse {
    pub(crate) fn new(periods: usize) -> Reuse {
        Reuse {
            keys: hashbrown::HashMap::with_capacity_and_hasher(
                MAX_TRACKED + 1,
                BuildHasherDefault::default(),
            ),
            threshold: ALL,
            period: 0,
            window: VecDeque::with_capacity(periods + 1),
            open_min: ALL,
        }
    }

    /// One access of the key hashed `h`.
    #[inline]
    pub(crate) fn access(&mut self, h: u64) {
        if h >> 32 < self.threshold {
            self.track(h);
        }
    }

    fn track(&mut self, h: u64) {
        let period = self.period;
        match self.keys.entry(h) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                let s = e.get_mut();
                s.prev = s.last;
                s.last = period;
            }
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(Stamps {
                    last: period,
                    prev: period.wrapping_sub(FAR),
                });
                while self.keys.len() > MAX_TRACKED && self.threshold > 1 {
                    self.threshold /= 2;
                    let t = self.threshold;
                    self.keys.retain(|h, _| h >> 32 < t);
                }
                self.open_min = self.open_min.min(self.threshold);
            }
        }
    }

    /// Closes the open period, the last of a window of `periods` (the configured number;
    /// fewer may have passed since start); returns the estimated keys accessed at least
    /// twice in the window that just ended.
    pub(crate) fn close(&mut self, periods: usize) -> u64 {
        let closed = self.period;
        self.window.push_back(self.open_min);
        while self.window.len() > periods {
            self.window.pop_front();
        }
        let n = self.window.len() as u32;
        // Estimated at the lowest threshold of the window: keys above it were not tracked
        // for all of it.
        let t = self.window.iter().copied().min().unwrap_or(ALL).max(1);
        let counted = self
            .keys
            .iter()
            .filter(|(h, s)| *h >> 32 < t && closed.wrapping_sub(s.prev) < n)
            .count();
        // Forget keys whose last access will have left the next window: a later access
        // would find its predecessor outside that window anyway.
        let keep = periods.saturating_sub(1) as u32;
        self.keys.retain(|_, s| closed.wrapping_sub(s.last) < keep);
        if self.keys.len() < MAX_TRACKED / 4 && self.threshold < ALL {
            self.threshold *= 2;
        }
        self.period = closed.wrapping_add(1);
        self.open_min = self.threshold;
        (counted as f64 * ALL as f64 / t as f64).round() as u64
    }

    /// The current sampling rate (tests).
    #[cfg(test)]
    pub(crate) fn rate(&self) -> f64 {
        self.threshold as f64 / ALL as f64
    }

    /// Keys tracked now (tests).
    #[cfg(test)]
    pub(crate) fn tracked(&self) -> usize {
        self.keys.len()
    }

    /// Bytes the table has allocated (tests check [`REUSE_BYTES`]).
    #[cfg(test)]
    pub(crate) fn allocated_bytes(&self) -> usize {
        self.keys.allocation_size() + self.window.capacity() * 8
    }
}
