//! A memory node beside disk nodes only (`latticekv local`'s shape): the memory tier's only
//! worker routes every key with a memory replica here without walking the rings, and the
//! disk node joining it starts no settling (nothing could be on its way here); a memory
//! node joining another one does settle.

use std::sync::Arc;

use placement::NodeInfo;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Op, OpResult};
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

/// A disk-tier shard of node `id` (one worker) under `view`, its LSM in `dir`.
fn disk_shard(id: &str, view: Arc<ViewState>, dir: &std::path::Path) -> Shard {
    let mut s = Shard::new(config(id, 0), view, 3, fixed_clock());
    let db = store::DiskDb::open(dir, &store::DiskOptions::default()).unwrap();
    let shard = db.shard(0).unwrap();
    s.attach_disk(db, shard, 0).unwrap();
    s
}

#[test]
fn the_disk_tier_forwards_client_requests_for_keys_with_a_memory_replica() {
    // The memory tier takes the clients' writes: a disk worker holding a key's disk
    // replica sends requests for it to the memory replica, so no client write lands on
    // the disk tier behind a WATCH honoured at the memory worker.
    let dir = tempfile::tempdir().unwrap();
    let nodes = vec![node("m", 1), disk("d")];
    let mut d = disk_shard("d", view(nodes.clone()), dir.path());
    let m = Shard::new(config("m", 0), view(nodes), 1, fixed_clock());
    for i in 0..100 {
        let key = format!("k{i}");
        assert!(d.is_replica(key.as_bytes()), "{key}");
        assert_eq!(d.route(key.as_bytes()), Route::Remote(m.me()), "{key}");
    }
    // Without a memory tier the disk tier serves its keys itself.
    let dir2 = tempfile::tempdir().unwrap();
    let mut alone = disk_shard("d", view(vec![disk("d")]), dir2.path());
    assert_eq!(alone.route(b"k0"), Route::Local);
}

#[test]
fn watch_is_honoured_at_the_only_memory_replica_beside_disk_replicas() {
    let mut s = Shard::new(config("m", 0), view(vec![node("m", 1)]), 1, fixed_clock());
    s.set_view(view(vec![node("m", 1), disk("d")]));
    let version = |s: &mut Shard, key: &[u8]| match s.execute(Op::Version { key }) {
        OpResult::Int(v) => v as u64,
        other => panic!("WATCH refused beside a disk replica: {other:?}"),
    };
    let v0 = version(&mut s, b"w");
    s.execute(Op::Assign {
        key: &b"w"[..],
        value: &b"1"[..],
        condition: crate::op::Condition::Always,
    });
    let v1 = version(&mut s, b"w");
    assert_ne!(v0, v1, "a write changes the fingerprint");
    let unit = |v: u64| Op::Exec {
        key: &b"w"[..],
        guards: vec![(&b"w"[..], crate::op::Guard::Version(v))],
        ops: vec![Op::Get { key: &b"w"[..] }],
    };
    assert!(
        matches!(s.execute(unit(v0)), OpResult::Int(0)),
        "stale guard"
    );
    assert!(matches!(s.execute(unit(v1)), OpResult::Multi(_)));

    // Two memory replicas (hot-key replication): a write at the other one could go unseen.
    let mut two = Shard::new(config("m", 0), view(vec![node("m", 2)]), 1, fixed_clock());
    let mut vector = default_vector(1, 2);
    vector.disk = placement::Replication {
        global: 1,
        local: 1,
    };
    two.set_view(Arc::new(ViewState::of(
        vec![node("m", 2), disk("d")],
        ReplicationTable::new(),
        vector,
    )));
    match two.execute(Op::Version { key: &b"w"[..] }) {
        OpResult::Error(e) => assert!(e.to_string().contains("2 replicas"), "{e}"),
        other => panic!("WATCH honoured with two memory replicas: {other:?}"),
    }
}
