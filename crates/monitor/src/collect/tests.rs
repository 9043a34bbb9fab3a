use bytes::Bytes;
use wire::pb;

use super::*;

fn member(id: &str, role: &str, status: pb::NodeStatus) -> pb::Member {
    pb::Member {
        node_id: id.into(),
        status: status as i32,
        role: role.into(),
        front: format!("{id}:7700"),
        workers: vec![format!("{id}:7701")],
        ..Default::default()
    }
}

fn worker(memory: u64, hot: &[(&str, u64)], latency: (u64, u64, Vec<u64>)) -> pb::WorkerStatus {
    let accesses: u64 = hot.iter().map(|(_, n)| n).sum();
    pb::WorkerStatus {
        memory_bytes: memory,
        stats: Some(pb::WorkerStats {
            accesses,
            accessed_keys: hot.len() as u64,
            access_sum_squares: hot.iter().map(|(_, n)| n * n).sum(),
            hot_keys: hot
                .iter()
                .map(|(k, n)| pb::worker_stats::HotKey {
                    key: Bytes::copy_from_slice(k.as_bytes()),
                    accesses: *n,
                })
                .collect(),
            occupancy: 0.5,
            latency_count: latency.0,
            latency_sum_ns: latency.1,
            latency_buckets: latency.2,
            disk_bytes: 7,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn counts_sum_across_replicas_and_dead_nodes_are_not_alive() {
    let topology = pb::Topology {
        default_global_replication: 1,
        default_local_replication: 1,
        default_disk_replication: 1,
        replication: vec![
            pb::SetReplication {
                key: Bytes::from_static(b"pinned"),
                global: 2,
                local: 1,
                disk_global: Some(1),
                disk_local: Some(1),
                reset: false,
                by_policy: false,
            },
            // Set by an earlier monitor: the policy's, though this monitor never set it.
            pb::SetReplication {
                key: Bytes::from_static(b"inherited"),
                global: 2,
                local: 1,
                disk_global: Some(1),
                disk_local: Some(1),
                reset: false,
                by_policy: true,
            },
        ],
        ..Default::default()
    };
    let mut a = [0u64; 40].to_vec();
    a[20] = 3; // three requests in bucket 20
    let reports = vec![
        NodeReport {
            member: member("m1", "memory", pb::NodeStatus::Alive),
            status: Some(pb::Status {
                memory_budget_bytes: 1000,
                workers: vec![
                    worker(100, &[("hot", 90), ("a", 1)], (3, 3_000, a.clone())),
                    worker(50, &[("hot", 10)], (1, 1_000, vec![0, 1])),
                ],
                ..Default::default()
            }),
        },
        NodeReport {
            member: member("d1", "disk", pb::NodeStatus::Alive),
            status: Some(pb::Status {
                workers: vec![worker(0, &[], (0, 0, vec![]))],
                ..Default::default()
            }),
        },
        NodeReport {
            member: member("m2", "memory", pb::NodeStatus::Dead),
            status: None,
        },
        NodeReport {
            member: member("r", "routing", pb::NodeStatus::Alive),
            status: None,
        },
    ];
    let snap = snapshot(
        5,
        &topology,
        &reports,
        CollectConfig {
            disk_capacity_bytes: 99,
        },
        &|k: &[u8]| k == b"hot",
    );
    assert_eq!(
        snap.nodes.len(),
        3,
        "the routing node is not a storage node"
    );
    let m1 = &snap.nodes[0];
    assert_eq!(
        (m1.storage_bytes, m1.capacity_bytes, m1.workers),
        (150, 1000, 2)
    );
    assert!(m1.alive && (m1.occupancy - 0.5).abs() < 1e-9);
    assert_eq!(
        (snap.nodes[1].storage_bytes, snap.nodes[1].capacity_bytes),
        (7, 99)
    );
    assert!(!snap.nodes[2].alive);
    let hot = snap.keys.iter().find(|k| k.key == b"hot").unwrap();
    assert_eq!(hot.accesses, 100, "counts of both replicas");
    assert!(!hot.is_explicit);
    assert_eq!(hot.vector, Vector::new((1, 1), (1, 1)));
    let pinned = snap.keys.iter().find(|k| k.key == b"pinned").unwrap();
    assert!(pinned.is_explicit && pinned.accesses == 0);
    assert!(pinned.pinned, "an operator's vector is pinned");
    let inherited = snap.keys.iter().find(|k| k.key == b"inherited").unwrap();
    assert!(
        inherited.is_explicit && !inherited.pinned,
        "a vector an earlier monitor set is the policy's"
    );
    assert!(!hot.pinned);
    assert_eq!(pinned.vector, Vector::new((2, 1), (1, 1)));
    assert_eq!(snap.access.accesses_total, 101);
    assert_eq!(snap.access.accessed_keys, 3);
    let l = snap.latency.unwrap();
    assert_eq!(l.count, 4);
    // 4 requests, 4 µs measured in all, at occupancy 0.5: the queueing correction doubles
    // the mean.
    assert!((l.mean_us - 2.0).abs() < 1e-9, "{}", l.mean_us);
    assert_eq!(l.p99_us, bucket_upper_ns(20) as f64 / 1000.0);
}

#[test]
fn disk_capacity_comes_from_the_nodes_unless_set() {
    let topology = pb::Topology {
        default_global_replication: 1,
        default_local_replication: 1,
        default_disk_replication: 1,
        ..Default::default()
    };
    let disk = |id: &str, capacity: u64| NodeReport {
        member: member(id, "disk", pb::NodeStatus::Alive),
        status: Some(pb::Status {
            workers: vec![worker(0, &[], (0, 0, vec![]))],
            disk_capacity_bytes: capacity,
            ..Default::default()
        }),
    };
    let reports = vec![disk("d1", 5_000), disk("d2", 0)];
    let capacities = |flag: u64| {
        let config = CollectConfig {
            disk_capacity_bytes: flag,
        };
        snapshot(5, &topology, &reports, config, &|_: &[u8]| false)
            .nodes
            .iter()
            .map(|n| n.capacity_bytes)
            .collect::<Vec<_>>()
    };
    // Without --disk-capacity: each node's own report; a node that reports none stays
    // unknown (0), which the storage rule skips.
    assert_eq!(capacities(0), [5_000, 0]);
    // --disk-capacity overrides every node's report.
    assert_eq!(capacities(99), [99, 99]);
}

#[test]
fn a_memory_node_that_caches_reports_its_working_set() {
    let topology = pb::Topology {
        default_global_replication: 1,
        default_local_replication: 1,
        default_disk_replication: 1,
        ..Default::default()
    };
    // 100 records in 10,000 bytes (100 each); 30 distinct keys accessed in the window, 12
    // of them at least twice (`None`: a node that does not report those).
    let memory = |id: &str, evictions: u64, disk_fetches: u64, reused: Option<u64>| {
        let mut w = worker(10_000, &[], (0, 0, vec![]));
        w.keys = 100;
        w.evictions = evictions;
        w.disk_fetches = disk_fetches;
        let s = w.stats.as_mut().unwrap();
        s.accessed_keys = 30;
        s.reused_keys = reused;
        NodeReport {
            member: member(id, "memory", pb::NodeStatus::Alive),
            status: Some(pb::Status {
                memory_budget_bytes: 10_000,
                workers: vec![w],
                ..Default::default()
            }),
        }
    };
    let reports = vec![
        memory("evicted", 5, 0, Some(12)),
        memory("fetched", 0, 7, Some(12)),
        memory("scanned", 5, 0, Some(0)),
        memory("older", 5, 0, None),
        memory("never", 0, 0, Some(12)),
    ];
    let snap = snapshot(
        5,
        &topology,
        &reports,
        CollectConfig::default(),
        &|_: &[u8]| false,
    );
    let sets: Vec<_> = snap.nodes.iter().map(|n| n.working_set_bytes).collect();
    // A cache: the 12 keys it keeps × 100 bytes (a scan, every key once: none); a node
    // that does not count reuse: all 30 keys accessed; a node that never spilled holds
    // what it must.
    assert_eq!(sets, [Some(1_200), Some(1_200), Some(0), Some(3_000), None]);
    assert!(snap.nodes.iter().all(|n| n.storage_bytes == 10_000));
}

#[test]
fn buckets_follow_the_protocols_rule() {
    assert_eq!(bucket_upper_ns(5), 5);
    // Bucket 16 holds 16 ns; 17 holds 17; bucket 32 starts the next power of two: 32..34.
    assert_eq!(bucket_upper_ns(16), 16);
    assert_eq!(bucket_upper_ns(31), 31);
    assert_eq!(bucket_upper_ns(32), 33);
    assert_eq!(bucket_upper_ns(48), 67);
    let mut h = vec![0u64; 50];
    h[3] = 98;
    h[48] = 2;
    assert_eq!(quantile_ns(&h, 0.5), 3);
    assert_eq!(quantile_ns(&h, 0.99), 67);
    assert_eq!(quantile_ns(&[], 0.99), 0);
}

/// The cost experiment's shape (docs/elasticity.md): one memory node that caches over the
/// disk tier, at its 12 MiB budget (12,288 records of 1 KiB), and a disk node; the load
/// touched all 40,000 keys (40 MiB) in the window but only `reused` of them twice;
/// the servers' latency (200 µs) meets the objective (1 ms). The actions of a round.
fn cost_round(reused: Option<u64>) -> Vec<crate::Action> {
    let topology = pb::Topology {
        default_global_replication: 1,
        default_local_replication: 1,
        default_disk_replication: 1,
        ..Default::default()
    };
    // 1,000 requests of 100 µs at 50 % occupancy: 200 µs once corrected for queueing.
    let mut w = worker(12 << 20, &[], (1_000, 100_000_000, vec![]));
    w.keys = 12_288;
    w.evictions = 30_000;
    w.disk_fetches = 60_000;
    let s = w.stats.as_mut().unwrap();
    s.accesses = 300_000;
    s.accessed_keys = 40_000;
    s.reused_keys = reused;
    let reports = vec![
        NodeReport {
            member: member("mem", "memory", pb::NodeStatus::Alive),
            status: Some(pb::Status {
                memory_budget_bytes: 12 << 20,
                workers: vec![w],
                ..Default::default()
            }),
        },
        NodeReport {
            member: member("disk", "disk", pb::NodeStatus::Alive),
            status: Some(pb::Status {
                workers: vec![worker(0, &[], (0, 0, vec![]))],
                ..Default::default()
            }),
        },
    ];
    let config = CollectConfig {
        disk_capacity_bytes: 1 << 30,
    };
    let snap = snapshot(5, &topology, &reports, config, &|_: &[u8]| false);
    assert!((snap.latency.as_ref().unwrap().mean_us - 200.0).abs() < 1.0);
    let policy = crate::PolicyConfig {
        latency_objective_us: Some(1_000),
        fault_tolerance: 0,
        ..Default::default()
    };
    crate::decide(&snap, &policy, &mut crate::PolicyState::new())
}

#[test]
fn a_latency_objective_met_by_a_cache_of_the_reused_keys_buys_no_nodes_for_storage() {
    let adds = |actions: &[crate::Action]| -> u32 {
        actions
            .iter()
            .map(|a| match a {
                crate::Action::AddNodes { count, .. } => *count,
                _ => 0,
            })
            .sum()
    };
    // 5,000 keys reused (5 MiB, under S_upper = 60 % of 12 MiB): the cache holds them, the
    // latency is met, nothing to buy.
    assert_eq!(cost_round(Some(5_000)), vec![]);
    // A scan (nothing reused) buys nothing either.
    assert_eq!(cost_round(Some(0)), vec![]);
    // Every key reused: 40 MiB at 60 % of 12 MiB per node asks for 6 nodes, 5 more.
    assert_eq!(adds(&cost_round(Some(40_000))), 5);
    // A node that does not measure reuse: every key accessed counts, as before.
    assert_eq!(adds(&cost_round(None)), 5);
}
