//! A tiny cluster model for testing the policy over many rounds: it turns a constant load
//! into snapshots and applies the policy's actions to itself.
//!
//! Model: each key has a fixed access rate per window. A key with memory replicas is
//! served by its memory replicas, else by its disk replicas, its rate split evenly over
//! every replica worker (R nodes × T workers, placed from the key's hash as consecutive
//! nodes of the tier sorted by id). A worker at utilisation ρ answers in
//! `base / (1 − min(ρ, 0.95))` µs (an M/M/1 queue, capped at 20 × base). Added nodes join
//! `join_delay_rounds` windows later; removed nodes are gone by the next window. Built for
//! this crate's tests and, with the `sim` feature, for benches and other crates.

use std::collections::BTreeMap;

use crate::actions::Action;
use crate::snapshot::{AccessSummary, KeyStats, Latency, NodeStats, Snapshot, Tier, Vector};

/// The model's fixed parameters.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// Memory nodes at the start.
    pub memory_nodes: u32,
    /// Disk nodes at the start.
    pub disk_nodes: u32,
    /// Workers per memory node.
    pub memory_workers: u32,
    /// Workers per disk node.
    pub disk_workers: u32,
    /// Requests one memory worker serves per window at 100 % busy.
    pub memory_worker_ops: f64,
    /// Requests one disk worker serves per window at 100 % busy.
    pub disk_worker_ops: f64,
    /// Unloaded latency of a memory worker, µs.
    pub memory_latency_us: f64,
    /// Unloaded latency of a disk worker, µs.
    pub disk_latency_us: f64,
    /// Bytes per stored copy of a key.
    pub key_bytes: u64,
    /// Capacity of a memory node, bytes.
    pub memory_capacity: u64,
    /// Capacity of a disk node, bytes.
    pub disk_capacity: u64,
    /// Windows between a node's request and its join.
    pub join_delay_rounds: u64,
    /// Length of a window (the policy period), ms.
    pub period_ms: u64,
    /// Keys reported as heavy hitters (the hottest), besides explicit ones.
    pub heavy_hitters: usize,
    /// The cluster's default vector.
    pub default_vector: Vector,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            memory_nodes: 4,
            disk_nodes: 2,
            memory_workers: 4,
            disk_workers: 4,
            memory_worker_ops: 100_000.0,
            disk_worker_ops: 10_000.0,
            memory_latency_us: 500.0,
            disk_latency_us: 2_000.0,
            key_bytes: 1_000,
            memory_capacity: 1 << 30,
            disk_capacity: 1 << 32,
            join_delay_rounds: 2,
            period_ms: 30_000,
            heavy_hitters: 32,
            default_vector: Vector::new((1, 1), (1, 1)),
        }
    }
}

/// The modelled cluster.
#[derive(Clone, Debug)]
pub struct Sim {
    cfg: SimConfig,
    now_ms: u64,
    round: u64,
    next_id: u32,
    /// Alive nodes (tier, id), sorted.
    nodes: Vec<(Tier, String)>,
    /// Nodes requested: (round they join, tier, id).
    joining: Vec<(u64, Tier, String)>,
    /// Keys and their accesses per window.
    load: Vec<(Vec<u8>, f64)>,
    explicit: BTreeMap<Vec<u8>, Vector>,
}

impl Sim {
    /// A cluster with `cfg`'s nodes under the constant `load` (key, accesses per window).
    pub fn new(cfg: SimConfig, load: Vec<(Vec<u8>, f64)>) -> Sim {
        let mut sim = Sim {
            now_ms: 1_000_000,
            round: 0,
            next_id: 0,
            nodes: Vec::new(),
            joining: Vec::new(),
            load,
            explicit: BTreeMap::new(),
            cfg,
        };
        for _ in 0..sim.cfg.memory_nodes {
            let id = sim.new_id(Tier::Memory);
            sim.nodes.push((Tier::Memory, id));
        }
        for _ in 0..sim.cfg.disk_nodes {
            let id = sim.new_id(Tier::Disk);
            sim.nodes.push((Tier::Disk, id));
        }
        sim.nodes.sort();
        sim
    }

    fn new_id(&mut self, tier: Tier) -> String {
        self.next_id += 1;
        match tier {
            Tier::Memory => format!("m{:03}", self.next_id),
            Tier::Disk => format!("d{:03}", self.next_id),
        }
    }

    /// The vector `key` has now.
    pub fn vector(&self, key: &[u8]) -> Vector {
        self.explicit
            .get(key)
            .copied()
            .unwrap_or(self.cfg.default_vector)
    }

    /// Alive nodes of `tier`.
    pub fn node_count(&self, tier: Tier) -> u32 {
        self.nodes.iter().filter(|(t, _)| *t == tier).count() as u32
    }

    fn tier_nodes(&self, tier: Tier) -> Vec<&str> {
        self.nodes
            .iter()
            .filter(|(t, _)| *t == tier)
            .map(|(_, id)| id.as_str())
            .collect()
    }

