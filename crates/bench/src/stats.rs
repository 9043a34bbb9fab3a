//! Run control shared by all threads ([`Control`]) and what each thread measures
//! ([`ThreadStats`]).
//!
//! Accounting is per *round* (the operations a connection writes together, then waits for):
//! a round's operations count if the round completes while the run is in its measured
//! phase. Throughput is therefore the operations of the rounds completed inside the measured
//! window divided by the window's length, and no round is counted twice or half.
//!
//! With a timeline (`--timeline SECS`) a measured round also counts in the interval of the
//! measured phase it completed in ([`Interval`]): interval `i` holds the rounds completed
//! between `i·SECS` and `(i+1)·SECS` after the measurement began.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;

use crate::error::BenchError;
use crate::retry::Resends;
use crate::workload::Slot;

/// The run's phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Phase {
    /// Load runs but is not measured.
    Warmup = 0,
    /// Completed rounds are measured.
    Measure = 1,
    /// Connections finish their current round and stop.
    Stop = 2,
}

/// State shared by the coordinator and every connection of a run.
#[derive(Debug)]
pub struct Control {
    epoch: Instant,
    phase: AtomicU8,
    /// Operations completed in any phase (for the progress line).
    completed: AtomicU64,
    /// Operations completed in the measured phase.
    measured: AtomicU64,
    /// Error replies in the measured phase.
    errors: AtomicU64,
    /// Stop after this many measured operations.
    target: Option<u64>,
    /// Nanoseconds after `epoch` when the target was reached (0: not reached).
    end_nanos: AtomicU64,
    /// A connection failed: the run stops.
    failed: AtomicBool,
    /// Nanoseconds after `epoch` when the measured phase began ([`NOT_STARTED`] before).
    measure_nanos: AtomicU64,
    /// Length of a timeline interval in nanoseconds (0: no timeline).
    interval_nanos: u64,
}

/// `Control::measure_nanos` before the measured phase.
const NOT_STARTED: u64 = u64::MAX;

/// Most intervals a timeline keeps (`--timeline` is checked against it).
pub use crate::args::MAX_INTERVALS;

impl Control {
    /// A run starting in `phase`, stopping after `target` measured operations if given.
    pub fn new(phase: Phase, target: Option<u64>) -> Control {
        Control {
            epoch: Instant::now(),
            phase: AtomicU8::new(phase as u8),
            completed: AtomicU64::new(0),
            measured: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            target,
            end_nanos: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            measure_nanos: AtomicU64::new(if phase == Phase::Measure {
                0
            } else {
                NOT_STARTED
            }),
            interval_nanos: 0,
        }
    }

    /// Also counts measured rounds per `interval` of the measured phase (a zero interval:
    /// no timeline).
    pub fn with_timeline(mut self, interval: Duration) -> Control {
        self.interval_nanos = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        self
    }

    /// When the measured phase began, if it has.
    pub fn measure_started_at(&self) -> Option<Instant> {
        match self.measure_nanos.load(Ordering::Acquire) {
            NOT_STARTED => None,
            n => Some(self.epoch + Duration::from_nanos(n)),
        }
    }

