//! Properties over arbitrary snapshots and configurations: the invariants of every round,
//! the grace period, determinism and idempotence.

use proptest::prelude::*;

use crate::policy::cap;
use crate::snapshot::{AccessSummary, KeyStats, Latency, NodeStats};
use crate::{decide, Action, PolicyConfig, PolicyState, Snapshot, Tier, Vector};

fn vector(max: u32) -> impl Strategy<Value = Vector> {
    (0..=max, 0..=max, 0..=max, 0..=max).prop_map(|(a, b, c, d)| Vector::new((a, b), (c, d)))
}

/// A node: tier, workers, bytes, capacity, occupancy, (alive, removable, working set).
type NodeParts = (Tier, u32, u64, u64, f64, (bool, bool, Option<u64>));

fn node(tier: Tier) -> impl Strategy<Value = NodeParts> {
    (
        Just(tier),
        1u32..8,
        0u64..2_000,
        prop_oneof![Just(0u64), 1u64..2_000],
        prop_oneof![0.0..1.0f64, Just(f64::NAN), Just(1.5)],
        (
            prop::bool::weighted(0.9),
            prop::bool::weighted(0.8),
            prop::option::of(0u64..4_000),
        ),
    )
}

prop_compose! {
    fn snapshot()(
        memory in prop::collection::vec(node(Tier::Memory), 0..6),
        disk in prop::collection::vec(node(Tier::Disk), 0..5),
        total in 0u64..100_000,
        accessed in 0u64..1_000,
        squares in 0.0..1e10f64,
        keys in prop::collection::vec(
            (prop_oneof![0u64..200, 0u64..20, Just(u64::MAX)], vector(8), any::<bool>()),
            0..30,
        ),
        latency in prop::option::of((0.0..20_000.0f64, 0u64..1_000)),
        default in (1u32..3, 0u32..3),
    ) -> Snapshot {
        let nodes = memory.into_iter().chain(disk).enumerate().map(
            |(i, (tier, workers, storage_bytes, capacity_bytes, occupancy, (alive, removable, working_set_bytes)))| {
                NodeStats {
                    id: format!("n{i}"),
                    tier,
                    workers,
                    storage_bytes,
                    capacity_bytes,
                    working_set_bytes,
                    occupancy,
                    alive,
                    removable,
                }
            },
        );
        Snapshot {
            now_ms: 100_000_000,
            nodes: nodes.collect(),
            access: AccessSummary {
                accesses_total: total,
                accessed_keys: accessed,
                access_sum_squares: squares,
            },
            keys: keys
                .into_iter()
                .enumerate()
                .map(|(i, (accesses, vector, is_explicit))| KeyStats {
                    pinned: false,
                    key: format!("k{i}").into_bytes(),
                    accesses,
                    vector,
                    is_explicit,
                })
                .collect(),
            latency: latency.map(|(mean_us, count)| Latency { mean_us, p99_us: mean_us, count }),
            default_vector: Vector::new((default.0, 1), (default.1, 1)),
        }
    }
}

prop_compose! {
    fn config()(
        k in 0u32..3,
        budget in prop::option::of(1.0..6.0f64),
        batch in 1u32..10,
        min_disk in 0u32..3,
        samples in 1u64..200,
    ) -> PolicyConfig {
        PolicyConfig {
            fault_tolerance: k,
            budget_per_hour: budget,
            node_addition_batch: batch,
            min_disk_nodes: min_disk,
            min_latency_samples: samples,
            ..PolicyConfig::paper()
        }
    }
}

fn count(snap: &Snapshot, tier: Tier) -> u32 {
    snap.node_count(tier)
}

