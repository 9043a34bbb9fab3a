//! Node additions and removals: storage- and compute-driven, the budget, the grace period,
//! pending requests, and the factor cut before a removal.

use super::{busy, key, latency, snapshot};
use crate::{decide, Action, PolicyConfig, PolicyState, Snapshot, Tier, Vector};

fn adds(actions: &[Action]) -> Vec<(Tier, u32)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::AddNodes { tier, count, .. } => Some((*tier, *count)),
            _ => None,
        })
        .collect()
}

fn removes(actions: &[Action]) -> Vec<(Tier, String)> {
    actions
        .iter()
        .filter_map(|a| match a {
            Action::RemoveNode { tier, node_id, .. } => Some((*tier, node_id.clone())),
            _ => None,
        })
        .collect()
}

/// Every memory node busy, latency `mean_us`.
fn overloaded(memory: u32, mean_us: f64) -> Snapshot {
    let mut snap = snapshot(memory, 2);
    snap.latency = latency(mean_us);
    busy(&mut snap, 0.9);
    snap
}

/// Every memory node idle, latency low.
fn idle(memory: u32, disk: u32) -> Snapshot {
    let mut snap = snapshot(memory, disk);
    snap.latency = latency(100.0);
    busy(&mut snap, 0.01);
    snap
}

#[test]
fn compute_driven_addition_is_n_times_the_latency_ratio_bounded_by_c() {
    // (memory nodes, latency µs, batch, expected additions)
    let table = [
        (4, 2_000.0, 8, 1),   // ratio 0.8: at least one
        (4, 3_750.0, 8, 2),   // ratio 1.5: 6 nodes
        (4, 25_000.0, 8, 2),  // ratio 10, bounded by c = 1.5
        (20, 25_000.0, 8, 8), // 30 wanted, 8 per round
        (4, 1_800.0, 8, 0),   // inside the latency band
    ];
    for (memory, mean_us, batch, want) in table {
        let cfg = PolicyConfig {
            node_addition_batch: batch,
            ..PolicyConfig::paper()
        };
        let actions = decide(&overloaded(memory, mean_us), &cfg, &mut PolicyState::new());
        let expected = if want == 0 {
            vec![]
        } else {
            vec![(Tier::Memory, want)]
        };
        assert_eq!(
            adds(&actions),
            expected,
            "{memory} nodes at {mean_us} µs: {actions:?}"
        );
    }
}

#[test]
fn compute_driven_removal_takes_the_least_occupied_memory_node_down_to_the_floor() {
    let cfg = PolicyConfig::paper();
    let mut snap = idle(3, 2);
    snap.nodes[0].occupancy = 0.03;
    snap.nodes[1].occupancy = 0.002;
    snap.nodes[2].occupancy = 0.002;
    snap.nodes[2].storage_bytes = 100; // tie on occupancy: less to move
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(removes(&actions), vec![(Tier::Memory, "m2".to_string())]);

    // One node busier than C_lower: keep them all (remove_occupancy = max).
    snap.nodes[0].occupancy = 0.06;
    assert_eq!(decide(&snap, &cfg, &mut PolicyState::new()), vec![]);

    // Floors: one memory node; with no disk tier and k = 1, two.
    assert_eq!(decide(&idle(1, 2), &cfg, &mut PolicyState::new()), vec![]);
    assert_eq!(decide(&idle(2, 0), &cfg, &mut PolicyState::new()), vec![]);
    assert_eq!(
        removes(&decide(&idle(3, 0), &cfg, &mut PolicyState::new())).len(),
        1
    );
}

#[test]
fn only_nodes_the_manager_can_remove_are_asked_to_leave() {
    // The least occupied memory node was started by hand (the monitor's seed, say): the
    // manager cannot stop it, so the policy asks the next one instead of failing (a failed
    // removal stayed pending for `pending_timeout_ms` and blocked every later removal).
    let cfg = PolicyConfig::paper();
    let mut snap = idle(3, 2);
    snap.nodes[0].occupancy = 0.001;
    snap.nodes[0].removable = false;
    snap.nodes[1].occupancy = 0.03;
    snap.nodes[2].occupancy = 0.02;
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(removes(&actions), vec![(Tier::Memory, "m2".to_string())]);

    // None it can remove: no removal, and nothing pending afterwards.
    for n in &mut snap.nodes {
        n.removable = false;
    }
    let mut state = PolicyState::new();
    assert_eq!(decide(&snap, &cfg, &mut state), vec![]);
    assert_eq!(state.pending_removal(Tier::Memory), None);

    // The disk tier's storage rule and the budget rule choose the same way.
    let mut snap = snapshot(1, 4);
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Disk) {
        n.storage_bytes = 10;
    }
    snap.nodes[1].removable = false;
    snap.nodes[2].storage_bytes = 20;
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(removes(&actions), vec![(Tier::Disk, "d2".to_string())]);
    let budget = PolicyConfig {
        budget_per_hour: Some(1.0),
        ..PolicyConfig::paper()
    };
    let mut snap = idle(3, 0);
    snap.nodes[0].removable = false;
    let actions = decide(&snap, &budget, &mut PolicyState::new());
    assert_eq!(removes(&actions), vec![(Tier::Memory, "m1".to_string())]);
}

