//! Statistics one worker measures for the elasticity policy, as a state machine without
//! I/O: the worker's core counts key accesses into a [`Recorder`], its driver adds request
//! latencies and, through a meter, the thread's busy time; every period the recorder closes
//! a period and publishes a [`Window`] over the last `window_ms` (see `docs/elasticity.md`).
//!
//! # What a window holds
//! - accesses: exact; every read and write of a key served by this worker counts once;
//! - per-key counts, for the hot keys only: a count-min sketch with conservative update
//!   (`sketch::CountMin`) and per-period candidates (`hot`), re-estimated over the window;
//! - distinct keys accessed (HyperLogLog) and Σ count² over keys (a count sketch), so a
//!   monitor gets the mean and standard deviation of per-key counts without the keys;
//! - distinct keys accessed at least twice (a fixed-size hash sample, `reuse`): the keys
//!   a cache keeps, which the storage rule sizes the memory tier by;
//! - occupancy: busy time of the worker's thread / wall time;
//! - latency of served client requests ([`latency`], mergeable buckets);
//! - bytes stored in memory and, for a disk-tier worker, on disk (when the window closed).
//!
//! A window is the sum of its last `window_ms / period_ms` periods: each period has its own
//! sketches, added to the window's sums when it closes and subtracted when it leaves the
//! window, so a key's count falls to zero once it was not accessed for a whole window. The
//! hot path touches only the open period's sketches.

mod hot;
pub mod latency;
pub mod requests;
mod reuse;
mod sketch;
#[cfg(test)]
mod tests;

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use serde::Deserialize;

pub use hot::MAX_HOT_KEY_BYTES;
pub use latency::Histogram;
use latency::PeriodHistogram;
use reuse::Reuse;
use sketch::{CountMin, CountMinSum, CountSketch, CountSketchSum, Hll};

/// Settings of the statistics (`[stats]`).
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(default, deny_unknown_fields)]
pub struct StatsConfig {
    /// How often a period closes and a new window is published, ms. Default: 1,000.
    pub period_ms: u64,
    /// Length of the sliding window statistics cover, ms (a multiple of `period_ms`).
    /// Default: 10,000.
    pub window_ms: u64,
    /// Most hot keys a worker reports per window. Default: 32.
    pub hot_keys: usize,
}

impl Default for StatsConfig {
    fn default() -> Self {
        StatsConfig {
            period_ms: 1_000,
            window_ms: 10_000,
            hot_keys: 32,
        }
    }
}

/// Bounds of [`StatsConfig`].
pub const MIN_PERIOD_MS: u64 = 100;
/// Longest period.
pub const MAX_PERIOD_MS: u64 = 60_000;
/// Most periods in a window (each keeps its own sketches).
pub const MAX_PERIODS: u64 = 60;
/// Most hot keys per worker.
pub const MAX_HOT_KEYS: usize = 1024;

impl StatsConfig {
    /// Checks the bounds: a period of 100 ms to 60 s, a window of 1 to 60 whole periods,
    /// 1 to 1,024 hot keys.
    pub fn validate(&self) -> Result<(), String> {
        if !(MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&self.period_ms) {
            return Err(format!(
                "period_ms = {} is outside {MIN_PERIOD_MS}..={MAX_PERIOD_MS}",
                self.period_ms
            ));
        }
        if !self.window_ms.is_multiple_of(self.period_ms)
            || !(1..=MAX_PERIODS).contains(&(self.window_ms / self.period_ms))
        {
            return Err(format!(
                "window_ms = {} must be 1 to {MAX_PERIODS} times period_ms ({})",
                self.window_ms, self.period_ms
            ));
        }
        if !(1..=MAX_HOT_KEYS).contains(&self.hot_keys) {
            return Err(format!(
                "hot_keys = {} is outside 1..={MAX_HOT_KEYS}",
                self.hot_keys
            ));
        }
        Ok(())
    }

    /// Periods in a window (at least 1, at most [`MAX_PERIODS`], whatever the fields say).
    fn periods(&self) -> usize {
        (self.window_ms / self.period_ms.max(1)).clamp(1, MAX_PERIODS) as usize
    }

