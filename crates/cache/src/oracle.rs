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
