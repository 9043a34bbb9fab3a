//! [`VersionLog`]: every version ever written, so tests and simulations can ask what a
//! version at a given clock (transitively) depends on, which versionsets cannot tell.
//!
//! The dependencies of `key` at `clock` are the join of the dependencies of every version of
//! `key` written with a clock `≤ clock`: everything that happened before or at that clock
//! for the key (same-key order is the clock order). With dependency inheritance (I2) and
//! the per-executor latest merge this equals the dependencies of the version itself; without
//! them it is larger, which makes the KOC check stricter, never weaker.

use std::collections::{BTreeMap, BTreeSet};

use lattice::{CausalVersion, MultiKeyCausal, VectorClock};

use crate::versionset::{koc_violations, KocViolation};
use crate::{Key, KeySet, VersionSet};

/// Every version written, per key.
#[derive(Clone, Debug, Default)]
pub struct VersionLog {
    versions: BTreeMap<Key, BTreeSet<CausalVersion>>,
}

impl VersionLog {
    /// An empty log.
    pub fn new() -> Self {
        VersionLog::default()
    }

    /// Records the versions of a value written to `key`.
    pub fn record(&mut self, key: &Key, value: &MultiKeyCausal) {
        let log = self.versions.entry(key.clone()).or_default();
        log.extend(value.versions().iter().cloned());
    }

    /// The dependencies of `key` at `clock` (see the module docs).
    pub fn deps_of(&self, key: &Key, clock: &VectorClock) -> BTreeMap<Key, VectorClock> {
        let mut out: BTreeMap<Key, VectorClock> = BTreeMap::new();
        for v in self.versions.get(key).into_iter().flatten() {
            if v.clock.leq(clock) {
                for (d, c) in &v.deps {
                    out.entry(d.clone()).or_default().merge_from(c);
                }
            }
        }
        out
    }

    /// Everything `key` at `clock` transitively depends on: [`VersionLog::deps_of`] closed
    /// under the dependencies of each dependency (the happens-before set of Def. 2). A
    /// snapshot must satisfy all of it; checking it does not rely on the versions' own
    /// dependency lists, so it stays exact when those are pruned (`crate::gc`).
    pub fn closure_of(&self, key: &Key, clock: &VectorClock) -> BTreeMap<Key, VectorClock> {
        let mut out = self.deps_of(key, clock);
        loop {
            let mut next = out.clone();
            for (d, c) in &out {
                for (dd, cc) in self.deps_of(d, c) {
                    next.entry(dd).or_default().merge_from(&cc);
                }
            }
            if next == out {
                break;
            }
            out = next;
        }
        out.remove(key);
        out
    }

    /// Def. 6 for `v` and `keys`, with this log answering dependencies.
    pub fn koc_violations(&self, v: &VersionSet, keys: &KeySet) -> Vec<KocViolation> {
        koc_violations(v, keys, |k, c| self.deps_of(k, c))
    }

    /// Number of versions recorded.
    pub fn len(&self) -> usize {
        self.versions.values().map(BTreeSet::len).sum()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.versions.is_empty()
    }
}
