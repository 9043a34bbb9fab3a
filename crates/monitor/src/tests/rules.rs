//! The per-key rules, one table per rule: promotion, demotion, hot-key replication,
//! de-replication; and the vector normalisation every change goes through.

use super::{busy, key, latency, snapshot, DEFAULT};
use crate::policy::{cap, normalize};
use crate::snapshot::AccessSummary;
use crate::{decide, Action, PolicyConfig, PolicyState, Snapshot, Vector};

/// The one action about key `k`, if any.
fn key_action(actions: &[Action], k: &str) -> Option<Action> {
    let mut found = actions.iter().filter(|a| a.key() == Some(k.as_bytes()));
    let first = found.next().cloned();
    assert!(found.next().is_none(), "two actions for {k}: {actions:?}");
    first
}

/// Expected outcome for a key.
#[derive(Debug, PartialEq)]
enum Want {
    Nothing,
    Reset,
    Set(Vector),
}

fn outcome(actions: &[Action], k: &str) -> Want {
    match key_action(actions, k) {
        None => Want::Nothing,
        Some(Action::ResetReplication { .. }) => Want::Reset,
        Some(Action::SetReplication { vector, .. }) => Want::Set(vector),
        Some(other) => panic!("not a key action: {other:?}"),
    }
}

/// Puts `state` inside a grace period at `snap.now_ms`: a round two seconds earlier saw
/// one more memory node than a round one second earlier.
fn enter_grace(snap: &Snapshot, state: &mut PolicyState, cfg: &PolicyConfig) {
    let mut before = snap.clone();
    before.keys.clear();
    before.latency = None;
    before.now_ms -= 2000;
    before
        .nodes
        .push(super::node("gone", crate::Tier::Memory, 0.1, 400));
    decide(&before, cfg, state);
    before.nodes.pop();
    before.now_ms += 1000;
    decide(&before, cfg, state);
}

#[test]
fn promotion_moves_one_replica_and_ignores_the_grace_period() {
    let cfg = PolicyConfig::paper();
    let on_disk = Vector::new((0, 1), (2, 1));
    // (accesses, memory nodes, disk nodes, in grace, vector, explicit, expected)
    let table = [
        // 3 > P = 2: one disk replica moves to memory; (1, 1) is the default: reset.
        (3, 2, 2, false, on_disk, true, Want::Reset),
        (3, 2, 2, true, on_disk, true, Want::Reset),
        // exactly P: not more than P.
        (2, 2, 2, false, on_disk, true, Want::Nothing),
        // three disk replicas: (1, 2) is not the default, an explicit vector.
        (
            5,
            2,
            3,
            false,
            Vector::new((0, 1), (3, 1)),
            true,
            Want::Set(Vector::new((1, 1), (2, 1))),
        ),
        // already in memory: nothing to promote.
        (50, 2, 2, false, DEFAULT, false, Want::Nothing),
        // no memory node to promote to.
        (50, 0, 2, false, on_disk, true, Want::Nothing),
    ];
    for (accesses, m, d, grace, vector, explicit, want) in table {
        let mut snap = snapshot(m, d);
        snap.keys = vec![key("k", accesses, vector, explicit)];
        let mut state = PolicyState::new();
        if grace {
            enter_grace(&snap, &mut state, &cfg);
            assert!(state.in_grace(snap.now_ms, &cfg));
        }
        let actions = decide(&snap, &cfg, &mut state);
        assert_eq!(
            outcome(&actions, "k"),
            want,
            "accesses {accesses}, {m}+{d} nodes, grace {grace}: {actions:?}"
        );
    }
}

