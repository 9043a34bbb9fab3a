//! Latency histograms with fixed log-linear buckets, so histograms of many workers and
//! nodes merge exactly by adding counts bucket by bucket.
//!
//! Values are nanoseconds. Bucket `i < 16` holds exactly `i` ns; above, every power of two
//! is split into 16 equal buckets: with `e = 4 + (i − 16) / 16` and `s = (i − 16) mod 16`,
//! bucket `i` holds `(16 + s)·2^(e−4) ≤ v < (17 + s)·2^(e−4)` — a bucket is at most 6.25%
//! wide. The last bucket ([`BUCKETS`] − 1) also holds everything from 2^36 ns (68.7 s) up.
//! The same rule is written in `WorkerStats.latency_buckets` of the protocol.

/// Sub-buckets per power of two (as a bit count: 16).
const SUB_BITS: u32 = 4;
const SUB: usize = 1 << SUB_BITS;
/// Values from 2^36 ns go to the last bucket.
const MAX_EXP: u32 = 36;
/// Number of buckets.
pub const BUCKETS: usize = SUB + (MAX_EXP - SUB_BITS) as usize * SUB;

/// The bucket of a latency of `ns` nanoseconds.
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let e = 63 - ns.leading_zeros();
    if e >= MAX_EXP {
        return BUCKETS - 1;
    }
    let s = ((ns >> (e - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (e - SUB_BITS) as usize * SUB + s
}

/// The smallest latency bucket `i` holds, and the smallest it does not (ns).
pub fn bucket_bounds(i: usize) -> (u64, u64) {
    if i < SUB {
        return (i as u64, i as u64 + 1);
    }
    let e = SUB_BITS + ((i - SUB) / SUB) as u32;
    let s = ((i - SUB) % SUB) as u64;
    let unit = 1u64 << (e - SUB_BITS);
    ((SUB as u64 + s) * unit, (SUB as u64 + s + 1) * unit)
}

/// The latencies of one period: counts per bucket (32-bit: a period counts fewer than
/// 2^32 requests), their exact sum and maximum.
pub(crate) struct PeriodHistogram {
    counts: Box<[u32]>,
    sum_ns: u64,
    max_ns: u64,
    /// Requests recorded (so an idle period is known without a pass over the buckets).
    requests: u64,
}

impl PeriodHistogram {
    pub(crate) fn new() -> PeriodHistogram {
        PeriodHistogram {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            sum_ns: 0,
            max_ns: 0,
            requests: 0,
        }
    }

    /// True if no request was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.requests == 0
    }

    /// Counts `n` requests that each took `ns`.
    #[inline]
    pub(crate) fn record(&mut self, ns: u64, n: u32) {
        let c = &mut self.counts[bucket_of(ns)];
        *c = c.saturating_add(n);
        self.sum_ns = self.sum_ns.saturating_add(ns.saturating_mul(u64::from(n)));
        self.max_ns = self.max_ns.max(ns);
        self.requests = self.requests.saturating_add(u64::from(n));
    }

    pub(crate) fn clear(&mut self) {
        self.counts.fill(0);
        self.sum_ns = 0;
        self.max_ns = 0;
        self.requests = 0;
    }
}

/// A latency histogram over a window (or merged from several): what workers publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram {
    /// Requests per bucket (see the module docs); trailing empty buckets may be left out.
    pub counts: Vec<u64>,
    /// Sum of all latencies, ns (exact).
    pub sum_ns: u64,
    /// Largest latency, ns (exact).
    pub max_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl Histogram {
    /// Adds (`add`) or removes a period's counts and sum. The maximum is recomputed by
    /// [`set_max`](Self::set_max): it cannot be subtracted.
    pub(crate) fn apply(&mut self, p: &PeriodHistogram, add: bool) {
        for (s, &c) in self.counts.iter_mut().zip(p.counts.iter()) {
            let c = u64::from(c);
            *s = if add {
                s.saturating_add(c)
            } else {
                s.saturating_sub(c)
            };
        }
        self.sum_ns = if add {
            self.sum_ns.saturating_add(p.sum_ns)
        } else {
            self.sum_ns.saturating_sub(p.sum_ns)
        };
    }

    /// Sets the maximum from the periods now in the window.
    pub(crate) fn set_max<'a>(&mut self, periods: impl Iterator<Item = &'a PeriodHistogram>) {
        self.max_ns = periods.map(|p| p.max_ns).max().unwrap_or(0);
    }

    /// Adds another histogram's counts (merging workers or nodes).
    pub fn merge(&mut self, other: &Histogram) {
        if self.counts.len() < other.counts.len() {
            self.counts.resize(other.counts.len(), 0);
        }
        for (s, &c) in self.counts.iter_mut().zip(other.counts.iter()) {
            *s = s.saturating_add(c);
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Number of requests.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Mean latency, ns (0 without requests).
    pub fn mean_ns(&self) -> u64 {
        self.sum_ns.checked_div(self.count()).unwrap_or(0)
    }

    /// The latency at quantile `q` (0..=1): the upper bound of the bucket holding the
    /// request of rank ⌈q·count⌉, so at most 6.25% above the true value (exact below 16 ns),
    /// and never above the maximum. 0 without requests.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        match quantile_bucket(&self.counts, self.count(), q) {
            None if self.count() == 0 => 0,
            None => self.max_ns,
            Some(i) => (bucket_bounds(i).1 - 1).min(self.max_ns),
        }
    }

    /// The counts without trailing empty buckets (what goes on the wire).
    pub fn trimmed(&self) -> &[u64] {
        let end = self
            .counts
            .iter()
            .rposition(|&c| c > 0)
            .map_or(0, |i| i + 1);
        &self.counts[..end]
    }
}