/// Checks what must hold after any round of `decide` (with a fresh state).
fn check_round(snap: &Snapshot, cfg: &PolicyConfig, actions: &[Action]) -> Result<(), String> {
    let k1 = cfg.fault_tolerance + 1;
    let mut after = [count(snap, Tier::Memory), count(snap, Tier::Disk)];
    let mut added = [0u32; 2];
    for a in actions {
        match a {
            Action::RemoveNode { tier, node_id, .. } => {
                if !snap.alive(*tier).any(|n| n.id == *node_id) {
                    return Err(format!("removes unknown {node_id}"));
                }
                if !snap.nodes.iter().any(|n| n.id == *node_id && n.removable) {
                    return Err(format!("removes {node_id}, which its manager cannot"));
                }
                let i = *tier as usize;
                after[i] = after[i]
                    .checked_sub(1)
                    .ok_or("removal from an empty tier")?;
            }
            Action::AddNodes { tier, count, .. } => {
                if *count == 0 || *count > cfg.node_addition_batch {
                    return Err(format!("adds {count}"));
                }
                added[*tier as usize] += count;
            }
            _ => {}
        }
    }
    let removals = |t: Tier| {
        actions
            .iter()
            .filter(|a| matches!(a, Action::RemoveNode { tier, .. } if *tier == t))
            .count()
    };
    let (n_m, n_e) = (after[0], after[1]);
    if removals(Tier::Memory) > 1 || removals(Tier::Disk) > 1 {
        return Err("more than one removal in a tier".into());
    }
    if removals(Tier::Memory) == 1 && n_m < cfg.min_memory_nodes.max(k1.saturating_sub(n_e)) {
        return Err(format!("memory tier shrunk to {n_m} with {n_e} disk nodes"));
    }
    if removals(Tier::Disk) == 1 && n_e < cfg.min_disk_nodes.max(k1) {
        return Err(format!("disk tier shrunk to {n_e}"));
    }
    if let Some(budget) = cfg.budget_per_hour {
        let p = cfg.prices;
        let cost =
            |m: u32, e: u32| p.fixed + f64::from(m) * p.memory_node + f64::from(e) * p.disk_node;
        let before = cost(count(snap, Tier::Memory), count(snap, Tier::Disk));
        let now = cost(n_m + added[0], n_e + added[1]);
        if added.iter().any(|&a| a > 0) && now > budget + 1e-6 {
            return Err(format!("additions cost {now} > budget {budget}"));
        }
        if now > before.max(budget) + 1e-6 {
            return Err(format!("cost grew from {before} to {now}"));
        }
    }
    let threads = [snap.threads(Tier::Memory), snap.threads(Tier::Disk)];
    let need = k1.min(n_m + n_e);
    let ok = |v: Vector| -> Result<(), String> {
        let fits = v.memory.global <= n_m
            && v.disk.global <= n_e
            && (1..=threads[0].max(1)).contains(&v.memory.local)
            && (1..=threads[1].max(1)).contains(&v.disk.local);
        if !fits {
            return Err(format!(
                "{v:?} exceeds {n_m}+{n_e} nodes, {threads:?} workers"
            ));
        }
        if v.memory.global + v.disk.global < need {
            return Err(format!("{v:?} has fewer than {need} replicas"));
        }
        Ok(())
    };
    let mut seen = std::collections::HashSet::new();
    for a in actions {
        let Some(key) = a.key() else { continue };
        if !seen.insert(key.to_vec()) {
            return Err(format!("two actions for {key:?}"));
        }
        let stats = snap
            .keys
            .iter()
            .find(|k| k.key == key)
            .ok_or("unknown key")?;
        match a {
            Action::SetReplication { vector, .. } => ok(*vector)?,
            Action::ResetReplication { .. } => {
                if !stats.is_explicit && stats.vector == snap.default_vector {
                    return Err("reset of a key without an explicit vector".into());
                }
                ok(cap(snap.default_vector, [n_m, n_e], threads))?;
            }
            _ => {}
        }
    }
    // After a removal no key keeps more replicas in that tier than its nodes left.
    for (i, removed) in [removals(Tier::Memory), removals(Tier::Disk)]
        .into_iter()
        .enumerate()
    {
        if removed == 0 {
            continue;
        }
        for k in &snap.keys {
            let v = match actions.iter().find(|a| a.key() == Some(&k.key)) {
                Some(Action::SetReplication { vector, .. }) => *vector,
                Some(_) => snap.default_vector,
                None => k.vector,
            };
            let r = [v.memory.global, v.disk.global][i];
            if r > after[i]
                && !matches!(
                    actions.iter().find(|a| a.key() == Some(&k.key)),
                    Some(Action::ResetReplication { .. })
                )
            {
                return Err(format!(
                    "{:?} keeps {r} replicas on {} nodes",
                    k.key, after[i]
                ));
            }
        }
    }
    Ok(())
}

