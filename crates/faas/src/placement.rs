//! Where a call runs. Pure: no I/O, no clock.
//!
//! Protocol CT runs a whole DAG on one compute host. [`Placement::place`] picks the least
//! loaded host (running DAGs per executor); among equally loaded hosts, the one that
//! recently received the most of this call's key references (*data locality*: its cache,
//! once there is one, likely holds them), then the smallest host id. The scheduler keeps a
//! bounded LRU of key → host it last sent the key to ([`Locality`]).

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;

/// A host's identity (as it says in its hello; unique per connection in the scheduler).
pub type HostId = String;

/// What the placement knows of one host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostLoad {
    /// Its executor processes (at least 1 in the arithmetic).
    pub executors: u32,
    /// DAGs this scheduler sent it that have not finished.
    pub in_flight: u32,
    /// DAGs running on it as it last reported (includes other schedulers' calls).
    pub reported: u32,
}

impl HostLoad {
    /// Running DAGs as best known: the scheduler's own count is fresh, the report covers
    /// other schedulers' calls.
    fn running(&self) -> u32 {
        self.in_flight.max(self.reported)
    }
}

/// A bounded LRU map from key to the host that last received a call referencing it.
#[derive(Clone, Debug)]
pub struct Locality {
    capacity: usize,
    tick: u64,
    /// key → (host, last use).
    entries: HashMap<Bytes, (HostId, u64)>,
    /// last use → key: the oldest first, for eviction.
    by_age: BTreeMap<u64, Bytes>,
}

impl Locality {
    /// An empty map holding at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> Locality {
        Locality {
            capacity: capacity.max(1),
            tick: 0,
            entries: HashMap::new(),
            by_age: BTreeMap::new(),
        }
    }

    /// Records that `key` was sent to `host`, evicting the least recently used key if full.
    pub fn record(&mut self, key: &Bytes, host: &str) {
        self.tick += 1;
        if let Some((_, age)) = self.entries.remove(key) {
            self.by_age.remove(&age);
        } else if self.entries.len() >= self.capacity {
            if let Some((_, oldest)) = self.by_age.pop_first() {
                self.entries.remove(&oldest);
            }
        }
        self.entries
            .insert(key.clone(), (host.to_string(), self.tick));
        self.by_age.insert(self.tick, key.clone());
    }

    /// The host `key` was last sent to.
    pub fn host_of(&self, key: &[u8]) -> Option<&str> {
        self.entries.get(key).map(|(h, _)| h.as_str())
    }

    /// Forgets every key of `host`.
    pub fn forget_host(&mut self, host: &str) {
        let gone: Vec<(Bytes, u64)> = self
            .entries
            .iter()
            .filter(|(_, (h, _))| h == host)
            .map(|(k, (_, age))| (k.clone(), *age))
            .collect();
        for (k, age) in gone {
            self.entries.remove(&k);
            self.by_age.remove(&age);
        }
    }

    /// Keys held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if no key is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The scheduler's view of its hosts, and its placement decisions.
#[derive(Clone, Debug)]
pub struct Placement {
    hosts: BTreeMap<HostId, HostLoad>,
    locality: Locality,
}

/// Default bound of the locality map.
pub const DEFAULT_LOCALITY_KEYS: usize = 100_000;

impl Default for Placement {
    fn default() -> Self {
        Placement::new(DEFAULT_LOCALITY_KEYS)
    }
}

impl Placement {
    /// No hosts; a locality map of at most `locality_keys` keys.
    pub fn new(locality_keys: usize) -> Placement {
        Placement {
            hosts: BTreeMap::new(),
            locality: Locality::new(locality_keys),
        }
    }

    /// A host joined (or said hello again: its counts restart).
    pub fn add_host(&mut self, host: &str, executors: u32) {
        self.hosts.insert(
            host.to_string(),
            HostLoad {
                executors,
                ..HostLoad::default()
            },
        );
    }

    /// A host left: it is no longer a candidate, and the keys it had are forgotten.
    pub fn remove_host(&mut self, host: &str) {
        self.hosts.remove(host);
        self.locality.forget_host(host);
    }

