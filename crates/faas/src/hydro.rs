//! HydroCache in the compute host: [`CausalCache`], the host's [`DataPlane`] with protocol
//! CT (spec §4.1). It is the I/O shell around the pure `cache` crate: it fetches, puts and
//! subscribes; `cache` decides.
//!
//! - **One per host.** It owns the host's strict causal cut ([`Cut`], capacity in bytes),
//!   the pinned versions of running DAGs ([`Pins`]) and one writer ([`Executor`]) per
//!   executor slot. Everything sits behind one mutex that is never held across I/O: a
//!   protocol step (merge a staged batch, take a snapshot, commit) runs start to end under
//!   it, so it sees a frozen cut (I4) and nothing interleaves with a merge (I3).
//! - **Snapshot** (CT: `C ∩ R̃_DAG`). Keys not in the cut are staged ([`Staging`]): its
//!   fetch lists go to the store with `get_many` outside the lock (from the fourth ask of
//!   a key on, `get_all`, which reads every replica), answers are accepted, and once the
//!   batch is closed under its dependencies it is merged and the snapshot taken in the same
//!   lock hold ([`ct_snapshot_shared`]), pinned for the run. Functions see the pinned values:
//!   their siblings as bytes (one: the bytes; several: a tuple), and in
//!   [`pb::KeyRead::meta`] the clock and dependencies they were read at.
//! - **Commit** at the sink: [`Executor::commit`] with the run's pinned read versions
//!   (I2: a written key that was read inherits its dependencies), one executor slot per run
//!   (`run_id mod slots`); every returned `MultiKeyCausal` is put with `put_many`, retried
//!   with the same versions (merging twice is a no-op). Then the host's own writes are
//!   staged as a push ([`Staging::for_pushed`]) and merged: a later DAG on this host reads
//!   its writes (read-your-writes on one host; another host sees them through its
//!   subscriptions).
//! - **Release**: the host calls [`DataPlane::release`] when a run ends for any reason
//!   (answer, error, timeout, or the run abandoned when the scheduler link breaks); pins
//!   also carry a deadline ([`CacheConfig::pin_lifetime`]) as a backstop.
//! - **Refresh by subscription**: every key that enters the cut is subscribed in the store
//!   ([`client::Client::subscribe_from`], period [`CacheConfig::refresh_period`]), a key
//!   fetched on a miss from the version fetched, so that the store does not push the
//!   value the miss has just read a second time; evicted keys are unsubscribed. A pushed value is staged with [`Staging::for_pushed`], its missing
//!   dependencies fetched as for a miss, and merged atomically. A key whose subscription
//!   cannot be made is evicted (with its dependents) rather than left to go stale; the next
//!   read fetches it again.
//!
//! # Other lattice types
//! A key holding another type than `MultiKeyCausal` reads as one version without
//! dependencies: an LWW register as its bytes at a clock of one entry, the reserved actor
//! [`LWW_ACTOR`] at the register's HLC time, so a newer LWW write supersedes the older one
//! in the cut (equal times with different bytes stay siblings); a single-key causal value
//! as its versions with their own clocks; any other type as its debug rendering at the
//! empty clock. Committing a write to a key that holds another type fails the call (the
//! store refuses a `MultiKeyCausal` put there: `WRONG_TYPE`).
//!
//! # Executor ids
//! A slot's actor id in clocks is `base << 32 | epoch` ([`Executor`]); each slot takes a
//! fresh random 32-bit `base` when the cache is created (distinct within the host, never
//! `u32::MAX`, which [`LWW_ACTOR`] uses), so a restarted host never reuses a clock of its
//! previous incarnation: two incarnations (or two hosts) collide only if they draw the same
//! base, with probability about `slots² / 2³²` per pair.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use cache::snapshot::ct_snapshot_shared;
use cache::versionset::refs_of;
use cache::{
    CacheId, Cut, Executor, Fetch, Here, Key, KeySet, Merged, MultiKeyCausal, PinLimits, Pins,
    ReqId, Staging, Step,
};
use client::{Notification, Subscription};
use lattice::Value;
use tokio::sync::{mpsc, Notify};

