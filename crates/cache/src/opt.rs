//! OPT (spec §4.2): validate at every DAG edge before a function runs, repair what can be
//! repaired, abort otherwise.
//!
//! Algorithm 1 (linear flow) is split into the sans-I/O steps the shell needs:
//! 1. [`plan`] (l.3–8): which keys of `R̃_d` must come from the store (stage them, §3.1)
//!    and which will be read from upstream caches;
//! 2. [`validate`] (l.1–2, l.9–33), on the cut frozen by the borrow (I4): Case I, Case II
//!    (erratum E3: a key moved to `R_remote` stops its scan), abort when unfixable,
//!    `S_d = ∪ RetrieveCut`, pinned; reports `R_local` (full versions) and `R_remote`
//!    (refs to fetch from upstream caches);
//! 3. [`finish`] (l.34–37), once the shell fetched `R_remote`: merges the remote versions
//!    into `R_d`, pins the read versions (I6) and returns `(S_new, R_new, R_d)`.
//!
//! Algorithm 3 (parallel flow) is [`parallel_flow`], run at a fan-in before Algorithm 1.
//!
//! The negations lost in the paper's text extraction are restored (`!supersede` at l.11 and
//! l.19, per the thesis and the prose; spec §9).

use std::collections::BTreeMap;

use lattice::{Lattice, MultiKeyCausal, VectorClock};

use crate::cut::Cut;
use crate::pins::Pins;
use crate::snapshot::{missing, retrieve_cut, values_of};
use crate::versionset::{fetches_by_source, refs_of, union, union_into, VersionRef, VersionSet};
use crate::{show, CacheId, Error, Here, Key, KeySet};

/// What arrives on a DAG edge: the abort flag `a`, the snapshot so far `S_u` (a KOC for
/// `R̃_DAG`) and the versions read so far `R_u ⊆ S_u`, as key + clock + sources only.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Upstream {
    /// An upstream function aborted: propagate.
    pub abort: bool,
    /// `S_u`.
    pub s: VersionSet,
    /// `R_u`.
    pub r: VersionSet,
}

impl Upstream {
    /// What a source function starts from: no abort, `S_u = R_u = ∅`.
    pub fn source() -> Self {
        Upstream::default()
    }

    /// An aborted edge.
    pub fn aborted() -> Self {
        Upstream {
            abort: true,
            ..Upstream::default()
        }
    }
}

/// Why OPT aborts (the DAG is restarted, or HB falls back to CON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Abort {
    /// An upstream function aborted (Alg. 1 l.1–2, Alg. 3 l.1–3).
    Upstream,
    /// Case II (l.21–23): the local version of `key` depends on a version of `dep` newer
    /// than (or concurrent with) what upstream read, and upstream offers no version of
    /// `key` to fall back to.
    Unfixable {
        /// The key that cannot be bound.
        key: Key,
        /// The upstream read it conflicts with.
        dep: Key,
    },
    /// Alg. 3 l.5–8: a parallel branch read a version of `key` that the union of the
    /// branches' snapshots supersedes (no repair: the branches already ran).
    Incompatible {
        /// The key.
        key: Key,
    },
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Abort::Upstream => write!(f, "upstream aborted"),
            Abort::Unfixable { key, dep } => {
                write!(
                    f,
                    "{} conflicts with the upstream read of {}",
                    show(key),
                    show(dep)
                )
            }
            Abort::Incompatible { key } => {
                write!(
                    f,
                    "parallel branches read incompatible versions of {}",
                    show(key)
                )
            }
        }
    }
}

/// Step 1 (l.3–8): where the keys of `R̃_d` that the cut lacks will come from.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Not cached and not in `S_u`: stage them from the store ([`crate::Staging::for_keys`])
    /// before [`validate`] (l.7–8).
    pub from_store: KeySet,
    /// Not cached but in `S_u`: they will be read from upstream caches (l.5–6); the shell
    /// may start fetching them now.
    pub from_upstream: VersionSet,
}