#[test]
fn removal_first_cuts_factors_to_the_nodes_left() {
    let cfg = PolicyConfig::paper();
    let mut snap = idle(3, 2);
    snap.keys = vec![
        key("wide", 20, Vector::new((3, 2), (1, 1)), true),
        key("narrow", 20, Vector::new((2, 1), (1, 1)), true),
    ];
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(removes(&actions).len(), 1, "{actions:?}");
    let set: Vec<_> = actions
        .iter()
        .filter_map(|a| match a {
            Action::SetReplication { key, vector, .. } => Some((key.clone(), *vector)),
            _ => None,
        })
        .collect();
    assert_eq!(set, vec![(b"wide".to_vec(), Vector::new((2, 2), (1, 1)))]);
}

#[test]
fn storage_driven_elasticity_per_tier() {
    let cfg = PolicyConfig::paper();
    // Memory 70 % full over 2 nodes of 1000 bytes: ceil(1400 / 600) = 3 nodes.
    let mut snap = snapshot(2, 2);
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Memory) {
        n.storage_bytes = 700;
    }
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(adds(&actions), vec![(Tier::Memory, 1)]);

    // Disk 90 % full over 2 nodes: ceil(1800 / 750) = 3.
    let mut snap = snapshot(1, 2);
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Disk) {
        n.storage_bytes = 900;
    }
    assert_eq!(
        adds(&decide(&snap, &cfg, &mut PolicyState::new())),
        vec![(Tier::Disk, 1)]
    );

    // Disk 10 % full over 4 nodes: one leaves (the one storing least), towards k + 1 = 2.
    let mut snap = snapshot(1, 4);
    for (i, n) in snap
        .nodes
        .iter_mut()
        .filter(|n| n.tier == Tier::Disk)
        .enumerate()
    {
        n.storage_bytes = 100 - i as u64;
    }
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    assert_eq!(removes(&actions), vec![(Tier::Disk, "d3".to_string())]);

    // ... but never below k + 1, and the memory tier is not shrunk for storage.
    let mut snap = snapshot(3, 2);
    for n in snap.nodes.iter_mut() {
        n.storage_bytes = 10;
    }
    assert_eq!(decide(&snap, &cfg, &mut PolicyState::new()), vec![]);
}

#[test]
fn a_cache_over_the_disk_tier_grows_for_its_working_set_not_its_bytes() {
    let cfg = PolicyConfig::paper();
    // Two memory nodes that cache over the disk tier, each at its budget (1000 of 1000
    // bytes): their bytes alone would ask for ceil(2000 / 600) = 4 nodes.
    let cache = |working_set: u64| {
        let mut snap = snapshot(2, 2);
        for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Memory) {
            n.storage_bytes = 1000;
            n.working_set_bytes = Some(working_set);
        }
        adds(&decide(&snap, &cfg, &mut PolicyState::new()))
    };
    // (working set per node, expected additions)
    let table = [
        (100, vec![]),                   // 10 %: a tenth of the cache is in use
        (600, vec![]),                   // at S_upper: holds
        (700, vec![(Tier::Memory, 1)]),  // ceil(1400 / 600) = 3 nodes
        (1500, vec![(Tier::Memory, 3)]), // larger than the cache: ceil(3000 / 600) = 5
    ];
    for (working_set, want) in table {
        assert_eq!(cache(working_set), want, "working set {working_set}");
    }
    // A memory node that is not a cache (no working set measured) counts its bytes.
    let mut snap = snapshot(2, 2);
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Memory) {
        n.storage_bytes = 1000;
    }
    assert_eq!(
        adds(&decide(&snap, &cfg, &mut PolicyState::new())),
        vec![(Tier::Memory, 2)]
    );
    // The disk tier's storage is its bytes, whatever a working set says.
    let mut snap = snapshot(1, 2);
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Disk) {
        n.storage_bytes = 900;
        n.working_set_bytes = Some(0);
    }
    assert_eq!(
        adds(&decide(&snap, &cfg, &mut PolicyState::new())),
        vec![(Tier::Disk, 1)]
    );
}

