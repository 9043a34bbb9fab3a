//! The backing store's I/O: a runtime of its own, shared by the node's workers.
//!
//! The store's client (a pool of PostgreSQL connections) lives on one runtime thread,
//! `lkv-backing`, so that its connections do not depend on any worker's runtime. A
//! worker hands each batch or read to it and awaits the answer on its own thread; the
//! core then decides what the answer means (`crate::core`'s backing module).

use std::sync::Arc;

use backing::{BackingOptions, BackingStore, Postgres};
use bytes::Bytes;
use lattice::Record;

use crate::writeback::BackingConfig;

/// The node's backing store and the runtime its I/O runs on.
#[derive(Clone)]
pub struct BackingHandle {
    store: Arc<dyn BackingStore>,
    rt: tokio::runtime::Handle,
}

/// Owns the backing store's runtime thread; dropping it stops the thread.
pub struct BackingRuntime {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for BackingRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

impl std::fmt::Debug for BackingHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BackingHandle")
    }
}

/// Starts the runtime thread and the store's client (which connects lazily: a store that
/// is down at start puts the workers in failed mode at their first request, it does not
/// stop the node). Errors are configuration errors.
pub fn start(config: &BackingConfig) -> Result<(BackingHandle, BackingRuntime), String> {
    let url = config.url.clone().ok_or("no backing store configured")?;
    let options = BackingOptions {
        url,
        table: config.table.clone(),
        pool_size: config.pool_size,
        connect_timeout: std::time::Duration::from_millis(config.connect_timeout_ms),
        statement_timeout: std::time::Duration::from_millis(config.statement_timeout_ms),
    };
    options.validate().map_err(|e| e.to_string())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, started) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("lkv-backing".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready.send(Err(format!("backing store runtime: {e}")));
                    return;
                }
            };
            let store = rt.block_on(Postgres::connect(options));
            let store = match store {
                Ok(s) => s,
                Err(e) => {
                    let _ = ready.send(Err(e.to_string()));
                    return;
                }
            };
            let handle = BackingHandle {
                store: Arc::new(store),
                rt: rt.handle().clone(),
            };
            let _ = ready.send(Ok(handle));
            // Serves the store's connections until the node stops.
            let _ = rt.block_on(stopped);
        })
        .map_err(|e| format!("backing store thread: {e}"))?;
    let handle = started
        .recv()
        .map_err(|_| "the backing store thread stopped".to_string())??;
    Ok((handle, BackingRuntime { stop: Some(stop) }))
}

impl BackingHandle {
    /// Merges `batch` into the store in one transaction (empty: a ping).
    pub async fn apply(&self, batch: Vec<(Bytes, Record)>) -> Result<(), String> {
        let store = self.store.clone();
        let task = self.rt.spawn(async move {
            if batch.is_empty() {
                store.ping().await
            } else {
                store.apply(&batch).await.map(|_| ())
            }
        });
        match task.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("backing store task: {e}")),
        }
    }

    /// The stored records of `keys`, in order.
    pub async fn fetch(&self, keys: Vec<Bytes>) -> Result<Vec<Option<Record>>, String> {
        let store = self.store.clone();
        let task = self.rt.spawn(async move { store.fetch(&keys).await });
        match task.await {
            Ok(result) => result.map_err(|e| e.to_string()),
            Err(e) => Err(format!("backing store task: {e}")),
        }
    }
}