/// Step 1: see [`Plan`].
pub fn plan(cut: &Cut, rd: &KeySet, up: &Upstream) -> Plan {
    let mut out = Plan::default();
    for k in rd.iter().filter(|k| !cut.contains(k)) {
        match up.s.get(k) {
            Some(r) => {
                out.from_upstream.insert(k.clone(), r.clone());
            }
            None => {
                out.from_store.insert(k.clone());
            }
        }
    }
    out
}

/// A successful validation (step 2): what `F_d` will read, and the pinned `S_d`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Validation {
    /// `S_d`: the union of the RetrieveCuts of the locally bound keys, pinned here.
    pub s_d: VersionSet,
    /// `R_local`: keys read from this cut, with the (pinned) versions.
    pub r_local: BTreeMap<Key, MultiKeyCausal>,
    /// `R_remote`: keys whose upstream version must be fetched (alone, or merged with the
    /// local one for Case I repairs).
    pub r_remote: VersionSet,
    /// Keys repaired by Case I (read = local ⊔ upstream).
    pub repaired: KeySet,
    /// Keys moved to the upstream version by Case II.
    pub fell_back: KeySet,
}

impl Validation {
    /// The cache-to-cache fetches `R_remote` needs, per source cache (other than `here`).
    pub fn fetches(&self, here: CacheId) -> BTreeMap<CacheId, VersionSet> {
        fetches_by_source(&self.r_remote, here)
    }

    /// True if nothing has to be fetched from another cache (the paper's "metadata only").
    pub fn is_metadata_only(&self) -> bool {
        self.r_remote.values().all(VersionRef::is_bottom)
    }
}

/// The outcome of step 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Validated {
    /// Go on: fetch `r_remote`, then [`finish`].
    Valid(Validation),
    /// Abort the request attempt (release its pins everywhere, then retry or fall back).
    Abort(Abort),
}

/// Step 2 (Alg. 1 l.1–2, l.9–33), on the frozen cut, after the shell staged
/// [`Plan::from_store`]. Pins `S_d` for `here.req` when valid. `rdag` must contain `rd`
/// (it is widened to if not).
///
/// # Errors
/// [`Error::NotCached`]: a key of `R̃_d` is neither cached nor in `S_u` (never staged, or
/// evicted since): stage it and validate again. [`Error::PinsFull`].
pub fn validate(
    cut: &mut Cut,
    pins: &mut Pins,
    here: Here,
    rd: &KeySet,
    rdag: &KeySet,
    up: &Upstream,
) -> Result<Validated, Error> {
    if up.abort {
        return Ok(Validated::Abort(Abort::Upstream));
    }
    let keys: Vec<Key> = missing(cut, rd)
        .into_iter()
        .filter(|k| !up.s.contains_key(k))
        .collect();
    if !keys.is_empty() {
        return Err(Error::NotCached { keys });
    }
    let rdag: KeySet = rdag.union(rd).cloned().collect();
    let view = CutView {
        cut,
        here: here.cache,
        rdag: &rdag,
    };
    let decision = match decide(&view, rd, up) {
        Ok(d) => d,
        Err(abort) => return Ok(Validated::Abort(abort)),
    };
    pins.pin(here.req, here.deadline_ms, values_of(cut, &decision.s_d))?;
    let r_local: BTreeMap<Key, MultiKeyCausal> = decision
        .local
        .keys()
        .map(|k| (k.clone(), cut.get(k).cloned().unwrap_or_default()))
        .collect();
    for k in rd {
        cut.touch(k);
    }
    Ok(Validated::Valid(Validation {
        s_d: decision.s_d,
        r_local,
        r_remote: decision.remote,
        repaired: decision.repaired,
        fell_back: decision.fell_back,
    }))
}

