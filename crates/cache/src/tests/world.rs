//! A toy store with lagging replicas, and helpers that drive stagings and writers against
//! it. Shared by the unit tests of several modules.

use std::collections::BTreeMap;

use lattice::{Lattice, MultiKeyCausal};

use super::k;
use crate::versionset::refs_of;
use crate::{CacheId, Cut, Error, Executor, Key, Merged, Staging, Step, VersionLog};

/// Every state each key went through; a lagging replica serves an older one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Store {
    states: BTreeMap<Key, Vec<MultiKeyCausal>>,
    /// Every version ever put.
    pub(crate) log: VersionLog,
}

impl Store {
    /// Merges `value` into `key`.
    pub(crate) fn put(&mut self, key: &Key, value: &MultiKeyCausal) {
        self.log.record(key, value);
        let states = self.states.entry(key.clone()).or_default();
        let mut next = states.last().cloned().unwrap_or_default();
        if next.merge_ref(value) || states.is_empty() {
            states.push(next);
        }
    }

    /// Puts every version of a commit.
    pub(crate) fn put_all(&mut self, versions: &[(Key, MultiKeyCausal)]) {
        for (key, value) in versions {
            self.put(key, value);
        }
    }

    /// The state `lag` puts before the latest (`None` before the key's first put).
    pub(crate) fn lagged(&self, key: &[u8], lag: usize) -> Option<MultiKeyCausal> {
        let states = self.states.get(key)?;
        let at = states.len().checked_sub(1 + lag)?;
        states.get(at).cloned()
    }

    /// The latest state.
    pub(crate) fn latest(&self, key: &[u8]) -> Option<MultiKeyCausal> {
        self.lagged(key, 0)
    }

    /// Number of states of `key`.
    pub(crate) fn depth(&self, key: &[u8]) -> usize {
        self.states.get(key).map_or(0, Vec::len)
    }
}

/// Drives `staging` to completion against `store`, answering each fetch synchronously with
/// the state `lag(key, attempt)` puts old, then merges it into `cut`.
pub(crate) fn run_staging(
    cut: &mut Cut,
    mut staging: Staging,
    store: &Store,
    mut lag: impl FnMut(&Key, u32) -> usize,
) -> Result<Merged, Error> {
    for _ in 0..10_000 {
        match staging.step(cut) {
            Step::Fetch(fetches) => {
                for f in fetches {
                    let answer = store.lagged(&f.key, lag(&f.key, f.attempt));
                    staging.accept(f.key, answer)?;
                }
            }
            Step::Wait => panic!("every fetch is answered at once"),
            Step::Ready => return cut.merge_staging(&mut staging),
        }
    }
    panic!("the staging never closed");
}

/// Stages `keys` from the latest store states.
pub(crate) fn fill(cut: &mut Cut, keys: &[&str], store: &Store) -> Merged {
    let staging = Staging::for_keys(keys.iter().map(|s| k(s)), cut);
    let merged = run_staging(cut, staging, store, |_, _| 0);
    let merged = merged.unwrap_or_else(|e| panic!("fill {keys:?}: {e}"));
    cut.check()
        .unwrap_or_else(|e| panic!("cut broken after fill: {e}"));
    merged
}

/// A writer DAG run directly on the store: reads the latest versions of `reads`, commits
/// `writes` at `exec`, puts the result. Returns the versions written.
pub(crate) fn write(
    store: &mut Store,
    exec: &mut Executor,
    reads: &[&str],
    writes: &[(&str, &str)],
) -> Vec<(Key, MultiKeyCausal)> {
    let read_versions: BTreeMap<Key, MultiKeyCausal> = reads
        .iter()
        .map(|r| (k(r), store.latest(r.as_bytes()).unwrap_or_default()))
        .collect();
    let refs = refs_of(&read_versions, CacheId(0));
    let writes = writes
        .iter()
        .map(|(key, v)| (k(key), Key::from(v.as_bytes())))
        .collect();
    let out = exec
        .commit(writes, &refs, &read_versions)
        .unwrap_or_else(|e| panic!("commit: {e}"));
    store.put_all(&out);
    out
}