#[test]
fn demotion_of_unused_explicit_keys_needs_k_plus_1_disk_nodes() {
    let cfg = PolicyConfig::paper(); // k = 1, D = 1
    let hot_vector = Vector::new((2, 1), (1, 1));
    let table = [
        // unused, explicit, memory replicas, 2 disk nodes: all on disk, k + 1 = 2 of them.
        (
            0,
            2,
            true,
            hot_vector,
            false,
            Want::Set(Vector::new((0, 1), (2, 1))),
        ),
        // one disk node cannot hold k + 1 replicas: back to the default instead.
        (0, 1, true, hot_vector, false, Want::Reset),
        // D = 1: one access is enough to stay (a key promoted earlier, not replicated).
        (
            1,
            2,
            true,
            Vector::new((1, 1), (2, 1)),
            false,
            Want::Nothing,
        ),
        (
            0,
            2,
            true,
            Vector::new((1, 1), (2, 1)),
            false,
            Want::Set(Vector::new((0, 1), (2, 1))),
        ),
        // default-vector keys are the memory node's LRU's business.
        (0, 2, false, DEFAULT, false, Want::Nothing),
        // inside the grace period: wait.
        (0, 2, true, hot_vector, true, Want::Nothing),
    ];
    for (accesses, disk, explicit, vector, grace, want) in table {
        let mut snap = snapshot(2, disk);
        snap.keys = vec![key("k", accesses, vector, explicit)];
        let mut state = PolicyState::new();
        if grace {
            enter_grace(&snap, &mut state, &cfg);
        }
        let actions = decide(&snap, &cfg, &mut state);
        assert_eq!(
            outcome(&actions, "k"),
            want,
            "accesses {accesses}, {disk} disk nodes"
        );
    }
}

#[test]
fn hot_keys_replicate_across_nodes_first_then_workers() {
    let cfg = PolicyConfig::paper(); // L_obj 2500 µs, f_upper 0.75 → 1875 µs; H = 40
    let table = [
        // latency just over the band: ratio 0.8 would shrink; +1 instead.
        (
            2_000.0,
            100,
            DEFAULT,
            Want::Set(Vector::new((2, 1), (1, 1))),
        ),
        // ratio 2: ceil(2 · 2) = 4 nodes.
        (
            5_000.0,
            100,
            Vector::new((2, 1), (1, 1)),
            Want::Set(Vector::new((4, 1), (1, 1))),
        ),
        // ratio 4 from 1: capped at the 4 memory nodes.
        (
            10_000.0,
            100,
            DEFAULT,
            Want::Set(Vector::new((4, 1), (1, 1))),
        ),
        // on every node: workers next, ceil(1 · 2) = 2.
        (
            5_000.0,
            100,
            Vector::new((4, 1), (1, 1)),
            Want::Set(Vector::new((4, 2), (1, 1))),
        ),
        // everything used: nothing more to give.
        (5_000.0, 100, Vector::new((4, 4), (1, 1)), Want::Nothing),
        // not hot (40 is not above H = 40).
        (5_000.0, 40, DEFAULT, Want::Nothing),
        // latency inside the band: no replication.
        (1_800.0, 100, DEFAULT, Want::Nothing),
    ];
    for (mean_us, accesses, vector, want) in table {
        let mut snap = snapshot(4, 1);
        snap.latency = latency(mean_us);
        snap.keys = vec![key("k", accesses, vector, vector != DEFAULT)];
        let actions = decide(&snap, &cfg, &mut PolicyState::new());
        assert_eq!(
            outcome(&actions, "k"),
            want,
            "latency {mean_us}, vector {vector:?}"
        );
        assert!(actions.iter().all(|a| !a.is_elastic()), "{actions:?}");
    }
}

#[test]
fn lukewarm_keys_are_not_split_below_what_their_replicas_can_see() {
    // A wide, flat load: 400,000 accesses over 200,000 keys (mean 2, σ 2, H = 8) on 20
    // workers, whose noise floor is 2 · 400,000 / (20 · 1,024) ≈ 39 accesses. A key with
    // 60 is hot by H, but split over two nodes neither would report it, the monitor would
    // see 0 accesses and de-replicate it the next round: it is left alone.
    let cfg = PolicyConfig::paper();
    let table = [
        (60, DEFAULT, Want::Nothing),
        // Two copies of 50 stay visible; the latency ratio (2) asks for 2 nodes.
        (100, DEFAULT, Want::Set(Vector::new((2, 1), (1, 1)))),
        // From two nodes the ratio asks for 4; 100 accesses allow only 2 copies.
        (100, Vector::new((2, 1), (1, 1)), Want::Nothing),
        // 200 accesses: 5 copies, so all 4 nodes.
        (
            200,
            Vector::new((2, 1), (1, 1)),
            Want::Set(Vector::new((4, 1), (1, 1))),
        ),
        // On every node, workers next only while 4 × T copies stay above the floor.
        (200, Vector::new((4, 1), (1, 1)), Want::Nothing),
        (
            400,
            Vector::new((4, 1), (1, 1)),
            Want::Set(Vector::new((4, 2), (1, 1))),
        ),
    ];
    for (accesses, vector, want) in table {
        let mut snap = snapshot(4, 1);
        snap.access = AccessSummary {
            accesses_total: 400_000,
            accessed_keys: 200_000,
            access_sum_squares: 1_600_000.0,
        };
        snap.latency = latency(5_000.0);
        snap.keys = vec![key("k", accesses, vector, vector != DEFAULT)];
        let actions = decide(&snap, &cfg, &mut PolicyState::new());
        assert_eq!(
            outcome(&actions, "k"),
            want,
            "{accesses} accesses, {vector:?}"
        );
    }
}

