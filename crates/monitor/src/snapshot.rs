//! What one policy round sees: a [`Snapshot`] of the cluster's statistics for one window.
//!
//! Plain data, filled by the monitor from the nodes' reports (per-key counts already summed
//! across replicas, as the thesis's monitoring thread does) and serialisable so a round can
//! be logged or dumped as JSON and replayed.

use serde::{Serialize, Serializer};

/// A storage tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// Values in RAM.
    Memory,
    /// Values in the embedded LSM.
    Disk,
}

impl Tier {
    /// Both tiers, memory first.
    pub const ALL: [Tier; 2] = [Tier::Memory, Tier::Disk];

    /// Index into per-tier arrays.
    pub(crate) fn index(self) -> usize {
        match self {
            Tier::Memory => 0,
            Tier::Disk => 1,
        }
    }
}

impl std::fmt::Display for Tier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tier::Memory => "memory",
            Tier::Disk => "disk",
        })
    }
}

impl From<placement::Tier> for Tier {
    fn from(t: placement::Tier) -> Tier {
        match t {
            placement::Tier::Memory => Tier::Memory,
            placement::Tier::Disk => Tier::Disk,
        }
    }
}

impl From<Tier> for placement::Tier {
    fn from(t: Tier) -> placement::Tier {
        match t {
            Tier::Memory => placement::Tier::Memory,
            Tier::Disk => placement::Tier::Disk,
        }
    }
}

/// A key's replication inside one tier: on `global` nodes, on `local` workers of each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Replicas {
    /// Nodes of the tier holding the key (R_i).
    pub global: u32,
    /// Workers of each of those nodes holding it (T_i).
    pub local: u32,
}

impl Replicas {
    /// `global` nodes × `local` workers.
    pub const fn new(global: u32, local: u32) -> Replicas {
        Replicas { global, local }
    }
}

/// A replication vector `[<R_M, R_E>, <T_M, T_E>]`, as `placement::ReplicationVector` but
/// serialisable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Vector {
    /// Memory tier.
    pub memory: Replicas,
    /// Disk tier (`global == 0`: not kept on disk).
    pub disk: Replicas,
}

impl Vector {
    /// `(R_M, T_M)` in memory and `(R_E, T_E)` on disk.
    pub const fn new(memory: (u32, u32), disk: (u32, u32)) -> Vector {
        Vector {
            memory: Replicas::new(memory.0, memory.1),
            disk: Replicas::new(disk.0, disk.1),
        }
    }

    /// The replication in `tier`.
    pub fn tier(&self, tier: Tier) -> Replicas {
        match tier {
            Tier::Memory => self.memory,
            Tier::Disk => self.disk,
        }
    }
}

impl From<placement::ReplicationVector> for Vector {
    fn from(v: placement::ReplicationVector) -> Vector {
        Vector::new(
            (v.memory.global, v.memory.local),
            (v.disk.global, v.disk.local),
        )
    }
}

impl From<Vector> for placement::ReplicationVector {
    fn from(v: Vector) -> placement::ReplicationVector {
        let r = |r: Replicas| placement::Replication {
            global: r.global,
            local: r.local,
        };
        placement::ReplicationVector {
            memory: r(v.memory),
            disk: r(v.disk),
        }
    }
}

/// One storage node's report for the window.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct NodeStats {
    /// Its id (its label on the global ring).
    pub id: String,
    /// Its tier.
    pub tier: Tier,
    /// Its worker count.
    pub workers: u32,
    /// Bytes its workers store (keys and values, all replicas it holds).
    pub storage_bytes: u64,
    /// Bytes it may store (memory budget, or disk space).
    pub capacity_bytes: u64,
    /// A memory node that caches over the disk tier (it has evicted or fetched records):
    /// the bytes of its working set, the records its clients touched within the last
    /// statistics window (Denning's W(t, τ), τ = the window), which the storage rule
    /// measures instead of `storage_bytes` — a cache sits at its budget whatever its load
    /// needs. `None`: not a cache; `storage_bytes` is what it must hold.
    pub working_set_bytes: Option<u64>,
    /// Busy fraction, 0..=1: the mean over its workers of (time handling requests / window),
    /// the reference code's definition (values outside 0..=1 are clamped).
    pub occupancy: f64,
    /// Alive in the membership (not suspect-dead, dead or left). Other nodes are ignored.
    pub alive: bool,
    /// Whether the policy may ask this node to leave: the monitor's cluster manager manages
    /// it (a manager can only remove its own nodes; a node started by hand, e.g. the seed
    /// the monitor polls, is not its to stop). Always true without a manager, where
    /// removals are recommendations.
    pub removable: bool,
}

