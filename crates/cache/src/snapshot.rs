//! Snapshots taken from one cache's cut: RetrieveCut (Alg. 2), CreateSnapshot (Alg. 4) and
//! CT's `C ∩ R̃_DAG` (spec §4.1).
//!
//! Each runs on a frozen cut (I4): the functions borrow the cut for the whole step, so no
//! refresh or eviction can interleave, and the versions they bind are pinned before they
//! return.

use std::collections::BTreeMap;

use lattice::MultiKeyCausal;

use crate::cut::{Cut, Shared};
use crate::pins::Pins;
use crate::versionset::{union_into, VersionRef, VersionSet};
use crate::{CacheId, Error, Here, Key, KeySet};

/// RetrieveCut (Alg. 2) with erratum E1: the keys of `C` that `key`'s version transitively
/// depends on, *and `key` itself*, each bound to the cut's version, intersected with
/// `rdag` at the end. The traversal goes through keys outside `rdag` (transitivity needs
/// them); the result is a KOC for `rdag` (Lemma 1). Sources are `here`.
///
/// A key that is not cached is bound to the bottom (callers stage `R̃_i` first).
pub fn retrieve_cut(cut: &Cut, here: CacheId, key: &[u8], rdag: &KeySet) -> VersionSet {
    closure(cut, key)
        .into_iter()
        .filter(|k| rdag.contains(k))
        .map(|k| {
            let clock = cut.get(&k).map(MultiKeyCausal::clock).unwrap_or_default();
            (k, VersionRef::new(clock, here))
        })
        .collect()
}

/// `key` and every cached key its version transitively depends on.
pub(crate) fn closure(cut: &Cut, key: &[u8]) -> KeySet {
    let mut out = KeySet::from([Key::from(key)]);
    let mut work: Vec<Key> = cut
        .get(key)
        .map(|v| v.deps().into_keys().collect())
        .unwrap_or_default();
    while let Some(k) = work.pop() {
        if !out.insert(k.clone()) {
            continue;
        }
        if let Some(v) = cut.get(&k) {
            work.extend(v.deps().into_keys());
        }
    }
    out
}

/// The keys of `keys` that are not in the cut.
pub(crate) fn missing(cut: &Cut, keys: &KeySet) -> Vec<Key> {
    keys.iter().filter(|k| !cut.contains(k)).cloned().collect()
}

/// The cut's full versions of `refs`' keys (bottoms for uncached keys).
pub(crate) fn values_of(cut: &Cut, refs: &VersionSet) -> BTreeMap<Key, Shared> {
    refs.keys()
        .map(|k| (k.clone(), shared_of(cut, k)))
        .collect()
}

/// The cut's value of `key`, shared (no copy of the payloads); the bottom if not cached.
fn shared_of(cut: &Cut, key: &[u8]) -> Shared {
    cut.get_shared(key).cloned().unwrap_or_default()
}

/// CreateSnapshot (Alg. 4), run by each cache CON involves, after the shell staged the
/// missing keys of `ri` (l.1–2): `S_i = ∪ RetrieveCut(k)` for `k ∈ R̃_i` (l.3–5), pinned for
/// the request (l.6), returned as key + clock (l.7).
///
/// `S_i` is a KOC for `rdag` (Lemma 1, Thm 1); it holds more than `R̃_i`: every key of
/// `rdag` the reads depend on, because other caches may need to fetch them.
///
/// # Errors
/// [`Error::NotCached`] if a key of `ri` is not in the cut (stage it and call again);
/// [`Error::PinsFull`].
pub fn create_snapshot(
    cut: &mut Cut,
    pins: &mut Pins,
    here: Here,
    ri: &KeySet,
    rdag: &KeySet,
) -> Result<VersionSet, Error> {
    let keys = missing(cut, ri);
    if !keys.is_empty() {
        return Err(Error::NotCached { keys });
    }
    let rdag: KeySet = rdag.union(ri).cloned().collect();
    let mut s_i = VersionSet::new();
    for k in ri {
        union_into(&mut s_i, &retrieve_cut(cut, here.cache, k, &rdag));
    }
    pins.pin(here.req, here.deadline_ms, values_of(cut, &s_i))?;
    for k in ri {
        cut.touch(k);
    }
    Ok(s_i)
}

/// CT (spec §4.1): the whole DAG runs on this cache and reads the pinned snapshot
/// `C ∩ R̃_DAG` (a KOC by Lemma 1, hence a snapshot), whatever the cut does while the DAG
/// runs. Returns the versions every function reads (bottoms for keys that do not exist),
/// as owned copies: [`ct_snapshot_shared`] hands out the pinned values without copying.
///
/// # Errors
/// [`Error::NotCached`] if a key of `rdag` is not in the cut (stage it and call again);
/// [`Error::PinsFull`].
pub fn ct_snapshot(
    cut: &mut Cut,
    pins: &mut Pins,
    here: Here,
    rdag: &KeySet,
) -> Result<BTreeMap<Key, MultiKeyCausal>, Error> {
    let values = ct_snapshot_shared(cut, pins, here, rdag)?;
    Ok(values
        .into_iter()
        .map(|(k, v)| (k, MultiKeyCausal::clone(&v)))
        .collect())
}

/// [`ct_snapshot`] without a copy: the values are shared with the cut and the pins (a
/// reference count each), so a snapshot of large values costs no pass over their payloads.
///
/// # Errors
/// As [`ct_snapshot`].
pub fn ct_snapshot_shared(
    cut: &mut Cut,
    pins: &mut Pins,
    here: Here,
    rdag: &KeySet,
) -> Result<BTreeMap<Key, Shared>, Error> {
    let keys = missing(cut, rdag);
    if !keys.is_empty() {
        return Err(Error::NotCached { keys });
    }
    let values: BTreeMap<Key, Shared> = rdag
        .iter()
        .map(|k| (k.clone(), shared_of(cut, k)))
        .collect();
    pins.pin(
        here.req,
        here.deadline_ms,
        values.iter().map(|(k, v)| (k.clone(), v.clone())),
    )?;
    for k in rdag {
        cut.touch(k);
    }
    Ok(values)
}