#[test]
fn saturation_discrimination_adds_nodes_when_all_are_busy_else_replicates() {
    let cfg = PolicyConfig::paper();
    // Skewed: one node saturated, the others idle (min occupancy 0.02 ≤ C_upper).
    let mut skewed = snapshot(4, 1);
    skewed.latency = latency(3_000.0);
    busy(&mut skewed, 0.02);
    skewed.nodes[0].occupancy = 1.0;
    skewed.keys = vec![key("hot", 500, DEFAULT, false)];
    let actions = decide(&skewed, &cfg, &mut PolicyState::new());
    assert!(
        matches!(outcome(&actions, "hot"), Want::Set(_)),
        "{actions:?}"
    );
    assert!(actions.iter().all(|a| !a.is_elastic()), "{actions:?}");

    // Uniform: every node busy: add nodes, leave the hot key alone.
    let mut uniform = skewed.clone();
    busy(&mut uniform, 0.9);
    let actions = decide(&uniform, &cfg, &mut PolicyState::new());
    assert_eq!(outcome(&actions, "hot"), Want::Nothing, "{actions:?}");
    assert!(
        actions.iter().any(|a| matches!(
            a,
            Action::AddNodes {
                tier: crate::Tier::Memory,
                ..
            }
        )),
        "{actions:?}"
    );
}

#[test]
fn cooled_keys_are_de_replicated_to_the_default() {
    let cfg = PolicyConfig::paper(); // mean 10
    let replicated = Vector::new((3, 1), (1, 1));
    let table = [
        (5, replicated, true, false, Want::Reset),
        // exactly the mean: not below it.
        (10, replicated, true, false, Want::Nothing),
        // more workers, one node: also replicated.
        (5, Vector::new((1, 3), (1, 1)), true, false, Want::Reset),
        // explicit but not replicated (a promoted-style vector): left alone.
        (5, Vector::new((1, 1), (2, 1)), true, false, Want::Nothing),
        // inside the grace period: wait.
        (5, replicated, true, true, Want::Nothing),
    ];
    for (accesses, vector, explicit, grace, want) in table {
        let mut snap = snapshot(4, 2);
        snap.keys = vec![key("k", accesses, vector, explicit)];
        let mut state = PolicyState::new();
        if grace {
            enter_grace(&snap, &mut state, &cfg);
        }
        let actions = decide(&snap, &cfg, &mut state);
        assert_eq!(
            outcome(&actions, "k"),
            want,
            "{accesses} accesses, {vector:?}"
        );
    }
}

#[test]
fn an_operators_vector_is_left_alone_cold_or_hot() {
    let cfg = PolicyConfig::paper(); // mean 10
    let operator = Vector::new((3, 1), (1, 1));
    for (accesses, latency_us) in [(0, 0.0), (5, 0.0), (500, 5_000.0)] {
        let mut snap = snapshot(4, 2);
        snap.latency = latency(latency_us);
        let mut k = key("k", accesses, operator, true);
        k.pinned = true;
        snap.keys = vec![k];
        let actions = decide(&snap, &cfg, &mut PolicyState::new());
        assert_eq!(
            outcome(&actions, "k"),
            Want::Nothing,
            "{accesses}: {actions:?}"
        );
    }
}

