//! Dependency-metadata GC across the layer (`cache::gc`; docs/serverless.md,
//! "Dependency-metadata GC"): the messages' conversions and bounds, the registry of a
//! host cache's fetches in flight (a report waits for those begun before its probe), and
//! the gauges of a cut's dependency lists (what GC bounds) and of its values' causal
//! metadata in bytes (the paper's measure).
//!
//! The host cache's side of a round is in `mtcc` ([`crate::data::OptPlane::gc_report`],
//! [`crate::data::OptPlane::gc_stable`]); the scheduler's side (sampling the store's
//! replicas, probing every caching host, computing and sending the stable clocks) is
//! `scheduler::gc`.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use cache::{CausalVersion, Cut, Key, MultiKeyCausal, VectorClock};
use tokio::sync::Notify;

use crate::pb;

/// Most keys one report or one `GcStable` carries. A report that would carry more is not
/// sent (the round is abandoned: a partial report would make `Stable` too high); a
/// `GcStable` beyond it is cut (a partial `Stable` only prunes less).
pub const MAX_GC_KEYS: usize = 200_000;
/// Most clock entries per key in either message.
pub const MAX_GC_CLOCK: usize = 4096;
/// How long a host waits for its earlier fetches before it declines to report.
pub(crate) const REPORT_WAIT: Duration = Duration::from_secs(30);

/// Keys of a cut whose dependency lists [`dep_gauge`] measures, at most (a host takes the
/// gauge under its cache's lock).
pub const DEPS_GAUGE_KEYS: usize = 100_000;

/// The dependency lists of `cut`'s values (how many keys each depends on), over at most
/// [`DEPS_GAUGE_KEYS`] keys: the median, the 99th percentile and the largest (0 for an
/// empty cut).
pub fn dep_gauge(cut: &Cut) -> (usize, usize, usize) {
    let counts: Vec<usize> = cut
        .keys()
        .take(DEPS_GAUGE_KEYS)
        .filter_map(|k| cut.get(k))
        .map(dep_count)
        .collect();
    quantiles(counts)
}

/// The causal metadata of `cut`'s values in bytes, over at most [`DEPS_GAUGE_KEYS`] keys:
/// the median, the 99th percentile and the largest (0 for an empty cut). A value's
/// metadata is what the store's encoding of it (`Value`) takes without the payloads: its
/// versions' clocks and dependency lists — the paper's "causal metadata per key in the
/// working set" (P:500).
pub fn meta_gauge(cut: &Cut) -> (usize, usize, usize) {
    let sizes: Vec<usize> = cut
        .keys()
        .take(DEPS_GAUGE_KEYS)
        .filter_map(|k| cut.get(k))
        .map(meta_bytes)
        .collect();
    quantiles(sizes)
}

/// The bytes of `v`'s causal metadata as the store encodes it (payloads left out).
pub fn meta_bytes(v: &MultiKeyCausal) -> usize {
    use prost::Message;
    let bare = MultiKeyCausal::from_versions(v.versions().iter().map(|x| CausalVersion {
        clock: x.clock.clone(),
        deps: x.deps.clone(),
        value: Default::default(),
    }));
    wire::convert::value_to_pb(&lattice::Value::MultiKeyCausal(bare)).encoded_len()
}

/// How many keys `v` depends on (the key-wise join of its versions' lists).
fn dep_count(v: &MultiKeyCausal) -> usize {
    match v.versions() {
        [one] => one.deps.len(),
        _ => v.deps().len(),
    }
}

/// The median, 99th percentile and largest of `counts` (0 for none).
fn quantiles(mut counts: Vec<usize>) -> (usize, usize, usize) {
    if counts.is_empty() {
        return (0, 0, 0);
    }
    counts.sort_unstable();
    let n = counts.len();
    let at = |q: f64| counts[((q * n as f64) as usize).min(n - 1)];
    (at(0.5), at(0.99), counts[n - 1])
}

