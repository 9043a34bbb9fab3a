//! Clocks: hybrid-logical [`Timestamp`]s and their generator [`Hlc`], [`VectorClock`]s, and
//! the delta-state [`CausalContext`] (a set of [`Dot`]s).
//!
//! Nothing here reads a system clock: physical time is always passed in by the caller.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use crate::Lattice;

/// Number of low bits of [`Timestamp::time`] that hold the logical counter.
const LOGICAL_BITS: u32 = 16;

/// A totally ordered, unique-per-writer timestamp.
///
/// `time` is a hybrid logical clock reading: `physical_ms << 16 | logical`, where `logical`
/// is a 16-bit counter that orders events within one millisecond. `writer` identifies the
/// clock that issued it and breaks ties, so timestamps issued by different writers never
/// compare equal. The order is `(time, writer)`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    /// Hybrid logical time: physical milliseconds `<< 16` plus a logical counter.
    pub time: u64,
    /// The writer (clock owner) that issued the timestamp; breaks ties.
    pub writer: u64,
}

impl Timestamp {
    /// The smallest timestamp (time 0, writer 0).
    pub const ZERO: Timestamp = Timestamp { time: 0, writer: 0 };

    /// A timestamp from its parts.
    pub const fn new(time: u64, writer: u64) -> Self {
        Timestamp { time, writer }
    }

    /// The physical part of `time`, in milliseconds (`time >> 16`).
    pub const fn physical_ms(&self) -> u64 {
        self.time >> LOGICAL_BITS
    }
}

/// A hybrid logical clock issuing strictly increasing [`Timestamp`]s for one writer.
///
/// Readings stay close to physical time but never go backwards, even when the physical clock
/// does, and they move past every timestamp the clock has [observed](Hlc::observe), so an
/// operation issued after seeing a write is ordered after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hlc {
    writer: u64,
    last: u64,
}

impl Hlc {
    /// A clock for `writer` that has issued and observed nothing.
    pub const fn new(writer: u64) -> Self {
        Hlc { writer, last: 0 }
    }

    /// The writer id stamped on every timestamp this clock issues.
    pub const fn writer(&self) -> u64 {
        self.writer
    }

    /// Issues the next timestamp: `max(last + 1, physical_ms << 16)`.
    ///
    /// Strictly increasing across calls whatever `physical_ms` does; when the 16-bit logical
    /// part overflows it carries into the millisecond part. (Readings saturate at `u64::MAX`,
    /// which is unreachable in practice: it is ~8900 years of milliseconds.)
    pub fn tick(&mut self, physical_ms: u64) -> Timestamp {
        let physical = physical_ms.min(u64::MAX >> LOGICAL_BITS) << LOGICAL_BITS;
        self.last = self.last.saturating_add(1).max(physical);
        Timestamp::new(self.last, self.writer)
    }

    /// Moves the clock past `ts`, so later ticks are ordered after it.
    pub fn observe(&mut self, ts: Timestamp) {
        self.last = self.last.max(ts.time);
    }
}

/// A vector clock: actor → counter, where a missing actor means 0 (zero entries are never
/// stored, so equal clocks are structurally equal).
///
/// Merge rule: pointwise maximum.
///
/// The causal (happens-before) order is [`VectorClock::leq`] / [`VectorClock::causal_cmp`].
/// The derived `PartialOrd`/`Ord` is only a plain storage order (lexicographic over the
/// entries) used to sort clocks canonically; it is NOT the causal order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VectorClock(BTreeMap<u64, u64>);

impl VectorClock {
    /// The empty clock (every counter 0).
    pub fn new() -> Self {
        VectorClock(BTreeMap::new())
    }

    /// The counter of `actor` (0 if absent).
    pub fn get(&self, actor: u64) -> u64 {
        self.0.get(&actor).copied().unwrap_or(0)
    }

    /// Sets the counter of `actor` (setting 0 removes the entry).
    pub fn set(&mut self, actor: u64, counter: u64) {
        if counter == 0 {
            self.0.remove(&actor);
        } else {
            self.0.insert(actor, counter);
        }
    }

    /// Adds one to the counter of `actor` (saturating) and returns the new counter.
    pub fn increment(&mut self, actor: u64) -> u64 {
        let next = self.get(actor).saturating_add(1);
        self.0.insert(actor, next);
        next
    }

