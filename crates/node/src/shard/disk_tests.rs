//! Disk-tier shards: every operation reaches the disk, keys survive a reopen, the cache
//! stays within its budget, whole-store passes read the disk.

use std::sync::Arc;

use bytes::Bytes;
use lattice::{Lww, Record, Timestamp, Value};
use store::{DiskDb, DiskOptions};

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Condition, Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

fn disk_shard(dir: &std::path::Path, budget: usize) -> Shard {
    let view = ViewState::of(
        vec![node("n", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    let mut cfg = config("n", 0);
    cfg.memory_budget = budget;
    let mut shard = Shard::new(cfg, Arc::new(view), 7, fixed_clock());
    let db = DiskDb::open(dir, &DiskOptions::default()).unwrap();
    let store = db.shard(0).unwrap();
    shard.attach_disk(db, store, 0).unwrap();
    shard
}

fn get(s: &mut Shard, key: &[u8]) -> Option<Value> {
    match s.execute(Op::Get { key }) {
        OpResult::Value(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn assign(s: &mut Shard, key: &[u8], value: &[u8]) {
    let r = s.execute(Op::Assign {
        key,
        value,
        condition: Condition::Always,
    });
    assert_eq!(r, OpResult::Int(1));
}

fn lww_text(v: Option<Value>) -> String {
    match v {
        Some(Value::Lww(l)) => String::from_utf8(l.value.to_vec()).unwrap(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_type_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut s = disk_shard(dir.path(), 1 << 30);
        assign(&mut s, b"name", b"ada");
        assert_eq!(
            s.execute(Op::CounterAdd {
                key: &b"hits"[..],
                delta: 5
            }),
            OpResult::Int(5)
        );
        assert_eq!(
            s.execute(Op::CounterAdd {
                key: &b"hits"[..],
                delta: 2
            }),
            OpResult::Int(7)
        );
        let members: Vec<&[u8]> = vec![b"a", b"b", b"c"];
        assert_eq!(
            s.execute(Op::SetAdd {
                key: &b"tags"[..],
                members
            }),
            OpResult::Int(3)
        );
        let gone: Vec<&[u8]> = vec![b"b"];
        assert_eq!(
            s.execute(Op::SetRemove {
                key: &b"tags"[..],
                members: gone
            }),
            OpResult::Int(1)
        );
        assign(&mut s, b"temp", b"x");
        assert_eq!(
            s.execute(Op::Delete { key: &b"temp"[..] }),
            OpResult::Int(1)
        );
        s.disk_db().unwrap().persist(true).unwrap();
        assert_eq!(s.stats().live_keys, 3);
    }
    let mut s = disk_shard(dir.path(), 1 << 30);
    assert_eq!(s.stats().live_keys, 3, "counted from disk");
    assert_eq!(s.stats().primary_keys, 3);
    assert_eq!(lww_text(get(&mut s, b"name")), "ada");
    match get(&mut s, b"hits") {
        Some(Value::Counter(c)) => assert_eq!(c.value(), 7),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        s.execute(Op::SetContains {
            key: &b"tags"[..],
            member: &b"c"[..]
        }),
        OpResult::Int(1)
    );
    assert_eq!(
        s.execute(Op::SetContains {
            key: &b"tags"[..],
            member: &b"b"[..]
        }),
        OpResult::Int(0)
    );
    assert_eq!(get(&mut s, b"temp"), None);
    assert!(s.holds(b"name") && !s.holds(b"temp") && s.stores(b"temp"));
    // A write after the reopen continues the counter, not a fresh one.
    assert_eq!(
        s.execute(Op::CounterAdd {
            key: &b"hits"[..],
            delta: 1
        }),
        OpResult::Int(8)
    );
}

#[test]
fn the_cache_stays_within_budget_and_reads_fault_in_from_disk() {
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * 1024;
    let mut s = disk_shard(dir.path(), budget);
    let value = vec![b'v'; 200];
    for i in 0..5_000 {
        assign(&mut s, format!("key{i}").as_bytes(), &value);
    }
    assert!(
        s.store().bytes() <= budget * 2,
        "cache holds {} bytes for a budget of {budget}",
        s.store().bytes()
    );
    assert!(s.store().len() < 5_000, "nothing was evicted");
    assert_eq!(s.stats().live_keys, 5_000);
    for i in (0..5_000).step_by(97) {
        let key = format!("key{i}");
        assert!(get(&mut s, key.as_bytes()).is_some(), "{key}");
        // The zero-copy read path faults in too.
        assert!(s.read(key.as_bytes()).unwrap().is_some(), "{key}");
    }
}

#[test]
fn gossip_merges_reach_the_disk_and_digests_read_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = disk_shard(dir.path(), 16 * 1024);
    let mut batch = Vec::new();
    for i in 0..2_000u64 {
        let ts = Timestamp::new((i + 1) << 16, 3);
        let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&b"g"[..])))));
        batch.push((Bytes::from(format!("g{i}")), record));
    }
    s.merge_gossip(batch.clone()).expect("merged on disk");
    assert_eq!(s.stats().live_keys, 2_000);
    // Every key is on disk whatever the cache evicted: a digest over the disk equals a
    // digest computed by a memory shard that received the same records.
    let view = s.view().clone();
    let mut memory = Shard::new(config("n", 0), view, 7, fixed_clock());
    memory.merge_gossip(batch).unwrap();
    let peer = placement::Replica {
        node: placement::node_key("n"),
        worker: 0,
    };
    let digest = s.digest(peer);
    assert!(digest.iter().any(|&b| b != 0), "the digest covers the keys");
    assert_eq!(digest, memory.digest(peer));
}
