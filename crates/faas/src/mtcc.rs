//! Protocol OPT in the compute host's causal cache: [`OptPlane`] for
//! [`CausalCache`], the I/O shell around `cache::opt` (spec §4.2, Algorithms 1 and 3).
//!
//! Per function, at its start:
//! 1. at a fan-in, `opt::parallel_flow` merges the upstream edges (or aborts);
//! 2. the keys of `R̃_d` that upstream did not bind are staged from the store as for a miss
//!    (`CausalCache::settle`), and in the same lock hold `opt::validate` runs on the
//!    frozen cut and pins `S_d` for the attempt;
//! 3. the versions to read from other caches (`Validation::fetches`) are fetched from
//!    their loopback ports (`crate::peer`), outside the lock;
//! 4. `opt::finish` checks them against the clocks asked for and pins `R_d`; the function
//!    reads `R_d`, and `(S_new, R_new)` goes on its downstream edges.
//!
//! The sink commits with `R_new` as its read set: the full versions of the written keys
//! it read are fetched from the caches `R_new` names (decision 1 of docs/serverless.md,
//! I2), the writes are committed by one executor slot's writer, put, and merged into this
//! cut. Anything that fails because a version is gone (pins released or expired, a cache
//! unreachable) or does not match aborts the attempt: the scheduler retries the DAG.
//! Pins are released by the scheduler's `ReleaseAttempt` at every host of the attempt, or
//! expire at the step's deadline.

use std::collections::BTreeMap;

use cache::opt::{self, Upstream, Validated};
use cache::snapshot::create_snapshot;
use cache::{
    CacheId, Error, Here, Holdings, Key, KeySet, MultiKeyCausal, ReqId, Stable, VersionSet,
};
use lattice::Lattice;

use crate::data::{BoxFuture, OptPlane, OptReads, OptStep, StepError};
use crate::gc;
use crate::hydro::{now_ms, CausalCache, Start};
use crate::pb;
use crate::peer;
use crate::values::key_read;

impl OptPlane for CausalCache {
    fn cache_id(&self) -> CacheId {
        self.id()
    }

    fn reads<'a>(&'a self, step: &'a OptStep) -> BoxFuture<'a, Result<OptReads, StepError>> {
        Box::pin(async move {
            let out = match &step.con {
                Some(part) => con_bind(self, step, part).await,
                None => opt_reads(self, step).await,
            };
            if matches!(out, Err(StepError::Abort(_))) {
                self.lock().stats.opt_aborts += 1;
            }
            out
        })
    }

    fn commit<'a>(
        &'a self,
        step: &'a OptStep,
        r_new: VersionSet,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), StepError>> {
        Box::pin(opt_commit(self, step, r_new, writes))
    }

    fn con_snapshot<'a>(
        &'a self,
        step: &'a OptStep,
    ) -> BoxFuture<'a, Result<VersionSet, StepError>> {
        Box::pin(async move {
            let here = here(self, step);
            let ri: KeySet = step.keys.iter().map(|k| Key::from(&k[..])).collect();
            self.settle(Start::Keys, &ri, |g| {
                g.pins.expire(now_ms());
                create_snapshot(&mut g.cut, &mut g.pins, here, &ri, &step.rdag)
                    .map_err(|e| e.to_string())
            })
            .await
            .map_err(StepError::Failed)
        })
    }

    fn prefetch<'a>(&'a self, keys: KeySet) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            match self.settle(Start::Keys, &keys, |_| Ok(())).await {
                Ok(()) => self.lock().stats.prefetched += keys.len() as u64,
                Err(e) => tracing::debug!("prefetch: {e}"),
            }
        })
    }

    fn hb_view(&self, keys: &KeySet, rdag: &KeySet) -> cache::hb::MetaView {
        let g = self.lock();
        cache::hb::view(&g.cut, self.id(), keys, rdag)
    }

    fn fetch_pinned(&self, attempt: u64, refs: &VersionSet) -> BTreeMap<Key, MultiKeyCausal> {
        self.lock().pins.fetch_refs(ReqId(attempt), refs)
    }

    fn gc_report(&self) -> BoxFuture<'_, Option<Holdings>> {
        Box::pin(async move {
            if !self.flights.drain_earlier(gc::REPORT_WAIT).await {
                return None;
            }
            let g = self.lock();
            let mut h = g.cut.holdings();
            h.hold_all(&g.pins.holdings());
            (h.len() <= gc::MAX_GC_KEYS).then_some(h)
        })
    }

    fn gc_stable(&self, stable: &Stable) {
        let mut g = self.lock();
        let pruned = g.cut.advance_stable(stable);
        g.stats.gc_pruned += pruned as u64;
        g.stats.gc_rounds += 1;
    }

    fn forget(&self) {
        let mut g = self.lock();
        let keys: Vec<Key> = g.cut.keys().cloned().collect();
        let mut evicted = Vec::new();
        for k in &keys {
            evicted.extend(g.cut.evict(k));
        }
        g.pins.expire(u64::MAX);
        g.runs.clear();
        drop(g);
        self.note_evicted(evicted);
    }
}

fn here(cache: &CausalCache, step: &OptStep) -> Here {
    Here {
        cache: cache.id(),
        req: ReqId(step.attempt),
        deadline_ms: step.deadline_ms,
    }
}

/// An error of the `cache` crate: a version that is gone or does not match aborts the
/// attempt (a retry takes fresh pins); anything else fails the call.
fn step_error(e: Error) -> StepError {
    match e {
        Error::MissingRemote { .. } | Error::RemoteMismatch { .. } => {
            StepError::Abort(e.to_string())
        }
        other => StepError::Failed(other.to_string()),
    }
}

