//! The policy driving the model cluster (`crate::sim`) for 50 rounds under a constant load:
//! its actions must die out, and no key's replication may go up, down and up again.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::sim::{Sim, SimConfig};
use crate::{decide, Action, PolicyConfig, PolicyState, Tier, Vector};

const ROUNDS: usize = 50;
/// The last rounds, which must be quiet.
const QUIET: usize = 10;

/// `keys` keys with Zipf(`s`) access rates summing to `total` per window.
fn zipf(keys: usize, s: f64, total: f64) -> Vec<(Vec<u8>, f64)> {
    let weights: Vec<f64> = (1..=keys).map(|r| 1.0 / (r as f64).powf(s)).collect();
    let sum: f64 = weights.iter().sum();
    weights
        .iter()
        .enumerate()
        .map(|(i, w)| (format!("key{i:05}").into_bytes(), total * w / sum))
        .collect()
}

/// What a run did.
struct Run {
    /// Actions per round.
    rounds: Vec<Vec<Action>>,
    sim: Sim,
}

fn run(cfg: &PolicyConfig, sim_cfg: SimConfig, load: Vec<(Vec<u8>, f64)>) -> Run {
    let mut sim = Sim::new(sim_cfg, load);
    let mut state = PolicyState::new();
    let mut rounds = Vec::new();
    for _ in 0..ROUNDS {
        let snap = sim.snapshot();
        let actions = decide(&snap, cfg, &mut state);
        sim.apply(&actions);
        sim.advance();
        rounds.push(actions);
    }
    Run { rounds, sim }
}

/// Whether `steps` (signs of successive changes) holds up, then down, then up.
fn up_down_up(steps: &[i8]) -> bool {
    let mut phase = 0;
    for &s in steps {
        phase = match (phase, s) {
            (0, 1) => 1,
            (1, -1) => 2,
            (2, 1) => return true,
            (p, _) => p,
        };
    }
    false
}

/// Checks convergence and the absence of oscillation; returns a description of a failure.
fn check(run: &Run, default: Vector) -> Result<(), String> {
    let quiet = &run.rounds[ROUNDS - QUIET..];
    if quiet.iter().any(|r| !r.is_empty()) {
        let busy: Vec<_> = run
            .rounds
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .collect();
        return Err(format!(
            "still acting in the last {QUIET} rounds: {busy:#?}"
        ));
    }
    // Per key: the memory replicas (R_M · T_M) and all replicas after each change.
    let mut last: BTreeMap<Vec<u8>, Vector> = BTreeMap::new();
    let mut steps: BTreeMap<Vec<u8>, (Vec<i8>, Vec<i8>)> = BTreeMap::new();
    let size = |v: Vector| {
        (
            v.memory.global * v.memory.local,
            v.memory.global * v.memory.local + v.disk.global * v.disk.local,
        )
    };
    for (i, round) in run.rounds.iter().enumerate() {
        for a in round {
            let (key, v) = match a {
                Action::SetReplication { key, vector, .. } => (key, *vector),
                Action::ResetReplication { key, .. } => (key, default),
                _ => continue,
            };
            let before = size(*last.get(key).unwrap_or(&default));
            let after = size(v);
            let s = steps.entry(key.clone()).or_default();
            s.0.push((after.0.cmp(&before.0)) as i8);
            s.1.push((after.1.cmp(&before.1)) as i8);
            last.insert(key.clone(), v);
            if up_down_up(&s.0) || up_down_up(&s.1) {
                return Err(format!(
                    "{} oscillates (round {i}): {:?}",
                    String::from_utf8_lossy(key),
                    s
                ));
            }
        }
    }
    Ok(())
}

fn node_adds(run: &Run, tier: Tier) -> u32 {
    run.rounds
        .iter()
        .flatten()
        .map(|a| match a {
            Action::AddNodes { tier: t, count, .. } if *t == tier => *count,
            _ => 0,
        })
        .sum()
}