use crate::data::{BoxFuture, DataPlane, OptPlane};
use crate::pb;
use crate::values::key_read_shared;
pub use crate::values::{causal_of, LWW_ACTOR};

/// Pushed values waiting for the refresh task (bounded: a full queue makes the
/// subscriptions' own bounded buffers keep only the latest value per key).
const PUSH_QUEUE: usize = 1024;
/// Pushed values staged together in one batch.
const PUSH_BATCH: usize = 64;
/// Asks of one key before a snapshot gives up (a dependency that never shows up: its
/// writer's put was lost). With the back-off between asks, about 17 s.
const MAX_FETCH_ATTEMPTS: u32 = 40;
/// Fetch rounds of one snapshot before it gives up whatever the keys: a chain of
/// dependencies asks a different key each round (each attempt 0), as deep as the keys that
/// depend on one another, so this bound is far above [`MAX_FETCH_ATTEMPTS`] (a hot key
/// set of 80 keys, each call reading three and writing one, made chains deeper than 40
/// rounds once calls got faster).
const MAX_FETCH_ROUNDS: u32 = 400;
/// Longest wait between two asks of a key whose answer did not supersede what is needed.
const MAX_FETCH_BACKOFF: Duration = Duration::from_millis(500);
/// Attempts of the puts of one commit.
const PUT_ATTEMPTS: u32 = 5;

/// A causal cache's settings.
#[derive(Clone, Debug)]
pub struct CacheConfig {
    /// Bytes the cut may hold (`cache::cut::value_bytes`); default 256 MiB.
    pub capacity: usize,
    /// Bounds of the pinned versions of running DAGs.
    pub pins: PinLimits,
    /// Executor slots: one writer (`cache::Executor`) each.
    pub slots: u32,
    /// Keys in a slot's latest-written table before it rotates to a fresh id (default
    /// 10 000).
    pub max_latest: usize,
    /// The period asked of the store's subscriptions: a subscribed key's new versions are
    /// pushed at most once per period (the store clamps it to [10 ms, 60 s]; default
    /// 100 ms, the store's own default).
    pub refresh_period: Duration,
    /// Pins of a run that was never released are dropped after this long (default 2 h,
    /// past the longest call timeout).
    pub pin_lifetime: Duration,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            capacity: 256 << 20,
            pins: PinLimits::default(),
            slots: 3,
            max_latest: 10_000,
            refresh_period: Duration::from_millis(100),
            pin_lifetime: Duration::from_secs(2 * 3600),
        }
    }
}

/// Counters of a cache, for tests and reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Keys in the cut.
    pub keys: usize,
    /// Bytes in the cut.
    pub bytes: usize,
    /// Runs with pinned versions.
    pub pinned_runs: usize,
    /// Snapshots whose keys were all cached already.
    pub hits: u64,
    /// Snapshots that fetched from the store first.
    pub misses: u64,
    /// Pushed values merged.
    pub pushes: u64,
    /// Keys evicted (to make room, with their dependents, or after a failed subscribe).
    pub evicted: u64,
    /// Keys subscribed now.
    pub subscribed: usize,
    /// OPT: functions whose reads validated here.
    pub opt_functions: u64,
    /// OPT: validations that aborted (or whose remote fetches failed).
    pub opt_aborts: u64,
    /// OPT and CON: fetches of pinned versions from other caches.
    pub remote_fetches: u64,
    /// CON: functions whose reads were bound here.
    pub con_functions: u64,
    /// HB: keys staged on a prefetch notice.
    pub prefetched: u64,
    /// Dependency GC: stable clocks learnt.
    pub gc_rounds: u64,
    /// Dependency GC: cached values pruned when stable clocks were learnt.
    pub gc_pruned: u64,
    /// The dependency lists of the cut's values (keys each depends on), over at most
    /// [`crate::gc::DEPS_GAUGE_KEYS`] of its keys: the median, the 99th percentile and the largest.
    pub deps_p50: usize,
    /// See [`CacheStats::deps_p50`].
    pub deps_p99: usize,
    /// See [`CacheStats::deps_p50`].
    pub deps_max: usize,
    /// The causal metadata of the cut's values in bytes (clocks and dependency lists, as
    /// the store encodes them, [`crate::gc::meta_gauge`]): the median, the 99th percentile
    /// and the largest.
    pub meta_p50: usize,
    /// See [`CacheStats::meta_p50`].
    pub meta_p99: usize,
    /// See [`CacheStats::meta_p50`].
    pub meta_max: usize,
}

