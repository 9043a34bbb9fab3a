//! Causal multi-value registers: [`SingleKeyCausal`] (per-key causality, Anna) and
//! [`MultiKeyCausal`] (with cross-key dependencies, HydroCache), plus [`CausalWriter`], which
//! issues their vector clocks.
//!
//! # Why an antichain
//!
//! Anna's causal lattice (Listing 2) keeps ONE clock (the join of everything seen) and one
//! merged value set: an incoming write whose clock is ≤ the joined clock is dropped, one
//! whose clock dominates replaces the value, and a concurrent one is merged in. That merge is
//! not associative when a write carries a clock equal to the join of two concurrent writes:
//! with `a = {a}@(x:1)`, `b = {b}@(y:1)`, `c = {c}@(x:1, y:1)`, the order a, b, c gives
//! `{a, b}` (c looks dominated by the joined clock `(x:1, y:1)`), while the order c, a, b
//! gives `{c}`. Replicas diverge.
//!
//! Here a value is instead the set of versions that no other version strictly dominates (an
//! antichain). Merge = union of the versions, drop every version whose clock is strictly
//! dominated by another version's clock, then sort and deduplicate. "The maximal elements of
//! a union" is associative, commutative and idempotent, so replicas converge in every order;
//! in the example every order gives `{c}`. The revealed clock is the join of the versions'
//! clocks and the revealed values are the siblings' values, which is what Anna returns in
//! every order where Anna itself is consistent.
//!
//! # Unique clocks
//!
//! A clock should identify one write. [`CausalWriter`] guarantees that two writes of the same
//! writer never carry the same clock, even when the writer reads from a stale replica that
//! has not seen its previous write (deriving the counter from the read clock alone would
//! re-use it). Versions with equal clocks but different contents are still kept side by
//! side, so the merge stays ACI whatever the writers do.

use std::collections::{BTreeMap, BTreeSet};

use crate::{Blob, Lattice, VectorClock};

/// Issues the vector clocks of one writer (actor) so that no two of its writes carry the
/// same clock.
///
/// The writer remembers the last counter it used; a new clock is the clock read, with the
/// writer's own entry set to `max(last, read[actor]) + 1`. The result dominates what was
/// read (the new version overwrites it) and differs from every earlier write of this writer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CausalWriter {
    actor: u64,
    counter: u64,
}

impl CausalWriter {
    /// A writer for `actor` that has written nothing yet.
    pub const fn new(actor: u64) -> Self {
        CausalWriter { actor, counter: 0 }
    }

    /// The writer's actor id (its entry in the clocks).
    pub const fn actor(&self) -> u64 {
        self.actor
    }

    /// The last counter this writer used (0 before its first write).
    pub const fn counter(&self) -> u64 {
        self.counter
    }

    /// The clock of a new write that overwrites the version(s) whose clock is `read`:
    /// `read` with entry `actor` = `max(self.counter, read[actor]) + 1` (saturating).
    pub fn next_clock(&mut self, read: &VectorClock) -> VectorClock {
        self.counter = self.counter.max(read.get(self.actor)).saturating_add(1);
        let mut clock = read.clone();
        clock.set(self.actor, self.counter);
        clock
    }
}

/// Sorts, deduplicates and drops every element whose clock is strictly dominated by another
/// element's clock.
fn antichain<V: Ord>(mut versions: Vec<V>, clock: impl Fn(&V) -> &VectorClock) -> Vec<V> {
    versions.sort();
    versions.dedup();
    let dominated: Vec<bool> = versions
        .iter()
        .map(|v| versions.iter().any(|w| clock(w).dominates(clock(v))))
        .collect();
    versions
        .into_iter()
        .zip(dominated)
        .filter_map(|(v, d)| (!d).then_some(v))
        .collect()
}

/// A causal multi-value register for one key (Anna's causal consistency, per key).
///
/// The state is an antichain of versions `(clock, value)`: concurrent writes are siblings,
/// and a write whose clock dominates others overwrites them.
///
/// Merge rule: union of the versions, then drop every version whose clock is strictly
/// dominated by another version's clock, then sort and deduplicate (see the
/// [module docs](self) for why this instead of Anna's Listing 2).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct SingleKeyCausal {
    versions: Vec<(VectorClock, Blob)>,
}

