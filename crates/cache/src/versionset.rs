//! Versionsets (spec §2.5): a key bound to a version, named by its clock only, plus the
//! caches where the full version can be fetched.
//!
//! A versionset is what travels on a DAG edge (`S_u`, `R_u`) and between a cache and the
//! scheduler (`S_i`): never dependencies or payloads (P:269). The dependencies a protocol
//! needs are checked where the full versions are, in the caches.

use std::collections::{BTreeMap, BTreeSet};

use lattice::{MultiKeyCausal, VectorClock};

use crate::{CacheId, Key, KeySet};

/// True if a version whose clock is `have` supersedes one whose clock is `need` (Def. 4):
/// they are equal or `need` happened before `have`, i.e. `need ≤ have`.
///
/// The bottom (empty clock) supersedes only the empty clock.
pub fn supersede(have: &VectorClock, need: &VectorClock) -> bool {
    need.leq(have)
}

/// One element of a versionset: the version's clock and the caches that pinned full
/// versions of the key for the request, *whose merge is exactly `clock`*.
///
/// To read the full version, fetch the key at `clock` from every source (each answers the
/// merge of what it pinned for the request at or below `clock`, see
/// [`crate::Pins::fetch`]) and merge the answers. A bottom ref (empty clock) stands for a key
/// bound to "does not exist": it has no sources and nothing needs fetching.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VersionRef {
    /// The version's clock (the join of its versions' clocks).
    pub clock: VectorClock,
    /// Caches holding pinned versions whose merge is `clock`.
    pub sources: BTreeSet<CacheId>,
}

impl VersionRef {
    /// A ref to a version pinned at `source` (no source if `clock` is empty: a bottom).
    pub fn new(clock: VectorClock, source: CacheId) -> Self {
        let sources = if clock.is_empty() {
            BTreeSet::new()
        } else {
            BTreeSet::from([source])
        };
        VersionRef { clock, sources }
    }

    /// The bottom: the key is bound to "does not exist".
    pub fn bottom() -> Self {
        VersionRef::default()
    }

    /// True for the bottom.
    pub fn is_bottom(&self) -> bool {
        self.clock.is_empty()
    }

    /// True if `self` supersedes `other` (Def. 4 on the clocks).
    pub fn supersedes(&self, other: &VersionRef) -> bool {
        supersede(&self.clock, &other.clock)
    }

    /// Joins `other` into `self` (Def. 7 for one key): the clock is the join. Sources: when
    /// one side supersedes the other strictly, the superseding side's sources already merge
    /// to the joined clock and are kept alone; otherwise (equal or concurrent) the union.
    pub fn join(&mut self, other: &VersionRef) {
        let mine = self.supersedes(other);
        let theirs = other.supersedes(self);
        match (mine, theirs) {
            (true, false) => {}
            (false, true) => *self = other.clone(),
            _ => {
                self.clock.merge_from(&other.clock);
                self.sources.extend(other.sources.iter().copied());
            }
        }
    }
}

/// A versionset: each key bound to one version.
pub type VersionSet = BTreeMap<Key, VersionRef>;

/// The union of two versionsets (Def. 7): a key of one side keeps its version, a key of
/// both sides gets the join ([`VersionRef::join`]).
pub fn union(a: &VersionSet, b: &VersionSet) -> VersionSet {
    let mut out = a.clone();
    union_into(&mut out, b);
    out
}

/// `into := into ∪ other` (Def. 7).
pub fn union_into(into: &mut VersionSet, other: &VersionSet) {
    for (key, r) in other {
        match into.get_mut(key) {
            Some(mine) => mine.join(r),
            None => {
                into.insert(key.clone(), r.clone());
            }
        }
    }
}

/// True if `t` supersedes `s`: for every key in both, `t`'s version supersedes `s`'s.
pub fn supersedes(t: &VersionSet, s: &VersionSet) -> bool {
    s.iter()
        .all(|(k, sr)| t.get(k).is_none_or(|tr| tr.supersedes(sr)))
}

/// True if `r ⊆ s` in the sense of Theorem 2: every key of `r` is bound in `s` to the same
/// clock (the version read is the version of the snapshot).
pub fn contained_in(r: &VersionSet, s: &VersionSet) -> bool {
    r.iter()
        .all(|(k, rr)| s.get(k).is_some_and(|sr| sr.clock == rr.clock))
}

