//! HB (spec §4.4): the scheduler starts OPT and, at the same time, simulates it on metadata
//! only; if the simulation aborts it tells the caches to stop (early abort) and runs CON,
//! otherwise it tells them what to prefetch.
//!
//! # What the scheduler queries
//! For each function `i`, the cache it is placed on answers [`view`]: for every key of
//! `R̃_i` it has cached, the clock it would bind and the key's RetrieveCut ∩ `R̃_DAG`
//! ([`KeyMeta`]). That is everything Algorithm 1 reads from a cache; Algorithm 3 needs
//! nothing from caches. A view pins nothing: it is a best guess, and the cut may move
//! before OPT reaches the cache.
//!
//! # Divergence
//! Keys a cache does not hold are simulated as bound to the bottom (the store's answer is
//! unknown), and cuts move after the query; so the simulation can say ok while the real OPT
//! aborts. The shell then falls back to CON for the request (not another OPT attempt: the
//! simulation exists to bound aborts). The reverse (simulation aborts, OPT would have
//! passed) only costs a CON run.

use std::collections::BTreeMap;

use lattice::{Lattice, MultiKeyCausal, VectorClock};

use crate::cut::Cut;
use crate::dag::Dag;
use crate::opt::{decide, parallel_flow, Abort, Upstream, View};
use crate::snapshot::retrieve_cut;
use crate::versionset::{union, VersionRef, VersionSet};
use crate::{CacheId, Key, KeySet};

/// What a cache answers about one key it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyMeta {
    /// The clock of the cached version (empty: cached as absent).
    pub clock: VectorClock,
    /// RetrieveCut(key) ∩ `R̃_DAG`, with this cache as source.
    pub cut: VersionSet,
}

/// A cache's answer to the scheduler for one function: its keys of `R̃_i` that it holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaView {
    /// The cache.
    pub cache: CacheId,
    /// Cached keys of `R̃_i`; a key missing here is not cached.
    pub keys: BTreeMap<Key, KeyMeta>,
}

/// The cache side of the query: the metadata of the keys of `ri` this cut holds.
pub fn view(cut: &Cut, here: CacheId, ri: &KeySet, rdag: &KeySet) -> MetaView {
    let rdag: KeySet = rdag.union(ri).cloned().collect();
    let keys = ri
        .iter()
        .filter_map(|k| {
            let clock = cut.get(k).map(MultiKeyCausal::clock)?;
            let meta = KeyMeta {
                clock,
                cut: retrieve_cut(cut, here, k, &rdag),
            };
            Some((k.clone(), meta))
        })
        .collect();
    MetaView { cache: here, keys }
}

impl View for MetaView {
    fn bound(&self, key: &[u8]) -> Option<VectorClock> {
        self.keys.get(key).map(|m| m.clock.clone())
    }

    fn cut_of(&self, key: &[u8]) -> VersionSet {
        match self.keys.get(key) {
            Some(m) => m.cut.clone(),
            None => VersionSet::from([(Key::from(key), VersionRef::bottom())]),
        }
    }
}

/// What a function's cache can fetch before OPT reaches it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefetch {
    /// Keys to stage from the store (not cached, not offered upstream).
    pub from_store: KeySet,
    /// Versions to fetch from other caches (upstream pins), as Algorithm 1 will ask.
    pub from_upstream: VersionSet,
}

/// The outcome of the simulation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Simulation {
    /// OPT is expected to pass: send each function's cache its prefetch notice.
    Ok {
        /// One per function, in DAG order.
        prefetch: Vec<Prefetch>,
        /// True if some function will need data from another cache (the paper's "OPT data
        /// fetch" class; false is "OPT metadata only").
        data_fetch: bool,
        /// The sink's `S_new` as simulated.
        s: VersionSet,
        /// The sink's `R_new` as simulated.
        r: VersionSet,
    },
    /// OPT is expected to abort at function `at`: early-abort the request and run CON.
    Abort {
        /// The function where validation fails.
        at: usize,
        /// Why.
        reason: Abort,
    },
}

/// Runs Algorithms 1 and 3 over the DAG on the caches' metadata only (`views[i]` is the
/// answer for function `i`; a function without an answer is simulated as aborting, so the
/// request goes to CON).
pub fn simulate(dag: &Dag, views: &[MetaView]) -> Simulation {
    let mut outputs: Vec<Upstream> = Vec::with_capacity(dag.fns().len());
    let mut prefetch = Vec::with_capacity(dag.fns().len());
    let mut data_fetch = false;
    for (at, f) in dag.fns().iter().enumerate() {
        let Some(v) = views.get(at) else {
            return Simulation::Abort {
                at,
                reason: Abort::Upstream,
            };
        };
        let up = match f.parents.as_slice() {
            [] => Upstream::source(),
            // Parents come before their children (`Dag` checks it), so outputs[p] exists.
            [p] => outputs[*p].clone(),
            ps => {
                let inputs: Vec<Upstream> = ps.iter().map(|&p| outputs[p].clone()).collect();
                match parallel_flow(&inputs) {
                    Ok(u) => u,
                    Err(reason) => return Simulation::Abort { at, reason },
                }
            }
        };
        let d = match decide(v, &f.reads, &up) {
            Ok(d) => d,
            Err(reason) => return Simulation::Abort { at, reason },
        };
        let mut p = Prefetch::default();
        for k in f.reads.iter().filter(|k| !v.keys.contains_key(*k)) {
            if !up.s.contains_key(k) {
                p.from_store.insert(k.clone());
            }
        }
        for (k, r) in &d.remote {
            if !r.is_bottom() && r.sources.iter().any(|s| *s != v.cache) {
                p.from_upstream.insert(k.clone(), r.clone());
            }
        }
        data_fetch |= !p.from_upstream.is_empty();
        // R_d as refs: local ⊔ remote, pinned at this cache once OPT finishes here.
        let mut r_d: BTreeMap<Key, VectorClock> = d.local.clone();
        for (k, r) in &d.remote {
            r_d.entry(k.clone()).or_default().merge_ref(&r.clock);
        }
        let r_d: VersionSet = r_d
            .into_iter()
            .map(|(k, c)| (k, VersionRef::new(c, v.cache)))
            .collect();
        outputs.push(Upstream {
            abort: false,
            s: union(&up.s, &d.s_d),
            r: union(&up.r, &r_d),
        });
        prefetch.push(p);
    }
    let last = outputs.pop().unwrap_or_default();
    Simulation::Ok {
        prefetch,
        data_fetch,
        s: last.s,
        r: last.r,
    }
}

/// HB's function-result reuse (P:396): after OPT aborted and CON bound function `i`'s reads,
/// the result of `i`'s OPT execution can be reused iff it read exactly the same versions.
pub fn reuse(opt_reads: &VersionSet, con_reads: &VersionSet) -> bool {
    opt_reads.len() == con_reads.len()
        && opt_reads
            .iter()
            .all(|(k, r)| con_reads.get(k).is_some_and(|c| c.clock == r.clock))
}
