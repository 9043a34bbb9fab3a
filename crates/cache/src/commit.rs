//! The sink's commit (spec §3.3): the DAG's writes become new versions that
//! - depend on everything the DAG read (minus the key itself), and inherit the dependencies
//!   of the version of each written key that was read (I2);
//! - carry a clock that strictly dominates the version of the key that was read (I1): the
//!   executor's entry is advanced once per commit, to the same fresh counter for every key;
//! - depend on each other, so they become visible together (atomic visibility, P:139–141);
//! - absorb the executor's own latest write of the key when the DAG did not read it, so a
//!   newer clock of this executor never silently drops a concurrent older write (P:143–145).
//!
//! The shell puts the returned versions to the store and retries failed puts with the same
//! versions: merging a version twice is a no-op (P:151).
//!
//! # Executor ids and the bounded latest table
//! An executor's actor id (its entry in clocks) is `base << 32 | epoch`. The table of latest
//! writes per key is bounded: when a commit would overflow it, the executor rotates to the
//! next epoch, i.e. a fresh actor id, and forgets the table (spec §6). That is safe because
//! the table only protects writes of *this actor id*: a later write of the same id carries a
//! larger counter and would dominate an earlier one it never read. A fresh id's writes carry
//! no entry of the old id except what they read, so they cannot dominate an old write they
//! did not read; the old id never writes again, so nothing can clobber its writes either.
//! The cost is one more entry in the clocks of keys written after a rotation.

use std::collections::BTreeMap;

use lattice::{Blob, CausalVersion, CausalWriter, MultiKeyCausal, VectorClock};

use crate::{Error, Key, Stable, VersionSet};

/// A new version of one key before the clock is advanced and the mutual dependencies added.
struct Draft {
    /// What it overwrites (the read version, joined with the latest write if merged).
    clock: VectorClock,
    /// Inherited and read dependencies.
    deps: BTreeMap<Key, VectorClock>,
    /// The new payload, plus the latest write's if merged.
    values: Vec<Blob>,
}

/// One executor thread's writer state: its actor id, clock, and latest write per key.
#[derive(Clone, Debug)]
pub struct Executor {
    base: u32,
    epoch: u32,
    writer: CausalWriter,
    /// Latest version this actor wrote, per key (at most `max_latest` keys).
    latest: BTreeMap<Key, MultiKeyCausal>,
    max_latest: usize,
    /// Test switch: the unsafe variant without the latest-write merge.
    #[cfg(test)]
    latest_merge: bool,
}

impl Executor {
    /// An executor with base id `base` at epoch 0, keeping at most `max_latest` keys in its
    /// latest table (at least one commit's worth is always kept).
    ///
    /// `base` must be unique among executors for as long as their versions exist: an
    /// executor that restarts without its state must get a new base, or its clocks could
    /// repeat.
    pub fn new(base: u32, max_latest: usize) -> Self {
        Executor {
            base,
            epoch: 0,
            writer: CausalWriter::new(u64::from(base) << 32),
            latest: BTreeMap::new(),
            max_latest,
            #[cfg(test)]
            latest_merge: true,
        }
    }

    /// The actor id in clocks: `base << 32 | epoch`.
    pub fn actor(&self) -> u64 {
        (u64::from(self.base) << 32) | u64::from(self.epoch)
    }

    /// The current epoch (number of rotations so far).
    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    /// Keys in the latest table.
    pub fn latest_len(&self) -> usize {
        self.latest.len()
    }

    /// Commits the DAG's `writes`.
    ///
    /// `reads` is the DAG's read set `R_new` (key + clock); `read_versions` holds the full
    /// read version of every written key that was read (the sink fetches it from the pins
    /// named by `R_new` when another cache served it), for dependency inheritance (I2).
    /// Returns the versions to put, in key order.
    ///
    /// # Errors
    /// [`Error::MissingReadVersion`] if a written key was read (non-bottom) and its full
    /// version is missing or not the one `reads` names; [`Error::EpochsExhausted`].
    pub fn commit(
        &mut self,
        writes: BTreeMap<Key, Blob>,
        reads: &VersionSet,
        read_versions: &BTreeMap<Key, MultiKeyCausal>,
    ) -> Result<Vec<(Key, MultiKeyCausal)>, Error> {
        self.commit_pruned(writes, reads, read_versions, &Stable::new())
    }

