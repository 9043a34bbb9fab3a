//! One policy round: [`decide`] turns a [`Snapshot`] into [`Action`]s (the paper's
//! Algorithms 1–5, in the order of its "implementation-ready version", spec §3.8).
//!
//! Order of a round:
//! 1. storage-driven elasticity per tier (`elastic::storage`);
//! 2. per key, hottest first, at most one rule each: promotion or demotion (`tiering`),
//!    else hot-key replication when the latency branch says so, else de-replication of a
//!    cooled key (`hot`);
//! 3. the latency/compute branch: add memory nodes, or remove one (`elastic::compute`), and
//!    in budget mode a memory node when over budget (`elastic::budget`);
//! 4. before a removal, every key's factors are cut to the nodes left (`reduce_replication`);
//! 5. every target vector is normalised (factors within node and worker counts, k + 1
//!    replicas across the tiers that have nodes) and compared with the key's vector.

mod elastic;
mod hot;
mod tiering;

use crate::actions::Action;
use crate::config::{Aggregate, PolicyConfig};
use crate::snapshot::{KeyStats, NodeStats, Replicas, Snapshot, Tier, Vector};
use crate::state::PolicyState;

/// Runs one policy round on `snapshot` and returns what to do, updating `state` (grace
/// period, pending nodes, per-key cooldowns, recent actions).
///
/// Deterministic: the same snapshot, configuration and state give the same actions. Never
/// panics, whatever the snapshot holds. The configuration should have passed
/// [`PolicyConfig::validate`]; an invalid one gives odd but bounded decisions.
pub fn decide(snapshot: &Snapshot, config: &PolicyConfig, state: &mut PolicyState) -> Vec<Action> {
    state.observe(snapshot, config);
    let mut round = Round::new(snapshot, config, state);
    elastic::storage(&mut round);
    round.key_rules();
    elastic::compute(&mut round);
    elastic::budget(&mut round);
    let actions = round.finish();
    state.record(snapshot, &actions, config);
    actions
}

/// What a round reads off a snapshot before its rules apply: the monitor exports it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Observed {
    /// L_obs: the mean latency the rules judge, µs (0 when not measured or measured on
    /// fewer than `min_latency_samples` requests).
    pub l_obs_us: f64,
    /// L_obj: the latency objective, µs.
    pub l_obj_us: f64,
    /// H: the hotness threshold, accesses in the window.
    pub hot_threshold: f64,
    /// Candidate keys above H (each key once).
    pub hot_keys: u64,
}

/// What [`decide`] would read off `snapshot` under `config` (see [`Observed`]).
pub fn observe(snapshot: &Snapshot, config: &PolicyConfig) -> Observed {
    let hot_threshold = hot_threshold(snapshot, config);
    let mut hot: Vec<&[u8]> = snapshot
        .keys
        .iter()
        .filter(|k| k.accesses as f64 > hot_threshold)
        .map(|k| k.key.as_slice())
        .collect();
    hot.sort_unstable();
    hot.dedup();
    Observed {
        l_obs_us: l_obs(snapshot, config),
        l_obj_us: config.latency_objective() as f64,
        hot_threshold,
        hot_keys: hot.len() as u64,
    }
}

/// L_obs in µs (0 when not measured or measured on too few requests).
fn l_obs(snap: &Snapshot, cfg: &PolicyConfig) -> f64 {
    match snap.latency {
        Some(l) if l.count >= cfg.min_latency_samples && l.mean_us.is_finite() => {
            l.mean_us.max(0.0)
        }
        _ => 0.0,
    }
}

/// The hotness threshold H: the mean access count plus `hot_sigmas` deviations.
fn hot_threshold(snap: &Snapshot, cfg: &PolicyConfig) -> f64 {
    let (mean, sigma) = snap.access.mean_and_sigma();
    mean + cfg.hot_sigmas * sigma
}

/// Which latency/compute branch of Algorithm 5 this round takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Branch {
    /// Nothing latency-driven (inside the grace period, or latency within its band).
    None,
    /// L_obs > f_upper·L_obj and every memory node busy: add memory nodes.
    AddNodes,
    /// L_obs > f_upper·L_obj and some memory nodes free: replicate hot keys.
    Replicate,
    /// L_obs < f_lower·L_obj and the memory tier idle: remove a memory node.
    RemoveNode,
}

/// A planned change of one key's vector.
#[derive(Clone, Debug)]
pub(crate) struct Change {
    pub(crate) target: Vector,
    pub(crate) reason: String,
}

