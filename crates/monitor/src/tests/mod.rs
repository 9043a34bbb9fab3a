//! Tests of the policy engine: per-rule tables (`rules`, `elastic`), configuration and JSON
//! (`io`), properties over arbitrary snapshots (`props`) and convergence of the model
//! cluster (`convergence`).

mod convergence;
mod elastic;
mod io;
mod props;
mod rules;

use crate::snapshot::{AccessSummary, KeyStats, Latency, NodeStats, Snapshot, Tier, Vector};

/// The default vector of the tests: one memory and one disk replica.
pub(crate) const DEFAULT: Vector = Vector::new((1, 1), (1, 1));

/// A node with 4 workers, capacity 1000 bytes.
pub(crate) fn node(id: &str, tier: Tier, occupancy: f64, storage_bytes: u64) -> NodeStats {
    NodeStats {
        id: id.to_string(),
        tier,
        workers: 4,
        storage_bytes,
        capacity_bytes: 1000,
        working_set_bytes: None,
        occupancy,
        alive: true,
        removable: true,
    }
}

/// `memory` memory nodes (40 % full, 10 % busy: inside every band) and `disk` disk nodes
/// (60 % full); 1000 accessed keys with mean 10 and σ 10 (so H = 40 and L = 10 with s = 3);
/// no latency measured; no candidate keys.
pub(crate) fn snapshot(memory: u32, disk: u32) -> Snapshot {
    let mut nodes = Vec::new();
    for i in 0..memory {
        nodes.push(node(&format!("m{i}"), Tier::Memory, 0.1, 400));
    }
    for i in 0..disk {
        nodes.push(node(&format!("d{i}"), Tier::Disk, 0.1, 600));
    }
    Snapshot {
        now_ms: 10_000_000,
        nodes,
        access: AccessSummary {
            accesses_total: 10_000,
            accessed_keys: 1000,
            access_sum_squares: 200_000.0,
        },
        keys: Vec::new(),
        latency: None,
        default_vector: DEFAULT,
    }
}

/// A candidate key.
pub(crate) fn key(name: &str, accesses: u64, vector: Vector, is_explicit: bool) -> KeyStats {
    KeyStats {
        pinned: false,
        key: name.as_bytes().to_vec(),
        accesses,
        vector,
        is_explicit,
    }
}

/// A latency measurement over plenty of requests.
pub(crate) fn latency(mean_us: f64) -> Option<Latency> {
    Some(Latency {
        mean_us,
        p99_us: mean_us * 3.0,
        count: 100_000,
    })
}

/// Sets every memory node's occupancy.
pub(crate) fn busy(snap: &mut Snapshot, occupancy: f64) {
    for n in snap.nodes.iter_mut().filter(|n| n.tier == Tier::Memory) {
        n.occupancy = occupancy;
    }
}