/// The state every protocol step works on, under one lock.
pub(crate) struct Inner {
    pub(crate) cut: Cut,
    pub(crate) pins: Pins,
    pub(crate) writers: Vec<Executor>,
    /// The keys each run pinned (its read set).
    pub(crate) runs: HashMap<u64, KeySet>,
    pub(crate) stats: CacheStats,
}

/// Subscription changes the refresh task has to make.
#[derive(Default)]
struct Pending {
    add: BTreeSet<Key>,
    remove: BTreeSet<Key>,
    /// Of the keys in `add` that entered the cut from a fetch, the store's version of the
    /// value fetched ([`client::value_version`]): the subscription starts from it, so the
    /// store does not push the value the miss has just read a second time.
    known: HashMap<Key, u64>,
}

/// HydroCache for one compute host (protocol CT). See the module docs.
pub struct CausalCache {
    store: client::Client,
    pub(crate) config: CacheConfig,
    id: CacheId,
    inner: Mutex<Inner>,
    pending: Mutex<Pending>,
    /// Wakes the refresh task: subscriptions to change, or the cache dropped.
    changed: Arc<Notify>,
    /// Fetches in flight, for the dependency GC's reports (`crate::gc`).
    pub(crate) flights: crate::gc::InFlight,
}

impl Drop for CausalCache {
    fn drop(&mut self) {
        self.changed.notify_one(); // the refresh task sees the cache gone and ends
    }
}

/// How a staging starts.
pub(crate) enum Start {
    /// Nothing to push: stage whatever of the wanted keys is missing.
    Keys,
    /// Values written by this host.
    Pushed(Vec<(Key, MultiKeyCausal)>),
    /// Values pushed by the store for subscribed keys: merged only into keys that are
    /// still cached when the batch merges. A push may be older than a dependency-GC round
    /// that did not count this cache for a key it had evicted (`crate::gc`); joined with a
    /// cached value it cannot lower it, inserted afresh it could.
    Refresh(Vec<(Key, MultiKeyCausal)>),
}

impl CausalCache {
    /// A cache over `store`, and its refresh task (spawned on the current runtime; it ends
    /// when the cache is dropped).
    pub fn start(store: client::Client, config: CacheConfig) -> Arc<CausalCache> {
        let mut bases = HashSet::new();
        let writers = (0..config.slots.max(1))
            .map(|_| {
                let base = loop {
                    let b = fastrand::u32(..u32::MAX);
                    if bases.insert(b) {
                        break b;
                    }
                };
                Executor::new(base, config.max_latest)
            })
            .collect();
        let cache = Arc::new(CausalCache {
            id: CacheId(fastrand::u64(..)),
            inner: Mutex::new(Inner {
                cut: Cut::new(config.capacity),
                pins: Pins::new(config.pins),
                writers,
                runs: HashMap::new(),
                stats: CacheStats::default(),
            }),
            pending: Mutex::new(Pending::default()),
            changed: Arc::new(Notify::new()),
            flights: crate::gc::InFlight::default(),
            store,
            config,
        });
        tokio::spawn(refresh(Arc::downgrade(&cache), cache.changed.clone()));
        cache
    }

    /// This cache's id in version refs.
    pub fn id(&self) -> CacheId {
        self.id
    }

    /// The actor ids its executor slots write with now.
    pub fn actors(&self) -> Vec<u64> {
        self.lock().writers.iter().map(Executor::actor).collect()
    }