impl SingleKeyCausal {
    /// A register holding one version.
    pub fn new(clock: VectorClock, value: Blob) -> Self {
        SingleKeyCausal {
            versions: vec![(clock, value)],
        }
    }

    /// A register from any versions; canonicalises (antichain, sorted, deduplicated).
    pub fn from_versions<I: IntoIterator<Item = (VectorClock, Blob)>>(versions: I) -> Self {
        SingleKeyCausal {
            versions: antichain(versions.into_iter().collect(), |(c, _)| c),
        }
    }

    /// The versions, sorted by (clock storage order, value).
    pub fn versions(&self) -> &[(VectorClock, Blob)] {
        &self.versions
    }

    /// The clock a reader sees: the join of every version's clock. A write that overwrites
    /// what was read derives its clock from this ([`CausalWriter::next_clock`]).
    pub fn clock(&self) -> VectorClock {
        let mut clock = VectorClock::new();
        for (c, _) in &self.versions {
            clock.merge_from(c);
        }
        clock
    }

    /// The register's metadata: every version's clock, its value empty (a reader that
    /// needs the clocks and not the data).
    pub fn metadata(&self) -> SingleKeyCausal {
        SingleKeyCausal::from_versions(
            self.versions
                .iter()
                .map(|(c, _)| (c.clone(), Blob::default())),
        )
    }

    /// The sibling values, sorted and without duplicates.
    pub fn values(&self) -> impl Iterator<Item = &Blob> + '_ {
        self.versions
            .iter()
            .map(|(_, v)| v)
            .collect::<BTreeSet<_>>()
            .into_iter()
    }

    /// True if the register holds no version (the bottom).
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}

impl Lattice for SingleKeyCausal {
    /// Union of the versions, minus the strictly dominated ones; sorted and deduplicated.
    fn merge(&mut self, other: Self) -> bool {
        let mut all = self.versions.clone();
        all.extend(other.versions);
        let merged = antichain(all, |(c, _)| c);
        if merged == self.versions {
            return false;
        }
        self.versions = merged;
        true
    }
}

/// One version of a key under multi-key causality (HydroCache): its clock, the versions of
/// other keys it depends on, and its value.
///
/// The derived order is a plain storage order used for canonical sorting (clock storage
/// order, then deps, then value), not a causal order.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CausalVersion {
    /// The version's vector clock (same-key causality).
    pub clock: VectorClock,
    /// Dependencies: key → the clock of the version of that key this version depends on.
    pub deps: BTreeMap<Blob, VectorClock>,
    /// The value.
    pub value: Blob,
}

/// A causal multi-value register with cross-key dependencies (HydroCache's multi-key causal
/// lattice).
///
/// Merge rule: the same antichain merge as [`SingleKeyCausal`], by clock: union of the
/// versions, drop every version whose clock is strictly dominated by another version's clock,
/// sort and deduplicate. Versions with equal clocks but different deps or values are both
/// kept.
///
/// Dependencies of an overwritten version are not merged into the new one by the lattice:
/// the writer must inherit them ([`MultiKeyCausal::next_version`] does), so a new version
/// still depends on everything the version it overwrites depended on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct MultiKeyCausal {
    versions: Vec<CausalVersion>,
}

impl MultiKeyCausal {
    /// A register holding one version.
    pub fn new(version: CausalVersion) -> Self {
        MultiKeyCausal {
            versions: vec![version],
        }
    }

    /// A register from any versions; canonicalises (antichain, sorted, deduplicated).
    pub fn from_versions<I: IntoIterator<Item = CausalVersion>>(versions: I) -> Self {
        MultiKeyCausal {
            versions: antichain(versions.into_iter().collect(), |v| &v.clock),
        }
    }

    /// The versions, in canonical order.
    pub fn versions(&self) -> &[CausalVersion] {
        &self.versions
    }

    /// The clock a reader sees: the join of every version's clock.
    pub fn clock(&self) -> VectorClock {
        let mut clock = VectorClock::new();
        for v in &self.versions {
            clock.merge_from(&v.clock);
        }
        clock
    }

    /// The dependencies a reader sees: the key-wise join of every version's deps.
    pub fn deps(&self) -> BTreeMap<Blob, VectorClock> {
        let mut deps: BTreeMap<Blob, VectorClock> = BTreeMap::new();
        for v in &self.versions {
            for (key, clock) in &v.deps {
                deps.entry(key.clone()).or_default().merge_from(clock);
            }
        }
        deps
    }