/// The bucket holding the request of rank ⌈q·count⌉ among `counts` (`count` their sum);
/// `None` without requests.
fn quantile_bucket(counts: &[u64], count: u64, q: f64) -> Option<usize> {
    if count == 0 {
        return None;
    }
    let rank = ((q.clamp(0.0, 1.0) * count as f64).ceil() as u64).max(1);
    let mut seen = 0u64;
    counts.iter().position(|&c| {
        seen += c;
        seen >= rank
    })
}

/// Latencies since the worker started, for the metrics endpoint: counts per bucket (the
/// same buckets as [`Histogram`]), their sum and number. Counters only grow, as Prometheus
/// histograms need; workers' totals add bucket by bucket.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cumulative {
    counts: Box<[u64]>,
    sum_ns: u64,
    count: u64,
}

impl Default for Cumulative {
    fn default() -> Self {
        Cumulative {
            counts: vec![0; BUCKETS].into_boxed_slice(),
            sum_ns: 0,
            count: 0,
        }
    }
}

impl Cumulative {
    /// `n` requests, each `ns` nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64, n: u64) {
        self.counts[bucket_of(ns)] += n;
        self.sum_ns = self.sum_ns.saturating_add(ns.saturating_mul(n));
        self.count += n;
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Cumulative) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
        self.count += other.count;
    }

    /// Requests recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Sum of their latencies, ns.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// The latency at quantile `q` (0..=1): the upper bound of the bucket holding the
    /// request of rank ⌈q·count⌉, so at most 6.25% above the true value. 0 without requests.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        quantile_bucket(&self.counts, self.count, q).map_or(0, |i| bucket_bounds(i).1 - 1)
    }

    /// Requests whose bucket lies wholly at or below `le_ns` (a Prometheus `le` bucket: a
    /// fine bucket straddling `le_ns` counts in the next one, so each count is exact up to
    /// the fine buckets' 6.25 % width).
    pub fn at_most(&self, le_ns: u64) -> u64 {
        self.counts
            .iter()
            .enumerate()
            .take_while(|(i, _)| bucket_bounds(*i).1 <= le_ns.saturating_add(1))
            .map(|(_, c)| c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_once_and_are_at_most_a_sixteenth_wide() {
        assert_eq!(BUCKETS, 528);
        let mut next = 0;
        for i in 0..BUCKETS - 1 {
            let (lo, hi) = bucket_bounds(i);
            assert_eq!(lo, next, "bucket {i} starts where the previous ended");
            assert!(hi > lo);
            assert!(
                (hi - lo) * 16 <= lo.max(16),
                "bucket {i} [{lo}, {hi}) too wide"
            );
            assert_eq!(bucket_of(lo), i);
            assert_eq!(bucket_of(hi - 1), i);
            next = hi;
        }
        assert_eq!(bucket_of(1 << 36), BUCKETS - 1);
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_within_a_bucket_of_the_truth() {
        let mut p = PeriodHistogram::new();
        // 1..=10,000 µs, once each.
        for us in 1..=10_000u64 {
            p.record(us * 1000, 1);
        }
        let mut h = Histogram::default();
        h.apply(&p, true);
        h.set_max(std::iter::once(&p));
        assert_eq!(h.count(), 10_000);
        assert_eq!(h.mean_ns(), 5_000_500);
        assert_eq!(h.max_ns, 10_000_000);
        for (q, truth) in [(0.5, 5_000_000u64), (0.99, 9_900_000), (0.999, 9_990_000)] {
            let got = h.quantile_ns(q);
            assert!(
                got >= truth && got as f64 <= truth as f64 * 1.0625,
                "q{q}: {got}"
            );
        }
        // Removing the period empties it again.
        h.apply(&p, false);
        assert_eq!(h.count(), 0);
        assert_eq!(h.quantile_ns(0.5), 0);
    }

    #[test]
    fn merged_histograms_equal_the_histogram_of_all_values() {
        let (mut a, mut b, mut all) = (
            PeriodHistogram::new(),
            PeriodHistogram::new(),
            PeriodHistogram::new(),
        );
        for v in [3u64, 700, 9_000, 1 << 40] {
            a.record(v, 2);
            all.record(v, 2);
        }
        for v in [5u64, 700, 123_456] {
            b.record(v, 1);
            all.record(v, 1);
        }
        let hist = |p: &PeriodHistogram| {
            let mut h = Histogram::default();
            h.apply(p, true);
            h.set_max(std::iter::once(p));
            h
        };
        let mut merged = hist(&a);
        merged.merge(&hist(&b));
        assert_eq!(merged, hist(&all));
        assert_eq!(merged.count(), 11);
    }

    #[test]
    fn cumulative_counts_only_grow_and_add_across_workers() {
        let mut a = Cumulative::default();
        a.record(40_000, 3); // 40 µs
        a.record(2_000_000, 1); // 2 ms
        assert_eq!(a.at_most(50_000), 3);
        assert_eq!(a.at_most(1_000_000), 3);
        assert_eq!(a.at_most(10_000_000), 4);
        let mut b = Cumulative::default();
        b.record(40_000, 1);
        b.add(&a);
        assert_eq!((b.count(), b.at_most(50_000)), (5, 4));
        assert_eq!(b.sum_ns(), 4 * 40_000 + 2_000_000);
    }

    #[test]
    fn cumulative_quantiles_are_within_a_bucket_of_the_truth() {
        let mut c = Cumulative::default();
        assert_eq!(c.quantile_ns(0.5), 0);
        // 1..=10,000 µs, once each.
        for us in 1..=10_000u64 {
            c.record(us * 1000, 1);
        }
        for (q, truth) in [(0.5, 5_000_000u64), (0.99, 9_900_000)] {
            let got = c.quantile_ns(q);
            assert!(
                got >= truth && got as f64 <= truth as f64 * 1.0625,
                "q{q}: {got}"
            );
        }
    }
}