    /// [`Executor::commit`], then drops from the new versions (and from the latest table)
    /// every dependency `stable` covers (`crate::gc`): the versions the store receives carry
    /// only dependencies a reader could still violate.
    ///
    /// # Errors
    /// As [`Executor::commit`].
    pub fn commit_pruned(
        &mut self,
        writes: BTreeMap<Key, Blob>,
        reads: &VersionSet,
        read_versions: &BTreeMap<Key, MultiKeyCausal>,
        stable: &Stable,
    ) -> Result<Vec<(Key, MultiKeyCausal)>, Error> {
        if writes.is_empty() {
            return Ok(Vec::new());
        }
        let mut bases: BTreeMap<Key, Option<&MultiKeyCausal>> = BTreeMap::new();
        for k in writes.keys() {
            let base = match reads.get(k) {
                Some(r) if !r.is_bottom() => match read_versions.get(k) {
                    Some(v) if v.clock() == r.clock => Some(v),
                    _ => return Err(Error::MissingReadVersion { key: k.clone() }),
                },
                _ => None,
            };
            bases.insert(k.clone(), base);
        }
        let fresh = writes
            .keys()
            .filter(|k| !self.latest.contains_key(*k))
            .count();
        if !self.latest.is_empty() && self.latest.len() + fresh > self.max_latest {
            self.rotate()?;
        }
        let actor = self.actor();
        let read_deps: Vec<(&Key, &VectorClock)> = reads
            .iter()
            .filter(|(_, r)| !r.is_bottom())
            .map(|(k, r)| (k, &r.clock))
            .collect();
        let mut drafts: BTreeMap<Key, Draft> = BTreeMap::new();
        let mut top = 0;
        for (k, payload) in writes {
            let base = bases.get(&k).copied().flatten();
            let mut clock = base.map(MultiKeyCausal::clock).unwrap_or_default();
            let mut deps = base.map(MultiKeyCausal::deps).unwrap_or_default();
            for (d, c) in &read_deps {
                deps.entry((*d).clone()).or_default().merge_from(c);
            }
            let mut values = vec![payload];
            if let Some(latest) = self.latest.get(&k) {
                if self.merges_latest() && !latest.clock().leq(&clock) {
                    // The DAG did not see this executor's latest write of k: keep it (Def. 1).
                    clock.merge_from(&latest.clock());
                    for (d, c) in latest.deps() {
                        deps.entry(d).or_default().merge_from(&c);
                    }
                    values.extend(latest.values().cloned());
                }
            }
            deps.remove(&k);
            top = top.max(clock.get(actor));
            drafts.insert(
                k,
                Draft {
                    clock,
                    deps,
                    values,
                },
            );
        }
        let counter = self
            .writer
            .next_clock(&VectorClock::from_iter([(actor, top)]))
            .get(actor);
        for d in drafts.values_mut() {
            d.clock.set(actor, counter);
        }
        let clocks: BTreeMap<Key, VectorClock> = drafts
            .iter()
            .map(|(k, d)| (k.clone(), d.clock.clone()))
            .collect();
        let mut out = Vec::with_capacity(drafts.len());
        for (k, d) in drafts {
            let Draft {
                clock,
                mut deps,
                values,
            } = d;
            for (other, c) in clocks.iter().filter(|(o, _)| **o != k) {
                deps.entry(other.clone()).or_default().merge_from(c);
            }
            deps.retain(|d, c| !stable.covers(d, c));
            let value =
                MultiKeyCausal::from_versions(values.into_iter().map(|value| CausalVersion {
                    clock: clock.clone(),
                    deps: deps.clone(),
                    value,
                }));
            self.latest.insert(k.clone(), value.clone());
            out.push((k, value));
        }
        Ok(out)
    }

    /// Moves to a fresh actor id and forgets the latest table (see the module docs).
    fn rotate(&mut self) -> Result<(), Error> {
        self.epoch = self
            .epoch
            .checked_add(1)
            .ok_or(Error::EpochsExhausted { base: self.base })?;
        self.writer = CausalWriter::new(self.actor());
        self.latest.clear();
        Ok(())
    }

    #[cfg(test)]
    fn merges_latest(&self) -> bool {
        self.latest_merge
    }

    #[cfg(not(test))]
    fn merges_latest(&self) -> bool {
        true
    }

    /// The same executor at another epoch (tests reach the last one).
    #[cfg(test)]
    pub(crate) fn at_epoch(mut self, epoch: u32) -> Self {
        self.epoch = epoch;
        self.writer = CausalWriter::new(self.actor());
        self
    }

    /// The unsafe variant without the latest-write merge, to show what it prevents.
    #[cfg(test)]
    pub(crate) fn without_latest_merge(mut self) -> Self {
        self.latest_merge = false;
        self
    }
}