async fn opt_reads(cache: &CausalCache, step: &OptStep) -> Result<OptReads, StepError> {
    let here = here(cache, step);
    let up = match step.upstream.len() {
        0 => Upstream::source(),
        1 => step.upstream[0].clone(),
        _ => opt::parallel_flow(&step.upstream).map_err(|a| StepError::Abort(a.to_string()))?,
    };
    let rd: KeySet = step.keys.iter().map(|k| Key::from(&k[..])).collect();
    // Keys upstream did not bind come from this cut (staged from the store if missing).
    let wanted: KeySet = rd
        .iter()
        .filter(|k| !up.s.contains_key(*k))
        .cloned()
        .collect();
    let validated = cache
        .settle(Start::Keys, &wanted, |g| {
            g.pins.expire(now_ms());
            opt::validate(&mut g.cut, &mut g.pins, here, &rd, &step.rdag, &up)
                .map_err(|e| e.to_string())
        })
        .await
        .map_err(StepError::Failed)?;
    let v = match validated {
        Validated::Valid(v) => v,
        Validated::Abort(a) => return Err(StepError::Abort(a.to_string())),
    };
    let mut fetched: Vec<(Key, MultiKeyCausal)> = Vec::new();
    for (source, refs) in v.fetches(cache.id()) {
        fetched.extend(fetch_from(cache, step, source, &refs).await?);
    }
    let finished = {
        let mut g = cache.lock();
        g.stats.opt_functions += 1;
        opt::finish(&mut g.pins, here, v, &up, fetched).map_err(step_error)?
    };
    let reads = step
        .keys
        .iter()
        .map(|k| {
            let v = finished.r_d.get(&k[..]);
            key_read(k.clone(), v.unwrap_or(&MultiKeyCausal::default()))
        })
        .collect();
    Ok(OptReads {
        reads,
        down: finished.downstream(),
    })
}

/// CON (Alg. 5 l.13–14, cache side): fetches the function's remote reads and binds its part
/// of the scheduler's snapshot; no validation (CON does not abort on data, only when a
/// pinned version is gone). `R_new` on the outgoing edges is the union of the upstream
/// ones and this function's reads.
async fn con_bind(
    cache: &CausalCache,
    step: &OptStep,
    part: &cache::con::Part,
) -> Result<OptReads, StepError> {
    let here = here(cache, step);
    let mut fetched: Vec<(Key, MultiKeyCausal)> = Vec::new();
    for (source, refs) in cache::versionset::fetches_by_source(&part.remote, cache.id()) {
        fetched.extend(fetch_from(cache, step, source, &refs).await?);
    }
    let r_d = {
        let mut g = cache.lock();
        g.stats.con_functions += 1;
        cache::con::bind(&mut g.pins, here, part, fetched).map_err(step_error)?
    };
    let mut r = part.reads.clone();
    for u in &step.upstream {
        cache::versionset::union_into(&mut r, &u.r);
    }
    let reads = step
        .keys
        .iter()
        .map(|k| {
            let v = r_d.get(&k[..]);
            key_read(k.clone(), v.unwrap_or(&MultiKeyCausal::default()))
        })
        .collect();
    Ok(OptReads {
        reads,
        down: Upstream {
            abort: false,
            s: r.clone(),
            r,
        },
    })
}

/// Fetches `refs` from the cache `source`; an unknown or unreachable cache aborts the
/// attempt.
async fn fetch_from(
    cache: &CausalCache,
    step: &OptStep,
    source: CacheId,
    refs: &VersionSet,
) -> Result<BTreeMap<Key, MultiKeyCausal>, StepError> {
    let addr = step
        .peers
        .get(&source)
        .ok_or_else(|| StepError::Abort(format!("{source} is not a known cache")))?;
    cache.lock().stats.remote_fetches += 1;
    let _flight = cache.flights.start();
    peer::fetch(addr, step.attempt, refs)
        .await
        .map_err(StepError::Abort)
}

async fn opt_commit(
    cache: &CausalCache,
    step: &OptStep,
    r_new: VersionSet,
    writes: Vec<pb::Write>,
) -> Result<(), StepError> {
    let writes: BTreeMap<Key, lattice::Blob> = writes
        .into_iter()
        .map(|w| (Key::from(&w.key[..]), lattice::Blob::from(&w.value[..])))
        .collect();
    // I2: the full version of every written key that was read (not a bottom).
    let read: VersionSet = r_new
        .iter()
        .filter(|(k, r)| writes.contains_key(*k) && !r.is_bottom())
        .map(|(k, r)| (k.clone(), r.clone()))
        .collect();
    let mut got: BTreeMap<Key, MultiKeyCausal> = BTreeMap::new();
    for (source, refs) in cache::versionset::fetches_by_source(&read, cache.id()) {
        for (k, v) in fetch_from(cache, step, source, &refs).await? {
            got.entry(k).or_default().merge(v);
        }
    }
    let versions = {
        let mut guard = cache.lock();
        let g = &mut *guard;
        let mut read_versions = BTreeMap::new();
        for (k, r) in &read {
            let mut v = got.remove(k).unwrap_or_default();
            if let Some(local) = g.pins.fetch(ReqId(step.attempt), k, &r.clock) {
                v.merge(local);
            }
            if v.clock() != r.clock {
                return Err(StepError::Abort(format!(
                    "the version of {} read upstream is no longer pinned",
                    String::from_utf8_lossy(k)
                )));
            }
            read_versions.insert(k.clone(), v);
        }
        let slot = (step.attempt % g.writers.len() as u64) as usize;
        g.writers[slot]
            .commit_pruned(writes, &r_new, &read_versions, g.cut.stable())
            .map_err(step_error)?
    };
    cache
        .put_versions(versions)
        .await
        .map_err(StepError::Failed)
}
