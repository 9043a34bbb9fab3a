//! The paper's LWW baseline (HydroCache §6): each compute host reads key references
//! through a cache of its own, with no causal protocol, and writes LWW values.
//!
//! A key read is served from the host's cache if it was fetched (or written here) less than
//! [`LwwCacheConfig::refresh`] ago, else read from the store again, so a cached value is at
//! most one refresh period old, as the causal cache's subscriptions keep it. The keys of
//! one read are each what the cache or the store held when asked: there is no snapshot
//! across keys, no metadata, no validation. Writes are LWW values put one by one (as
//! [`crate::data::DirectStore`] does) and then cached (read-your-writes on the host).
//! The cache holds at most [`LwwCacheConfig::capacity`] bytes of keys and values; past
//! that the entries fetched longest ago are dropped.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use tokio::time::Instant;

use crate::data::{versions, BoxFuture, DataPlane};
use crate::pb;

/// The settings of an [`LwwCache`].
#[derive(Clone, Debug)]
pub struct LwwCacheConfig {
    /// Bytes of keys and values held, at most (default 256 MiB).
    pub capacity: usize,
    /// How long a cached value is served before it is read again (default 100 ms, the
    /// causal cache's default refresh period).
    pub refresh: Duration,
}

impl Default for LwwCacheConfig {
    fn default() -> Self {
        LwwCacheConfig {
            capacity: 256 << 20,
            refresh: Duration::from_millis(100),
        }
    }
}

/// Counters of an [`LwwCache`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LwwCacheStats {
    /// Keys read from the cache.
    pub hits: u64,
    /// Keys read from the store (absent, or older than the refresh period).
    pub misses: u64,
    /// Keys dropped to stay within the capacity.
    pub evicted: u64,
    /// Keys held now.
    pub keys: usize,
    /// Bytes held now.
    pub bytes: usize,
}

struct Entry {
    read: pb::KeyRead,
    at: Instant,
    bytes: usize,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<Bytes, Entry>,
    bytes: usize,
    stats: LwwCacheStats,
}

/// A compute host's LWW cache over the store (see the module docs).
pub struct LwwCache {
    store: client::Client,
    config: LwwCacheConfig,
    inner: Mutex<Inner>,
}

/// Bytes an entry is counted for: its key, its values, and 64 for the rest.
fn entry_bytes(read: &pb::KeyRead) -> usize {
    read.key.len() + read.values.iter().map(Bytes::len).sum::<usize>() + 64
}

impl Inner {
    fn insert(&mut self, read: pb::KeyRead, at: Instant, capacity: usize) {
        let bytes = entry_bytes(&read);
        if let Some(old) = self
            .entries
            .insert(read.key.clone(), Entry { read, at, bytes })
        {
            self.bytes -= old.bytes;
        }
        self.bytes += bytes;
        if self.bytes > capacity {
            // Down to 90 % in one pass (sorting per insert would cost more).
            let mut by_age: Vec<(Instant, Bytes)> = self
                .entries
                .iter()
                .map(|(k, e)| (e.at, k.clone()))
                .collect();
            by_age.sort();
            for (_, k) in by_age {
                if self.bytes <= capacity / 10 * 9 {
                    break;
                }
                if let Some(e) = self.entries.remove(&k) {
                    self.bytes -= e.bytes;
                    self.stats.evicted += 1;
                }
            }
        }
    }
}

impl LwwCache {
    /// A cache over `store`.
    pub fn new(store: client::Client, config: LwwCacheConfig) -> LwwCache {
        LwwCache {
            store,
            config,
            inner: Mutex::new(Inner::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its counters.
    pub fn stats(&self) -> LwwCacheStats {
        let g = self.lock();
        LwwCacheStats {
            keys: g.entries.len(),
            bytes: g.bytes,
            ..g.stats
        }
    }
}

impl DataPlane for LwwCache {
    fn committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(crate::data::marker_exists(&self.store, marker))
    }

    fn mark_committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(crate::data::set_marker(&self.store, marker))
    }

    fn snapshot<'a>(
        &'a self,
        _run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>> {
        Box::pin(async move {
            let now = Instant::now();
            let mut out: Vec<Option<pb::KeyRead>> = Vec::with_capacity(keys.len());
            let mut missing = Vec::new();
            {
                let mut g = self.lock();
                for (i, k) in keys.iter().enumerate() {
                    match g.entries.get(k) {
                        Some(e) if now.duration_since(e.at) < self.config.refresh => {
                            out.push(Some(e.read.clone()));
                            g.stats.hits += 1;
                        }
                        _ => {
                            out.push(None);
                            missing.push(i);
                            g.stats.misses += 1;
                        }
                    }
                }
            }
            if !missing.is_empty() {
                let ask: Vec<Bytes> = missing.iter().map(|&i| keys[i].clone()).collect();
                let values = self.store.get_many(&ask).await.map_err(|e| e.to_string())?;
                let mut g = self.lock();
                for (i, v) in missing.into_iter().zip(values) {
                    let read = pb::KeyRead {
                        key: keys[i].clone(),
                        found: v.is_some(),
                        values: v.as_ref().map(versions).unwrap_or_default(),
                        meta: Bytes::new(),
                    };
                    g.insert(read.clone(), now, self.config.capacity);
                    out[i] = Some(read);
                }
            }
            Ok(out.into_iter().flatten().collect())
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
                let read = pb::KeyRead {
                    key: w.key.clone(),
                    found: true,
                    values: vec![w.value.clone()],
                    meta: Bytes::new(),
                };
                self.lock()
                    .insert(read, Instant::now(), self.config.capacity);
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(key: &str, len: usize) -> pb::KeyRead {
        pb::KeyRead {
            key: Bytes::from(key.to_string()),
            found: true,
            values: vec![Bytes::from(vec![0u8; len])],
            meta: Bytes::new(),
        }
    }

    #[test]
    fn the_oldest_entries_go_first_when_over_capacity() {
        let mut inner = Inner::default();
        let t0 = Instant::now();
        let cap = 1100;
        for i in 0..5 {
            inner.insert(
                read(&format!("k{i}"), 136),
                t0 + Duration::from_millis(i),
                cap,
            );
        }
        assert_eq!(inner.bytes, 5 * 202);
        assert_eq!(inner.stats.evicted, 0);
        inner.insert(read("k5", 136), t0 + Duration::from_millis(5), cap);
        // 1212 > 1100: down to at most 990, oldest first.
        assert!(inner.bytes <= 990, "{}", inner.bytes);
        assert!(!inner.entries.contains_key(&Bytes::from("k0")));
        assert!(!inner.entries.contains_key(&Bytes::from("k1")));
        assert!(inner.entries.contains_key(&Bytes::from("k5")));
        assert_eq!(inner.stats.evicted, 2);
        // Replacing an entry counts its new size only.
        inner.insert(read("k5", 36), t0 + Duration::from_millis(6), cap);
        assert_eq!(inner.bytes, 3 * 202 + 102);
    }
}