/// What `F_d` reads and what goes downstream (step 3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// `S_new = S_u ∪ S_d`: a KOC for `R̃_DAG` containing everything read so far.
    pub s_new: VersionSet,
    /// `R_new = R_u ∪ R_d` (as refs; `R_d` is pinned here).
    pub r_new: VersionSet,
    /// `R_d`: the full versions `F_d` reads (pinned here, I6).
    pub r_d: BTreeMap<Key, MultiKeyCausal>,
}

impl Finished {
    /// The trigger metadata for the downstream functions: `(false, S_new, R_new)`.
    pub fn downstream(&self) -> Upstream {
        Upstream {
            abort: false,
            s: self.s_new.clone(),
            r: self.r_new.clone(),
        }
    }
}

/// Step 3 (l.34–37): `fetched` holds the answers of the other caches to
/// [`Validation::fetches`] (any number of answers per key; they are merged, together with
/// what this cache pinned for the request, and must merge to exactly the clock asked for).
/// Pins the read versions and returns `(S_new, R_new, R_d)`.
///
/// # Errors
/// [`Error::MissingRemote`] / [`Error::RemoteMismatch`]: a remote version did not arrive
/// or is not the one named (pins released or expired): abort the attempt and retry.
/// [`Error::PinsFull`].
pub fn finish<I>(
    pins: &mut Pins,
    here: Here,
    v: Validation,
    up: &Upstream,
    fetched: I,
) -> Result<Finished, Error>
where
    I: IntoIterator<Item = (Key, MultiKeyCausal)>,
{
    let remote = assemble(pins, here, &v.r_remote, fetched)?;
    let mut r_d = v.r_local;
    for (k, value) in remote {
        r_d.entry(k).or_default().merge(value);
    }
    pins.pin(here.req, here.deadline_ms, r_d.clone())?;
    let s_new = union(&up.s, &v.s_d);
    let r_new = union(&up.r, &refs_of(&r_d, here.cache));
    debug_assert!(crate::versionset::contained_in(&r_new, &s_new));
    Ok(Finished { s_new, r_new, r_d })
}

/// The full versions of `refs` for `here.req`: this cache's own pins merged with the
/// fetched answers, checked against each ref's clock.
pub(crate) fn assemble<I>(
    pins: &Pins,
    here: Here,
    refs: &VersionSet,
    fetched: I,
) -> Result<BTreeMap<Key, MultiKeyCausal>, Error>
where
    I: IntoIterator<Item = (Key, MultiKeyCausal)>,
{
    let mut got: BTreeMap<Key, MultiKeyCausal> = BTreeMap::new();
    for (k, value) in fetched {
        if refs.contains_key(&k) {
            got.entry(k).or_default().merge(value);
        }
    }
    let mut out = BTreeMap::new();
    for (k, r) in refs {
        let mut value = got.remove(k).unwrap_or_default();
        if let Some(local) = pins.fetch(here.req, k, &r.clock) {
            value.merge(local);
        }
        let clock = value.clock();
        if clock != r.clock {
            return Err(if clock.leq(&r.clock) {
                Error::MissingRemote {
                    req: here.req,
                    key: k.clone(),
                }
            } else {
                Error::RemoteMismatch { key: k.clone() }
            });
        }
        out.insert(k.clone(), value);
    }
    Ok(out)
}

/// Algorithm 3 (parallel flow), where parallel upstreams meet: aborts if any did, or if a
/// branch read a version the union of the branches' snapshots supersedes; otherwise the
/// merged edge `(false, ∪ S_i, ∪ R_i)`, on which Algorithm 1 then runs.
pub fn parallel_flow(inputs: &[Upstream]) -> Result<Upstream, Abort> {
    if inputs.iter().any(|u| u.abort) {
        return Err(Abort::Upstream);
    }
    let mut s = VersionSet::new();
    for u in inputs {
        union_into(&mut s, &u.s);
    }
    for u in inputs {
        for (k, r) in &u.r {
            if !s.get(k).is_some_and(|sr| r.supersedes(sr)) {
                return Err(Abort::Incompatible { key: k.clone() });
            }
        }
    }
    let mut r = VersionSet::new();
    for u in inputs {
        union_into(&mut r, &u.r);
    }
    Ok(Upstream { abort: false, s, r })
}