/// The working state of one round.
pub(crate) struct Round<'a> {
    pub(crate) snap: &'a Snapshot,
    pub(crate) cfg: &'a PolicyConfig,
    pub(crate) state: &'a PolicyState,
    pub(crate) now: u64,
    pub(crate) in_grace: bool,
    /// k + 1.
    pub(crate) k1: u32,
    /// Alive nodes per tier.
    pub(crate) nodes: [u32; 2],
    /// Workers per node per tier (the smallest).
    pub(crate) threads: [u32; 2],
    /// Nodes removed by this round per tier (at most one).
    pub(crate) removed: [Option<String>; 2],
    /// Whether this round already changed a tier's node count.
    pub(crate) elastic_done: [bool; 2],
    /// Nodes requested by this round per tier.
    pub(crate) added: [u32; 2],
    /// L_obs in µs (0 when not measured or measured on too few requests).
    pub(crate) l_obs: f64,
    /// L_obj in µs.
    pub(crate) l_obj: f64,
    pub(crate) branch: Branch,
    /// Mean key access count (the coldness threshold L).
    pub(crate) mean: f64,
    /// The hotness threshold H.
    pub(crate) hot: f64,
    /// Candidate keys, hottest first, without duplicates.
    pub(crate) keys: Vec<&'a KeyStats>,
    /// Planned change per candidate (same index as `keys`).
    pub(crate) plan: Vec<Option<Change>>,
    /// Node actions decided so far.
    pub(crate) node_actions: Vec<Action>,
}