#[test]
fn pending_nodes_are_not_requested_again_until_they_join_or_time_out() {
    let cfg = PolicyConfig::paper();
    let mut snap = overloaded(4, 3_750.0);
    let mut state = PolicyState::new();
    assert_eq!(
        adds(&decide(&snap, &cfg, &mut state)),
        vec![(Tier::Memory, 2)]
    );
    assert_eq!(state.pending_additions(Tier::Memory), 2);
    // After the grace period, still overloaded, nodes not there yet: no new request.
    snap.now_ms += cfg.grace_ms;
    assert_eq!(adds(&decide(&snap, &cfg, &mut state)), vec![]);
    // One joins: one still pending (and the join restarts the grace period).
    snap.now_ms += 30_000;
    snap.nodes.push(super::node("new1", Tier::Memory, 0.9, 400));
    assert_eq!(decide(&snap, &cfg, &mut state), vec![]);
    assert_eq!(state.pending_additions(Tier::Memory), 1);
    assert!(state.in_grace(snap.now_ms, &cfg));
    // The other never comes: after pending_timeout_ms the pressure is answered again.
    snap.now_ms += cfg.pending_timeout_ms;
    let actions = decide(&snap, &cfg, &mut state);
    assert_eq!(adds(&actions), vec![(Tier::Memory, 3)], "{actions:?}");
}

#[test]
fn the_grace_period_holds_elasticity_back() {
    let cfg = PolicyConfig::paper();
    let mut snap = idle(4, 2);
    let mut state = PolicyState::new();
    let first = decide(&snap, &cfg, &mut state);
    let (_, gone) = removes(&first).pop().expect("a removal");
    // The node is gone a round later: the departure restarts the grace period.
    snap.nodes.retain(|n| n.id != gone);
    snap.now_ms += 30_000;
    let departed = snap.now_ms;
    // Every round inside the grace period: nothing, though the tier is still idle.
    while snap.now_ms < departed + cfg.grace_ms {
        assert_eq!(
            decide(&snap, &cfg, &mut state),
            vec![],
            "at {} ms",
            snap.now_ms
        );
        snap.now_ms += 30_000;
    }
    assert_eq!(removes(&decide(&snap, &cfg, &mut state)).len(), 1);
}

#[test]
fn a_membership_change_restarts_the_grace_period() {
    let cfg = PolicyConfig::paper();
    let mut snap = overloaded(4, 3_750.0);
    let mut state = PolicyState::new();
    snap.nodes[0].alive = false; // first sight: no grace
    let mut quiet = snap.clone();
    quiet.latency = None;
    assert_eq!(decide(&quiet, &cfg, &mut state), vec![]);
    snap.now_ms += 30_000;
    snap.nodes[0].alive = true; // m0 back: a change
    assert_eq!(decide(&snap, &cfg, &mut state), vec![]);
    assert_eq!(state.last_resource_change_ms(), Some(snap.now_ms));
}

#[test]
fn the_budget_caps_additions_and_sheds_memory_nodes_when_exceeded() {
    // 4 memory + 2 disk nodes: 0.30 + 4 · 0.532 + 2 · 0.133 = 2.694 $/h.
    let cfg = |budget: f64| PolicyConfig {
        budget_per_hour: Some(budget),
        ..PolicyConfig::paper()
    };
    // Budget for exactly one more memory node: 2 wanted (ratio 1.5), 1 granted.
    let actions = decide(&overloaded(4, 3_750.0), &cfg(3.3), &mut PolicyState::new());
    assert_eq!(adds(&actions), vec![(Tier::Memory, 1)], "{actions:?}");
    // No room: none.
    assert_eq!(
        decide(&overloaded(4, 3_750.0), &cfg(2.7), &mut PolicyState::new()),
        vec![]
    );
    // Over budget (lowered under the cluster): one memory node leaves.
    let mut snap = snapshot(4, 2);
    snap.latency = latency(1_000.0);
    let actions = decide(&snap, &cfg(2.2), &mut PolicyState::new());
    assert_eq!(removes(&actions).len(), 1, "{actions:?}");
    // Budget mode aims at the unsaturated latency: 2,500 µs · 0.75.
    let actions = decide(
        &overloaded(4, 2_000.0),
        &cfg(100.0),
        &mut PolicyState::new(),
    );
    assert_eq!(adds(&actions), vec![(Tier::Memory, 1)]);
}

#[test]
fn latency_over_too_few_requests_is_not_trusted() {
    let cfg = PolicyConfig::paper();
    let mut snap = overloaded(4, 25_000.0);
    snap.latency.as_mut().unwrap().count = cfg.min_latency_samples - 1;
    assert_eq!(decide(&snap, &cfg, &mut PolicyState::new()), vec![]);
}
