//! Dependency-metadata GC (spec §6, P:149; `docs/serverless.md`, "Dependency-metadata GC").
//!
//! A dependency ⟨a, VC⟩ of a version may be dropped once `VC ≤ Stable(a)`, where `Stable`
//! is a per-key clock with two properties:
//! - **dominated**: every holder of `a` dominates `Stable(a)` now and later: every storage
//!   replica of `a`, every cache holding `a` in its cut, in a pin or in a staging batch, and
//!   every copy such a holder can still obtain. A reader of `a` gets at least `Stable(a)`.
//! - **closed**: every dependency of a version of `a` at or below `Stable(a)` is itself
//!   covered by `Stable`. A cut holding `b` that depends on `a` at `VC` holds `a ≥ VC`,
//!   hence (I2) `a`'s own dependencies; once ⟨a, VC⟩ is dropped nothing makes the cut hold
//!   those, so they must be stable as well. (Without this the rule is unsound: the model
//!   test finds the Def. 2 violation `c_old → c → a → b` with `c_old` and `b` read.)
//!
//! Then a dropped dependency, and everything it transitively depends on, is satisfied by
//! whatever a reader can hold, and need not be checked. Pruning is monotone in `Stable`,
//! and `Stable` only grows, so any holder may prune with whatever `Stable` it last learnt
//! (an older one prunes less, never wrongly).
//!
//! This module is the rule and the bookkeeping, without I/O:
//! - [`Stable`]: key → stable clock, [`Stable::prune`] applies the rule to a value. The
//!   writer prunes at commit ([`crate::Executor::commit_pruned`]), the cut at every merge
//!   and when it learns a newer `Stable` ([`crate::Cut::advance_stable`]); a staging does
//!   not fetch a dependency the cut's `Stable` covers.
//! - [`Holdings`]: what one holder holds, per key the meet of the clocks of its copies
//!   ([`crate::Cut::holdings`], [`crate::Pins::holdings`]).
//! - [`Round`]: one GC round. It samples the storage replicas first ([`Round::sample`]:
//!   the meet of their clocks, the join of their dependencies) and must then be given the
//!   holdings of every cache, each taken **after** the sample and after every fetch the
//!   cache began before the sample has ended (merged or dropped). That ordering closes the
//!   race the design names: a fetch answered before the sample may bring an old version
//!   that no report mentions yet; a fetch sent after the sample is answered by a replica
//!   that is past the floor. [`Round::finish`] then keeps the result closed.

use std::collections::BTreeMap;

use lattice::{CausalVersion, MultiKeyCausal, VectorClock};

use crate::Key;

/// The greatest lower bound of two clocks: the entry-wise minimum (a missing entry is 0).
pub fn meet(a: &VectorClock, b: &VectorClock) -> VectorClock {
    a.iter()
        .filter_map(|(actor, n)| {
            let m = n.min(b.get(actor));
            (m > 0).then_some((actor, m))
        })
        .collect()
}

/// Per key, a clock every holder of the key dominates (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stable {
    clocks: BTreeMap<Key, VectorClock>,
}

impl Stable {
    /// Nothing stable: prunes nothing.
    pub fn new() -> Self {
        Stable::default()
    }

    /// The stable clock of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<&VectorClock> {
        self.clocks.get(key)
    }

    /// True if a dependency on `key` at `clock` may be dropped: `clock ≤ Stable(key)`. A
    /// dependency on the empty clock is satisfied by anything, the key's absence included.
    pub fn covers(&self, key: &[u8], clock: &VectorClock) -> bool {
        clock.is_empty() || self.get(key).is_some_and(|s| clock.leq(s))
    }

    /// Raises `key`'s stable clock to include `clock` (a join); true if it grew.
    pub fn advance(&mut self, key: Key, clock: &VectorClock) -> bool {
        if clock.is_empty() {
            return false;
        }
        self.clocks.entry(key).or_default().merge_from(clock)
    }

    /// Joins `other` into this one; true if anything grew.
    pub fn advance_all(&mut self, other: &Stable) -> bool {
        let mut grew = false;
        for (k, c) in &other.clocks {
            grew |= self.advance(k.clone(), c);
        }
        grew
    }

    /// True if [`Stable::prune`] would drop a dependency of `value`.
    pub fn prunes(&self, value: &MultiKeyCausal) -> bool {
        value
            .versions()
            .iter()
            .any(|v| v.deps.iter().any(|(d, c)| self.covers(d, c)))
    }

    /// `value` without the dependencies this `Stable` covers. Versions that become equal
    /// (the same version pruned before with an older `Stable`) collapse into one.
    pub fn prune(&self, value: &MultiKeyCausal) -> MultiKeyCausal {
        if !self.prunes(value) {
            return value.clone();
        }
        MultiKeyCausal::from_versions(value.versions().iter().map(|v| {
            CausalVersion {
                clock: v.clock.clone(),
                deps: v
                    .deps
                    .iter()
                    .filter(|(d, c)| !self.covers(d, c))
                    .map(|(d, c)| (d.clone(), c.clone()))
                    .collect(),
                value: v.value.clone(),
            }
        }))
    }

    /// Keys with a stable clock.
    pub fn len(&self) -> usize {
        self.clocks.len()
    }

    /// True if no key has a stable clock.
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// The stable clocks, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &VectorClock)> + '_ {
        self.clocks.iter()
    }
}