    /// The current phase.
    #[inline]
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Warmup,
            1 => Phase::Measure,
            _ => Phase::Stop,
        }
    }

    /// Enters `phase`.
    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    /// Leaves the warm-up (unless the run already stopped).
    pub fn start_measuring(&self) {
        // The start is stored before the phase flips, so a round counted as measured always
        // finds it.
        let nanos = u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(NOT_STARTED - 1);
        let _ = self.measure_nanos.compare_exchange(
            NOT_STARTED,
            nanos,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        let _ = self.phase.compare_exchange(
            Phase::Warmup as u8,
            Phase::Measure as u8,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// The timeline interval a round completed at `now` falls in (None: no timeline, not
    /// measuring yet, or past [`MAX_INTERVALS`]).
    fn interval_at(&self, now: Instant) -> Option<usize> {
        if self.interval_nanos == 0 {
            return None;
        }
        let start = self.measure_started_at()?;
        let since = u64::try_from(now.saturating_duration_since(start).as_nanos()).ok()?;
        let i = usize::try_from(since / self.interval_nanos).ok()?;
        (i < MAX_INTERVALS).then_some(i)
    }

    /// Operations completed so far (all phases).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }

    /// Measured operations so far.
    pub fn measured(&self) -> u64 {
        self.measured.load(Ordering::Relaxed)
    }

    /// Measured error replies so far.
    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// When the `--ops` target was reached, if it was.
    pub fn target_reached_at(&self) -> Option<Instant> {
        match self.end_nanos.load(Ordering::Acquire) {
            0 => None,
            n => Some(self.epoch + Duration::from_nanos(n)),
        }
    }

    /// Records that a connection failed; the coordinator stops the run.
    pub fn fail(&self) {
        self.failed.store(true, Ordering::Release);
        self.set_phase(Phase::Stop);
    }

    /// True once a connection failed.
    pub fn has_failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Accounts a completed round: its operations count (into `stats`) if the run is
    /// measuring. `first_error` is the text of an error reply seen in the round, if any.
    pub fn finish_round(
        &self,
        slots: &[Slot],
        stats: &mut ThreadStats,
        first_error: &mut Option<String>,
    ) {
        let now = if self.interval_nanos > 0 {
            Some(Instant::now())
        } else {
            None
        };
        self.finish_round_at(slots, stats, first_error, now);
    }

    /// Adds operations sent again (`--follow-topology`) to `stats`, if measuring.
    pub(crate) fn count_resends(&self, stats: &mut ThreadStats, resends: &Resends) {
        if self.phase() == Phase::Measure {
            stats.resends.add(resends);
        }
    }

    /// [`finish_round`](Self::finish_round) for a round completed at `now` (read only when
    /// there is a timeline).
    pub fn finish_round_at(
        &self,
        slots: &[Slot],
        stats: &mut ThreadStats,
        first_error: &mut Option<String>,
        now: Option<Instant>,
    ) {
        let n = slots.len() as u64;
        self.completed.fetch_add(n, Ordering::Relaxed);
        if stats.first_error.is_none() {
            stats.first_error = first_error.take();
        }
        if self.phase() != Phase::Measure {
            return;
        }
        let mut errors = 0;
        for s in slots {
            stats.histogram.saturating_record(s.latency_us);
            errors += u64::from(s.error);
        }
        stats.ops += n;
        stats.errors += errors;
        if let Some(i) = now.and_then(|t| self.interval_at(t)) {
            stats.interval(i).record(slots, errors);
        }
        if errors > 0 {
            self.errors.fetch_add(errors, Ordering::Relaxed);
        }
        let total = self.measured.fetch_add(n, Ordering::Relaxed) + n;
        if let Some(target) = self.target {
            if total >= target
                && self
                    .phase
                    .compare_exchange(
                        Phase::Measure as u8,
                        Phase::Stop as u8,
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    )
                    .is_ok()
            {
                let nanos = self.epoch.elapsed().as_nanos().max(1) as u64;
                self.end_nanos.store(nanos, Ordering::Release);
            }
        }
    }
}

/// Largest latency the histograms hold (one hour, in microseconds); longer ones count as this.
pub const MAX_LATENCY_US: u64 = 3_600_000_000;

/// What one load-generator thread measured.
#[derive(Debug)]
pub struct ThreadStats {
    /// Per-operation latency in microseconds.
    pub histogram: Histogram<u64>,
    /// Measured operations.
    pub ops: u64,
    /// Measured operations that got an error reply.
    pub errors: u64,
    /// The text of the first error reply seen (any phase).
    pub first_error: Option<String>,
    /// The first connection failure.
    pub failure: Option<BenchError>,
    /// Operations sent again while measuring, by cause (`--follow-topology`).
    pub resends: Resends,
    /// Measured rounds per timeline interval (empty without a timeline).
    pub timeline: Vec<Interval>,
}

/// What one timeline interval measured (on one thread, or merged).
#[derive(Debug)]
pub struct Interval {
    /// Operations of the rounds completed in the interval.
    pub ops: u64,
    /// Those that got an error reply.
    pub errors: u64,
    /// Times they were sent again (`--follow-topology`).
    pub resent: u64,
    /// Their latency in microseconds (two significant digits: an interval holds few
    /// operations, and a run may hold thousands of intervals).
    pub histogram: Histogram<u64>,
}

impl Default for Interval {
    fn default() -> Self {
        Interval {
            ops: 0,
            errors: 0,
            resent: 0,
            histogram: Histogram::new_with_bounds(1, MAX_LATENCY_US, 2)
                .unwrap_or_else(|e| panic!("histogram: {e}")),
        }
    }
}

impl Interval {
    fn record(&mut self, slots: &[Slot], errors: u64) {
        for s in slots {
            self.histogram.saturating_record(s.latency_us);
            self.resent += u64::from(s.resent);
        }
        self.ops += slots.len() as u64;
        self.errors += errors;
    }

    fn merge(&mut self, other: &Interval) {
        // Same bounds and precision: adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        self.ops += other.ops;
        self.errors += other.errors;
        self.resent += other.resent;
    }
}

impl Default for ThreadStats {
    fn default() -> Self {
        ThreadStats {
            // 1 µs to 1 hour at three significant digits; `saturating_record` clamps above.
            histogram: Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                .unwrap_or_else(|e| panic!("histogram: {e}")),
            ops: 0,
            errors: 0,
            first_error: None,
            failure: None,
            resends: Resends::default(),
            timeline: Vec::new(),
        }
    }
}

impl ThreadStats {
    /// Interval `i` of the timeline, created (with the ones before it) if needed.
    fn interval(&mut self, i: usize) -> &mut Interval {
        if self.timeline.len() <= i {
            self.timeline.resize_with(i + 1, Interval::default);
        }
        &mut self.timeline[i]
    }

    /// Adds another thread's measurements.
    pub fn merge(&mut self, other: ThreadStats) {
        // Both histograms have the same bounds, so adding cannot fail.
        let _ = self.histogram.add(&other.histogram);
        self.ops += other.ops;
        self.errors += other.errors;
        self.resends.add(&other.resends);
        if self.first_error.is_none() {
            self.first_error = other.first_error;
        }
        if self.failure.is_none() {
            self.failure = other.failure;
        }
        for (i, interval) in other.timeline.iter().enumerate() {
            self.interval(i).merge(interval);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::OpKind;

    fn slot(lat: u64, error: bool) -> Slot {
        let mut s = Slot::new(0, OpKind::Read, 0);
        s.latency_us = lat;
        s.error = error;
        s
    }

    #[test]
    fn rounds_count_only_while_measuring() {
        let c = Control::new(Phase::Warmup, Some(5));
        let mut stats = ThreadStats::default();
        let mut err = Some("ERR x".to_string());
        c.finish_round(&[slot(10, false), slot(20, true)], &mut stats, &mut err);
        assert_eq!((stats.ops, stats.errors, c.completed()), (0, 0, 2));
        assert_eq!(stats.first_error.as_deref(), Some("ERR x"));
        c.set_phase(Phase::Measure);
        c.finish_round(&[slot(10, false), slot(20, true)], &mut stats, &mut None);
        assert_eq!(
            (stats.ops, stats.errors, c.measured(), c.errors()),
            (2, 1, 2, 1)
        );
        assert_eq!(c.phase(), Phase::Measure);
        assert!(c.target_reached_at().is_none());
        c.finish_round(&[slot(30, false); 3], &mut stats, &mut None);
        assert_eq!(c.phase(), Phase::Stop);
        assert!(c.target_reached_at().is_some());
        c.finish_round(&[slot(30, false); 3], &mut stats, &mut None);
        assert_eq!(stats.ops, 5);
        assert_eq!(stats.histogram.len(), 5);
        assert_eq!(stats.histogram.max(), 30);
        // Large latencies are kept (to three significant digits), not clamped.
        let c = Control::new(Phase::Measure, None);
        c.finish_round(
            &[slot(2, false), slot(5_000, false), slot(12_345_678, false)],
            &mut stats,
            &mut None,
        );
        assert!(stats.histogram.max() >= 12_340_000);
        assert_eq!(stats.histogram.value_at_quantile(0.0), 2);
        let mut merged = ThreadStats::default();
        merged.merge(stats);
        assert_eq!(merged.ops, 8);
        assert!(merged.histogram.max() >= 12_340_000);
        assert!(merged
            .histogram
            .equivalent(merged.histogram.value_at_quantile(0.8), 5_000));
    }

    #[test]
    fn resends_count_only_while_measuring_and_add_up_across_threads() {
        let c = Control::new(Phase::Warmup, None).with_timeline(Duration::from_millis(500));
        let two = Resends {
            redirected: 2,
            silent: 1,
            ..Resends::default()
        };
        let mut a = ThreadStats::default();
        c.count_resends(&mut a, &two);
        assert_eq!(a.resends, Resends::default());
        c.start_measuring();
        c.count_resends(&mut a, &two);
        let mut resent = slot(10, false);
        resent.resent = 2;
        let start = c.measure_started_at().unwrap();
        c.finish_round_at(&[resent, slot(5, false)], &mut a, &mut None, Some(start));
        assert_eq!(a.timeline[0].resent, 2);
        let mut b = ThreadStats::default();
        c.count_resends(&mut b, &two);
        a.merge(b);
        assert_eq!(
            (a.resends.redirected, a.resends.silent, a.resends.total()),
            (4, 2, 6)
        );
    }

    #[test]
    fn timeline_counts_rounds_in_the_interval_they_complete_in() {
        let c = Control::new(Phase::Warmup, None).with_timeline(Duration::from_millis(500));
        let mut a = ThreadStats::default();
        let t0 = Instant::now();
        // Warm-up rounds count nowhere.
        c.finish_round_at(&[slot(10, false)], &mut a, &mut None, Some(t0));
        assert!(c.measure_started_at().is_none());
        c.start_measuring();
        let start = c.measure_started_at().unwrap();
        let at = |ms: u64| Some(start + Duration::from_millis(ms));
        c.finish_round_at(&[slot(10, false), slot(30, true)], &mut a, &mut None, at(0));
        c.finish_round_at(&[slot(20, false)], &mut a, &mut None, at(499));
        c.finish_round_at(&[slot(1_000, false)], &mut a, &mut None, at(1_200));
        assert_eq!(a.timeline.len(), 3);
        assert_eq!((a.timeline[0].ops, a.timeline[0].errors), (3, 1));
        assert_eq!(a.timeline[0].histogram.max(), 30);
        assert_eq!((a.timeline[1].ops, a.timeline[2].ops), (0, 1));
        assert_eq!(a.ops, 4);
        // Another thread's intervals add up, interval by interval.
        let mut b = ThreadStats::default();
        c.finish_round_at(&[slot(40, false)], &mut b, &mut None, at(700));
        c.finish_round_at(&[slot(50, false)], &mut b, &mut None, at(5_100));
        a.merge(b);
        let ops: Vec<u64> = a.timeline.iter().map(|i| i.ops).collect();
        assert_eq!(ops, [3, 1, 1, 0, 0, 0, 0, 0, 0, 0, 1]);
        assert_eq!(a.ops, 6);
        // Past the last interval kept: in the totals only.
        let far = Duration::from_millis(500) * (MAX_INTERVALS as u32 + 1);
        c.finish_round_at(&[slot(1, false)], &mut a, &mut None, Some(start + far));
        assert_eq!((a.timeline.len(), a.ops), (11, 7));
        // Without a timeline nothing is kept per interval.
        let plain = Control::new(Phase::Measure, None);
        let mut s = ThreadStats::default();
        plain.finish_round(&[slot(1, false)], &mut s, &mut None);
        assert!(s.timeline.is_empty());
        assert_eq!(s.ops, 1);
    }
}
