//! A memory worker whose tier's membership changes may come to answer for keys a previous
//! owner evicted: hand-offs carry only what was in RAM, so the worker fetches its misses
//! from the disk tier from then on, as after an eviction of its own.

use super::*;

/// The tier tests' view with a second memory node, `m2`.
fn with_second_memory_node() -> Arc<ViewState> {
    view_of(vec![
        info("m", Tier::Memory),
        info("m2", Tier::Memory),
        info("d", Tier::Disk),
    ])
}

/// A key of `view` that this worker (`m`/0) replicates.
fn owned_here(view: &ViewState) -> String {
    let me = Replica {
        node: node_key("m"),
        worker: 0,
    };
    names("owned", 1_000)
        .into_iter()
        .find(|k| view.is_replica(k.as_bytes(), me))
        .expect("some key is m's")
}

const TS: Timestamp = Timestamp::new(1_700_000_000_000 << 16, 9);

fn lww(value: &[u8]) -> Record {
    Record::new(TS, Some(Value::Lww(Lww::new(TS, Box::from(value)))))
}

#[test]
fn a_change_of_memory_members_makes_misses_fetch_from_the_disk_tier() {
    let mut rig = Rig::new(1 << 20);
    let next = with_second_memory_node();
    let key = owned_here(&next);
    // A record only the disk tier holds: evicted by a previous owner of the key.
    rig.disk.insert(Bytes::from(key.clone()), lww(b"evicted"));
    // This worker has held every key it replicates since it started: a miss is a miss.
    assert_eq!(rig.get(&key), None);
    assert_eq!(rig.fetches, 0);
    assert!(!rig.core.shard().spilled());

    rig.core.set_view(next);
    assert!(rig.core.shard().spilled());
    assert_eq!(
        rig.get(&key),
        Some(Value::Lww(Lww::new(TS, Box::from(&b"evicted"[..]))))
    );
    assert_eq!(rig.fetches, 1);
}

#[test]
fn a_disk_node_joining_leaves_the_memory_worker_authoritative() {
    let mut rig = Rig::new(1 << 20);
    // A second disk node: the memory tier is unchanged (as when `latticekv local`'s disk
    // node joins its memory node).
    rig.core.set_view(view_of(vec![
        info("m", Tier::Memory),
        info("d", Tier::Disk),
        info("d2", Tier::Disk),
    ]));
    assert!(!rig.core.shard().spilled());
}