    /// The register's metadata: every version's clock and dependencies, its value empty (a
    /// reader that needs the causal metadata and not the data, such as a dependency GC).
    pub fn metadata(&self) -> MultiKeyCausal {
        MultiKeyCausal::from_versions(self.versions.iter().map(|v| CausalVersion {
            clock: v.clock.clone(),
            deps: v.deps.clone(),
            value: Blob::default(),
        }))
    }

    /// The sibling values, sorted and without duplicates.
    pub fn values(&self) -> impl Iterator<Item = &Blob> + '_ {
        self.versions
            .iter()
            .map(|v| &v.value)
            .collect::<BTreeSet<_>>()
            .into_iter()
    }

    /// True if the register holds no version (the bottom).
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }

    /// A new version that overwrites `read` (what the writer read of this key, if anything).
    ///
    /// Its clock is `writer.next_clock(read clock)`, so it dominates what was read. Its deps
    /// are the read value's deps merged with `deps` (dependency inheritance, HydroCache
    /// invariant I2: a new version inherits the dependencies of the version it overwrites,
    /// so causality through this key is not lost).
    pub fn next_version(
        read: Option<&MultiKeyCausal>,
        writer: &mut CausalWriter,
        deps: impl IntoIterator<Item = (Blob, VectorClock)>,
        value: Blob,
    ) -> MultiKeyCausal {
        let clock = writer.next_clock(&read.map(MultiKeyCausal::clock).unwrap_or_default());
        let mut all_deps = read.map(MultiKeyCausal::deps).unwrap_or_default();
        for (key, dep) in deps {
            all_deps.entry(key).or_default().merge_from(&dep);
        }
        MultiKeyCausal::new(CausalVersion {
            clock,
            deps: all_deps,
            value,
        })
    }
}

