//! Staging: closing fetched or pushed versions under their dependencies before they become
//! visible (spec §3.1, P:125–127), as a sans-I/O state machine.
//!
//! A [`Staging`] starts from the keys a function missed ([`Staging::for_keys`]) or from the
//! versions the store pushed for subscribed keys ([`Staging::for_pushed`]). The shell loops:
//!
//! ```text
//! loop {
//!     match staging.step(&cut) {
//!         Step::Fetch(fetches) => for f in fetches { send GET f.key (back off by f.attempt) }
//!         Step::Wait => wait for a response, then staging.accept(key, value)?
//!         Step::Ready => { cut.merge_staging(&mut staging)?; break }
//!     }
//! }
//! ```
//!
//! The batch is never visible to functions. A key is asked for again while the cut and the
//! batch together do not supersede what a staged version depends on (a lagging replica
//! answered with an old version, or the writer's puts have not all landed); each ask counts
//! an attempt so the shell can back off, switch to reading every replica, or give up (drop
//! the staging and reschedule the function). Mutually dependent writes (cycles) close as soon
//! as every member is staged: each is then superseded by the batch itself.
//!
//! What a staged version needs is recomputed at every step from the *current* cut: only the
//! dependencies of `C[k] ⊔ batch[k]` count (a staged version the cut already dominates needs
//! nothing), and a dependency the cut lost to an eviction since the last step is fetched.

use std::collections::BTreeMap;

use lattice::{Lattice, MultiKeyCausal, VectorClock};

use crate::cut::{value_bytes, Cut, Merged};
use crate::{Error, Key, KeySet};

/// One fetch the shell should send to the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fetch {
    /// The key to GET.
    pub key: Key,
    /// How many times this staging asked for the key before (0 = first ask). A retry means
    /// the previous answer did not supersede what is needed: back off, and past a few
    /// attempts read every replica (the store's `GetAll`).
    pub attempt: u32,
}

/// What the shell should do next for a staging.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Send these fetches (others may still be outstanding).
    Fetch(Vec<Fetch>),
    /// Fetches are outstanding; wait for a response and [`Staging::accept`] it.
    Wait,
    /// Closed: call [`Cut::merge_staging`] now (same turn of the event loop).
    Ready,
}

/// Versions being closed under their dependencies, not yet visible. See the module docs.
#[derive(Clone, Debug, Default)]
pub struct Staging {
    /// The staged versions: fetched, pushed, or the bottom for a requested key the store
    /// does not have.
    batch: BTreeMap<Key, MultiKeyCausal>,
    /// Requested keys not fetched yet (each is fetched once even if cached).
    unfetched: KeySet,
    /// Keys asked for and not answered yet.
    in_flight: KeySet,
    /// Asks per key.
    attempts: BTreeMap<Key, u32>,
    /// Accounted size of the batch.
    bytes: usize,
    /// The cut's capacity when the staging began: a batch that alone exceeds it can never
    /// merge.
    capacity: usize,
    /// Merged into the cut (spent).
    merged: bool,
}

impl Staging {
    /// A staging for keys missing from the cut (or to refresh): each is fetched once, then
    /// whatever its version depends on. A key the store does not have is cached as absent.
    pub fn for_keys<I: IntoIterator<Item = Key>>(keys: I, cut: &Cut) -> Self {
        Staging {
            unfetched: keys.into_iter().collect(),
            capacity: cut.capacity(),
            ..Staging::default()
        }
    }

    /// A staging for versions pushed by the store for subscribed keys (refresh, P:127).
    ///
    /// # Errors
    /// [`Error::WouldExceedCapacity`] if the pushed versions alone exceed the cut's capacity.
    pub fn for_pushed<I>(values: I, cut: &Cut) -> Result<Self, Error>
    where
        I: IntoIterator<Item = (Key, MultiKeyCausal)>,
    {
        let mut staging = Staging {
            capacity: cut.capacity(),
            ..Staging::default()
        };
        for (key, value) in values {
            staging.stage(key, value)?;
        }
        Ok(staging)
    }

    /// The next thing to do, given the cut as it is now. Marks the returned fetches as in
    /// flight.
    pub fn step(&mut self, cut: &Cut) -> Step {
        if self.merged {
            return Step::Ready;
        }
        let mut wanted: KeySet = self.unfetched.clone();
        wanted.extend(self.unresolved(cut).into_keys());
        let mut fetches = Vec::new();
        for key in wanted {
            if self.in_flight.contains(&key) {
                continue;
            }
            let count = self.attempts.entry(key.clone()).or_insert(0);
            fetches.push(Fetch {
                key: key.clone(),
                attempt: *count,
            });
            *count = count.saturating_add(1);
            self.in_flight.insert(key);
        }
        if !fetches.is_empty() {
            Step::Fetch(fetches)
        } else if !self.in_flight.is_empty() {
            Step::Wait
        } else {
            Step::Ready
        }
    }