    /// The non-zero entries `(actor, counter)`, ordered by actor.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.0.iter().map(|(&a, &c)| (a, c))
    }

    /// Number of non-zero entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if every counter is 0.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// True if `self` happened before or equals `other`: every counter of `self` is ≤ the
    /// matching counter of `other` (missing = 0).
    pub fn leq(&self, other: &VectorClock) -> bool {
        self.0.iter().all(|(&a, &c)| c <= other.get(a))
    }

    /// The causal order: `Less` if `self` happened before `other`, `Greater` if after, `Equal`
    /// if equal, and `None` if they are concurrent.
    pub fn causal_cmp(&self, other: &VectorClock) -> Option<Ordering> {
        match (self.leq(other), other.leq(self)) {
            (true, true) => Some(Ordering::Equal),
            (true, false) => Some(Ordering::Less),
            (false, true) => Some(Ordering::Greater),
            (false, false) => None,
        }
    }

    /// True if `other` happened strictly before `self` (`other ≤ self` and `other ≠ self`).
    pub fn dominates(&self, other: &VectorClock) -> bool {
        other.leq(self) && other != self
    }

    /// Merges `other` into `self` (pointwise maximum); returns true iff `self` changed.
    /// The same as [`Lattice::merge_ref`], without the clone.
    pub fn merge_from(&mut self, other: &VectorClock) -> bool {
        let mut changed = false;
        for (&actor, &counter) in &other.0 {
            if counter > self.get(actor) {
                self.0.insert(actor, counter);
                changed = true;
            }
        }
        changed
    }
}

impl Lattice for VectorClock {
    /// Pointwise maximum.
    fn merge(&mut self, other: Self) -> bool {
        self.merge_from(&other)
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        self.merge_from(other)
    }
}

impl FromIterator<(u64, u64)> for VectorClock {
    /// Builds a clock from `(actor, counter)` pairs; a repeated actor keeps its maximum and
    /// zero counters are dropped.
    fn from_iter<I: IntoIterator<Item = (u64, u64)>>(iter: I) -> Self {
        let mut clock = VectorClock::new();
        for (actor, counter) in iter {
            if counter > clock.get(actor) {
                clock.0.insert(actor, counter);
            }
        }
        clock
    }
}

/// One event of an actor: its `counter`-th event (counters start at 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dot {
    /// The actor that produced the event.
    pub actor: u64,
    /// The actor's sequence number of the event (1, 2, …).
    pub counter: u64,
}

impl Dot {
    /// A dot from its parts.
    pub const fn new(actor: u64, counter: u64) -> Self {
        Dot { actor, counter }
    }
}

/// A causal context: the set of [`Dot`]s (events) a replica has seen, as a compact version
/// vector (actor → every counter `1..=n` seen) plus a "dot cloud" of the dots that are not
/// contiguous with the vector.
///
/// Merge rule: set union, then compaction. The representation is always compact: cloud dots
/// contiguous with the vector are folded into it and dots the vector already covers are
/// dropped, so equal sets of dots are structurally equal. A dot with counter 0 is treated as
/// always seen.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CausalContext {
    vector: BTreeMap<u64, u64>,
    cloud: BTreeSet<Dot>,
}

impl CausalContext {
    /// The empty context (no dot seen).
    pub fn new() -> Self {
        CausalContext::default()
    }

    /// A context from a version vector and a dot cloud (the wire decoder's constructor).
    /// Canonicalises: zero vector entries are dropped and the cloud is compacted.
    pub fn from_parts(vector: BTreeMap<u64, u64>, cloud: BTreeSet<Dot>) -> Self {
        let vector = vector.into_iter().filter(|&(_, n)| n > 0).collect();
        let mut context = CausalContext {
            vector,
            cloud: BTreeSet::new(),
        };
        for dot in cloud {
            context.insert(dot);
        }
        context
    }

    /// The compact part: actor → highest counter `n` such that every dot `1..=n` was seen.
    pub fn vector(&self) -> &BTreeMap<u64, u64> {
        &self.vector
    }

    /// The dots seen that are not contiguous with [`CausalContext::vector`].
    pub fn cloud(&self) -> &BTreeSet<Dot> {
        &self.cloud
    }

    fn vector_get(&self, actor: u64) -> u64 {
        self.vector.get(&actor).copied().unwrap_or(0)
    }

