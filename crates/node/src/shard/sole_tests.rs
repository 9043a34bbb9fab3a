//! A memory node beside disk nodes only (`latticekv local`'s shape): the memory tier's only
//! worker routes every key with a memory replica here without walking the rings, and the
//! disk node joining it starts no settling (nothing could be on its way here); a memory
//! node joining another one does settle.

use std::sync::Arc;

use placement::NodeInfo;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::view::{default_vector, ReplicationTable, ViewState};

fn disk(id: &str) -> NodeInfo {
    NodeInfo {
        tier: Tier::Disk,
        ..node(id, 1)
    }
}

fn view(nodes: Vec<NodeInfo>) -> Arc<ViewState> {
    let mut vector = default_vector(1, 1);
    vector.disk = placement::Replication {
        global: 1,
        local: 1,
    };
    Arc::new(ViewState::of(nodes, ReplicationTable::new(), vector))
}

#[test]
fn the_only_memory_worker_holds_every_memory_replica_and_a_joining_disk_node_settles_nothing() {
    let mut s = Shard::new(config("m", 0), view(vec![node("m", 1)]), 1, fixed_clock());
    s.set_view(view(vec![node("m", 1), disk("d")]));
    assert!(
        s.settling().is_none(),
        "the memory tier is the same, and this worker never evicted"
    );
    for i in 0..200 {
        let key = format!("k{i}");
        assert_eq!(s.route(key.as_bytes()), Route::Local, "{key}");
        assert!(s.is_replica(key.as_bytes()));
        // The disk replica is another replica; no other memory replica.
        assert!(s.replicated(key.as_bytes()));
    }
}

#[test]
fn a_second_memory_node_ends_the_shortcut_and_a_change_from_it_settles() {
    let mut s = Shard::new(config("m", 0), view(vec![node("m", 1)]), 1, fixed_clock());
    s.set_view(view(vec![node("m", 1), node("m2", 1), disk("d")]));
    // Some keys are m2's now: routed there, not here.
    let remote = (0..200)
        .map(|i| format!("k{i}"))
        .filter(|k| s.route(k.as_bytes()) != Route::Local)
        .count();
    assert!(remote > 0, "every key stayed here with two memory nodes");
    // m2 leaves: m may be missing keys m2 held, so reads that miss ask m2 for a while.
    s.set_view(view(vec![node("m", 1), disk("d")]));
    assert!(s.settling().is_some());
}

#[test]
fn a_disk_node_joining_a_two_worker_memory_node_settles_nothing_until_it_spilled() {
    let mut w0 = Shard::new(config("m", 0), view(vec![node("m", 2)]), 1, fixed_clock());
    w0.set_view(view(vec![node("m", 2), disk("d")]));
    assert!(
        w0.settling().is_none(),
        "the memory tier is the same: every key's memory replicas are where they were"
    );
    // A second disk node joins a worker that has evicted: a key it evicted may be moving
    // between disk nodes, so its misses ask the previous view too.
    w0.mark_spilled();
    w0.set_view(view(vec![node("m", 2), disk("d"), disk("d2")]));
    assert!(w0.settling().is_some());
}

#[test]
fn a_memory_node_joining_another_settles() {
    // n2 starts alone, then joins m: keys are on their way to it from m, so its misses
    // ask m for a while.
    let mut s = Shard::new(config("n2", 0), view(vec![node("n2", 1)]), 1, fixed_clock());
    s.set_view(view(vec![node("m", 1), node("n2", 1)]));
    assert!(s.settling().is_some());
}