/// Key → clock pairs as messages.
pub fn clocks_to_pb<'a>(it: impl Iterator<Item = (&'a Key, &'a VectorClock)>) -> Vec<pb::GcClock> {
    it.map(|(k, c)| pb::GcClock {
        key: Bytes::copy_from_slice(k),
        clock: c
            .iter()
            .map(|(actor, counter)| pb::ClockEntry { actor, counter })
            .collect(),
    })
    .collect()
}

/// Messages as key → clock pairs; `None` if over the bounds.
pub fn clocks_from_pb(m: &[pb::GcClock]) -> Option<Vec<(Key, VectorClock)>> {
    if m.len() > MAX_GC_KEYS || m.iter().any(|c| c.clock.len() > MAX_GC_CLOCK) {
        return None;
    }
    Some(
        m.iter()
            .map(|c| {
                let clock: VectorClock = c.clock.iter().map(|e| (e.actor, e.counter)).collect();
                (Key::from(&c.key[..]), clock)
            })
            .collect(),
    )
}

/// The fetches a cache has in flight: stagings from the store and fetches of other caches'
/// pinned versions. A report waits for those that began before its probe.
#[derive(Default)]
pub(crate) struct InFlight {
    next: Mutex<(u64, BTreeSet<u64>)>,
    done: Notify,
}

/// One fetch in flight; it ends when this is dropped (finished, failed or cancelled).
pub(crate) struct Flight<'a> {
    of: &'a InFlight,
    id: u64,
}

impl InFlight {
    /// Registers a fetch starting now.
    pub(crate) fn start(&self) -> Flight<'_> {
        let mut g = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let id = g.0;
        g.0 += 1;
        g.1.insert(id);
        Flight { of: self, id }
    }

    /// Waits until every fetch that began before this call has ended; false on timeout.
    pub(crate) async fn drain_earlier(&self, within: Duration) -> bool {
        let mark = self.next.lock().unwrap_or_else(|p| p.into_inner()).0;
        let wait = async {
            loop {
                let notified = self.done.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let busy = {
                    let g = self.next.lock().unwrap_or_else(|p| p.into_inner());
                    g.1.first().is_some_and(|&first| first < mark)
                };
                if !busy {
                    return;
                }
                notified.await;
            }
        };
        tokio::time::timeout(within, wait).await.is_ok()
    }
}

impl Drop for Flight<'_> {
    fn drop(&mut self) {
        let mut g = self.of.next.lock().unwrap_or_else(|p| p.into_inner());
        g.1.remove(&self.id);
        drop(g);
        self.of.done.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dependency_gauge_takes_median_p99_and_max() {
        assert_eq!(quantiles(Vec::new()), (0, 0, 0));
        assert_eq!(quantiles(vec![7]), (7, 7, 7));
        let mut counts: Vec<usize> = (0..100).collect();
        counts.reverse();
        assert_eq!(quantiles(counts), (50, 99, 99));
        let mut many = vec![1; 198];
        many.push(40);
        many.push(41);
        assert_eq!(quantiles(many), (1, 40, 41));
    }

    #[test]
    fn metadata_bytes_count_clocks_and_deps_not_payloads() {
        let value = |payload: usize, deps: u64| {
            MultiKeyCausal::new(CausalVersion {
                clock: VectorClock::from_iter([(1 << 40 | 1, 5), (2 << 40 | 1, 9)]),
                deps: (0..deps)
                    .map(|i| {
                        let key = lattice::Blob::from(format!("k{i:06}").as_bytes());
                        (key, VectorClock::from_iter([(1 << 40 | 1, i + 1)]))
                    })
                    .collect(),
                value: lattice::Blob::from(vec![b'x'; payload].as_slice()),
            })
        };
        let small = meta_bytes(&value(10, 0));
        assert_eq!(meta_bytes(&value(100_000, 0)), small);
        assert!(
            small > 2 * 8,
            "two clock entries take more than their ids: {small}"
        );
        let with_deps = meta_bytes(&value(10, 10));
        // Each dependency: a 7-byte key and a one-entry clock.
        assert!(with_deps >= small + 10 * (7 + 8), "{small} -> {with_deps}");
        assert!(with_deps < small + 10 * 40, "{small} -> {with_deps}");
    }
}