impl<'a> Round<'a> {
    fn new(snap: &'a Snapshot, cfg: &'a PolicyConfig, state: &'a PolicyState) -> Round<'a> {
        let nodes = [snap.node_count(Tier::Memory), snap.node_count(Tier::Disk)];
        let threads = [snap.threads(Tier::Memory), snap.threads(Tier::Disk)];
        let in_grace = state.in_grace(snap.now_ms, cfg);
        let l_obj = cfg.latency_objective() as f64;
        let l_obs = l_obs(snap, cfg);
        let (mean, _) = snap.access.mean_and_sigma();
        let hot = hot_threshold(snap, cfg);

        let mut keys: Vec<&KeyStats> = snap.keys.iter().collect();
        // A key listed twice keeps its entry with the most accesses.
        keys.sort_by(|a, b| a.key.cmp(&b.key).then_with(|| b.accesses.cmp(&a.accesses)));
        keys.dedup_by(|later, first| later.key == first.key);
        keys.sort_by(|a, b| b.accesses.cmp(&a.accesses).then_with(|| a.key.cmp(&b.key)));
        let mut round = Round {
            snap,
            cfg,
            state,
            now: snap.now_ms,
            in_grace,
            k1: cfg.fault_tolerance.saturating_add(1),
            nodes,
            threads,
            removed: [None, None],
            elastic_done: [false, false],
            added: [0, 0],
            l_obs,
            l_obj,
            branch: Branch::None,
            mean,
            hot,
            plan: vec![None; keys.len()],
            keys,
            node_actions: Vec::new(),
        };
        round.branch = round.branch();
        round
    }

    /// Algorithm 5 lines 8–14: which latency branch applies (none inside the grace period).
    fn branch(&self) -> Branch {
        if self.in_grace || self.nodes[0] == 0 {
            return Branch::None;
        }
        let band = self.cfg.compute_band;
        let latency = self.cfg.latency_band;
        if self.l_obs > latency.upper * self.l_obj {
            if self.occupancy(self.cfg.add_occupancy) > band.upper {
                Branch::AddNodes
            } else {
                Branch::Replicate
            }
        } else if self.l_obs < latency.lower * self.l_obj
            && self.occupancy(self.cfg.remove_occupancy) < band.lower
        {
            Branch::RemoveNode
        } else {
            Branch::None
        }
    }

    /// compute(M): the memory nodes' occupancies folded by `how` (0 without memory nodes).
    pub(crate) fn occupancy(&self, how: Aggregate) -> f64 {
        let occ: Vec<f64> = self.snap.alive(Tier::Memory).map(occupancy).collect();
        if occ.is_empty() {
            return 0.0;
        }
        match how {
            Aggregate::Min => occ.iter().copied().fold(f64::INFINITY, f64::min),
            Aggregate::Max => occ.iter().copied().fold(0.0, f64::max),
            Aggregate::Mean => occ.iter().sum::<f64>() / occ.len() as f64,
        }
    }

    /// Alive nodes of `tier` once this round's removal is done.
    pub(crate) fn nodes_after(&self, tier: Tier) -> u32 {
        let i = tier.index();
        self.nodes[i].saturating_sub(u32::from(self.removed[i].is_some()))
    }

    /// Whether `key` has a vector of its own: flagged so, or different from the default
    /// (a snapshot that says otherwise is inconsistent; the vector wins).
    pub(crate) fn explicit(&self, key: &KeyStats) -> bool {
        key.is_explicit || key.vector != self.snap.default_vector
    }

    /// Whether a removal in `tier` is already under way or decided.
    pub(crate) fn removing(&self, tier: Tier) -> bool {
        self.removed[tier.index()].is_some() || self.state.pending_removal(tier).is_some()
    }

    /// Nodes the memory tier must keep: `min_memory_nodes`, and enough for k + 1 replicas
    /// when the disk tier is smaller than k + 1.
    pub(crate) fn memory_floor(&self) -> u32 {
        let disk = self.nodes_after(Tier::Disk);
        self.cfg
            .min_memory_nodes
            .max(1)
            .max(self.k1.saturating_sub(disk))
    }

    /// Nodes the disk tier keeps, when it exists: max(min_disk_nodes, k + 1).
    pub(crate) fn disk_floor(&self) -> u32 {
        self.cfg.min_disk_nodes.max(self.k1)
    }

    /// Step 2: the per-key rules, hottest key first, one rule per key, at most
    /// `max_key_changes_per_round` changes; keys in their cooldown and keys an operator
    /// placed (`pinned`) are skipped.
    fn key_rules(&mut self) {
        let mut budget = self.cfg.max_key_changes_per_round;
        for i in 0..self.keys.len() {
            if budget == 0 {
                break;
            }
            let key = self.keys[i];
            if key.pinned || self.state.in_cooldown(&key.key, self.now, self.cfg) {
                continue;
            }
            let change = tiering::movement(self, key).or_else(|| hot::replication(self, key));
            if let Some(change) = change {
                self.plan[i] = Some(change);
                budget -= 1;
            }
        }
    }

    /// The vector `key` ends the round with so far: its planned target or its own.
    fn planned(&self, i: usize) -> Vector {
        self.plan[i]
            .as_ref()
            .map_or(self.keys[i].vector, |c| c.target)
    }

    /// Step 4 (`reduce_replication`): before removing a node of `tier`, no key may keep more
    /// replicas in it than the nodes left (the paper decrements such factors; the reference
    /// code would otherwise spin forever, ours would cap silently).
    fn reduce_replication(&mut self, tier: Tier) {
        let left = self.nodes_after(tier);
        let Some(node) = self.removed[tier.index()].clone() else {
            return;
        };
        for i in 0..self.keys.len() {
            let mut v = self.planned(i);
            let r = match tier {
                Tier::Memory => &mut v.memory,
                Tier::Disk => &mut v.disk,
            };
            if r.global > left {
                r.global = left;
                let reason = match &self.plan[i] {
                    Some(c) => format!("{}; cut to the {left} {tier:?} nodes left", c.reason),
                    None => format!("cut to the {left} {tier:?} nodes left once {node} leaves"),
                };
                self.plan[i] = Some(Change { target: v, reason });
            }
        }
    }

    /// Steps 4 and 5: the actions of the round.
    fn finish(mut self) -> Vec<Action> {
        for tier in Tier::ALL {
            self.reduce_replication(tier);
        }
        let nodes = [self.nodes_after(Tier::Memory), self.nodes_after(Tier::Disk)];
        let default = self.snap.default_vector;
        let default_capped = cap(default, nodes, self.threads);
        // The default may stand for a key only if it keeps k + 1 replicas here.
        let default_ok = normalize(default, nodes, self.threads, self.k1) == default_capped;
        let mut actions = Vec::new();
        for (i, change) in self.plan.iter().enumerate() {
            let Some(change) = change else { continue };
            let key = self.keys[i];
            let target = normalize(change.target, nodes, self.threads, self.k1);
            if default_ok && target == default_capped {
                if self.explicit(key) {
                    actions.push(Action::ResetReplication {
                        key: key.key.clone(),
                        reason: change.reason.clone(),
                    });
                }
            } else if target != key.vector {
                actions.push(Action::SetReplication {
                    key: key.key.clone(),
                    vector: target,
                    reason: change.reason.clone(),
                });
            }
        }
        actions.append(&mut self.node_actions);
        actions
    }
}

/// A node's occupancy, clamped to 0..=1 (not-a-number counts as 0).
pub(crate) fn occupancy(n: &NodeStats) -> f64 {
    if n.occupancy.is_nan() {
        0.0
    } else {
        n.occupancy.clamp(0.0, 1.0)
    }
}

/// `v` with each tier's factors within its node and worker counts (local factors at least 1).
pub fn cap(v: Vector, nodes: [u32; 2], threads: [u32; 2]) -> Vector {
    let tier = |r: Replicas, n: u32, t: u32| Replicas {
        global: r.global.min(n),
        local: r.local.clamp(1, t.max(1)),
    };
    Vector {
        memory: tier(v.memory, nodes[0], threads[0]),
        disk: tier(v.disk, nodes[1], threads[1]),
    }
}

/// [`cap`], then raised to `k1` (k + 1) replicas across the tiers as far as their nodes
/// allow: disk replicas first (they cost less), then memory.
pub fn normalize(v: Vector, nodes: [u32; 2], threads: [u32; 2], k1: u32) -> Vector {
    let mut v = cap(v, nodes, threads);
    let need = k1.min(nodes[0].saturating_add(nodes[1]));
    let have = v.memory.global.saturating_add(v.disk.global);
    if have < need {
        let add = (need - have).min(nodes[1] - v.disk.global);
        v.disk.global += add;
    }
    let have = v.memory.global.saturating_add(v.disk.global);
    if have < need {
        let add = (need - have).min(nodes[0] - v.memory.global);
        v.memory.global += add;
    }
    v
}