impl Lattice for MultiKeyCausal {
    /// Union of the versions, minus those with a strictly dominated clock; sorted and
    /// deduplicated.
    fn merge(&mut self, other: Self) -> bool {
        let mut all = self.versions.clone();
        all.extend(other.versions);
        let merged = antichain(all, |v| &v.clock);
        if merged == self.versions {
            return false;
        }
        self.versions = merged;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vc(entries: &[(u64, u64)]) -> VectorClock {
        entries.iter().copied().collect()
    }

    fn b(s: &str) -> Blob {
        Box::from(s.as_bytes())
    }

    fn values(c: &SingleKeyCausal) -> Vec<&[u8]> {
        c.values().map(|v| &v[..]).collect()
    }

    const X: u64 = 1;
    const Y: u64 = 2;

    #[test]
    fn metadata_keeps_clocks_and_deps_and_drops_payloads() {
        let deps: BTreeMap<Blob, VectorClock> = [(b("d"), vc(&[(Y, 3)]))].into_iter().collect();
        let m = MultiKeyCausal::from_versions([
            CausalVersion {
                clock: vc(&[(X, 1)]),
                deps: deps.clone(),
                value: vec![7u8; 100_000].into_boxed_slice(),
            },
            CausalVersion {
                clock: vc(&[(Y, 1)]),
                deps: BTreeMap::new(),
                value: b("small"),
            },
        ]);
        let meta = m.metadata();
        assert_eq!(meta.clock(), m.clock());
        assert_eq!(meta.deps(), m.deps());
        assert_eq!(meta.versions().len(), 2);
        assert!(meta.versions().iter().all(|v| v.value.is_empty()));
        let s = SingleKeyCausal::from_versions([(vc(&[(X, 1)]), b("a")), (vc(&[(Y, 1)]), b("b"))]);
        let sm = s.metadata();
        assert_eq!(sm.clock(), s.clock());
        assert!(sm.versions().iter().all(|(_, v)| v.is_empty()));
    }

    /// The counter-example to Anna's Listing 2 converges in all 6 delivery orders.
    #[test]
    fn listing_2_counter_example_converges_in_every_order() {
        let a = SingleKeyCausal::new(vc(&[(X, 1)]), b("a"));
        let bb = SingleKeyCausal::new(vc(&[(Y, 1)]), b("b"));
        let c = SingleKeyCausal::new(vc(&[(X, 1), (Y, 1)]), b("c"));
        let all = [a, bb, c];
        let orders = [
            [0, 1, 2],
            [0, 2, 1],
            [1, 0, 2],
            [1, 2, 0],
            [2, 0, 1],
            [2, 1, 0],
        ];
        let mut results = Vec::new();
        for order in orders {
            let mut state = SingleKeyCausal::default();
            for i in order {
                state.merge(all[i].clone());
            }
            results.push(state);
        }
        for r in &results {
            assert_eq!(r, &results[0]);
        }
        assert_eq!(values(&results[0]), vec![&b"c"[..]]);
        assert_eq!(results[0].clock(), vc(&[(X, 1), (Y, 1)]));
    }

    /// Anna's worked example (P:349–355).
    #[test]
    fn anna_worked_example() {
        // Sequential: x writes {a}@(1,0), y reads (1,0) and writes {b}@(1,1): overwrite.
        let mut seq = SingleKeyCausal::default();
        let mut wx = CausalWriter::new(X);
        let mut wy = CausalWriter::new(Y);
        let c1 = wx.next_clock(&seq.clock());
        assert_eq!(c1, vc(&[(X, 1)]));
        seq.merge(SingleKeyCausal::new(c1, b("a")));
        assert_eq!(values(&seq), vec![&b"a"[..]]);
        let c2 = wy.next_clock(&seq.clock());
        assert_eq!(c2, vc(&[(X, 1), (Y, 1)]));
        assert!(seq.merge(SingleKeyCausal::new(c2, b("b"))));
        assert_eq!(values(&seq), vec![&b"b"[..]]);
        assert_eq!(seq.versions().len(), 1);

        // Concurrent: both read (0,0); x writes {a}@(1,0), y writes {b}@(0,1).
        let mut wx = CausalWriter::new(X);
        let mut wy = CausalWriter::new(Y);
        let empty = VectorClock::new();
        let a = SingleKeyCausal::new(wx.next_clock(&empty), b("a"));
        let bb = SingleKeyCausal::new(wy.next_clock(&empty), b("b"));
        let mut ab = a.clone();
        assert!(ab.merge(bb.clone()));
        let mut ba = bb;
        assert!(ba.merge(a));
        assert_eq!(ab, ba);
        assert_eq!(values(&ab), vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(ab.clock(), vc(&[(X, 1), (Y, 1)]));
        // A later write that read (1,1) overwrites both siblings.
        let mut wx2 = wx;
        let next = wx2.next_clock(&ab.clock());
        assert_eq!(next, vc(&[(X, 2), (Y, 1)]));
        assert!(ab.merge(SingleKeyCausal::new(next, b("ab"))));
        assert_eq!(values(&ab), vec![&b"ab"[..]]);
    }

    /// The causal tie bug: a writer whose read is stale (it misses the writer's own previous
    /// write) must not re-use its counter.
    #[test]
    fn stale_read_does_not_reuse_a_clock() {
        let mut y = CausalWriter::new(Y);
        // y writes b, reading an empty replica.
        let first = y.next_clock(&VectorClock::new());
        assert_eq!(first, vc(&[(Y, 1)]));
        // y then reads from a replica that has not seen b yet (still empty) and writes c.
        let second = y.next_clock(&VectorClock::new());
        assert_eq!(second, vc(&[(Y, 2)]));
        // Deriving the counter from the read alone would give c the clock of b: a tie.
        let mut naive = VectorClock::new();
        naive.increment(Y);
        assert_eq!(naive, first);
        // With the writer's clock, c overwrites b (y wrote it later), in every order.
        let bv = SingleKeyCausal::new(first, b("b"));
        let cv = SingleKeyCausal::new(second, b("c"));
        let mut s1 = bv.clone();
        assert!(s1.merge(cv.clone()));
        let mut s2 = cv;
        assert!(!s2.merge(bv));
        assert_eq!(s1, s2);
        assert_eq!(values(&s1), vec![&b"c"[..]]);

        // Same with another writer's data in the stale read: y reads only x's write a and
        // gets (x:1, y:3), not (x:1, y:1), the join of a and b (the Listing 2 hazard).
        let third = y.next_clock(&vc(&[(X, 1)]));
        assert_eq!(third, vc(&[(X, 1), (Y, 3)]));
        assert_eq!(y.counter(), 3);
        assert_eq!(y.actor(), Y);
    }

    #[test]
    fn equal_clocks_keep_both_versions_canonically() {
        let v1 = (vc(&[(X, 1)]), b("p"));
        let v2 = (vc(&[(X, 1)]), b("q"));
        let s = SingleKeyCausal::from_versions([v2.clone(), v1.clone(), v2.clone()]);
        assert_eq!(s.versions(), &[v1.clone(), v2.clone()]);
        let mut t = SingleKeyCausal::from_versions([v1]);
        assert!(t.merge(SingleKeyCausal::from_versions([v2])));
        assert_eq!(s, t);

        let m1 = CausalVersion {
            clock: vc(&[(X, 1)]),
            deps: BTreeMap::from([(b("k"), vc(&[(Y, 1)]))]),
            value: b("v"),
        };
        let m2 = CausalVersion {
            deps: BTreeMap::new(),
            ..m1.clone()
        };
        let mut m = MultiKeyCausal::new(m1.clone());
        assert!(m.merge(MultiKeyCausal::new(m2.clone())));
        assert_eq!(m.versions().len(), 2);
        assert_eq!(m, MultiKeyCausal::from_versions([m1, m2]));
        assert_eq!(m.values().count(), 1);
    }

    /// HydroCache's example (P:87): e1 writes a; e2 reads a and writes b depending on a; e3
    /// reads b and writes b again: the new b still depends on a (invariant I2).
    #[test]
    fn dependencies_are_inherited() {
        let (e1, e2, e3) = (1, 2, 3);
        let mut w1 = CausalWriter::new(e1);
        let mut w2 = CausalWriter::new(e2);
        let mut w3 = CausalWriter::new(e3);
        let a = MultiKeyCausal::next_version(None, &mut w1, [], b("a1"));
        assert_eq!(a.clock(), vc(&[(e1, 1)]));
        assert!(a.deps().is_empty());

        let b1 = MultiKeyCausal::next_version(None, &mut w2, [(b("a"), a.clock())], b("b1"));
        assert_eq!(b1.deps(), BTreeMap::from([(b("a"), vc(&[(e1, 1)]))]));

        let b2 = MultiKeyCausal::next_version(Some(&b1), &mut w3, [], b("b2"));
        assert!(b1.clock().leq(&b2.clock()) && b1.clock() != b2.clock());
        assert_eq!(b2.clock(), vc(&[(e2, 1), (e3, 1)]));
        assert_eq!(b2.deps(), BTreeMap::from([(b("a"), vc(&[(e1, 1)]))]));

        // b2 overwrites b1 in every order, and keeps the inherited dependency.
        let mut x = b1.clone();
        assert!(x.merge(b2.clone()));
        let mut y = b2.clone();
        assert!(!y.merge(b1));
        assert_eq!(x, y);
        assert_eq!(x.values().collect::<Vec<_>>(), vec![&b("b2")]);
        assert_eq!(x.deps(), BTreeMap::from([(b("a"), vc(&[(e1, 1)]))]));
    }

    #[test]
    fn concurrent_multi_key_versions_join_deps() {
        let mut w1 = CausalWriter::new(1);
        let mut w2 = CausalWriter::new(2);
        let v1 = MultiKeyCausal::next_version(None, &mut w1, [(b("a"), vc(&[(9, 2)]))], b("x"));
        let v2 = MultiKeyCausal::next_version(
            None,
            &mut w2,
            [(b("a"), vc(&[(8, 1)])), (b("c"), vc(&[(7, 1)]))],
            b("y"),
        );
        let mut m = v1.clone();
        assert!(m.merge(v2));
        assert_eq!(m.versions().len(), 2);
        assert_eq!(
            m.deps(),
            BTreeMap::from([(b("a"), vc(&[(8, 1), (9, 2)])), (b("c"), vc(&[(7, 1)]))])
        );
        assert_eq!(m.clock(), vc(&[(1, 1), (2, 1)]));
        assert!(!m.merge(v1));
        assert!(!MultiKeyCausal::default().merge(MultiKeyCausal::default()));
        assert!(MultiKeyCausal::default().is_empty());
    }
}