/// What Algorithm 1 needs from a cache: the clock it would bind a key to and the key's
/// RetrieveCut. The cut itself for [`validate`]; metadata answered to the scheduler for HB's
/// simulation.
pub(crate) trait View {
    /// The clock of the cached version of `key` (`None`: not cached).
    fn bound(&self, key: &[u8]) -> Option<VectorClock>;
    /// RetrieveCut(`key`) ∩ `R̃_DAG`.
    fn cut_of(&self, key: &[u8]) -> VersionSet;
}

struct CutView<'a> {
    cut: &'a Cut,
    here: CacheId,
    rdag: &'a KeySet,
}

impl View for CutView<'_> {
    fn bound(&self, key: &[u8]) -> Option<VectorClock> {
        self.cut.get(key).map(MultiKeyCausal::clock)
    }

    fn cut_of(&self, key: &[u8]) -> VersionSet {
        retrieve_cut(self.cut, self.here, key, self.rdag)
    }
}

/// The metadata decision of Algorithm 1.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Decision {
    /// `R_local` after Case II: key → the local clock.
    pub(crate) local: BTreeMap<Key, VectorClock>,
    /// `R_remote`.
    pub(crate) remote: VersionSet,
    /// `S_d`.
    pub(crate) s_d: VersionSet,
    /// Case I repairs.
    pub(crate) repaired: KeySet,
    /// Case II fallbacks.
    pub(crate) fell_back: KeySet,
}

/// Algorithm 1 on metadata (l.3–32). A key the view does not bind and `S_u` does not hold
/// is taken as bound to the bottom (only HB's simulation gets there; `validate` makes the
/// shell stage such keys first).
pub(crate) fn decide(view: &impl View, rd: &KeySet, up: &Upstream) -> Result<Decision, Abort> {
    if up.abort {
        return Err(Abort::Upstream);
    }
    let mut d = Decision::default();
    // l.3–8: availability.
    for k in rd {
        match (view.bound(k), up.s.get(k)) {
            (Some(clock), _) => {
                d.local.insert(k.clone(), clock);
            }
            (None, Some(r)) => {
                d.remote.insert(k.clone(), r.clone());
            }
            (None, None) => {
                d.local.insert(k.clone(), VectorClock::new());
            }
        }
    }
    // l.9–12, Case I: the local version must supersede what S_u (hence R_u.deps) requires;
    // otherwise read the merge with the upstream version.
    for (k, r) in &up.s {
        if let Some(local) = d.local.get(k) {
            if !r.clock.leq(local) {
                d.remote.insert(k.clone(), r.clone());
                d.repaired.insert(k.clone());
            }
        }
    }
    // l.13–26, Case II: R_u must supersede the cut of every locally bound key; otherwise
    // fall back to the upstream version of the key, or abort if there is none.
    let mut cuts: BTreeMap<Key, VersionSet> = BTreeMap::new();
    let keys: Vec<Key> = d.local.keys().cloned().collect();
    for k in keys {
        let s_k = view.cut_of(&k);
        let violated = s_k
            .iter()
            .find(|(m, mr)| up.r.get(*m).is_some_and(|ur| !ur.supersedes(mr)));
        match violated {
            None => {
                cuts.insert(k, s_k);
            }
            Some((m, _)) => match up.s.get(&k) {
                None => {
                    return Err(Abort::Unfixable {
                        key: k,
                        dep: m.clone(),
                    })
                }
                Some(r) => {
                    // E3: k is moved; its scan stops here.
                    d.remote.insert(k.clone(), r.clone());
                    d.local.remove(&k);
                    d.repaired.remove(&k);
                    d.fell_back.insert(k);
                }
            },
        }
    }
    // l.29–32: S_d, a KOC for R̃_DAG by Thm 1.
    for s_k in cuts.values() {
        union_into(&mut d.s_d, s_k);
    }
    Ok(d)
}