    /// Counters.
    pub fn stats(&self) -> CacheStats {
        let g = self.lock();
        let mut s = g.stats;
        s.keys = g.cut.len();
        s.bytes = g.cut.bytes();
        s.pinned_runs = g.pins.requests();
        (s.deps_p50, s.deps_p99, s.deps_max) = crate::gc::dep_gauge(&g.cut);
        (s.meta_p50, s.meta_p99, s.meta_max) = crate::gc::meta_gauge(&g.cut);
        s
    }

    /// Checks Def. 3 over the whole cut (tests).
    pub fn check(&self) -> Result<(), String> {
        self.lock().cut.check().map_err(|e| e.to_string())
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic under the lock leaves a consistent cut (every step changes it in one
        // call), so a poisoned lock is taken over.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records what a merge changed for the refresh task: subscribe `added`, unsubscribe
    /// `evicted`.
    fn note(&self, merged: &Merged) {
        self.note_fetched(merged, &HashMap::new());
    }

    /// [`note`](Self::note), with the versions of the values fetched from the store for the
    /// merge (see `Pending::known`).
    fn note_fetched(&self, merged: &Merged, fetched: &HashMap<Key, u64>) {
        if merged.added.is_empty() && merged.evicted.is_empty() {
            return;
        }
        let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        for k in &merged.evicted {
            p.add.remove(k);
            p.known.remove(k);
            p.remove.insert(k.clone());
        }
        for k in &merged.added {
            p.remove.remove(k);
            p.add.insert(k.clone());
            match fetched.get(k) {
                Some(&v) => p.known.insert(k.clone(), v),
                None => p.known.remove(k),
            };
        }
        drop(p);
        self.changed.notify_one();
    }

    /// Stages what `start` says (or the keys of `wanted` missing from the cut), fetching
    /// from the store outside the lock, merges each closed batch, and once every key of
    /// `wanted` is cached runs `finish` in the same lock hold as the last merge.
    pub(crate) async fn settle<T>(
        &self,
        start: Start,
        wanted: &KeySet,
        finish: impl FnOnce(&mut Inner) -> Result<T, String>,
    ) -> Result<T, String> {
        let _flight = self.flights.start();
        let mut start = Some(start);
        let mut staging: Option<Staging> = None;
        let mut refreshed: Vec<Key> = Vec::new();
        // The store's version of each value fetched, for the subscriptions of the keys
        // that enter the cut (`Pending::known`).
        let mut fetched: HashMap<Key, u64> = HashMap::new();
        let mut rounds = 0;
        loop {
            let fetches: Vec<Fetch> = {
                let mut g = self.lock();
                let g = &mut *g;
                loop {
                    match start.take() {
                        Some(Start::Pushed(values)) => {
                            staging = Some(
                                Staging::for_pushed(values, &g.cut).map_err(|e| e.to_string())?,
                            );
                        }
                        Some(Start::Refresh(values)) => {
                            let values: Vec<_> = values
                                .into_iter()
                                .filter(|(k, _)| g.cut.contains(k))
                                .collect();
                            if values.is_empty() {
                                return finish(g);
                            }
                            refreshed = values.iter().map(|(k, _)| k.clone()).collect();
                            staging = Some(
                                Staging::for_pushed(values, &g.cut).map_err(|e| e.to_string())?,
                            );
                        }
                        Some(Start::Keys) | None => {}
                    }
                    let Some(st) = staging.as_mut() else {
                        let missing: Vec<Key> = wanted
                            .iter()
                            .filter(|k| !g.cut.contains(k))
                            .cloned()
                            .collect();
                        if missing.is_empty() {
                            return finish(g);
                        }
                        g.stats.misses += 1;
                        staging = Some(Staging::for_keys(missing, &g.cut));
                        continue;
                    };
                    match st.step(&g.cut) {
                        Step::Ready => {
                            if refreshed.iter().any(|k| !g.cut.contains(k)) {
                                return Err("a refreshed key was evicted meanwhile".into());
                            }
                            let merged = g.cut.merge_staging(st).map_err(|e| e.to_string())?;
                            g.stats.evicted += merged.evicted.len() as u64;
                            self.note_fetched(&merged, &fetched);
                            fetched.clear();
                            staging = None;
                        }
                        Step::Fetch(f) => break f,
                        // Every answer of a round is accepted before the next step.
                        Step::Wait => return Err("staging waits for nothing".into()),
                    }
                }
            };
            rounds += 1;
            let attempt = fetches.iter().map(|f| f.attempt).max().unwrap_or(0);
            if rounds > MAX_FETCH_ROUNDS || attempt >= MAX_FETCH_ATTEMPTS {
                let stuck = fetches
                    .iter()
                    .max_by_key(|f| f.attempt)
                    .expect("a fetch round asks for at least one key");
                return Err(format!(
                    "dependencies still missing after {rounds} rounds of fetches (e.g. {}, \
                     asked {} times)",
                    String::from_utf8_lossy(&stuck.key),
                    stuck.attempt + 1
                ));
            }
            if attempt > 0 {
                let wait = Duration::from_millis(5 << attempt.min(7)).min(MAX_FETCH_BACKOFF);
                tokio::time::sleep(wait).await;
            }
            let asked: Vec<Key> = fetches.into_iter().map(|f| f.key).collect();
            let mut keys = Vec::new();
            let mut values = Vec::new();
            if attempt >= 3 {
                for k in &asked {
                    values.push(self.store.get_all(k).await.map_err(|e| e.to_string())?);
                }
                keys.extend(asked.iter().cloned());
            }
            // A key asked again: its earlier answer was older than what a newer answer of
            // another key needs. Re-read the whole batch in one request, so that it is
            // sampled at one instant: asking only for the lagging keys chases writers
            // that commit faster than a round of asks (each answer needing newer versions
            // of the others) and may never close the batch.
            let mut batch = asked;
            if attempt > 0 {
                let st = staging.as_ref().ok_or("no staging")?;
                let more: Vec<Key> = st.keys().filter(|k| !batch.contains(k)).cloned().collect();
                batch.extend(more);
            }
            values.extend(
                self.store
                    .get_many(&batch)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            keys.extend(batch);
            let st = staging.as_mut().ok_or("no staging")?;
            for (k, v) in keys.into_iter().zip(values) {
                match &v {
                    Some(v) => fetched.insert(k.clone(), client::value_version(v)),
                    None => fetched.remove(&k),
                };
                st.accept(k, v.map(causal_of)).map_err(|e| e.to_string())?;
            }
        }
    }

    async fn snapshot_keys(
        &self,
        run_id: u64,
        keys: Vec<Bytes>,
    ) -> Result<Vec<pb::KeyRead>, String> {
        let rdag: KeySet = keys.iter().map(|k| Key::from(&k[..])).collect();
        let here = Here {
            cache: self.id,
            req: ReqId(run_id),
            deadline_ms: now_ms().saturating_add(millis(self.config.pin_lifetime)),
        };
        let mut values = self
            .settle(Start::Keys, &rdag, |g| {
                g.pins.expire(now_ms());
                let values = ct_snapshot_shared(&mut g.cut, &mut g.pins, here, &rdag)
                    .map_err(|e| e.to_string())?;
                g.runs
                    .entry(run_id)
                    .or_default()
                    .extend(rdag.iter().cloned());
                g.stats.hits += 1;
                Ok(values)
            })
            .await?;
        Ok(keys
            .into_iter()
            .map(|key| {
                // The pinned values are shared with the cut: the reply's payloads are views
                // of them, not copies.
                let v = values.remove(&key[..]).unwrap_or_default();
                key_read_shared(key, v)
            })
            .collect())
    }

    async fn commit_writes(&self, run_id: u64, writes: Vec<pb::Write>) -> Result<(), String> {
        let writes: BTreeMap<Key, lattice::Blob> = writes
            .into_iter()
            .map(|w| (Key::from(&w.key[..]), lattice::Blob::from(&w.value[..])))
            .collect();
        let versions = {
            let mut g = self.lock();
            let g = &mut *g;
            let req = ReqId(run_id);
            let read_versions: BTreeMap<Key, MultiKeyCausal> = g
                .runs
                .get(&run_id)
                .into_iter()
                .flatten()
                .map(|k| {
                    let v = g.pins.pinned(req, k).next().cloned().unwrap_or_default();
                    (k.clone(), v)
                })
                .collect();
            let reads = refs_of(&read_versions, self.id);
            let slot = (run_id % g.writers.len() as u64) as usize;
            g.writers[slot]
                .commit_pruned(writes, &reads, &read_versions, g.cut.stable())
                .map_err(|e| e.to_string())?
        };
        self.put_versions(versions).await
    }

    /// Puts a commit's versions to the store (retried with the same versions), then
    /// merges them into the cut (read-your-writes on this host).
    pub(crate) async fn put_versions(
        &self,
        versions: Vec<(Key, MultiKeyCausal)>,
    ) -> Result<(), String> {
        let items: Vec<(Key, Value)> = versions
            .iter()
            .map(|(k, v)| (k.clone(), Value::MultiKeyCausal(v.clone())))
            .collect();
        let mut attempt = 0;
        loop {
            match self.store.put_many(&items).await {
                Ok(()) => break,
                Err(e) if e.is_retryable() && attempt + 1 < PUT_ATTEMPTS => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(50 << attempt)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        }
        // Read-your-writes on this host: the commit's versions enter the cut as a push.
        let keys: Vec<Key> = versions.iter().map(|(k, _)| k.clone()).collect();
        if let Err(e) = self
            .settle(Start::Pushed(versions), &KeySet::new(), |_| Ok(()))
            .await
        {
            // The cut must not keep an older version of a key this host wrote.
            tracing::debug!("the host's own writes are evicted, not cached: {e}");
            self.evict(&keys);
        }
        Ok(())
    }

    /// Merges pushed values of subscribed keys still in the cut.
    async fn merge_pushed(&self, pushed: Vec<Notification>) {
        let values: Vec<(Key, MultiKeyCausal)> = {
            let g = self.lock();
            pushed
                .into_iter()
                .filter(|n| g.cut.contains(&n.key))
                .filter_map(|n| Some((n.key, causal_of(n.value?))))
                .collect()
        };
        if values.is_empty() {
            return;
        }
        let count = values.len() as u64;
        let keys: Vec<Key> = values.iter().map(|(k, _)| k.clone()).collect();
        match self
            .settle(Start::Refresh(values), &KeySet::new(), |_| Ok(()))
            .await
        {
            Ok(()) => self.lock().stats.pushes += count,
            Err(e) => {
                // Not left stale: evicted (with dependents), the next read fetches them.
                tracing::warn!("refresh: pushed values not merged, keys evicted: {e}");
                self.evict(&keys);
            }
        }
    }

    /// Drops the subscriptions of keys evicted outside a merge.
    pub(crate) fn note_evicted(&self, evicted: Vec<Key>) {
        self.note(&Merged {
            evicted,
            ..Merged::default()
        });
    }

    /// Evicts keys whose subscription failed (with their dependents).
    fn evict(&self, keys: &[Key]) {
        let mut g = self.lock();
        let mut evicted = Vec::new();
        for k in keys {
            evicted.extend(g.cut.evict(k));
        }
        g.stats.evicted += evicted.len() as u64;
        drop(g);
        self.note(&Merged {
            evicted,
            ..Merged::default()
        });
    }
}

impl DataPlane for CausalCache {
    fn snapshot<'a>(
        &'a self,
        run_id: u64,
        keys: Vec<Bytes>,
    ) -> BoxFuture<'a, Result<Vec<pb::KeyRead>, String>> {
        Box::pin(self.snapshot_keys(run_id, keys))
    }

    fn commit<'a>(
        &'a self,
        run_id: u64,
        writes: Vec<pb::Write>,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(self.commit_writes(run_id, writes))
    }

    fn committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<bool, String>> {
        Box::pin(crate::data::marker_exists(&self.store, marker))
    }

    fn mark_committed<'a>(&'a self, marker: &'a str) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(crate::data::set_marker(&self.store, marker))
    }