/// Per-key access statistics for the window, summed across replicas, over all keys.
///
/// Estimates (from the workers' sketches), enough for the mean and standard deviation of
/// the per-key counts without listing every key.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct AccessSummary {
    /// Accesses (reads and writes) in the window.
    pub accesses_total: u64,
    /// Distinct keys accessed at least once.
    pub accessed_keys: u64,
    /// Σ over keys of count² (a float: it overflows 64 bits long before the counts do).
    pub access_sum_squares: f64,
}

impl AccessSummary {
    /// Mean and standard deviation of the counts of the accessed keys (`(0, 0)` if none).
    /// The variance of estimated sums can come out negative; it is clamped to 0.
    pub fn mean_and_sigma(&self) -> (f64, f64) {
        if self.accessed_keys == 0 {
            return (0.0, 0.0);
        }
        let n = self.accessed_keys as f64;
        let mean = self.accesses_total as f64 / n;
        let var = self.access_sum_squares / n - mean * mean;
        let var = if var.is_finite() { var.max(0.0) } else { 0.0 };
        (mean, var.sqrt())
    }
}

/// A key the policy may act on: a heavy hitter of some worker, or a key with an explicit
/// vector.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct KeyStats {
    /// The key (JSON: its bytes with non-printable ones escaped, as `\x00`).
    #[serde(serialize_with = "escaped")]
    pub key: Vec<u8>,
    /// Accesses in the window, summed across replicas.
    pub accesses: u64,
    /// Its current replication vector (the default if it has none of its own).
    pub vector: Vector,
    /// Whether it has an explicit (non-default) vector entry.
    pub is_explicit: bool,
    /// Placed by an operator (`latticekv replicate`), not by the policy: the per-key rules
    /// leave it alone (its factors are still cut to the nodes left before a removal).
    pub pinned: bool,
}

/// Request latency measured at the servers over the window.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Latency {
    /// Mean, in µs (L_obs).
    pub mean_us: f64,
    /// 99th percentile, in µs (reported, not used by the rules).
    pub p99_us: f64,
    /// Requests measured.
    pub count: u64,
}

/// Everything one policy round looks at.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Snapshot {
    /// When the window ended, in ms (the monitor's clock; only differences are used).
    pub now_ms: u64,
    /// Every storage node of the membership.
    pub nodes: Vec<NodeStats>,
    /// Access statistics over all keys.
    pub access: AccessSummary,
    /// Candidate keys: the union of the workers' heavy hitters and every key with an
    /// explicit vector.
    pub keys: Vec<KeyStats>,
    /// Latency measured at the servers, if any request was measured.
    pub latency: Option<Latency>,
    /// The cluster's default vector.
    pub default_vector: Vector,
}

impl Snapshot {
    /// The alive nodes of `tier`.
    pub fn alive(&self, tier: Tier) -> impl Iterator<Item = &NodeStats> {
        self.nodes.iter().filter(move |n| n.alive && n.tier == tier)
    }

    /// Number of alive nodes of `tier` (N_M, N_E).
    pub fn node_count(&self, tier: Tier) -> u32 {
        u32::try_from(self.alive(tier).count()).unwrap_or(u32::MAX)
    }

    /// Workers per node of `tier` that every alive node has (the smallest worker count; the
    /// paper's N_T_memory for the memory tier). 0 if the tier has no node.
    pub fn threads(&self, tier: Tier) -> u32 {
        self.alive(tier).map(|n| n.workers).min().unwrap_or(0)
    }
}

/// Serialises key bytes as a readable, lossless string (`\x00lkv\x00…`).
pub(crate) fn escaped<S: Serializer>(key: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&key.escape_ascii())
}