    fn candidates(&self) -> usize {
        (2 * self.hot_keys).clamp(8, 2 * MAX_HOT_KEYS)
    }

    /// Bytes a worker's statistics take at most: the periods' sketches, latency histograms
    /// and hot-key candidates (the window's and the open period's included), and the
    /// window's sums.
    pub fn memory_bytes(&self) -> usize {
        let period = sketch::PERIOD_SKETCH_BYTES
            + latency::BUCKETS * 4
            + hot::candidate_bytes(self.candidates());
        (self.periods() + 1) * period
            + sketch::WINDOW_SKETCH_BYTES
            + latency::BUCKETS * 8
            + self.hot_keys.min(MAX_HOT_KEYS) * (MAX_HOT_KEY_BYTES + 48)
            + reuse::REUSE_BYTES
    }
}

/// The key-hash seed of the statistics of a core seeded with `core_seed` (random per
/// process in a node, fixed in the simulation).
pub(crate) fn seed_from(core_seed: u64) -> u64 {
    sketch::remix(core_seed ^ 0x7374_6174_735f_6b65)
}

/// A key reported hot, with its estimated accesses in the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotKey {
    /// The key.
    pub key: Bytes,
    /// Estimated accesses in the window: never fewer than the true count, more by at most
    /// e/1024 ≈ 0.27% of the window's accesses with probability ≥ 98%.
    pub accesses: u64,
}

/// What a worker publishes when a period closes: its statistics over the window that just
/// ended.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Window {
    /// Windows closed since the worker started (0: none yet; this is then all zeros).
    pub seq: u64,
    /// Wall time the window covers, ms (shorter than the configured window until enough
    /// periods have passed since start).
    pub window_ms: u64,
    /// Key accesses served (exact).
    pub accesses: u64,
    /// Estimated distinct keys accessed (HyperLogLog, standard error ≈ 3.3%).
    pub accessed_keys: u64,
    /// Estimated distinct keys accessed at least twice (a hash sample of at most 4,096
    /// keys: exact while fewer are accessed, else a relative standard error of about
    /// 1/√(sampled keys counted)).
    pub reused_keys: u64,
    /// Estimated Σ over keys of (accesses of the key)² (count sketch: unbiased, standard
    /// deviation ≤ 3.1% of the value).
    pub access_sum_squares: u64,
    /// The most accessed keys, most accessed first (at most `hot_keys`).
    pub hot_keys: Vec<HotKey>,
    /// Fraction of the window's wall time the worker's thread was busy (0..=1; 0 if the
    /// driver measures no busy time).
    pub occupancy: f64,
    /// Latency of served client requests.
    pub latency: Histogram,
    /// Bytes of data stored in memory when the window closed.
    pub memory_bytes: u64,
    /// Bytes of data on disk when the window closed (a disk-tier worker; else `None`).
    pub disk_bytes: Option<u64>,
}

/// What the recorder is told about the worker when a period closes.
#[derive(Clone, Copy, Debug, Default)]
pub struct Gauges {
    /// Busy time of the worker's thread since it started, ns (`None`: not measured).
    pub busy_ns: Option<u64>,
    /// Bytes stored in memory.
    pub memory_bytes: u64,
    /// Bytes stored on disk (a disk-tier worker).
    pub disk_bytes: Option<u64>,
}

/// One period's measurements.
struct Period {
    cms: CountMin,
    f2: CountSketch,
    hll: Hll,
    latency: PeriodHistogram,
    accesses: u64,
    /// Hot-key candidates (of the open period) or their keys (of a closed one).
    candidates: hot::Candidates,
    closed: Vec<hot::Candidate>,
    span_ms: u64,
    busy_ns: u64,
}

impl Period {
    fn new(candidates: usize) -> Period {
        Period {
            cms: CountMin::new(),
            f2: CountSketch::new(),
            hll: Hll::new(),
            latency: PeriodHistogram::new(),
            accesses: 0,
            candidates: hot::Candidates::new(candidates),
            closed: Vec::new(),
            span_ms: 0,
            busy_ns: 0,
        }
    }

