//! Algorithms 3 and 4, NodeAddition and NodeRemoval: storage-driven elasticity per tier,
//! compute-driven elasticity of the memory tier, and the budget cap.
//!
//! Every rule here waits out the grace period, acts at most once per tier per round, and
//! counts nodes requested but not joined as present (so a request is not repeated each
//! round while Kubernetes starts them). At most one node per tier leaves per round: a
//! leaving node hands its keys off before it goes, and one at a time keeps k + 1 copies of
//! each key while that happens.

use super::{occupancy, Branch, Round};
use crate::actions::Action;
use crate::snapshot::Tier;

/// Algorithm 5 lines 1–5: a tier above S_upper grows to `required_storage`; the disk tier
/// below S_lower shrinks by one node towards max(required_storage, k + 1). The memory tier
/// is not shrunk for storage (the paper: hot-key replication raises compute, not storage).
///
/// A memory node that caches over the disk tier counts its working set
/// (`NodeStats::working_set_bytes`), not the bytes it holds: a cache is full whatever its
/// load needs, and counting it full would grow the tier until it held all data (the
/// paper's memory tier held only the keys it promoted, so its storage followed the load).
pub(super) fn storage(round: &mut Round<'_>) {
    if round.in_grace {
        return;
    }
    for tier in Tier::ALL {
        let n = round.nodes[tier.index()];
        if n == 0 {
            continue;
        }
        let (bytes, capacity) = round.snap.alive(tier).fold((0u128, 0u128), |(b, c), n| {
            let stored = match tier {
                Tier::Memory => n.working_set_bytes.unwrap_or(n.storage_bytes),
                Tier::Disk => n.storage_bytes,
            };
            (b + u128::from(stored), c + u128::from(n.capacity_bytes))
        });
        if capacity == 0 {
            continue;
        }
        let band = match tier {
            Tier::Memory => round.cfg.memory_storage,
            Tier::Disk => round.cfg.disk_storage,
        };
        let used = bytes as f64 / capacity as f64;
        // required_storage = ceil(bytes / (capacity of one node · S_upper)), with the
        // tier's mean node capacity: the smallest count that keeps the tier at or below
        // S_upper. Spec §6.8 checks it against the paper's "four EBS nodes".
        let per_node = capacity as f64 / f64::from(n);
        let required = (bytes as f64 / (per_node * band.upper)).ceil();
        let required = if required.is_finite() {
            required as u32
        } else {
            u32::MAX
        };
        let pending = round.state.pending_additions(tier);
        if used > band.upper {
            let present = n.saturating_add(pending);
            let want = required.saturating_sub(present);
            if want > 0 {
                let reason = format!(
                    "{tier:?} storage at {:.0} % > S_upper {:.0} %: {required} nodes needed, {n} present{}",
                    used * 100.0,
                    band.upper * 100.0,
                    pending_note(pending)
                );
                add(round, tier, want, reason);
            }
        } else if tier == Tier::Disk && used < band.lower && pending == 0 {
            let target = required.max(round.disk_floor());
            if n > target && !round.removing(tier) {
                let reason = format!(
                    "disk storage at {:.0} % < S_lower {:.0} %: {target} nodes suffice, {n} present",
                    used * 100.0,
                    band.lower * 100.0
                );
                remove(round, tier, reason);
            }
        }
    }
}

/// Algorithm 5 lines 8–14 (the node part): every memory node busy and latency above its
/// band → N_M · min(L_obs/L_obj, c) nodes (at least one more); the tier idle and latency
/// below its band → one node less.
pub(super) fn compute(round: &mut Round<'_>) {
    let tier = Tier::Memory;
    if round.elastic_done[tier.index()] {
        return;
    }
    let n = round.nodes[0];
    match round.branch {
        Branch::AddNodes => {
            let pending = round.state.pending_additions(tier);
            if pending > 0 {
                // The nodes already asked for answer the same pressure.
                return;
            }
            let ratio = (round.l_obs / round.l_obj).min(round.cfg.max_latency_ratio);
            let target = (f64::from(n) * ratio).ceil();
            let target = if target.is_finite() {
                target as u32
            } else {
                u32::MAX
            };
            let want = target.saturating_sub(n).max(1);
            let reason = format!(
                "latency {:.0} µs > {:.0} µs and every memory node at least {:.0} % busy (> C_upper {:.0} %): {n} → {} nodes",
                round.l_obs,
                round.cfg.latency_band.upper * round.l_obj,
                round.occupancy(round.cfg.add_occupancy) * 100.0,
                round.cfg.compute_band.upper * 100.0,
                n.saturating_add(want)
            );
            add(round, tier, want, reason);
        }
        Branch::RemoveNode => {
            let idle = round.state.pending_additions(tier) == 0 && !round.removing(tier);
            if idle && n > round.memory_floor() {
                let reason = format!(
                    "latency {:.0} µs < {:.0} µs and every memory node under {:.0} % busy (C_lower): {n} → {} nodes",
                    round.l_obs,
                    round.cfg.latency_band.lower * round.l_obj,
                    round.cfg.compute_band.lower * 100.0,
                    n - 1
                );
                remove(round, tier, reason);
            }
        }
        Branch::None | Branch::Replicate => {}
    }
}

