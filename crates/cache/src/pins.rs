//! Pinned temporary versions (spec I5, I6, P:408): full versions a cache keeps for one
//! request attempt, so its functions read exactly what was validated and other caches can
//! fetch exactly the versions a versionset names, whatever the cut does meanwhile.
//!
//! Per request and key the store keeps every distinct value pinned (by clock): the versions
//! of `S_d`/`S_i` taken from the cut, and the read versions a function was bound to (which
//! may merge in versions fetched from other caches). A fetch for `(req, key, clock)` answers
//! the merge of the values pinned at or below `clock`: for a [`crate::VersionRef`] whose
//! sources each pinned part of the version, the answers of all sources merge to exactly
//! `clock`.
//!
//! Lifetime: pins are released by [`Pins::release`] when the request attempt ends (DAG end,
//! abort, HB early abort, fallback to CON), and otherwise dropped by [`Pins::expire`] once
//! their deadline passed (the sink died, or the release was lost). Every pin for a request
//! pushes its deadline out. The store is bounded in versions and bytes; a pin that does not
//! fit is refused whole ([`Error::PinsFull`]).
//!
//! A pin holds a [`Shared`] value: pinning a value of the cut shares its allocation with the
//! cut (a reference count, no copy of the payloads). The bounds count every pinned value in
//! full, shared or not.

use std::collections::BTreeMap;

use lattice::{Lattice, MultiKeyCausal, VectorClock};

use crate::cut::{value_bytes, Shared};
use crate::gc::Holdings;
use crate::{Error, Key, ReqId, VersionSet};

/// Bounds of the pin store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PinLimits {
    /// Most distinct values pinned, over all requests.
    pub max_versions: usize,
    /// Most bytes pinned ([`value_bytes`]), over all requests.
    pub max_bytes: usize,
}

impl Default for PinLimits {
    /// 100,000 values, 256 MiB.
    fn default() -> Self {
        PinLimits {
            max_versions: 100_000,
            max_bytes: 256 << 20,
        }
    }
}

/// Everything pinned for one request attempt.
#[derive(Clone, Debug, Default)]
struct Pinned {
    /// Dropped by [`Pins::expire`] after this time.
    deadline_ms: u64,
    /// Key → clock → the value pinned with that clock.
    keys: BTreeMap<Key, BTreeMap<VectorClock, Shared>>,
}

/// The pinned versions of one cache, per request attempt.
#[derive(Clone, Debug, Default)]
pub struct Pins {
    limits: PinLimits,
    reqs: BTreeMap<ReqId, Pinned>,
    versions: usize,
    bytes: usize,
}

impl Pins {
    /// An empty pin store with these bounds.
    pub fn new(limits: PinLimits) -> Self {
        Pins {
            limits,
            ..Pins::default()
        }
    }

    /// Pins `values` for `req` until at least `deadline_ms`, all or nothing. Bottoms (keys
    /// bound to "does not exist") need no pin and are skipped; a value already pinned for
    /// the request with the same clock is not pinned twice. A [`Shared`] value is pinned
    /// without copying its payloads.
    ///
    /// # Errors
    /// [`Error::PinsFull`] if the new values would exceed a bound; nothing is pinned then
    /// (earlier pins of the request stay, with their deadline pushed out).
    pub fn pin<I, V>(&mut self, req: ReqId, deadline_ms: u64, values: I) -> Result<usize, Error>
    where
        I: IntoIterator<Item = (Key, V)>,
        V: Into<Shared>,
    {
        let entry = self.reqs.entry(req).or_default();
        entry.deadline_ms = entry.deadline_ms.max(deadline_ms);
        let mut fresh: BTreeMap<(Key, VectorClock), Shared> = BTreeMap::new();
        for (key, value) in values {
            let value: Shared = value.into();
            if value.is_empty() {
                continue;
            }
            let clock = value.clock();
            let pinned = entry.keys.get(&key).is_some_and(|m| m.contains_key(&clock));
            if !pinned {
                fresh.insert((key, clock), value);
            }
        }
        let bytes: usize = fresh.iter().map(|((k, _), v)| value_bytes(k, v)).sum();
        if self.versions + fresh.len() > self.limits.max_versions
            || self.bytes + bytes > self.limits.max_bytes
        {
            if self.reqs.get(&req).is_some_and(|p| p.keys.is_empty()) {
                self.reqs.remove(&req);
            }
            return Err(Error::PinsFull {
                versions: self.versions,
                bytes: self.bytes,
                max_versions: self.limits.max_versions,
                max_bytes: self.limits.max_bytes,
            });
        }
        let count = fresh.len();
        let entry = self.reqs.entry(req).or_default();
        for ((key, clock), value) in fresh {
            entry.keys.entry(key).or_default().insert(clock, value);
        }
        self.versions += count;
        self.bytes += bytes;
        Ok(count)
    }

