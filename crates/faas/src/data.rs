//! How a compute host reads a DAG's key references and applies its writes.
//!
//! This is the seam where HydroCache plugs in: [`DataPlane::snapshot`] is where the cache
//! will pin a causal snapshot of the DAG's read set (protocol CT: `C ∩ R̃_DAG`), and
//! [`DataPlane::commit`] where the sink's writes become mutually dependent
//! `MultiKeyCausal` versions. [`crate::hydro::CausalCache`] does both (the default);
//! [`DirectStore`], the "no cache" baseline, reads each key from the store and writes LWW
//! values one by one.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use cache::opt::Upstream;
use cache::{CacheId, Holdings, Key, KeySet, MultiKeyCausal, Stable, VersionSet};
use lattice::Value;

use crate::pb;

/// A boxed future (the trait is used as `dyn`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Reads and writes of a DAG run.
pub trait DataPlane: Send + Sync {
    /// Reads `keys` for run `run_id`; all reads of the run come from what this returns.
    fn snapshot<'a>(
        &'a self,
        run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>>;

    /// Applies the run's writes, at the sink, after every function succeeded.
    fn commit<'a>(
        &'a self,
        run_id: u64,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), String>>;

    /// The run ended (answered, failed, timed out or abandoned): drop whatever was kept
    /// for it (the causal cache's pinned versions). Called exactly once per run that
    /// called [`DataPlane::snapshot`] or [`DataPlane::commit`], and also for runs that
    /// called neither; must be cheap and must not block on I/O.
    fn release(&self, _run_id: u64) {}

    /// Whether the commit recorded under `marker` happened already (a sink run again after
    /// its first host committed and failed before answering). The default records
    /// nothing: `false`.
    fn committed<'a>(&'a self, _marker: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(async { Ok(false) })
    }

    /// Records under `marker` that a commit happened (after its writes were stored). The
    /// default records nothing.
    fn mark_committed<'a>(&'a self, _marker: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }

    /// The plane's side of MTCC across hosts ([`OptPlane`]): `None` for a plane without a
    /// causal cache, whose functions then read straight from it ([`DataPlane::snapshot`]
    /// per function, no metadata) and whose sink writes with [`DataPlane::commit`].
    fn opt(&self) -> Option<&dyn OptPlane> {
        None
    }
}

/// One function of a DAG spread over hosts (protocol OPT), as its host's cache sees it.
#[derive(Clone, Debug)]
pub struct OptStep {
    /// The request attempt: pins are held per attempt.
    pub attempt: u64,
    /// The function's key references (`R̃_d`), in argument order, without duplicates.
    pub keys: Vec<Bytes>,
    /// Every key reference of the DAG (`R̃_DAG`).
    pub rdag: KeySet,
    /// The metadata of each upstream edge (none for a source function).
    pub upstream: Vec<Upstream>,
    /// Where the other caches answer fetches of pinned versions.
    pub peers: BTreeMap<CacheId, String>,
    /// Pins of the attempt live at least until then (ms since the Unix epoch).
    pub deadline_ms: u64,
    /// CON: the function's part of the scheduler's snapshot (reads and remote fetches);
    /// `None` under OPT.
    pub con: Option<cache::con::Part>,
}

/// What a function reads under OPT.
#[derive(Clone, Debug)]
pub struct OptReads {
    /// Its key references, resolved (in [`OptStep::keys`] order).
    pub reads: Vec<pb::KeyRead>,
    /// The metadata for its downstream edges (`S_new`, `R_new`).
    pub down: Upstream,
}

/// Why an OPT step did not go through.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepError {
    /// Validation failed, or a pinned version could not be fetched: retry the attempt.
    #[error("abort: {0}")]
    Abort(String),
    /// The cache or the store failed.
    #[error("{0}")]
    Failed(String),
}

/// A causal cache's part in protocol OPT (spec §4.2), driven by the compute host.
pub trait OptPlane: Send + Sync {
    /// This cache's id in version refs.
    fn cache_id(&self) -> CacheId;

    /// Validates a function's reads against its upstream edges (`cache::opt`), fetching
    /// pinned versions from other caches as needed; pins what it read for the attempt.
    fn reads<'a>(&'a self, step: &'a OptStep) -> BoxFuture<'a, Result<OptReads, StepError>>;