    fn release(&self, run_id: u64) {
        let mut g = self.lock();
        g.runs.remove(&run_id);
        g.pins.release(ReqId(run_id));
    }

    fn opt(&self) -> Option<&dyn OptPlane> {
        Some(self) // `faas::mtcc`
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, millis)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// One store subscription's forwarder: its pushes go to the refresh task; keys handed to
/// `remove` are unsubscribed when `removed` is notified. Ends with its last key.
async fn forward(
    mut sub: Subscription,
    pushes: mpsc::Sender<Notification>,
    remove: Arc<Mutex<Vec<Key>>>,
    removed: Arc<Notify>,
) {
    loop {
        tokio::select! {
            n = sub.next() => match n {
                Some(n) => {
                    if pushes.send(n).await.is_err() {
                        return;
                    }
                }
                None => return,
            },
            () = removed.notified() => {
                let keys = std::mem::take(&mut *remove.lock().unwrap_or_else(|p| p.into_inner()));
                let _ = sub.unsubscribe(keys).await;
            }
        }
    }
}

/// A subscription as the refresh task tracks it.
struct SubHandle {
    remove: Arc<Mutex<Vec<Key>>>,
    removed: Arc<Notify>,
    live: usize,
    task: tokio::task::AbortHandle,
}

/// The refresh task: keeps one store subscription per batch of keys that entered the cut,
/// unsubscribes evicted keys, and merges what the subscriptions push.
async fn refresh(cache: Weak<CausalCache>, changed: Arc<Notify>) {
    let (pushes_tx, mut pushes) = mpsc::channel::<Notification>(PUSH_QUEUE);
    let mut subs: HashMap<u64, SubHandle> = HashMap::new();
    let mut by_key: HashMap<Key, u64> = HashMap::new();
    let mut next_sub = 0u64;
    loop {
        tokio::select! {
            () = changed.notified() => {
                let Some(c) = cache.upgrade() else { break };
                let Pending { add, remove, known } =
                    std::mem::take(&mut *c.pending.lock().unwrap_or_else(|p| p.into_inner()));
                let mut touched = HashSet::new();
                for k in remove {
                    if let Some(id) = by_key.remove(&k) {
                        if let Some(h) = subs.get_mut(&id) {
                            h.remove.lock().unwrap_or_else(|p| p.into_inner()).push(k);
                            h.live -= 1;
                            touched.insert(id);
                        }
                    }
                }
                for id in touched {
                    if let Some(h) = subs.get(&id) {
                        h.removed.notify_one();
                        if h.live == 0 {
                            subs.remove(&id); // its forwarder ends after the unsubscribe
                        }
                    }
                }
                let add: Vec<Key> = add.into_iter().filter(|k| !by_key.contains_key(k)).collect();
                if !add.is_empty() {
                    let from = add.iter().map(|k| (k, known.get(k).copied().unwrap_or(0)));
                    match c.store.subscribe_from(from, c.config.refresh_period).await {
                        Ok(sub) => {
                            next_sub += 1;
                            let remove = Arc::new(Mutex::new(Vec::new()));
                            let removed = Arc::new(Notify::new());
                            let task = tokio::spawn(forward(
                                sub,
                                pushes_tx.clone(),
                                remove.clone(),
                                removed.clone(),
                            ))
                            .abort_handle();
                            for k in &add {
                                by_key.insert(k.clone(), next_sub);
                            }
                            subs.insert(next_sub, SubHandle { remove, removed, live: add.len(), task });
                        }
                        Err(e) => {
                            tracing::warn!(keys = add.len(), "cannot subscribe; evicting the keys: {e}");
                            c.evict(&add);
                        }
                    }
                }
                c.lock().stats.subscribed = by_key.len();
            }
            Some(first) = pushes.recv() => {
                let Some(c) = cache.upgrade() else { break };
                let mut batch = vec![first];
                while batch.len() < PUSH_BATCH {
                    match pushes.try_recv() {
                        Ok(n) => batch.push(n),
                        Err(_) => break,
                    }
                }
                c.merge_pushed(batch).await;
            }
        }
    }
    for h in subs.values() {
        h.task.abort();
    }
}
