//! How a compute host reads a DAG's key references and applies its writes.
//!
//! This is the seam where HydroCache plugs in: [`DataPlane::snapshot`] is where the cache
//! will pin a causal snapshot of the DAG's read set (protocol CT: `C ∩ R̃_DAG`), and
//! [`DataPlane::commit`] where the sink's writes become mutually dependent
//! `MultiKeyCausal` versions. [`crate::hydro::CausalCache`] does both (the default);
//! [`DirectStore`], the "no cache" baseline, reads each key from the store and writes LWW
//! values one by one.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
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