    /// The sink's commit: `writes` depend on everything the DAG read (`r_new`); the full
    /// versions of written keys that were read are fetched from their caches (I2).
    fn commit<'a>(
        &'a self,
        step: &'a OptStep,
        r_new: VersionSet,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), StepError>>;

    /// CON, before the DAG starts: stages the step's keys and answers `S_i`, the union of
    /// their RetrieveCuts within `R̃_DAG`, pinned for the attempt (`create_snapshot`).
    fn con_snapshot<'a>(
        &'a self,
        step: &'a OptStep,
    ) -> BoxFuture<'a, Result<VersionSet, StepError>>;

    /// HB's prefetch notice: stage `keys` into the cut now (best effort: errors are only
    /// logged; the function's own reads stage whatever is still missing).
    fn prefetch<'a>(&'a self, keys: KeySet) -> BoxFuture<'a, ()>;

    /// HB: what Algorithm 1 would read here for a function reading `keys` (`hb::view`;
    /// pins nothing, stages nothing).
    fn hb_view(&self, keys: &KeySet, rdag: &KeySet) -> cache::hb::MetaView;

    /// Another cache's fetch of versions pinned here for `attempt` (`cache::Pins::fetch_refs`).
    fn fetch_pinned(&self, attempt: u64, refs: &VersionSet) -> BTreeMap<Key, MultiKeyCausal>;

    /// Dependency GC: what this cache holds (per key the meet of its cut's and pins'
    /// clocks), once every fetch it began before the call has ended; `None` if it cannot
    /// report (they did not end in time, or too many keys).
    fn gc_report(&self) -> BoxFuture<'_, Option<Holdings>>;

    /// Dependency GC: learns stable clocks (the cut prunes now, the writers at commit).
    fn gc_stable(&self, stable: &Stable);

    /// Drops everything cached and pinned: a host that lost its scheduler may have missed
    /// GC rounds, so what it held before cannot be trusted to be above their stable clocks.
    fn forget(&self);
}

/// The prefix of the keys recording committed calls: `lkv.faas/done/<scheduler id>/<run
/// id>`, set by the sink after its commit, deleted by the scheduler when the call ends.
pub const COMMIT_MARKER_PREFIX: &str = "lkv.faas/done/";

/// [`DataPlane::committed`] over the store: the marker key exists.
pub async fn marker_exists(store: &client::Client, marker: &str) -> Result<bool, String> {
    store
        .get(marker)
        .await
        .map(|v| v.is_some())
        .map_err(|e| e.to_string())
}

/// [`DataPlane::mark_committed`] over the store.
pub async fn set_marker(store: &client::Client, marker: &str) -> Result<(), String> {
    store.assign(marker, b"1").await.map_err(|e| e.to_string())
}

/// Runs `commit` unless the commit recorded under `marker` happened already, then records
/// it (an empty `marker`: always commit, record nothing). Decision 13: a sink run again
/// after its first host committed and failed before answering does not write a second,
/// concurrent version. Left open: a host that fails between its writes and the record.
pub(crate) async fn commit_once<Fut>(
    data: &dyn DataPlane,
    marker: &str,
    commit: impl FnOnce() -> Fut,
) -> Result<(), String>
where
    Fut: Future<Output = Result<(), String>>,
{
    if !marker.is_empty() && data.committed(marker).await? {
        tracing::info!(marker, "the call's writes were committed by an earlier run");
        return Ok(());
    }
    commit().await?;
    if !marker.is_empty() {
        data.mark_committed(marker).await?;
    }
    Ok(())
}

/// Reads through the store's client, writes LWW values.
pub struct DirectStore {
    store: client::Client,
}

impl DirectStore {
    /// Over `store`.
    pub fn new(store: client::Client) -> DirectStore {
        DirectStore { store }
    }
}

/// The versions of a value a function sees: its bytes (one per concurrent version of a
/// causal value), or its rendering for other lattice types.
pub fn versions(value: &Value) -> Vec<Bytes> {
    match value {
        Value::Lww(l) => vec![Bytes::copy_from_slice(&l.value)],
        Value::SingleKeyCausal(c) => c.values().map(|b| Bytes::copy_from_slice(b)).collect(),
        Value::MultiKeyCausal(c) => c.values().map(|b| Bytes::copy_from_slice(b)).collect(),
        other => vec![Bytes::from(format!("{other:?}"))],
    }
}

impl DataPlane for DirectStore {
    fn committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(marker_exists(&self.store, marker))
    }

    fn mark_committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(set_marker(&self.store, marker))
    }

    fn snapshot<'a>(
        &'a self,
        _run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>> {
        Box::pin(async move {
            let values = self
                .store
                .get_many(&keys)
                .await
                .map_err(|e| e.to_string())?;
            Ok(keys
                .into_iter()
                .zip(values)
                .map(|(key, v)| pb::KeyRead {
                    key,
                    found: v.is_some(),
                    values: v.as_ref().map(versions).unwrap_or_default(),
                    meta: Bytes::new(),
                })
                .collect())
        })
    }

    fn commit<'a>(
        &'a self,
        _run_id: u64,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            for w in writes {
                self.store
                    .assign(&w.key, &w.value)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    }
}