    /// Takes the store's answer for `key`: its value, or `None` if the store (this replica)
    /// does not have the key. A requested key that does not exist is staged as the bottom
    /// (cached as absent); a dependency that does not exist yet stays unresolved and is
    /// asked for again at the next step. Answers for keys not asked for are merged too
    /// (merging is idempotent).
    ///
    /// # Errors
    /// [`Error::WouldExceedCapacity`] when the batch alone outgrows the cut's capacity: drop
    /// the staging and reschedule the function.
    pub fn accept(&mut self, key: Key, value: Option<MultiKeyCausal>) -> Result<(), Error> {
        self.in_flight.remove(&key);
        let requested = self.unfetched.remove(&key);
        match value {
            Some(v) => self.stage(key, v),
            None if requested => self.stage(key, MultiKeyCausal::default()),
            None => Ok(()),
        }
    }

    /// Asks made for `key` so far.
    pub fn attempts(&self, key: &[u8]) -> u32 {
        self.attempts.get(key).copied().unwrap_or(0)
    }

    /// The staged keys.
    pub fn keys(&self) -> impl Iterator<Item = &Key> + '_ {
        self.batch.keys()
    }

    /// True once merged into the cut.
    pub fn is_merged(&self) -> bool {
        self.merged
    }

    /// The staged versions.
    pub(crate) fn batch(&self) -> &BTreeMap<Key, MultiKeyCausal> {
        &self.batch
    }

    /// Marks the staging spent (its batch is in the cut).
    pub(crate) fn mark_merged(&mut self) {
        self.merged = true;
        self.batch.clear();
        self.bytes = 0;
    }

    /// How many keys still need a fetch or an answer before the batch can merge into `cut`.
    pub(crate) fn outstanding(&self, cut: &Cut) -> usize {
        let mut keys: KeySet = self.unfetched.clone();
        keys.extend(self.in_flight.iter().cloned());
        keys.extend(self.unresolved(cut).into_keys());
        keys.len()
    }

    /// Dependencies of the staged versions (as merged with the cut) that neither the cut nor
    /// the batch supersedes: key → the clock needed.
    fn unresolved(&self, cut: &Cut) -> BTreeMap<Key, VectorClock> {
        let mut out: BTreeMap<Key, VectorClock> = BTreeMap::new();
        for (key, staged) in &self.batch {
            let deps = match cut.get(key) {
                Some(cached) => {
                    let mut merged = cached.clone();
                    if !merged.merge_ref(staged) {
                        continue; // the cut already dominates: its deps hold by I3
                    }
                    merged.deps()
                }
                None => staged.deps(),
            };
            for (dep, needed) in deps {
                if cut.stable().covers(&dep, &needed) {
                    continue; // empty, or dropped by the dependency GC at merge
                }
                let mut have = cut.get(&dep).map(MultiKeyCausal::clock).unwrap_or_default();
                if let Some(b) = self.batch.get(&dep) {
                    have.merge_from(&b.clock());
                }
                if !needed.leq(&have) {
                    out.entry(dep).or_default().merge_from(&needed);
                }
            }
        }
        out
    }

    fn stage(&mut self, key: Key, value: MultiKeyCausal) -> Result<(), Error> {
        let before = self.batch.get(&key).map_or(0, |v| value_bytes(&key, v));
        let slot = self.batch.entry(key.clone()).or_default();
        slot.merge(value);
        let after = value_bytes(&key, slot);
        self.bytes = self.bytes - before + after;
        if self.bytes > self.capacity {
            return Err(Error::WouldExceedCapacity {
                needed: self.bytes,
                capacity: self.capacity,
            });
        }
        Ok(())
    }
}

impl Cut {
    /// Merges a closed staging batch into the cut, atomically (I3): nothing observable
    /// happens between the first and the last key.
    ///
    /// If the merged cut would exceed the capacity, least-recently-used keys are evicted
    /// first, never one the batch (transitively) depends on or one whose eviction would drag
    /// a batch key along. On success the staging is spent.
    ///
    /// # Errors
    /// - [`Error::NotReady`]: the staging still has fetches to do (the cut may have lost a
    ///   dependency to an eviction since the staging last stepped): step it again.
    /// - [`Error::WouldExceedCapacity`]: even after evicting what may be evicted the batch
    ///   does not fit; nothing changed (the paper reschedules the function elsewhere).
    /// - [`Error::AlreadyMerged`].
    pub fn merge_staging(&mut self, staging: &mut Staging) -> Result<Merged, Error> {
        if staging.is_merged() {
            return Err(Error::AlreadyMerged);
        }
        let unresolved = staging.outstanding(self);
        if unresolved > 0 {
            return Err(Error::NotReady { unresolved });
        }
        let merged = self.merge_batch(staging.batch())?;
        staging.mark_merged();
        Ok(merged)
    }
}