impl FromIterator<(Key, VectorClock)> for Stable {
    fn from_iter<I: IntoIterator<Item = (Key, VectorClock)>>(iter: I) -> Self {
        let mut s = Stable::new();
        for (k, c) in iter {
            s.advance(k, &c);
        }
        s
    }
}

/// What one holder holds: per key, the meet of the clocks of every copy it holds (a key
/// held as absent holds the empty clock, which keeps the key's `Stable` at nothing).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Holdings {
    clocks: BTreeMap<Key, VectorClock>,
}

impl Holdings {
    /// Holds nothing.
    pub fn new() -> Self {
        Holdings::default()
    }

    /// Records a copy of `key` at `clock`.
    pub fn hold(&mut self, key: &[u8], clock: &VectorClock) {
        match self.clocks.get_mut(key) {
            Some(held) => *held = meet(held, clock),
            None => {
                self.clocks.insert(Key::from(key), clock.clone());
            }
        }
    }

    /// Records every copy `other` holds.
    pub fn hold_all(&mut self, other: &Holdings) {
        for (k, c) in &other.clocks {
            self.hold(k, c);
        }
    }

    /// The meet of the copies of `key` held, if any.
    pub fn get(&self, key: &[u8]) -> Option<&VectorClock> {
        self.clocks.get(key)
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.clocks.len()
    }

    /// True if nothing is held.
    pub fn is_empty(&self) -> bool {
        self.clocks.is_empty()
    }

    /// The held clocks, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&Key, &VectorClock)> + '_ {
        self.clocks.iter()
    }
}

impl FromIterator<(Key, VectorClock)> for Holdings {
    fn from_iter<I: IntoIterator<Item = (Key, VectorClock)>>(iter: I) -> Self {
        let mut h = Holdings::new();
        for (k, c) in iter {
            h.hold(&k, &c);
        }
        h
    }
}

/// What the storage replicas of one key held when sampled.
#[derive(Clone, Debug, Default)]
struct Floor {
    /// The meet of the replicas' clocks.
    clock: VectorClock,
    /// The join of the replicas' dependencies: an upper bound of the dependencies of every
    /// version of the key at or below `clock` (I2).
    deps: BTreeMap<Key, VectorClock>,
}

/// One GC round (see the module docs for the order its inputs must be taken in).
#[derive(Clone, Debug, Default)]
pub struct Round {
    previous: Stable,
    floor: BTreeMap<Key, Floor>,
    held: Holdings,
}

impl Round {
    /// A round that extends `previous` (the last `Stable` of this keyspace: the result is
    /// never below it).
    pub fn new(previous: &Stable) -> Self {
        Round {
            previous: previous.clone(),
            ..Round::default()
        }
    }

    /// One storage replica's value of `key` as sampled (every replica of every key the
    /// round should cover, sampled before any cache reports). Keys never sampled keep their
    /// previous `Stable`. A replica without the key samples the bottom, which keeps the
    /// key where it was.
    pub fn sample(&mut self, key: &[u8], value: &MultiKeyCausal) {
        let clock = value.clock();
        match self.floor.get_mut(key) {
            Some(f) => {
                f.clock = meet(&f.clock, &clock);
                for (d, c) in value.deps() {
                    f.deps.entry(d).or_default().merge_from(&c);
                }
            }
            None => {
                self.floor.insert(
                    Key::from(key),
                    Floor {
                        clock,
                        deps: value.deps(),
                    },
                );
            }
        }
    }

    /// One cache's report, taken after every replica was sampled and after the fetches the
    /// cache began before that have ended.
    pub fn report(&mut self, holdings: &Holdings) {
        self.held.hold_all(holdings);
    }

    /// The new stable clocks.
    ///
    /// A key's candidate is the meet of its floor and every reported copy (joined with the
    /// previous `Stable`). Being below every holder is not enough: a version `b` that
    /// depended on `c` at `Y` relied on `c`'s own dependencies through `c` (a cut holding
    /// `b` holds `c ≥ Y`, hence `c`'s dependencies). Once ⟨c, Y⟩ is dropped, nothing makes
    /// a reader of `b` hold those, so they must be stable too. The result is therefore
    /// *closed*: a key keeps a candidate above its previous clock only if every dependency
    /// of its floor is covered by the result; the others fall back to the previous clock
    /// (closed by induction), until nothing changes.
    pub fn finish(self) -> Stable {
        let Round {
            previous,
            floor,
            held,
        } = self;
        let mut out = previous.clone();
        for (k, f) in &floor {
            let cand = match held.get(k) {
                Some(h) => meet(&f.clock, h),
                None => f.clock.clone(),
            };
            out.advance(k.clone(), &cand);
        }
        loop {
            let mut changed = false;
            for (k, f) in &floor {
                if out.get(k) == previous.get(k) {
                    continue;
                }
                if f.deps.iter().any(|(d, c)| d != k && !out.covers(d, c)) {
                    match previous.get(k) {
                        Some(p) => {
                            out.clocks.insert(k.clone(), p.clone());
                        }
                        None => {
                            out.clocks.remove(k);
                        }
                    }
                    changed = true;
                }
            }
            if !changed {
                return out;
            }
        }
    }
}