    /// True if nothing was recorded in it: its sketches and histogram are all zeros.
    fn is_idle(&self) -> bool {
        self.accesses == 0 && self.latency.is_empty()
    }

    fn clear(&mut self) {
        self.cms.clear();
        self.f2.clear();
        self.hll.clear();
        self.latency.clear();
        self.accesses = 0;
        self.closed.clear();
        self.span_ms = 0;
        self.busy_ns = 0;
    }
}

/// One worker's statistics (see the module docs).
pub struct Recorder {
    config: StatsConfig,
    /// Seed of the key hash: random per worker, so nobody can choose keys that collide in
    /// the sketches to make a cold key look hot.
    seed: u64,
    open: Period,
    /// Closed periods in the window, oldest first.
    ring: VecDeque<Period>,
    cms: CountMinSum,
    f2: CountSketchSum,
    latency: Histogram,
    accesses: u64,
    reuse: Reuse,
    opened_ms: u64,
    busy_at_open: Option<u64>,
    published: Arc<Window>,
}

impl Recorder {
    /// A recorder whose first period opens at `now_ms`; `seed` seeds its key hash.
    pub fn new(config: StatsConfig, seed: u64, now_ms: u64) -> Recorder {
        let candidates = config.candidates();
        Recorder {
            open: Period::new(candidates),
            ring: VecDeque::with_capacity(config.periods() + 1),
            cms: CountMinSum::new(),
            f2: CountSketchSum::new(),
            latency: Histogram::default(),
            accesses: 0,
            reuse: Reuse::new(config.periods()),
            opened_ms: now_ms,
            busy_at_open: None,
            published: Arc::new(Window::default()),
            seed,
            config,
        }
    }

    /// The settings.
    pub fn config(&self) -> &StatsConfig {
        &self.config
    }

    /// One access of `key` (a read or a write served here).
    #[inline]
    pub fn access(&mut self, key: &[u8]) {
        let h = xxhash_rust::xxh3::xxh3_64_with_seed(key, self.seed);
        let g = sketch::remix(h);
        let p = &mut self.open;
        p.accesses += 1;
        let est = p.cms.add(h, 1);
        p.f2.add(g, 1);
        p.hll.add(g);
        self.reuse.access(h);
        // Below twice the mean load of a sketch counter, a key cannot be told from the
        // keys it collides with: it is no candidate.
        let noise = (p.accesses / sketch::CM_WIDTH as u64) as u32;
        if est >= 2 && est > 2 * noise {
            p.candidates.offer(h, key, est, noise);
        }
    }

    /// `n` client requests answered, each `ns` nanoseconds after it arrived.
    #[inline]
    pub fn latency(&mut self, ns: u64, n: u32) {
        self.open.latency.record(ns, n);
    }

    /// Sets the busy-time reading the first period starts from (the meter's value when it
    /// was attached).
    pub fn start_busy(&mut self, busy_ns: u64) {
        self.busy_at_open = Some(busy_ns);
    }

    /// When the open period closes (monotonic ms).
    pub fn next_close(&self) -> u64 {
        self.opened_ms.saturating_add(self.config.period_ms.max(1))
    }

    /// The last window published.
    pub fn window(&self) -> &Arc<Window> {
        &self.published
    }

    /// Closes the open period at `now_ms` and publishes the window ending now.
    pub fn close(&mut self, now_ms: u64, gauges: Gauges) {
        // The period leaving the window (if it is full) becomes the next open one.
        let mut next = if self.ring.len() >= self.config.periods() {
            let mut old = self.ring.pop_front().expect("a full ring is not empty");
            // An idle period holds only zeros: nothing to subtract or clear (an idle node
            // closes a period every second; this keeps that cheap).
            if !old.is_idle() {
                self.cms.apply(&old.cms, false);
                self.f2.apply(&old.f2, false);
                self.latency.apply(&old.latency, false);
                self.accesses -= old.accesses;
                old.clear();
            }
            old
        } else {
            Period::new(self.config.candidates())
        };
        std::mem::swap(&mut self.open, &mut next);
        let mut p = next;
        p.span_ms = now_ms.saturating_sub(self.opened_ms);
        p.busy_ns = match (gauges.busy_ns, self.busy_at_open) {
            (Some(now), Some(then)) => now.saturating_sub(then),
            _ => 0,
        };
        p.closed = p.candidates.take();
        self.busy_at_open = gauges.busy_ns;
        self.opened_ms = now_ms;
        if !p.is_idle() {
            self.cms.apply(&p.cms, true);
            self.f2.apply(&p.f2, true);
            self.latency.apply(&p.latency, true);
            self.accesses += p.accesses;
        }
        self.ring.push_back(p);
        self.latency.set_max(self.ring.iter().map(|p| &p.latency));
        let reused_keys = self.reuse.close(self.config.periods());
        self.published = Arc::new(self.summarise(gauges, reused_keys));
    }