/// `v ∩ K̃` (Def. 5): the elements of `v` whose key is in `keys`.
pub fn restrict(v: &VersionSet, keys: &KeySet) -> VersionSet {
    v.iter()
        .filter(|(k, _)| keys.contains(*k))
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect()
}

/// The refs of full versions pinned at `source`.
pub fn refs_of(values: &BTreeMap<Key, MultiKeyCausal>, source: CacheId) -> VersionSet {
    values
        .iter()
        .map(|(k, v)| (k.clone(), VersionRef::new(v.clock(), source)))
        .collect()
}

/// The cache-to-cache fetches needed to materialise `refs` at cache `here`: for each other
/// source, the refs to ask it for (the shell sends one request per source and merges the
/// answers; versions pinned at `here` are merged in by the protocol step itself).
pub fn fetches_by_source(refs: &VersionSet, here: CacheId) -> BTreeMap<CacheId, VersionSet> {
    let mut out: BTreeMap<CacheId, VersionSet> = BTreeMap::new();
    for (key, r) in refs {
        for &source in r.sources.iter().filter(|&&s| s != here) {
            out.entry(source)
                .or_default()
                .insert(key.clone(), r.clone());
        }
    }
    out
}

/// Why a versionset is not a keyset-overlapping cut (Def. 6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KocViolation {
    /// `key` is bound but not in the keyset.
    OutsideKeyset {
        /// The key.
        key: Key,
    },
    /// The version of `key` (transitively) depends on `dep` at `needed`, `dep` is in the
    /// keyset, and the versionset binds `dep` to `have`, which does not supersede it (`None`:
    /// `dep` is not bound at all).
    NotSuperseded {
        /// The element whose dependency is violated.
        key: Key,
        /// The dependency's key.
        dep: Key,
        /// The clock the dependency needs.
        needed: VectorClock,
        /// What the versionset binds `dep` to.
        have: Option<VectorClock>,
    },
}

/// Checks Def. 6: every element of `v` has its key in `keys`, and for every element `k_i`
/// and every `d_j → k_i` (happens-before, transitive) with `d ∈ keys`, `v` binds `d` to a
/// version that supersedes `d_j`. Returns every violation (empty = `v` is a KOC).
///
/// Versionsets carry no dependencies, so `deps_of(key, clock)` must answer the direct
/// dependencies of the version of `key` at `clock` (e.g. [`crate::VersionLog::deps_of`]);
/// the check follows them transitively, through keys outside `keys` too, and also holds a
/// key to what its own version transitively depends on.
pub fn koc_violations<F>(v: &VersionSet, keys: &KeySet, mut deps_of: F) -> Vec<KocViolation>
where
    F: FnMut(&Key, &VectorClock) -> BTreeMap<Key, VectorClock>,
{
    let mut out = Vec::new();
    for (key, r) in v {
        if !keys.contains(key) {
            out.push(KocViolation::OutsideKeyset { key: key.clone() });
            continue;
        }
        for (dep, needed) in transitive_deps(key, &r.clock, &mut deps_of) {
            if !keys.contains(&dep) {
                continue;
            }
            let have = v.get(&dep).map(|d| d.clock.clone());
            let ok = match &have {
                Some(h) => supersede(h, &needed),
                None => needed.is_empty(),
            };
            if !ok {
                out.push(KocViolation::NotSuperseded {
                    key: key.clone(),
                    dep,
                    needed,
                    have,
                });
            }
        }
    }
    out
}

/// Everything the version of `key` at `clock` transitively depends on: key → the join of the
/// clocks needed. The version's own clock is not included (only what its dependencies need,
/// which may include `key` itself through another key).
pub(crate) fn transitive_deps<F>(
    key: &Key,
    clock: &VectorClock,
    deps_of: &mut F,
) -> BTreeMap<Key, VectorClock>
where
    F: FnMut(&Key, &VectorClock) -> BTreeMap<Key, VectorClock>,
{
    let mut need: BTreeMap<Key, VectorClock> = BTreeMap::new();
    let mut work: Vec<(Key, VectorClock)> = deps_of(key, clock).into_iter().collect();
    while let Some((dep, vc)) = work.pop() {
        if vc.is_empty() {
            continue;
        }
        let entry = need.entry(dep.clone()).or_default();
        if !entry.is_empty() && vc.leq(entry) {
            continue; // explored at least this far already (deps_of is monotone in the clock)
        }
        entry.merge_from(&vc);
        let at = entry.clone();
        work.extend(deps_of(&dep, &at));
    }
    need
}