    /// True if `dot` was seen.
    pub fn contains(&self, dot: &Dot) -> bool {
        dot.counter <= self.vector_get(dot.actor) || self.cloud.contains(dot)
    }

    /// Adds `dot` to the set of seen dots, keeping the representation compact.
    pub fn insert(&mut self, dot: Dot) {
        let base = self.vector_get(dot.actor);
        if dot.counter <= base {
            return;
        }
        if dot.counter != base + 1 {
            self.cloud.insert(dot);
            return;
        }
        // The dot extends the vector: fold in the cloud dots that are now contiguous.
        let mut top = dot.counter;
        while top < u64::MAX && self.cloud.remove(&Dot::new(dot.actor, top + 1)) {
            top += 1;
        }
        self.vector.insert(dot.actor, top);
    }

    /// The next dot of `actor`: one past the highest counter seen for it (in the vector or the
    /// cloud). Saturates at `u64::MAX`.
    pub fn next_dot(&self, actor: u64) -> Dot {
        let in_cloud = self
            .cloud
            .range(Dot::new(actor, 0)..=Dot::new(actor, u64::MAX))
            .next_back()
            .map_or(0, |d| d.counter);
        let highest = self.vector_get(actor).max(in_cloud);
        Dot::new(actor, highest.saturating_add(1))
    }

    /// True if no dot was seen.
    pub fn is_empty(&self) -> bool {
        self.vector.is_empty() && self.cloud.is_empty()
    }

    /// Every dot of the context, if there are at most `limit` of them (a delta's context
    /// names a few dots; a full state's covers whole ranges). `None` if there are more.
    pub fn dots_up_to(&self, limit: usize) -> Option<Vec<Dot>> {
        let mut count = self.cloud.len();
        for &n in self.vector.values() {
            count = count.saturating_add(usize::try_from(n).unwrap_or(usize::MAX));
            if count > limit {
                return None;
            }
        }
        if count > limit {
            return None;
        }
        let mut dots = Vec::with_capacity(count);
        for (&actor, &n) in &self.vector {
            dots.extend((1..=n).map(|c| Dot::new(actor, c)));
        }
        dots.extend(self.cloud.iter().copied());
        Some(dots)
    }

    /// True if every dot of `other` is in `self`.
    pub fn includes(&self, other: &CausalContext) -> bool {
        // `self` is compact, so the dot just past its vector entry is not in its cloud: the
        // range `1..=n` is covered only if the vector entry reaches `n`.
        other.vector.iter().all(|(&a, &n)| self.vector_get(a) >= n)
            && other.cloud.iter().all(|d| self.contains(d))
    }
}

impl Lattice for CausalContext {
    /// Union of the seen dots, then compaction.
    fn merge(&mut self, other: Self) -> bool {
        self.merge_ref(&other)
    }