fn set_vectors(run: &Run) -> usize {
    run.rounds
        .iter()
        .flatten()
        .filter(|a| matches!(a, Action::SetReplication { .. }))
        .count()
}

#[test]
fn a_hot_key_is_replicated_until_latency_is_back_in_its_band() {
    let cfg = PolicyConfig::paper();
    let sim = SimConfig::default();
    // Zipf 2 over 1000 keys: the hottest key takes ~61 % of 400k accesses, 2.4 times what
    // one worker serves; every other worker is nearly idle.
    let run = run(&cfg, sim.clone(), zipf(1000, 2.0, 400_000.0));
    check(&run, sim.default_vector).unwrap();
    let hot = run.sim.vector(b"key00000");
    assert!(hot.memory.global > 1, "{hot:?}");
    assert_eq!(
        node_adds(&run, Tier::Memory),
        0,
        "skew is answered by replication"
    );
    let latency = run.sim.snapshot().latency.unwrap().mean_us;
    assert!(latency <= 0.75 * 2_500.0, "{latency} µs");
}

#[test]
fn uniform_overload_adds_memory_nodes_and_no_replicas() {
    let cfg = PolicyConfig::paper();
    let sim = SimConfig::default();
    // 16 workers at 100k each: 85 % busy everywhere.
    let run = run(&cfg, sim.clone(), zipf(5_000, 0.0, 1_360_000.0));
    check(&run, sim.default_vector).unwrap();
    assert!(node_adds(&run, Tier::Memory) >= 1);
    assert_eq!(set_vectors(&run), 0);
    let latency = run.sim.snapshot().latency.unwrap().mean_us;
    assert!(latency <= 0.75 * 2_500.0, "{latency} µs");
}

#[test]
fn an_idle_cluster_shrinks_to_its_floors() {
    let cfg = PolicyConfig::paper();
    let sim = SimConfig {
        memory_nodes: 6,
        disk_nodes: 4,
        ..SimConfig::default()
    };
    let run = run(&cfg, sim.clone(), zipf(1000, 0.5, 1_000.0));
    check(&run, sim.default_vector).unwrap();
    assert_eq!(run.sim.node_count(Tier::Memory), 1);
    assert_eq!(run.sim.node_count(Tier::Disk), 2, "k + 1");
}

#[test]
fn hot_disk_keys_are_promoted_once() {
    let cfg = PolicyConfig::paper();
    let sim = SimConfig {
        default_vector: Vector::new((0, 1), (2, 1)),
        heavy_hitters: 64,
        ..SimConfig::default()
    };
    let run = run(&cfg, sim.clone(), zipf(2000, 1.0, 20_000.0));
    check(&run, sim.default_vector).unwrap();
    let promoted = run.rounds[0].len();
    assert!(promoted >= 32, "{promoted} promoted in the first round");
    assert_eq!(run.sim.vector(b"key00000").memory.global, 1);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn constant_load_converges_without_oscillation(
        memory in 1u32..6,
        disk in 0u32..4,
        workers in 1u32..5,
        skew in 0.0..2.5f64,
        load in 0.01..1.3f64,
        delay in 0u64..4,
        budget in prop::option::of(2.0..8.0f64),
        k in 0u32..3,
    ) {
        let sim = SimConfig {
            memory_nodes: memory,
            disk_nodes: disk,
            memory_workers: workers,
            join_delay_rounds: delay,
            ..SimConfig::default()
        };
        let capacity = f64::from(memory * workers) * sim.memory_worker_ops;
        let cfg = PolicyConfig {
            budget_per_hour: budget,
            fault_tolerance: k,
            ..PolicyConfig::paper()
        };
        let run = run(&cfg, sim.clone(), zipf(2000, skew, load * capacity));
        prop_assert_eq!(check(&run, sim.default_vector), Ok(()));
    }
}
