//! [`Counter`]: a PN-counter.

use std::collections::BTreeMap;

use crate::Lattice;

/// A counter that can be incremented and decremented (PN-counter).
///
/// Each actor keeps its own cumulative `(increments, decrements)` pair, which only grows; the
/// value is the sum of all increments minus the sum of all decrements. Actors with `(0, 0)`
/// are never stored.
///
/// Merge rule: per actor, the pointwise maximum of each component.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Counter(BTreeMap<u64, (u64, u64)>);

impl Counter {
    /// The zero counter (the bottom).
    pub fn new() -> Self {
        Counter(BTreeMap::new())
    }

    /// A counter from `(actor, (increments, decrements))` entries (the wire decoder's
    /// constructor). A repeated actor keeps the pointwise maximum; `(0, 0)` entries are
    /// dropped.
    pub fn from_entries<I: IntoIterator<Item = (u64, (u64, u64))>>(entries: I) -> Self {
        let mut counter = Counter::new();
        for (actor, pair) in entries {
            counter.merge_entry(actor, pair);
        }
        counter
    }

    /// The value: total increments minus total decrements (saturating; it cannot overflow
    /// with fewer than 2^63 actors).
    pub fn value(&self) -> i128 {
        self.0.values().fold(0i128, |sum, &(inc, dec)| {
            sum.saturating_add(i128::from(inc))
                .saturating_sub(i128::from(dec))
        })
    }

    /// The actor's cumulative `(increments, decrements)` (`(0, 0)` if it never wrote).
    pub fn get(&self, actor: u64) -> (u64, u64) {
        self.0.get(&actor).copied().unwrap_or((0, 0))
    }

    /// The delta that adds `delta` as `actor`: a counter holding only the actor's NEW
    /// cumulative pair. `None` if that cumulative would overflow `u64`.
    #[must_use]
    pub fn add_delta(&self, actor: u64, delta: i64) -> Option<Counter> {
        let (inc, dec) = self.get(actor);
        let pair = if delta >= 0 {
            (inc.checked_add(delta.unsigned_abs())?, dec)
        } else {
            (inc, dec.checked_add(delta.unsigned_abs())?)
        };
        let mut out = Counter::new();
        out.merge_entry(actor, pair);
        Some(out)
    }

    /// Adds `delta` as `actor` in place and returns the delta to ship to the other replicas
    /// (the same as merging [`add_delta`](Self::add_delta), without building a second
    /// counter to merge). `None`, and no change, if the actor's cumulative would overflow.
    #[must_use = "the delta must reach the other replicas"]
    pub fn add(&mut self, actor: u64, delta: i64) -> Option<Counter> {
        let delta = self.add_delta(actor, delta)?;
        for (&actor, &pair) in &delta.0 {
            self.0.insert(actor, pair);
        }
        Some(delta)
    }

    /// The entries `(actor, (increments, decrements))`, ordered by actor.
    pub fn entries(&self) -> impl Iterator<Item = (u64, (u64, u64))> + '_ {
        self.0.iter().map(|(&actor, &pair)| (actor, pair))
    }

    /// Merges one actor's pair; true iff it changed.
    fn merge_entry(&mut self, actor: u64, (inc, dec): (u64, u64)) -> bool {
        if (inc, dec) == (0, 0) {
            return false;
        }
        let mine = self.0.entry(actor).or_insert((0, 0));
        let merged = (mine.0.max(inc), mine.1.max(dec));
        let changed = merged != *mine;
        *mine = merged;
        changed
    }
}

impl Lattice for Counter {
    /// Per actor, pointwise maximum of increments and of decrements.
    fn merge(&mut self, other: Self) -> bool {
        self.merge_ref(&other)
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        let mut changed = false;
        for (&actor, &pair) in &other.0 {
            changed |= self.merge_entry(actor, pair);
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn increments_and_decrements_across_actors() {
        let mut a = Counter::new();
        let mut b = Counter::new();
        for d in [5, -2, 3] {
            let delta = a.add_delta(1, d).unwrap_or_default();
            a.merge(delta);
        }
        let delta = b.add_delta(2, -10).unwrap_or_default();
        b.merge(delta);
        assert_eq!(a.value(), 6);
        assert_eq!(a.get(1), (8, 2));
        let mut ab = a.clone();
        assert!(ab.merge(b.clone()));
        let mut ba = b.clone();
        assert!(ba.merge(a.clone()));
        assert_eq!(ab, ba);
        assert_eq!(ab.value(), -4);
        // Re-delivery changes nothing.
        assert!(!ab.merge(a));
        assert_eq!(
            ab.entries().collect::<Vec<_>>(),
            vec![(1, (8, 2)), (2, (0, 10))]
        );
    }

    #[test]
    fn overflow_is_refused() {
        let c = Counter::from_entries([(1, (u64::MAX - 1, 0)), (2, (0, 0))]);
        assert_eq!(c.entries().count(), 1);
        assert!(c.add_delta(1, 1).is_some());
        assert!(c.add_delta(1, 2).is_none());
        assert!(c.add_delta(1, i64::MIN).is_some());
        assert_eq!(c.value(), i128::from(u64::MAX - 1));
        assert_eq!(Counter::new().add_delta(3, 0), Some(Counter::new()));
    }

    #[test]
    fn add_in_place_equals_merging_the_delta() {
        let mut fast = Counter::new();
        let mut slow = Counter::new();
        for (actor, d) in [(1, 5), (2, -3), (1, -2), (3, 0), (2, 7)] {
            let delta = fast.add(actor, d).unwrap();
            let expected = slow.add_delta(actor, d).unwrap();
            assert_eq!(delta, expected);
            slow.merge(expected);
            assert_eq!(fast, slow);
        }
        assert_eq!(fast.value(), 7);
        let mut full = Counter::new();
        let _ = full.add(1, i64::MAX).unwrap();
        let _ = full.add(1, i64::MAX).unwrap();
        let before = full.clone();
        assert!(full.add(1, i64::MAX).is_none(), "u64 cumulative overflow");
        assert_eq!(full, before);
    }
}
