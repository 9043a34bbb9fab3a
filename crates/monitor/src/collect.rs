//! From the nodes' reports to a [`Snapshot`]: what the monitor thread does each round
//! between polling every storage node (`GetStatus`) and calling the policy. No I/O.
//!
//! - Per-key counts are summed across replicas: every worker counts the accesses it served
//!   and reports its heavy hitters, so a key's total is the sum of what its replicas report
//!   (the thesis's "aggregates the per-key statistics across all replicas"). A replica
//!   whose top-K does not list the key contributes nothing: the sum is a lower bound.
//! - The summary (accesses, distinct keys, Σ count²) is summed over workers. A key
//!   replicated on r workers counts r times in the distinct keys and its Σ count² is
//!   split (Σ cᵢ² ≤ (Σ cᵢ)²), so a replicated hot key looks a little less hot than it is —
//!   the bias is toward not replicating further, never toward oscillating.
//! - Latency: the workers' histograms are merged exactly (same buckets) for the p99. The
//!   mean (the policy's L_obs) is corrected for the wait the servers cannot see: a
//!   request is timed from the read that completed it, so time spent queued in the socket
//!   while the worker was busy is missing — and that is exactly what grows when a worker
//!   saturates. Each worker's mean is scaled as an M/M/1 queue's response time,
//!   `mean / (1 − ρ)`, with its occupancy as ρ (capped at 0.99): an idle worker's
//!   requests count as measured, a saturated one's many times over.
//! - Working set: a memory node that caches over the disk tier (a worker of it evicted or
//!   fetched records) is always at its budget, so the storage rule measures its working
//!   set instead — per worker, the distinct keys accessed in the window times the mean
//!   size of the records it holds (Denning's W(t, τ) with τ the statistics window).
//! - Storage: a memory node's bytes in RAM against its memory budget; a disk node's bytes
//!   on disk against `disk_capacity_bytes` when set, else against the capacity the node
//!   reports (`Status.disk_capacity_bytes`: stored bytes plus the free space of its data
//!   directory's file system beyond its reserve). 0 from both: unknown, the storage rule
//!   skips the tier.

use std::collections::BTreeMap;

use wire::pb;

use crate::snapshot::{AccessSummary, KeyStats, Latency, NodeStats, Snapshot, Tier, Vector};

/// Highest utilisation the queueing correction of the latency uses (at most ×100).
const MAX_RHO: f64 = 0.99;

/// One storage node as the monitor saw it this round.
#[derive(Clone, Debug)]
pub struct NodeReport {
    /// Its membership entry.
    pub member: pb::Member,
    /// Its status, or `None` if it did not answer.
    pub status: Option<pb::Status>,
}

/// Settings of the conversion that the reports do not carry.
#[derive(Clone, Copy, Debug, Default)]
pub struct CollectConfig {
    /// What one disk-tier node may store, in bytes (0: use what each node reports).
    pub disk_capacity_bytes: u64,
}

/// The tier of a member, if it is a storage node.
pub fn member_tier(m: &pb::Member) -> Option<Tier> {
    match m.role.as_str() {
        "memory" => Some(Tier::Memory),
        "disk" => Some(Tier::Disk),
        _ => None,
    }
}

/// The default vector and the explicit ones a topology lists.
pub fn vectors(t: &pb::Topology) -> (Vector, BTreeMap<Vec<u8>, Vector>) {
    let default = Vector::new(
        (
            t.default_global_replication.max(1),
            t.default_local_replication.max(1),
        ),
        (t.default_disk_replication, 1),
    );
    let explicit = t
        .replication
        .iter()
        .map(|r| {
            let v = Vector::new(
                (r.global, r.local.max(1)),
                (
                    r.disk_global.unwrap_or(default.disk.global),
                    r.disk_local.unwrap_or(1).max(1),
                ),
            );
            (r.key.to_vec(), v)
        })
        .collect();
    (default, explicit)
}