    /// What is pinned, over every request, for a GC round's report (`crate::gc::Round`):
    /// per key the meet of the pinned clocks.
    pub fn holdings(&self) -> Holdings {
        self.reqs
            .values()
            .flat_map(|p| p.keys.iter())
            .flat_map(|(k, m)| m.keys().map(move |c| (k.clone(), c.clone())))
            .collect()
    }

    /// Everything pinned for `(req, key)`, by clock: the versions of `S_d`/`S_i` and the
    /// read versions of the request's functions at this cache.
    pub fn pinned(&self, req: ReqId, key: &[u8]) -> impl Iterator<Item = &MultiKeyCausal> + '_ {
        self.reqs
            .get(&req)
            .and_then(|p| p.keys.get(key))
            .into_iter()
            .flat_map(|m| m.values().map(|v| &**v))
    }

    /// The value pinned for `(req, key)` with exactly this clock.
    pub fn get(&self, req: ReqId, key: &[u8], clock: &VectorClock) -> Option<&MultiKeyCausal> {
        self.reqs.get(&req)?.keys.get(key)?.get(clock).map(|v| &**v)
    }

    /// What this cache contributes to the version of `key` at `clock` for `req`: the merge
    /// of the values it pinned for the request at or below `clock` (`None` if none). This
    /// is what a cache answers another cache's fetch with.
    pub fn fetch(&self, req: ReqId, key: &[u8], clock: &VectorClock) -> Option<MultiKeyCausal> {
        let pinned = self.reqs.get(&req)?.keys.get(key)?;
        let mut out: Option<MultiKeyCausal> = None;
        for (c, v) in pinned {
            if c.leq(clock) {
                match &mut out {
                    Some(o) => {
                        o.merge_ref(v);
                    }
                    None => out = Some(MultiKeyCausal::clone(v)),
                }
            }
        }
        out
    }

    /// Answers another cache's fetch of `refs` for `req`: [`Pins::fetch`] for each ref
    /// (keys with nothing pinned here are left out).
    pub fn fetch_refs(&self, req: ReqId, refs: &VersionSet) -> BTreeMap<Key, MultiKeyCausal> {
        refs.iter()
            .filter_map(|(k, r)| self.fetch(req, k, &r.clock).map(|v| (k.clone(), v)))
            .collect()
    }

    /// Releases everything pinned for `req` (request end, abort, early abort, CON fallback);
    /// returns how many values were released.
    pub fn release(&mut self, req: ReqId) -> usize {
        let Some(pinned) = self.reqs.remove(&req) else {
            return 0;
        };
        let mut count = 0;
        for (key, values) in pinned.keys {
            for v in values.values() {
                count += 1;
                self.bytes -= value_bytes(&key, v);
            }
        }
        self.versions -= count;
        count
    }

    /// Releases every request whose deadline is before `now_ms`; returns them.
    pub fn expire(&mut self, now_ms: u64) -> Vec<ReqId> {
        let expired: Vec<ReqId> = self
            .reqs
            .iter()
            .filter(|(_, p)| p.deadline_ms < now_ms)
            .map(|(r, _)| *r)
            .collect();
        for req in &expired {
            self.release(*req);
        }
        expired
    }

    /// Pushes `req`'s deadline out to at least `deadline_ms` (a long-running DAG).
    pub fn extend(&mut self, req: ReqId, deadline_ms: u64) {
        if let Some(p) = self.reqs.get_mut(&req) {
            p.deadline_ms = p.deadline_ms.max(deadline_ms);
        }
    }

    /// Requests with pins (or an empty entry after a refused pin).
    pub fn requests(&self) -> usize {
        self.reqs.len()
    }

    /// Distinct values pinned.
    pub fn versions(&self) -> usize {
        self.versions
    }

    /// Bytes pinned.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The bounds.
    pub fn limits(&self) -> PinLimits {
        self.limits
    }
}