#[test]
fn a_changed_key_waits_out_its_cooldown() {
    let cfg = PolicyConfig::paper();
    let mut snap = snapshot(4, 1);
    snap.latency = latency(5_000.0);
    snap.keys = vec![key("k", 100, DEFAULT, false)];
    let mut state = PolicyState::new();
    let first = decide(&snap, &cfg, &mut state);
    let Want::Set(v) = outcome(&first, "k") else {
        panic!("{first:?}")
    };
    // Same statistics again 30 s later (the window still predates the change).
    snap.keys = vec![key("k", 100, v, true)];
    snap.now_ms += 30_000;
    assert_eq!(decide(&snap, &cfg, &mut state), vec![]);
    // A window later the key may grow again.
    snap.now_ms += 30_000;
    assert!(matches!(
        outcome(&decide(&snap, &cfg, &mut state), "k"),
        Want::Set(_)
    ));
}

#[test]
fn key_changes_per_round_are_capped_hottest_first() {
    let cfg = PolicyConfig {
        max_key_changes_per_round: 2,
        ..PolicyConfig::paper()
    };
    let mut snap = snapshot(4, 2);
    let on_disk = Vector::new((0, 1), (2, 1));
    snap.keys = (0..5)
        .map(|i| key(&format!("k{i}"), 10 + i, on_disk, true))
        .collect();
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    let keys: Vec<_> = actions.iter().filter_map(|a| a.key()).collect();
    assert_eq!(keys, vec![&b"k4"[..], b"k3"], "{actions:?}");
}

#[test]
fn normalize_caps_factors_and_restores_k_plus_1() {
    let threads = [4, 2];
    // (vector, nodes, k + 1, expected)
    let table = [
        // within bounds: unchanged.
        (
            Vector::new((2, 2), (1, 1)),
            [3, 2],
            2,
            Vector::new((2, 2), (1, 1)),
        ),
        // above the node and worker counts: capped.
        (
            Vector::new((9, 9), (9, 9)),
            [3, 2],
            2,
            Vector::new((3, 4), (2, 2)),
        ),
        // too few replicas: disk first.
        (
            Vector::new((0, 1), (1, 1)),
            [3, 2],
            3,
            Vector::new((1, 1), (2, 1)),
        ),
        // no disk tier: memory makes up for it.
        (
            Vector::new((1, 1), (1, 1)),
            [3, 0],
            2,
            Vector::new((2, 1), (0, 1)),
        ),
        // not enough nodes at all: everything there is.
        (
            Vector::new((1, 1), (0, 1)),
            [1, 1],
            4,
            Vector::new((1, 1), (1, 1)),
        ),
        // local factors are at least 1.
        (
            Vector::new((1, 0), (1, 0)),
            [1, 1],
            2,
            Vector::new((1, 1), (1, 1)),
        ),
        (
            Vector::new((u32::MAX, u32::MAX), (u32::MAX, 0)),
            [u32::MAX, u32::MAX],
            u32::MAX,
            Vector::new((u32::MAX, 4), (u32::MAX, 1)),
        ),
    ];
    for (v, nodes, k1, want) in table {
        assert_eq!(
            normalize(v, nodes, threads, k1),
            want,
            "{v:?} on {nodes:?}, k+1 {k1}"
        );
        assert_eq!(cap(want, nodes, threads), want);
    }
}

#[test]
fn a_key_listed_twice_gets_one_action_from_its_larger_count() {
    let cfg = PolicyConfig::paper();
    let mut snap = snapshot(4, 1);
    snap.latency = latency(5_000.0);
    snap.keys = vec![
        key("k", 100, DEFAULT, false),
        key("other", 20, DEFAULT, false),
        // on its own this entry would be de-replicated (5 < mean 10)
        key("k", 5, Vector::new((3, 1), (1, 1)), true),
    ];
    let actions = decide(&snap, &cfg, &mut PolicyState::new());
    // 100 accesses > H: replicated once (key_action fails on two actions for "k").
    assert!(
        matches!(outcome(&actions, "k"), Want::Set(_)),
        "{actions:?}"
    );
}