    fn merge_ref(&mut self, other: &Self) -> bool {
        if self.includes(other) {
            return false;
        }
        let mut moved = Vec::new();
        for (&actor, &n) in &other.vector {
            if n > self.vector_get(actor) {
                self.vector.insert(actor, n);
                moved.push(actor);
            }
        }
        // Re-inserting the cloud dots of the actors whose vector entry grew folds in the ones
        // it made contiguous and drops the ones it now covers; the others' stay compact. (Not
        // the whole cloud: a changeset accumulating deltas would pay O(cloud) per delta.)
        for actor in moved {
            let range = Dot::new(actor, 0)..=Dot::new(actor, u64::MAX);
            let dots: Vec<Dot> = self.cloud.range(range).copied().collect();
            for dot in &dots {
                self.cloud.remove(dot);
            }
            for dot in dots {
                self.insert(dot);
            }
        }
        for &dot in &other.cloud {
            self.insert(dot);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The merge renormalising only the actors whose vector entry grew equals re-inserting
    /// the whole cloud (the reference), on random contexts.
    #[test]
    fn context_merge_equals_reinserting_every_dot() {
        let mut rng = fastrand::Rng::with_seed(3);
        let random = |rng: &mut fastrand::Rng| {
            let mut c = CausalContext::new();
            for _ in 0..rng.usize(0..40) {
                c.insert(Dot::new(rng.u64(1..4), rng.u64(1..30)));
            }
            c
        };
        for _ in 0..2000 {
            let (mut a, b) = (random(&mut rng), random(&mut rng));
            let mut reference = CausalContext::new();
            for (&actor, &n) in a.vector.iter().chain(b.vector.iter()) {
                if n > reference.vector_get(actor) {
                    reference.vector.insert(actor, n);
                }
            }
            for &dot in a.cloud.iter().chain(b.cloud.iter()) {
                reference.insert(dot);
            }
            let before = a.clone();
            let changed = a.merge_ref(&b);
            assert_eq!(a, reference);
            assert_eq!(changed, a != before);
        }
    }

    #[test]
    fn hlc_is_monotonic_under_a_backwards_clock() {
        let mut hlc = Hlc::new(7);
        let a = hlc.tick(1000);
        let b = hlc.tick(1000);
        let c = hlc.tick(10); // the physical clock jumped backwards
        let d = hlc.tick(999);
        assert!(a < b && b < c && c < d);
        assert_eq!(a, Timestamp::new(1000 << 16, 7));
        assert_eq!(a.physical_ms(), 1000);
        assert_eq!(d.physical_ms(), 1000);
        let e = hlc.tick(2000);
        assert_eq!(e.time, 2000 << 16);
        assert_eq!(hlc.writer(), 7);
    }

    #[test]
    fn hlc_logical_overflow_carries_and_observe_moves_past() {
        let mut hlc = Hlc::new(1);
        hlc.observe(Timestamp::new((5 << 16) | 0xffff, 2));
        let t = hlc.tick(0);
        assert_eq!(t.time, 6 << 16);
        assert_eq!(t.physical_ms(), 6);
        hlc.observe(Timestamp::new(3, 9)); // older: no effect
        assert_eq!(hlc.tick(0).time, (6 << 16) + 1);
        let mut far = Hlc::new(1);
        let x = far.tick(u64::MAX);
        let y = far.tick(u64::MAX);
        assert!(x < y);
    }

    #[test]
    fn vector_clock_basics() {
        let mut a = VectorClock::new();
        assert_eq!(a.increment(1), 1);
        assert_eq!(a.increment(1), 2);
        a.set(2, 0);
        assert_eq!(a.len(), 1);
        let b: VectorClock = [(1, 1), (2, 3), (3, 0)].into_iter().collect();
        assert_eq!(b.len(), 2);
        assert_eq!(a.causal_cmp(&b), None);
        let mut j = a.clone();
        assert!(j.merge_ref(&b));
        assert!(!j.merge_ref(&b));
        assert_eq!(j.iter().collect::<Vec<_>>(), vec![(1, 2), (2, 3)]);
        assert_eq!(a.causal_cmp(&j), Some(Ordering::Less));
        assert_eq!(j.causal_cmp(&b), Some(Ordering::Greater));
        assert_eq!(j.causal_cmp(&j.clone()), Some(Ordering::Equal));
        assert!(j.dominates(&a) && !a.dominates(&a));
        assert!(VectorClock::new().leq(&a));
    }

    #[test]
    fn causal_context_compacts() {
        let mut c = CausalContext::new();
        c.insert(Dot::new(1, 3));
        c.insert(Dot::new(1, 2));
        assert_eq!(c.cloud().len(), 2);
        assert_eq!(c.next_dot(1), Dot::new(1, 4));
        c.insert(Dot::new(1, 1));
        assert!(c.cloud().is_empty());
        assert_eq!(c.vector().get(&1), Some(&3));
        assert!(c.contains(&Dot::new(1, 2)) && !c.contains(&Dot::new(1, 4)));
        let mut d = CausalContext::from_parts(
            [(1, 0), (2, 1)].into_iter().collect(),
            [Dot::new(2, 1), Dot::new(2, 3), Dot::new(1, 1)]
                .into_iter()
                .collect(),
        );
        assert_eq!(d.vector().len(), 2);
        assert_eq!(d.cloud().len(), 1);
        assert!(d.merge_ref(&c));
        assert!(!d.merge_ref(&c));
        let mut f = d.clone();
        assert!(f.merge(CausalContext::from_parts(
            BTreeMap::new(),
            [Dot::new(2, 2)].into_iter().collect(),
        )));
        assert_eq!(f.vector().get(&2), Some(&3));
        assert!(f.cloud().is_empty());
        assert!(CausalContext::new().is_empty() && !f.is_empty());
    }
}