/// Builds the round's snapshot. An explicit vector is the policy's when its entry says so
/// (`by_policy`) or `managed(key)` (this monitor set it); other explicit vectors were set
/// by an operator and are `pinned`.
pub fn snapshot(
    now_ms: u64,
    topology: &pb::Topology,
    reports: &[NodeReport],
    config: CollectConfig,
    managed: &dyn Fn(&[u8]) -> bool,
) -> Snapshot {
    let (default_vector, explicit) = vectors(topology);
    // The policy's own vectors: marked so on the entry (a restarted monitor still knows
    // them), or set by this monitor since the topology was read.
    let policy_keys: std::collections::BTreeSet<&[u8]> = topology
        .replication
        .iter()
        .filter(|r| r.by_policy)
        .map(|r| &r.key[..])
        .collect();
    let managed = |key: &[u8]| policy_keys.contains(key) || managed(key);
    let mut nodes = Vec::new();
    let mut access = AccessSummary::default();
    let mut hot: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    let mut histogram: Vec<u64> = Vec::new();
    let (mut count, mut sum_ns) = (0u64, 0f64);
    for r in reports {
        let Some(tier) = member_tier(&r.member) else {
            continue;
        };
        let alive = r.member.status == pb::NodeStatus::Alive as i32 && r.status.is_some();
        let Some(status) = &r.status else {
            nodes.push(NodeStats {
                id: r.member.node_id.clone(),
                tier,
                workers: r.member.workers.len() as u32,
                storage_bytes: 0,
                capacity_bytes: 0,
                working_set_bytes: None,
                occupancy: 0.0,
                alive: false,
                removable: true,
            });
            continue;
        };
        let mut storage = 0u64;
        let mut working_set = 0u64;
        let mut caches = false;
        let mut occupancy = 0.0;
        for w in &status.workers {
            let s = w.stats.clone().unwrap_or_default();
            caches |= w.evictions > 0 || w.disk_fetches > 0;
            working_set = working_set.saturating_add(worker_working_set(w, &s));
            storage = storage.saturating_add(match tier {
                Tier::Memory => w.memory_bytes,
                Tier::Disk => s.disk_bytes,
            });
            occupancy += s.occupancy.clamp(0.0, 1.0);
            access.accesses_total = access.accesses_total.saturating_add(s.accesses);
            access.accessed_keys = access.accessed_keys.saturating_add(s.accessed_keys);
            access.access_sum_squares += s.access_sum_squares as f64;
            for h in &s.hot_keys {
                let c = hot.entry(h.key.to_vec()).or_default();
                *c = c.saturating_add(h.accesses);
            }
            if histogram.len() < s.latency_buckets.len() {
                histogram.resize(s.latency_buckets.len(), 0);
            }
            for (i, n) in s.latency_buckets.iter().enumerate() {
                histogram[i] = histogram[i].saturating_add(*n);
            }
            count = count.saturating_add(s.latency_count);
            let rho = s.occupancy.clamp(0.0, MAX_RHO);
            sum_ns += s.latency_sum_ns as f64 / (1.0 - rho);
        }
        let workers = status.workers.len().max(1);
        nodes.push(NodeStats {
            id: r.member.node_id.clone(),
            tier,
            workers: workers as u32,
            storage_bytes: storage,
            capacity_bytes: match tier {
                Tier::Memory => status.memory_budget_bytes,
                Tier::Disk => disk_capacity(config, status),
            },
            working_set_bytes: (tier == Tier::Memory && caches).then_some(working_set),
            occupancy: occupancy / workers as f64,
            alive,
            removable: true,
        });
    }
    let mut keys: Vec<KeyStats> = hot
        .iter()
        .map(|(key, accesses)| KeyStats {
            key: key.clone(),
            accesses: *accesses,
            vector: explicit.get(key).copied().unwrap_or(default_vector),
            is_explicit: explicit.contains_key(key),
            pinned: explicit.contains_key(key) && !managed(key),
        })
        .collect();
    keys.extend(
        explicit
            .iter()
            .filter(|(k, _)| !hot.contains_key(*k))
            .map(|(key, v)| KeyStats {
                key: key.clone(),
                accesses: 0,
                vector: *v,
                is_explicit: true,
                pinned: !managed(key),
            }),
    );
    let latency = (count > 0).then(|| Latency {
        mean_us: sum_ns / count as f64 / 1_000.0,
        p99_us: quantile_ns(&histogram, 0.99) as f64 / 1_000.0,
        count,
    });
    Snapshot {
        now_ms,
        nodes,
        access,
        keys,
        latency,
        default_vector,
    }
}

/// The bytes of a memory worker's working set: the distinct keys its clients accessed at
/// least twice in the window (the keys a cache keeps; from a node that does not report
/// them, every key accessed, its HyperLogLog) times the mean size of the records it holds;
/// for a worker that never evicted nor fetched (not a cache), the bytes it holds.
fn worker_working_set(w: &pb::WorkerStatus, s: &pb::WorkerStats) -> u64 {
    if w.evictions == 0 && w.disk_fetches == 0 {
        return w.memory_bytes;
    }
    let mean = w.memory_bytes as f64 / w.keys.max(1) as f64;
    let keys = s.reused_keys.unwrap_or(s.accessed_keys);
    let bytes = (keys as f64 * mean).round();
    if bytes.is_finite() && bytes < u64::MAX as f64 {
        bytes as u64
    } else {
        u64::MAX
    }
}

/// A disk node's capacity: `--disk-capacity` when set, else what the node reports (its
/// stored bytes plus its file system's free space beyond its reserve; 0 from a node that
/// does not report it: unknown).
fn disk_capacity(config: CollectConfig, status: &pb::Status) -> u64 {
    if config.disk_capacity_bytes > 0 {
        config.disk_capacity_bytes
    } else {
        status.disk_capacity_bytes
    }
}

/// The upper bound (ns) of latency bucket `i`, as `WorkerStats.latency_buckets` defines
/// the buckets: i < 16 holds exactly i ns; then 16 buckets per power of two.
pub fn bucket_upper_ns(i: usize) -> u64 {
    if i < 16 {
        return i as u64;
    }
    let e = 4 + (i - 16) / 16;
    let s = ((i - 16) % 16) as u64;
    if e >= 40 {
        return u64::MAX;
    }
    ((17 + s) << (e - 4)).saturating_sub(1)
}

/// The `q` quantile of a merged histogram, as its bucket's upper bound (0 if empty).
pub fn quantile_ns(buckets: &[u64], q: f64) -> u64 {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return 0;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as u64;
    let mut seen = 0u64;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return bucket_upper_ns(i);
        }
    }
    bucket_upper_ns(buckets.len().saturating_sub(1))
}

#[cfg(test)]
mod tests;
