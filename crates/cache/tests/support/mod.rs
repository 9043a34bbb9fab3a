//! Support for the model test: a seeded random source, a toy store whose replicas lag and
//! whose puts can land late, and the loop that drives a [`Staging`] against it.

pub mod model;

use std::collections::BTreeMap;

use cache::{Cut, Error, Key, Merged, MultiKeyCausal, Staging, Step, VersionLog};
use lattice::{Lattice, VectorClock};

/// SplitMix64: small, seeded, good enough to pick events.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// A store of `MultiKeyCausal` values. Every state a key went through is kept: a lagging
/// replica answers an older one. Puts may be held back (a writer's puts to different keys
/// land at different times); a key asked for the third time in a staging gets everything
/// that was held back and the latest state, so stagings always close.
///
/// A GC round samples a *floor* per key (the state every replica has reached,
/// [`Store::sample_floor`]): from then on no replica answers anything older.
#[derive(Default)]
pub struct Store {
    states: BTreeMap<Key, Vec<MultiKeyCausal>>,
    /// Per key, the index of the oldest state a replica may still answer.
    floor: BTreeMap<Key, usize>,
    held: Vec<(Key, MultiKeyCausal)>,
    /// Every version ever committed (held-back ones included), as the committer records it
    /// (with its dependencies before any pruning: the ground truth of happens-before).
    pub log: VersionLog,
    /// Answers that were older than the latest state.
    pub lagged_answers: u64,
}

impl Store {
    /// Commits `value` to `key` now, or holds it back if `later`.
    pub fn put(&mut self, key: &Key, value: &MultiKeyCausal, later: bool) {
        if later {
            self.held.push((key.clone(), value.clone()));
            return;
        }
        let states = self.states.entry(key.clone()).or_default();
        let mut next = states.last().cloned().unwrap_or_default();
        if next.merge_ref(value) || states.is_empty() {
            states.push(next);
        }
    }

    /// Lands every held-back put.
    pub fn flush(&mut self) {
        for (k, v) in std::mem::take(&mut self.held) {
            self.put(&k, &v, false);
        }
    }

    /// The latest state of `key`.
    pub fn latest(&self, key: &[u8]) -> Option<MultiKeyCausal> {
        self.states.get(key)?.last().cloned()
    }

    /// A replica's answer for `key` on the `attempt`-th ask: often the latest state,
    /// sometimes an older one (or nothing) while `attempt < 2`.
    pub fn get(&mut self, key: &[u8], attempt: u32, rng: &mut Rng) -> Option<MultiKeyCausal> {
        if attempt >= 2 {
            self.flush();
            return self.latest(key);
        }
        let states = self.states.get(key)?;
        if rng.chance(30) {
            let at = match self.floor.get(key) {
                // Every replica has the key, at the floor or later.
                Some(&f) => f + rng.below(states.len() - f),
                None => rng.below(states.len() + 1),
            };
            if at < states.len() - 1 || at == states.len() {
                self.lagged_answers += 1;
            }
            return states.get(at).cloned();
        }
        states.last().cloned()
    }

    /// Samples the replicas for a GC round: for every key, a state every replica has
    /// reached (between the old floor and the latest, at random), which becomes the floor.
    pub fn sample_floor(&mut self, rng: &mut Rng) -> Vec<(Key, MultiKeyCausal)> {
        let mut out = Vec::new();
        for (k, states) in &self.states {
            let old = self.floor.get(k).copied().unwrap_or(0);
            let at = old + rng.below(states.len() - old);
            self.floor.insert(k.clone(), at);
            out.push((k.clone(), states[at].clone()));
        }
        out
    }

    /// The latest clock of every key (what a too-high `Stable` would take).
    pub fn latest_clocks(&self) -> Vec<(Key, VectorClock)> {
        self.states
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), s.last()?.clock())))
            .collect()
    }
}

/// Drives `staging` to its merge into `cut`, answering fetches from `store`; `between` runs
/// after every round of answers, while the staging holds them unmerged.
pub fn stage(
    cut: &mut Cut,
    mut staging: Staging,
    store: &mut Store,
    rng: &mut Rng,
    between: &mut dyn FnMut(&Cut, &mut Store, &mut Rng),
) -> Result<Merged, Error> {
    for _ in 0..1000 {
        match staging.step(cut) {
            Step::Fetch(fetches) => {
                for f in fetches {
                    let answer = store.get(&f.key, f.attempt, rng);
                    staging.accept(f.key, answer)?;
                }
                between(cut, store, rng);
            }
            Step::Wait => panic!("fetches are answered at once"),
            Step::Ready => return cut.merge_staging(&mut staging),
        }
    }
    panic!("a staging did not close")
}