    /// A host's periodic report.
    pub fn report(&mut self, host: &str, running: u32, executors: u32) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.reported = running;
            h.executors = executors;
        }
    }

    /// The hosts and their loads.
    pub fn hosts(&self) -> &BTreeMap<HostId, HostLoad> {
        &self.hosts
    }

    /// The locality map.
    pub fn locality(&self) -> &Locality {
        &self.locality
    }

    /// Chooses the host for a call referencing `keys`, and counts the call as in flight
    /// there (and the keys as sent there). `None` if there is no host.
    pub fn place(&mut self, keys: &[Bytes]) -> Option<HostId> {
        let best = self
            .hosts
            .iter()
            .map(|(id, load)| {
                let local = keys
                    .iter()
                    .filter(|k| self.locality.host_of(k) == Some(id.as_str()))
                    .count();
                (id, load, local)
            })
            .min_by(|(a_id, a, a_local), (b_id, b, b_local)| {
                // running/executors, compared without division.
                let a_load = u64::from(a.running()) * u64::from(b.executors.max(1));
                let b_load = u64::from(b.running()) * u64::from(a.executors.max(1));
                a_load
                    .cmp(&b_load)
                    .then(b_local.cmp(a_local))
                    .then(a_id.cmp(b_id))
            })
            .map(|(id, _, _)| id.clone())?;
        if let Some(h) = self.hosts.get_mut(&best) {
            h.in_flight += 1;
        }
        for k in keys {
            self.locality.record(k, &best);
        }
        Some(best)
    }

    /// A call placed on `host` finished (or was taken away from it).
    pub fn finished(&mut self, host: &str) {
        if let Some(h) = self.hosts.get_mut(host) {
            h.in_flight = h.in_flight.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ks: &[&str]) -> Vec<Bytes> {
        ks.iter()
            .map(|k| Bytes::copy_from_slice(k.as_bytes()))
            .collect()
    }

    #[test]
    fn no_host_no_placement() {
        assert_eq!(Placement::default().place(&[]), None);
    }

    #[test]
    fn the_least_loaded_host_wins() {
        let mut p = Placement::default();
        p.add_host("a", 3);
        p.add_host("b", 3);
        assert_eq!(p.place(&[]).as_deref(), Some("a")); // tie: smallest id
        assert_eq!(p.place(&[]).as_deref(), Some("b"));
        assert_eq!(p.place(&[]).as_deref(), Some("a"));
        p.finished("b");
        assert_eq!(p.place(&[]).as_deref(), Some("b"));
    }

    #[test]
    fn load_is_per_executor() {
        let mut p = Placement::default();
        p.add_host("small", 1);
        p.add_host("big", 4);
        let placed: Vec<_> = (0..5).map(|_| p.place(&[]).unwrap()).collect();
        assert_eq!(placed.iter().filter(|h| *h == "big").count(), 4);
    }

    #[test]
    fn reports_count_other_schedulers_calls() {
        let mut p = Placement::default();
        p.add_host("a", 3);
        p.add_host("b", 3);
        p.report("a", 2, 3);
        assert_eq!(p.place(&[]).as_deref(), Some("b"));
    }

    #[test]
    fn ties_go_to_the_host_that_received_the_keys() {
        let mut p = Placement::default();
        p.add_host("a", 3);
        p.add_host("b", 3);
        // "b" gets x and y (after "a" got an unrelated call), then both finish.
        assert_eq!(p.place(&keys(&["z"])).as_deref(), Some("a"));
        assert_eq!(p.place(&keys(&["x", "y"])).as_deref(), Some("b"));
        p.finished("a");
        p.finished("b");
        assert_eq!(p.place(&keys(&["x", "q"])).as_deref(), Some("b"));
        p.finished("b");
        assert_eq!(p.place(&keys(&["z", "q"])).as_deref(), Some("a"));
        p.finished("a");
        // Load beats locality.
        p.place(&[]);
        p.place(&[]);
        assert_eq!(p.hosts()["a"].in_flight, 1);
        assert_eq!(p.place(&keys(&["x", "y"])).as_deref(), Some("b"));
    }

    #[test]
    fn a_removed_host_is_not_chosen_and_its_keys_are_forgotten() {
        let mut p = Placement::default();
        p.add_host("a", 3);
        p.place(&keys(&["k"]));
        p.remove_host("a");
        assert!(p.locality().is_empty());
        assert_eq!(p.place(&keys(&["k"])), None);
    }

    #[test]
    fn the_locality_map_is_a_bounded_lru() {
        let mut l = Locality::new(2);
        let (a, b, c) = (Bytes::from("a"), Bytes::from("b"), Bytes::from("c"));
        l.record(&a, "h1");
        l.record(&b, "h1");
        l.record(&a, "h2"); // a is now the most recent
        l.record(&c, "h1"); // evicts b
        assert_eq!(l.len(), 2);
        assert_eq!(l.host_of(b"a"), Some("h2"));
        assert_eq!(l.host_of(b"b"), None);
        assert_eq!(l.host_of(b"c"), Some("h1"));
    }
}