    /// The snapshot of the current window.
    pub fn snapshot(&self) -> Snapshot {
        let mem = self.tier_nodes(Tier::Memory);
        let disk = self.tier_nodes(Tier::Disk);
        let workers = |tier| match tier {
            Tier::Memory => self.cfg.memory_workers,
            Tier::Disk => self.cfg.disk_workers,
        };
        // (tier index, node index) → per-worker load; per-node bytes.
        let mut load: [Vec<Vec<f64>>; 2] = [
            vec![vec![0.0; self.cfg.memory_workers as usize]; mem.len()],
            vec![vec![0.0; self.cfg.disk_workers as usize]; disk.len()],
        ];
        let mut bytes: [Vec<u64>; 2] = [vec![0; mem.len()], vec![0; disk.len()]];
        // Per key: its serving tier and its replica workers.
        let mut served: Vec<(usize, Vec<(usize, usize)>)> = Vec::with_capacity(self.load.len());
        for (key, rate) in &self.load {
            let v = self.vector(key);
            let h = placement::key_hash(key);
            let mut replicas = [Vec::new(), Vec::new()];
            for tier in Tier::ALL {
                let n = [mem.len(), disk.len()][tier.index()];
                let r = v.tier(tier);
                let g = (r.global as usize).min(n);
                let w = workers(tier) as usize;
                let t = (r.local.max(1) as usize).min(w);
                for j in 0..g {
                    let node = (h as usize + j) % n;
                    bytes[tier.index()][node] += self.cfg.key_bytes * t as u64;
                    for l in 0..t {
                        replicas[tier.index()].push((node, ((h >> 32) as usize + l) % w));
                    }
                }
            }
            let tier = if replicas[0].is_empty() { 1 } else { 0 };
            let reps = std::mem::take(&mut replicas[tier]);
            let share = rate / reps.len().max(1) as f64;
            for &(node, worker) in &reps {
                load[tier][node][worker] += share;
            }
            served.push((tier, reps));
        }
        let ops = [self.cfg.memory_worker_ops, self.cfg.disk_worker_ops];
        let base = [self.cfg.memory_latency_us, self.cfg.disk_latency_us];
        let latency = |tier: usize, node: usize, worker: usize| {
            let rho = load[tier][node][worker] / ops[tier];
            base[tier] / (1.0 - rho.min(0.95))
        };
        let (mut weighted, mut total, mut worst) = (0.0, 0.0, 0.0f64);
        for ((_, rate), (tier, reps)) in self.load.iter().zip(&served) {
            let share = rate / reps.len().max(1) as f64;
            for &(node, worker) in reps {
                let l = latency(*tier, node, worker);
                weighted += share * l;
                worst = worst.max(l);
            }
            total += rate;
        }
        let mut nodes = Vec::new();
        for tier in Tier::ALL {
            let ids = [&mem, &disk][tier.index()];
            for (i, id) in ids.iter().enumerate() {
                let w = &load[tier.index()][i];
                let occ = w
                    .iter()
                    .map(|l| (l / ops[tier.index()]).min(1.0))
                    .sum::<f64>()
                    / w.len().max(1) as f64;
                nodes.push(NodeStats {
                    id: id.to_string(),
                    tier,
                    workers: workers(tier),
                    storage_bytes: bytes[tier.index()][i],
                    capacity_bytes: match tier {
                        Tier::Memory => self.cfg.memory_capacity,
                        Tier::Disk => self.cfg.disk_capacity,
                    },
                    working_set_bytes: None,
                    occupancy: occ,
                    alive: true,
                    removable: true,
                });
            }
        }
        let mut access = AccessSummary::default();
        for (_, rate) in &self.load {
            if *rate > 0.0 {
                access.accesses_total += rate.round() as u64;
                access.accessed_keys += 1;
                access.access_sum_squares += rate.round() * rate.round();
            }
        }
        let mut order: Vec<usize> = (0..self.load.len()).collect();
        order.sort_by(|&a, &b| self.load[b].1.total_cmp(&self.load[a].1));
        let mut keys: Vec<KeyStats> = order
            .iter()
            .enumerate()
            .filter(|&(rank, &i)| {
                rank < self.cfg.heavy_hitters || self.explicit.contains_key(&self.load[i].0)
            })
            .map(|(_, &i)| {
                let (key, rate) = &self.load[i];
                KeyStats {
                    pinned: false,
                    key: key.clone(),
                    accesses: rate.round() as u64,
                    vector: self.vector(key),
                    is_explicit: self.explicit.contains_key(key),
                }
            })
            .collect();
        keys.sort_by(|a, b| a.key.cmp(&b.key));
        Snapshot {
            now_ms: self.now_ms,
            nodes,
            access,
            keys,
            latency: (total > 0.0).then(|| Latency {
                mean_us: weighted / total,
                p99_us: worst,
                count: total.round() as u64,
            }),
            default_vector: self.cfg.default_vector,
        }
    }

    /// Carries out a round's actions.
    pub fn apply(&mut self, actions: &[Action]) {
        for action in actions {
            match action {
                Action::SetReplication { key, vector, .. } => {
                    self.explicit.insert(key.clone(), *vector);
                }
                Action::ResetReplication { key, .. } => {
                    self.explicit.remove(key);
                }
                Action::AddNodes { tier, count, .. } => {
                    for _ in 0..*count {
                        let id = self.new_id(*tier);
                        let at = self.round + self.cfg.join_delay_rounds;
                        self.joining.push((at, *tier, id));
                    }
                }
                Action::RemoveNode { tier, node_id, .. } => {
                    self.nodes.retain(|(t, id)| !(t == tier && id == node_id));
                }
            }
        }
    }

    /// Moves to the next window: time passes and nodes whose start-up is over join.
    pub fn advance(&mut self) {
        self.round += 1;
        self.now_ms += self.cfg.period_ms;
        let round = self.round;
        let (ready, waiting): (Vec<_>, Vec<_>) =
            self.joining.drain(..).partition(|(at, _, _)| *at <= round);
        self.joining = waiting;
        self.nodes
            .extend(ready.into_iter().map(|(_, tier, id)| (tier, id)));
        self.nodes.sort();
    }
}