/// `snap` with `actions` carried out at once (added nodes have not joined yet).
fn apply(snap: &Snapshot, actions: &[Action]) -> Snapshot {
    let mut s = snap.clone();
    for a in actions {
        match a {
            Action::SetReplication { key, vector, .. } => {
                let k = s.keys.iter_mut().find(|k| k.key == *key).unwrap();
                k.vector = *vector;
                k.is_explicit = true;
            }
            Action::ResetReplication { key, .. } => {
                let k = s.keys.iter_mut().find(|k| k.key == *key).unwrap();
                k.vector = s.default_vector;
                k.is_explicit = false;
            }
            Action::RemoveNode { node_id, .. } => {
                s.nodes.iter_mut().find(|n| n.id == *node_id).unwrap().alive = false;
            }
            Action::AddNodes { .. } => {}
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn every_round_keeps_the_invariants(snap in snapshot(), cfg in config(), prior in snapshot()) {
        let actions = decide(&snap, &cfg, &mut PolicyState::new());
        prop_assert_eq!(check_round(&snap, &cfg, &actions), Ok(()), "{:?}", actions);
        // Also after an earlier, unrelated round (pending nodes, grace, cooldowns).
        let mut state = PolicyState::new();
        let mut earlier = prior;
        earlier.now_ms = snap.now_ms - 60_000;
        decide(&earlier, &cfg, &mut state);
        let actions = decide(&snap, &cfg, &mut state);
        prop_assert!(actions.iter().filter(|a| a.is_elastic()).count() <= 2);
        for a in &actions {
            if let Action::SetReplication { vector, .. } = a {
                let n = [count(&snap, Tier::Memory), count(&snap, Tier::Disk)];
                prop_assert!(vector.memory.global <= n[0] && vector.disk.global <= n[1]);
            }
        }
    }

    #[test]
    fn caches_whose_working_set_fits_never_grow_for_storage(
        snap in snapshot(),
        cfg in config(),
        fill in 0.0..0.999f64,
    ) {
        // Every memory node a cache at or over its budget, its working set at most
        // S_upper of its capacity: the memory tier may grow for latency, never for storage.
        let mut snap = snap;
        for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Memory) {
            let room = n.capacity_bytes as f64 * cfg.memory_storage.upper;
            n.working_set_bytes = Some((room * fill).floor() as u64);
            n.storage_bytes = n.storage_bytes.max(n.capacity_bytes);
        }
        for a in decide(&snap, &cfg, &mut PolicyState::new()) {
            if let Action::AddNodes { tier: Tier::Memory, reason, .. } = &a {
                prop_assert!(!reason.contains("storage"), "{:?}", a);
            }
        }
    }

    #[test]
    fn the_same_input_gives_the_same_actions(snap in snapshot(), cfg in config(), prior in snapshot()) {
        let mut state = PolicyState::new();
        let mut earlier = prior;
        earlier.now_ms = snap.now_ms - 45_000;
        decide(&earlier, &cfg, &mut state);
        let a = decide(&snap, &cfg, &mut state.clone());
        let b = decide(&snap, &cfg, &mut state.clone());
        prop_assert_eq!(a, b);
    }

    #[test]
    fn a_round_after_its_own_actions_has_nothing_left_to_do(snap in snapshot(), cfg in config()) {
        let mut state = PolicyState::new();
        let first = decide(&snap, &cfg, &mut state);
        let applied = apply(&snap, &first);
        let second = decide(&applied, &cfg, &mut state);
        prop_assert!(second.is_empty(), "first {:?}\nthen {:?}", first, second);
    }

    #[test]
    fn inside_the_grace_period_only_promotions_happen(snap in snapshot(), cfg in config()) {
        // Two quiet rounds just before, the first with one more memory node: a change.
        let mut state = PolicyState::new();
        let mut quiet = snap.clone();
        quiet.keys.clear();
        quiet.latency = None;
        quiet.now_ms -= 2_000;
        quiet.nodes.push(NodeStats {
            id: "leaving".into(),
            tier: Tier::Memory,
            workers: 1,
            storage_bytes: 0,
            capacity_bytes: 0,
            working_set_bytes: None,
            occupancy: 0.5,
            alive: true,
            removable: true,
        });
        decide(&quiet, &cfg, &mut state);
        quiet.nodes.pop();
        quiet.now_ms += 1_000;
        decide(&quiet, &cfg, &mut state);
        prop_assert!(state.in_grace(snap.now_ms, &cfg));

        let n_m = count(&snap, Tier::Memory);
        for a in decide(&snap, &cfg, &mut state) {
            prop_assert!(!a.is_elastic(), "{:?}", a);
            let stats = snap.keys.iter().find(|k| Some(&k.key[..]) == a.key()).unwrap();
            prop_assert_eq!(stats.vector.memory.global.min(n_m), 0, "not a promotion: {:?}", a);
            let target = match &a {
                Action::SetReplication { vector, .. } => *vector,
                _ => snap.default_vector,
            };
            prop_assert!(target.memory.global >= 1, "{:?}", a);
        }
    }
}