    /// Bytes held now, counted as [`StatsConfig::memory_bytes`] counts them (tests check
    /// the bound).
    #[cfg(test)]
    pub(crate) fn held_bytes(&self) -> usize {
        let period = |p: &Period| {
            sketch::PERIOD_SKETCH_BYTES
                + latency::BUCKETS * 4
                + p.candidates.held_bytes()
                + p.closed
                    .iter()
                    .map(|c| std::mem::size_of::<hot::Candidate>() + c.key.capacity() + 16)
                    .sum::<usize>()
        };
        self.ring.iter().map(period).sum::<usize>()
            + period(&self.open)
            + sketch::WINDOW_SKETCH_BYTES
            + latency::BUCKETS * 8
            + self.reuse.allocated_bytes()
            + self
                .published
                .hot_keys
                .iter()
                .map(|h| h.key.len() + 48)
                .sum::<usize>()
    }

    /// The window made of the closed periods.
    fn summarise(&self, gauges: Gauges, reused_keys: u64) -> Window {
        let mut hll = Hll::new();
        let (mut span_ms, mut busy_ns) = (0u64, 0u64);
        for p in &self.ring {
            if p.accesses > 0 {
                hll.merge(&p.hll);
            }
            span_ms += p.span_ms;
            busy_ns += p.busy_ns;
        }
        let occupancy = if span_ms == 0 || gauges.busy_ns.is_none() {
            0.0
        } else {
            (busy_ns as f64 / (span_ms as f64 * 1e6)).clamp(0.0, 1.0)
        };
        Window {
            seq: self.published.seq + 1,
            window_ms: span_ms,
            accesses: self.accesses,
            accessed_keys: if self.accesses == 0 {
                0
            } else {
                hll.estimate()
            },
            reused_keys,
            access_sum_squares: self.f2.sum_squares(),
            hot_keys: self.hot_keys(),
            occupancy,
            latency: self.latency.clone(),
            memory_bytes: gauges.memory_bytes,
            disk_bytes: gauges.disk_bytes,
        }
    }

    /// The window's hot keys: every period's candidates and the last window's hot keys,
    /// estimated over the window, above the sketch's noise, the `hot_keys` largest.
    fn hot_keys(&self) -> Vec<HotKey> {
        let noise = self.accesses / sketch::CM_WIDTH as u64;
        // By hash: two keys of one 64-bit hash would share their estimate anyway.
        let mut seen = hashbrown::HashSet::new();
        let mut found: Vec<(u64, Bytes)> = Vec::new();
        let mut consider = |hash: u64, key: &[u8]| {
            if !seen.insert(hash) {
                return;
            }
            let est = self.cms.estimate(hash);
            if est >= 1 && est > 2 * noise {
                found.push((est, Bytes::copy_from_slice(key)));
            }
        };
        for p in &self.ring {
            for c in &p.closed {
                consider(c.hash, &c.key);
            }
        }
        for h in &self.published.hot_keys {
            let hash = xxhash_rust::xxh3::xxh3_64_with_seed(&h.key, self.seed);
            consider(hash, &h.key);
        }
        found.sort_unstable_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        found.truncate(self.config.hot_keys);
        found
            .into_iter()
            .map(|(accesses, key)| HotKey { key, accesses })
            .collect()
    }
}