/// Budget mode: a cluster costing more than B (the budget was lowered, or nodes came from
/// outside the policy) loses one memory node per round, down to the memory floor.
pub(super) fn budget(round: &mut Round<'_>) {
    let Some(budget) = round.cfg.budget_per_hour else {
        return;
    };
    let tier = Tier::Memory;
    if round.in_grace || round.elastic_done[tier.index()] || round.removing(tier) {
        return;
    }
    let cost = cost(round);
    if cost > budget && round.nodes[0] > round.memory_floor() {
        let reason = format!("cluster costs {cost:.3} $/h > budget {budget:.3} $/h");
        remove(round, tier, reason);
    }
}

/// $/h of the cluster with its alive nodes and the nodes requested (earlier or by this
/// round), without the nodes leaving.
fn cost(round: &Round<'_>) -> f64 {
    let p = round.cfg.prices;
    let count = |tier: Tier| {
        let i = tier.index();
        let leaving = u32::from(round.removing(tier));
        let n = round.nodes[i]
            .saturating_add(round.state.pending_additions(tier))
            .saturating_add(round.added[i])
            .saturating_sub(leaving);
        f64::from(n)
    };
    p.fixed + count(Tier::Memory) * p.memory_node + count(Tier::Disk) * p.disk_node
}

/// Requests `want` nodes of `tier`, capped by `node_addition_batch` and, in budget mode, by
/// what the budget still pays for (the paper's `adjust()`: the most nodes affordable).
fn add(round: &mut Round<'_>, tier: Tier, want: u32, mut reason: String) {
    let mut count = want.min(round.cfg.node_addition_batch);
    if count < want {
        reason.push_str(&format!(" (at most {count} per round)"));
    }
    if let Some(budget) = round.cfg.budget_per_hour {
        let price = match tier {
            Tier::Memory => round.cfg.prices.memory_node,
            Tier::Disk => round.cfg.prices.disk_node,
        };
        let spare = budget - cost(round);
        let affordable = if price <= 0.0 {
            count
        } else if spare <= 0.0 {
            0
        } else {
            // Float to int `as` saturates; NaN maps to 0.
            ((spare / price) + 1e-9).floor() as u32
        };
        if affordable < count {
            count = affordable;
            reason.push_str(&format!(" (budget {budget:.3} $/h allows {count})"));
        }
    }
    if count == 0 {
        return;
    }
    round.elastic_done[tier.index()] = true;
    round.added[tier.index()] = count;
    round.node_actions.push(Action::AddNodes {
        tier,
        count,
        reason,
    });
}

/// Asks one node of `tier` to leave: in the memory tier the least occupied (least load to
/// move), in the disk tier the one storing least (least data to hand off, so the shortest
/// departure); ties broken by the other measure, then by id, so the choice is
/// deterministic. Only nodes the cluster manager can remove are candidates (none: no
/// removal). The keys' factors are cut to the nodes left when the round finishes.
fn remove(round: &mut Round<'_>, tier: Tier, mut reason: String) {
    let candidates = round.snap.alive(tier).filter(|n| n.removable);
    let chosen = candidates.min_by(|a, b| {
        let (oa, ob) = (occupancy(a), occupancy(b));
        let by_load = oa.total_cmp(&ob);
        let by_bytes = a.storage_bytes.cmp(&b.storage_bytes);
        match tier {
            Tier::Memory => by_load.then(by_bytes),
            Tier::Disk => by_bytes.then(by_load),
        }
        .then_with(|| a.id.cmp(&b.id))
    });
    let Some(node) = chosen else { return };
    let node_id = node.id.clone();
    reason.push_str(&format!("; {node_id} leaves"));
    round.removed[tier.index()] = Some(node_id.clone());
    round.elastic_done[tier.index()] = true;
    round.node_actions.push(Action::RemoveNode {
        tier,
        node_id,
        reason,
    });
}

fn pending_note(pending: u32) -> String {
    if pending == 0 {
        String::new()
    } else {
        format!(" and {pending} requested")
    }
}
