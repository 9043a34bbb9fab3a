//! Shard unit tests: operations, limits, gossip, view changes, anti-entropy.

use std::sync::Arc;

use bytes::Bytes;
use lattice::{LatticeType, Timestamp, Value};
use placement::{node_key, replication, NodeInfo, Replica, Tier};

use super::*;
use crate::error::NodeError;
use crate::op::{Condition, Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

/// A clock standing still at 2023-11-14.
pub(super) fn fixed_clock() -> SharedClock {
    Arc::new(crate::clock::ManualClock::new(1_700_000_000_000))
}

/// A node description with `workers` workers.
pub(super) fn node(id: &str, workers: usize) -> NodeInfo {
    NodeInfo {
        id: id.to_string(),
        tier: Tier::Memory,
        workers: (0..workers).map(|w| format!("{id}/{w}")).collect(),
        front: format!("{id}/front"),
        resp: format!("{id}/resp"),
        peer: String::new(),
        vnodes: 32,
        placement: placement::PLACEMENT_HASH_TAGS,
    }
}

pub(super) fn config(node_id: &str, worker: u32) -> ShardConfig {
    ShardConfig {
        me: Replica {
            node: node_key(node_id),
            worker,
        },
        limits: Limits::default(),
        memory_budget: 1 << 30,
        max_changeset_keys: 1024,
        settle_ms: 1_000,
        tombstone_memory_ms: 1_000,
        disk_copy: Default::default(),
    }
}

/// A shard of worker `worker` on a single node with `workers` workers.
fn shard(worker: u32, workers: usize) -> Shard {
    let view = ViewState::of(
        vec![node("n", workers)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    Shard::new(
        config("n", worker),
        Arc::new(view),
        100 + worker as u64,
        fixed_clock(),
    )
}

fn get(s: &mut Shard, key: &[u8]) -> Option<Value> {
    match s.execute(Op::Get { key }) {
        OpResult::Value(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

fn int(r: OpResult) -> i64 {
    match r {
        OpResult::Int(n) => n,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn assign_get_delete() {
    let mut s = shard(0, 1);
    assert_eq!(get(&mut s, b"k"), None);
    let r = s.execute(Op::Assign {
        key: &b"k"[..],
        value: &b"v1"[..],
        condition: Condition::Always,
    });
    assert_eq!(int(r), 1);
    match get(&mut s, b"k") {
        Some(Value::Lww(l)) => assert_eq!(&*l.value, b"v1"),
        other => panic!("{other:?}"),
    }
    // NX fails on an existing key, XX succeeds.
    let nx = Op::Assign {
        key: &b"k"[..],
        value: &b"v2"[..],
        condition: Condition::IfAbsent,
    };
    assert_eq!(int(s.execute(nx)), 0);
    let xx = Op::Assign {
        key: &b"k"[..],
        value: &b"v3"[..],
        condition: Condition::IfPresent,
    };
    assert_eq!(int(s.execute(xx)), 1);
    assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 1);
    assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 0);
    assert_eq!(get(&mut s, b"k"), None);
    assert_eq!(s.stats().live_keys, 0);
    // Re-create after delete, with another type.
    let add = Op::SetAdd {
        key: &b"k"[..],
        members: vec![&b"x"[..]],
    };
    assert_eq!(int(s.execute(add)), 1);
    assert_eq!(s.stats().live_keys, 1);
}

#[test]
fn wrong_type_is_an_error() {
    let mut s = shard(0, 1);
    s.execute(Op::CounterAdd {
        key: &b"c"[..],
        delta: 5,
    });
    let r = s.execute(Op::Assign {
        key: &b"c"[..],
        value: &b"x"[..],
        condition: Condition::Always,
    });
    assert!(matches!(
        r,
        OpResult::Error(NodeError::WrongType {
            found: LatticeType::Counter,
            ..
        })
    ));
    let r = s.execute(Op::SetAdd {
        key: &b"c"[..],
        members: vec![&b"x"[..]],
    });
    assert!(matches!(r, OpResult::Error(NodeError::WrongType { .. })));
    // The counter is untouched.
    assert_eq!(
        int(s.execute(Op::CounterAdd {
            key: &b"c"[..],
            delta: -7
        })),
        -2
    );
}

#[test]
fn counter_overflow_is_refused() {
    let mut s = shard(0, 1);
    let add = |d| Op::CounterAdd {
        key: &b"c"[..],
        delta: d,
    };
    assert_eq!(int(s.execute(add(i64::MAX))), i64::MAX);
    assert_eq!(s.execute(add(1)), OpResult::Error(NodeError::Overflow));
    assert_eq!(int(s.execute(add(-1))), i64::MAX - 1);
}

#[test]
fn orset_add_remove_and_emptied_set_is_absent() {
    let mut s = shard(0, 1);
    let members = vec![&b"a"[..], &b"b"[..], &b"a"[..]];
    assert_eq!(
        int(s.execute(Op::SetAdd {
            key: &b"s"[..],
            members
        })),
        2
    );
    assert_eq!(int(s.execute(Op::SetLen { key: &b"s"[..] })), 2);
    let rm = Op::SetRemove {
        key: &b"s"[..],
        members: vec![&b"a"[..], &b"zz"[..]],
    };
    assert_eq!(int(s.execute(rm)), 1);
    assert_eq!(
        int(s.execute(Op::SetContains {
            key: &b"s"[..],
            member: &b"b"[..]
        })),
        1
    );
    let rm = Op::SetRemove {
        key: &b"s"[..],
        members: vec![&b"b"[..]],
    };
    assert_eq!(int(s.execute(rm)), 1);
    assert_eq!(int(s.execute(Op::Exists { key: &b"s"[..] })), 0);
    assert_eq!(s.stats().live_keys, 0);
    // An emptied set does not pin the key's type.
    let r = s.execute(Op::Assign {
        key: &b"s"[..],
        value: &b"now a string"[..],
        condition: Condition::Always,
    });
    assert_eq!(int(r), 1);
    assert_eq!(int(s.execute(Op::Exists { key: &b"s"[..] })), 1);
}

#[test]
fn limits_are_enforced() {
    let mut cfg = config("n", 0);
    cfg.limits.max_key_size = 4;
    cfg.limits.max_value_size = 8;
    let mut s = Shard::new(cfg, shard(0, 1).view().clone(), 1, fixed_clock());
    let r = s.execute(Op::Get { key: &b"12345"[..] });
    assert!(matches!(
        r,
        OpResult::Error(NodeError::KeyTooLarge { len: 5, max: 4 })
    ));
    let r = s.execute(Op::Assign {
        key: &b"k"[..],
        value: &b"123456789"[..],
        condition: Condition::Always,
    });
    assert!(matches!(
        r,
        OpResult::Error(NodeError::ValueTooLarge { .. })
    ));
    let mut s = shard(0, 1);
    let meta = replication::replication_key(b"k");
    let r = s.execute(Op::Get { key: &meta[..] });
    assert_eq!(r, OpResult::Error(NodeError::ReservedKey));
}

#[test]
fn memory_budget_refuses_writes_but_not_reads_or_deletes() {
    let mut cfg = config("n", 0);
    cfg.memory_budget = 300;
    let mut s = Shard::new(cfg, shard(0, 1).view().clone(), 1, fixed_clock());
    let mut refused = None;
    for i in 0..100u32 {
        let key = i.to_be_bytes();
        let r = s.execute(Op::Assign {
            key: &key[..],
            value: &b"0123456789"[..],
            condition: Condition::Always,
        });
        if let OpResult::Error(e) = r {
            refused = Some((i, e));
            break;
        }
    }
    let (i, e) = refused.expect("the budget must be hit");
    assert!(matches!(e, NodeError::MemoryLimit { .. }));
    assert!(get(&mut s, &0u32.to_be_bytes()).is_some());
    assert_eq!(
        int(s.execute(Op::Delete {
            key: &0u32.to_be_bytes()[..]
        })),
        1
    );
    assert!(i > 0);
}

/// Two workers replicating a key converge through take_gossip/merge_gossip.
#[test]
fn replicated_key_converges_by_gossip() {
    let mut table = ReplicationTable::new();
    table.insert(
        Box::from(&b"hot"[..]),
        (Timestamp::new(1 << 16, 9), default_vector(1, 2)),
    );
    let view = Arc::new(ViewState::of(
        vec![node("n", 2)],
        table,
        default_vector(1, 1),
    ));
    let mut a = Shard::new(config("n", 0), view.clone(), 100, fixed_clock());
    let mut b = Shard::new(config("n", 1), view, 101, fixed_clock());
    assert!(a.is_replica(b"hot") && b.is_replica(b"hot"));
    a.execute(Op::SetAdd {
        key: &b"hot"[..],
        members: vec![&b"x"[..]],
    });
    b.execute(Op::SetAdd {
        key: &b"hot"[..],
        members: vec![&b"y"[..]],
    });
    let to_b = a.take_gossip();
    let to_a = b.take_gossip();
    assert_eq!(to_b.len(), 1);
    assert_eq!(to_b[0].to, b.me());
    assert_eq!(to_b[0].entries.len(), 1);
    for o in to_b {
        b.merge_gossip(o.entries).unwrap();
    }
    for o in to_a {
        a.merge_gossip(o.entries).unwrap();
    }
    assert_eq!(get(&mut a, b"hot"), get(&mut b, b"hot"));
    assert_eq!(int(a.execute(Op::SetLen { key: &b"hot"[..] })), 2);
    // Unreplicated keys never enter the changeset.
    a.execute(Op::CounterAdd {
        key: &b"cold"[..],
        delta: 1,
    });
    assert!(a.take_gossip().is_empty());
}

/// A node joins: keys that move to it are sent by exactly one old replica and dropped
/// by the old owner once delivered; a node dies: its keys are re-replicated.
#[test]
fn view_changes_move_keys_to_their_new_replicas() {
    let v2 = default_vector(2, 1);
    let two = Arc::new(ViewState::of(
        vec![node("a", 1), node("b", 1)],
        ReplicationTable::new(),
        v2,
    ));
    let mut a = Shard::new(config("a", 0), two.clone(), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), two.clone(), 2, fixed_clock());
    let mut c = Shard::new(config("c", 0), two.clone(), 3, fixed_clock());
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    for k in &keys {
        a.execute(Op::Assign {
            key: k.as_bytes(),
            value: &b"v"[..],
            condition: Condition::Always,
        });
    }
    for o in a.take_gossip() {
        assert_eq!(o.to, b.me());
        b.merge_gossip(o.entries).unwrap();
    }
    // c joins: with 3 nodes and replication 2, about a third of the keys move to c.
    let mut rings = ViewState::of(
        vec![node("a", 1), node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        v2,
    );
    rings.version = 1;
    let three = Arc::new(rings);
    for s in [&mut a, &mut b, &mut c] {
        s.set_view_now(three.clone());
    }
    let mut to_c = 0;
    let mut batches = Vec::new();
    for s in [&mut a, &mut b] {
        for o in s.take_gossip() {
            batches.push((s.me(), o));
        }
    }
    for (from, o) in batches {
        let keys: Vec<Bytes> = o.entries.iter().map(|(k, _)| k.clone()).collect();
        for k in &keys {
            assert!(three.is_replica(k, o.to), "{k:?} sent to a non-replica");
        }
        if o.to == c.me() {
            to_c += o.entries.len();
            c.merge_gossip(o.entries).unwrap();
        } else if o.to == a.me() {
            a.merge_gossip(o.entries).unwrap();
        } else {
            b.merge_gossip(o.entries).unwrap();
        }
        let sender = if from == a.me() { &mut a } else { &mut b };
        sender.delivered(o.to, &o.handoffs);
    }
    assert!(to_c > 50, "{to_c} keys moved to c");
    // Every key is exactly where the new view says, on every node.
    for k in &keys {
        let owners = three.replicas(k.as_bytes());
        for s in [&a, &b, &c] {
            assert_eq!(
                s.stores(k.as_bytes()),
                owners.contains(&s.me()),
                "key {k} on {:?}",
                s.me()
            );
        }
    }
    // b dies: keys it held with a or c get a new second replica from the survivor.
    let mut survivors = ViewState::of(
        vec![node("a", 1), node("c", 1)],
        ReplicationTable::new(),
        v2,
    );
    survivors.version = 2;
    let survivors = Arc::new(survivors);
    a.set_view_now(survivors.clone());
    c.set_view_now(survivors.clone());
    let a_out = a.take_gossip();
    let c_out = c.take_gossip();
    for o in a_out {
        assert_eq!(o.to, c.me());
        c.merge_gossip(o.entries).unwrap();
    }
    for o in c_out {
        assert_eq!(o.to, a.me());
        a.merge_gossip(o.entries).unwrap();
    }
    for k in &keys {
        assert!(
            a.stores(k.as_bytes()) && c.stores(k.as_bytes()),
            "{k} back to 2 replicas"
        );
    }
    // While settling, the previous view is available for reads that miss.
    assert!(a.settling().is_some());
}

/// Anti-entropy finds exactly the buckets that differ and repairs them.
#[test]
fn anti_entropy_repairs_a_lost_update() {
    let two = Arc::new(ViewState::of(
        vec![node("a", 1), node("b", 1)],
        ReplicationTable::new(),
        default_vector(2, 1),
    ));
    let mut a = Shard::new(config("a", 0), two.clone(), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), two, 2, fixed_clock());
    for i in 0..100 {
        let k = format!("k{i}");
        a.execute(Op::CounterAdd {
            key: k.as_bytes(),
            delta: 1,
        });
    }
    for o in a.take_gossip() {
        b.merge_gossip(o.entries).unwrap();
    }
    assert_eq!(a.digest(b.me()), b.digest(a.me()));
    // An update whose gossip is lost.
    a.execute(Op::CounterAdd {
        key: &b"k7"[..],
        delta: 5,
    });
    let _lost = a.take_gossip();
    let differing = b.differing(a.me(), &a.digest(b.me()));
    assert_eq!(differing.len(), 1);
    let from_a = a.bucket_entries(b.me(), &differing);
    assert!(from_a.iter().any(|(k, _)| &k[..] == b"k7"));
    b.merge_gossip(from_a).unwrap();
    assert_eq!(a.digest(b.me()), b.digest(a.me()));
    assert_eq!(
        int(b.execute(Op::CounterAdd {
            key: &b"k7"[..],
            delta: 0
        })),
        6
    );
}

/// A write forwarded to a worker that no longer replicates the key (the sender's view was
/// stale) is handed off to the key's replicas and dropped once delivered — whatever path
/// forwarded it, including a write asking for several acknowledgements, which used to stay
/// on the non-replica for good (and kept a leaving node from ever finishing its hand-off).
#[test]
fn forwarded_write_to_a_non_replica_is_handed_off() {
    let view = Arc::new(ViewState::of(
        vec![node("a", 1), node("b", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    ));
    let mut a = Shard::new(config("a", 0), view.clone(), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), view.clone(), 2, fixed_clock());
    let key = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| view.replicas(k.as_bytes()) == vec![b.me()])
        .expect("a key of b");
    let op = Op::CounterAdd {
        key: key.as_bytes(),
        delta: 3,
    };
    assert_eq!(a.execute_forwarded(op, false), OpResult::Int(3));
    assert!(a.stores(key.as_bytes()), "applied where it landed");
    let out = a.take_gossip();
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to, b.me());

    b.merge_gossip(out[0].entries.clone()).unwrap();
    a.delivered(out[0].to, &out[0].handoffs);
    assert!(!a.stores(key.as_bytes()), "dropped once delivered");
    assert!(!a.has_gossip());
    let add = Op::CounterAdd {
        key: key.as_bytes(),
        delta: 0,
    };
    assert_eq!(b.execute(add), OpResult::Int(3));
    // On a replica, a forwarded write is an ordinary write.
    let op = Op::CounterAdd {
        key: key.as_bytes(),
        delta: 1,
    };
    assert_eq!(b.execute_forwarded(op, false), OpResult::Int(4));
    assert!(!b.has_gossip(), "nothing to hand off, no other replica");
}

/// A worker that handed a key off and dropped it, then writes it again before getting its
/// state back (the write was forwarded under a stale view, or the key came back with
/// another view change), must not reuse its old counter entry or OR-set dots: the merge
/// would swallow the new write.
#[test]
fn a_worker_that_dropped_a_key_writes_it_again_without_losing_the_write() {
    let both = |version| {
        let mut v = ViewState::of(
            vec![node("a", 1), node("b", 1)],
            ReplicationTable::new(),
            default_vector(2, 1),
        );
        v.version = version;
        Arc::new(v)
    };
    let mut without_a = ViewState::of(
        vec![node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        default_vector(2, 1),
    );
    without_a.version = 2;
    let mut a = Shard::new(config("a", 0), both(1), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), both(1), 2, fixed_clock());
    let add = |k: &'static [u8], delta| Op::CounterAdd { key: k, delta };
    let sadd = |k: &'static [u8], m: &'static [u8]| Op::SetAdd {
        key: k,
        members: vec![m],
    };
    a.execute(add(b"c", 5));
    a.execute(sadd(b"s", b"x"));
    for o in a.take_gossip() {
        b.merge_gossip(o.entries).unwrap();
    }
    // b removes x (its context now covers a's dot for x).
    let rm = Op::SetRemove {
        key: &b"s"[..],
        members: vec![&b"x"[..]],
    };
    assert_eq!(b.execute(rm), OpResult::Int(1));
    let _ = b.take_gossip();
    // a leaves the rings: hands both keys to b and c, drops them once delivered.
    let writer = a.actor();
    a.set_view_now(Arc::new(without_a));
    for o in a.take_gossip() {
        if o.to == b.me() {
            b.merge_gossip(o.entries).unwrap();
        }
        a.delivered(o.to, &o.handoffs);
    }
    assert!(!a.stores(b"c") && !a.stores(b"s"));
    assert_ne!(a.actor(), writer, "a new writer id after dropping keys");
    // a is back; writes reach it before the keys' state does.
    a.set_view_now(both(3));
    a.execute(add(b"c", 1));
    a.execute(sadd(b"s", b"y"));
    for o in a.take_gossip() {
        b.merge_gossip(o.entries).unwrap();
    }
    assert_eq!(b.execute(add(b"c", 0)), OpResult::Int(6), "the +1 is kept");
    let has_y = Op::SetContains {
        key: &b"s"[..],
        member: &b"y"[..],
    };
    assert_eq!(b.execute(has_y), OpResult::Int(1), "y is kept");
}

/// A node leaving a cluster whose only other node has a single worker hands its keys to
/// that worker and drops them: the one worker of its new view is not itself.
#[test]
fn leaving_a_two_node_cluster_hands_every_key_off() {
    let mut two = ViewState::of(
        vec![node("a", 1), node("b", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    two.version = 1;
    let mut only_b = ViewState::of(
        vec![node("b", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    only_b.version = 2;
    let only_b = Arc::new(only_b);
    let mut a = Shard::new(config("a", 0), Arc::new(two), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), only_b.clone(), 2, fixed_clock());
    let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    for k in &keys {
        a.execute_forwarded(
            Op::CounterAdd {
                key: k.as_bytes(),
                delta: 1,
            },
            false,
        );
    }
    a.set_view_now(only_b);
    assert!(!a.is_replica(b"k0"), "b's worker is not a");
    assert_eq!(a.route(b"k0"), Route::Remote(b.me()));
    for o in a.take_gossip() {
        assert_eq!(o.to, b.me());

        b.merge_gossip(o.entries).unwrap();
        a.delivered(o.to, &o.handoffs);
    }
    assert_eq!(a.stats().live_keys, 0, "everything handed off");
    for k in &keys {
        assert!(b.holds(k.as_bytes()));
    }
}

/// What a leaving node waits for: a worker without live keys may still hold a delete to
/// hand off, and keeps every handed-off key until each new replica has acknowledged it —
/// its counters must show both.
#[test]
fn stats_show_replication_still_owed() {
    let three = Arc::new(ViewState::of(
        vec![node("a", 1), node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        default_vector(3, 1),
    ));
    let mut without_a = ViewState::of(
        vec![node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        default_vector(3, 1),
    );
    without_a.version = 1;
    let mut a = Shard::new(config("a", 0), three, 1, fixed_clock());
    a.execute(Op::CounterAdd {
        key: &b"c"[..],
        delta: 1,
    });
    a.execute(Op::CounterAdd {
        key: &b"gone"[..],
        delta: 1,
    });
    assert_eq!(int(a.execute(Op::Delete { key: &b"gone"[..] })), 1);
    let _ = a.take_gossip();
    a.set_view_now(Arc::new(without_a));
    let stats = a.stats();
    assert_eq!(stats.live_keys, 1);
    assert_eq!(stats.stored_keys, 2, "the tombstone counts");
    assert!(stats.pending_replication >= 2);
    let mut out = a.take_gossip();
    out.sort_by_key(|o| o.to);
    assert_eq!(out.len(), 2, "to b and c");
    assert!(
        out.iter().all(|o| o.durable()),
        "hand-offs ask for durable acks"
    );
    let (first, second) = (out.remove(0), out.remove(0));

    a.delivered(first.to, &first.handoffs);
    // Only the first recipient has both keys; the other batch failed: a keeps them.
    a.requeue(second.clone());
    let stats = a.stats();
    assert_eq!((stats.live_keys, stats.stored_keys), (1, 2));
    assert_eq!(stats.handoff_keys, 2, "both hand-offs are still owed");
    let retry = a.take_gossip();
    assert_eq!(
        retry.len(),
        1,
        "only to the replica that has not acknowledged"
    );
    assert_eq!(retry[0].to, second.to);
    let keys: Vec<Bytes> = retry[0].entries.iter().map(|(k, _)| k.clone()).collect();
    assert_eq!(keys.len(), 2);
    a.delivered(retry[0].to, &retry[0].handoffs);
    let stats = a.stats();
    assert_eq!((stats.stored_keys, stats.pending_replication), (0, 0));
}

/// A hand-off is kept until every new replica acknowledged it: when the replicas that
/// did not crash before acknowledging are gone and the view makes this worker the key's
/// only replica again, the key is simply still here.
#[test]
fn a_hand_off_is_kept_until_every_replica_acknowledged() {
    let view = |nodes: Vec<NodeInfo>, global, version| {
        let mut v = ViewState::of(nodes, ReplicationTable::new(), default_vector(global, 1));
        v.version = version;
        Arc::new(v)
    };
    let three = view(vec![node("a", 1), node("b", 1), node("c", 1)], 2, 1);
    let key = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| {
            !three.is_replica(
                k.as_bytes(),
                Replica {
                    node: node_key("a"),
                    worker: 0,
                },
            )
        })
        .expect("a key a does not replicate");
    let key = key.as_bytes();
    // a holds the key alone, then b and c join and become its replicas.
    let mut a = Shard::new(
        config("a", 0),
        view(vec![node("a", 1)], 2, 0),
        1,
        fixed_clock(),
    );
    a.execute(Op::CounterAdd { key, delta: 7 });
    a.set_view_now(three);
    let mut out = a.take_gossip();
    out.sort_by_key(|o| o.to);
    assert_eq!(out.len(), 2, "handed to b and c");
    let (first, second) = (out.remove(0), out.remove(0));
    // The first recipient acknowledges; the other batch fails: a keeps the key.

    a.delivered(first.to, &first.handoffs);
    assert!(a.stores(key), "not every replica acknowledged");
    a.requeue(second);
    // Both recipients crash; a is alone again and still has it.
    a.set_view_now(view(vec![node("a", 1)], 2, 2));
    assert!(a.take_gossip().is_empty(), "nowhere to send it");
    assert_eq!(
        a.execute(Op::CounterAdd { key, delta: 0 }),
        OpResult::Int(7)
    );
    assert!(!a.has_gossip());
    assert_eq!(a.stats().pending_replication, 0);
}

/// The deliberate break the simulation and an integration test must catch: dropping a
/// handed-off key after the first acknowledgement.
#[test]
fn the_deliberate_break_drops_after_the_first_acknowledgement() {
    let three = Arc::new(ViewState::of(
        vec![node("a", 1), node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        default_vector(3, 1),
    ));
    let mut without_a = ViewState::of(
        vec![node("b", 1), node("c", 1)],
        ReplicationTable::new(),
        default_vector(3, 1),
    );
    without_a.version = 1;
    let mut a = Shard::new(config("a", 0), three, 1, fixed_clock());
    a.break_handoff();
    a.execute(Op::CounterAdd {
        key: &b"c"[..],
        delta: 1,
    });
    let _ = a.take_gossip();
    a.set_view_now(Arc::new(without_a));
    let out = a.take_gossip();
    assert_eq!(out.len(), 2);
    a.delivered(out[0].to, &out[0].handoffs);
    assert!(
        !a.stores(b"c"),
        "broken on purpose: dropped after one of two"
    );
}

/// A key handed off and later handed back (views changing back and forth, as around a
/// partition) takes writes before its state returns: none of them, and none of the
/// writes before the hand-off, is lost — the worker does not reuse its old counter entry
/// or OR-set dots for the key it forgot.
#[test]
fn a_key_that_comes_back_keeps_every_write() {
    let v1 = default_vector(1, 1);
    let view = |nodes: Vec<NodeInfo>, version| {
        let mut v = ViewState::of(nodes, ReplicationTable::new(), v1);
        v.version = version;
        Arc::new(v)
    };
    let only_a = view(vec![node("a", 1)], 1);
    let mut a = Shard::new(config("a", 0), only_a.clone(), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), only_a, 2, fixed_clock());
    let add = |s: &mut Shard, member: &'static [u8]| {
        s.execute(Op::SetAdd {
            key: &b"s"[..],
            members: vec![member],
        })
    };
    let incr = |s: &mut Shard, delta| {
        s.execute(Op::CounterAdd {
            key: &b"c"[..],
            delta,
        })
    };
    incr(&mut a, 5);
    add(&mut a, b"x");
    // The keys move to b; a drops them once delivered.
    let only_b = view(vec![node("b", 1)], 2);
    a.set_view_now(only_b.clone());
    b.set_view_now(only_b);
    for o in a.take_gossip() {
        assert_eq!(o.to, b.me());

        b.merge_gossip(o.entries).unwrap();
        a.delivered(o.to, &o.handoffs);
    }
    assert!(
        !a.stores(b"c") && !a.stores(b"s"),
        "a dropped the handed-off keys"
    );
    // They come back to a, which takes writes before b's copy arrives.
    let only_a = view(vec![node("a", 1)], 3);
    a.set_view_now(only_a.clone());
    b.set_view_now(only_a);
    incr(&mut a, 3);
    add(&mut a, b"y");
    for o in b.take_gossip() {
        assert_eq!(o.to, a.me());
        a.merge_gossip(o.entries).unwrap();
    }
    assert_eq!(int(incr(&mut a, 0)), 8, "5 before the moves + 3 after");
    let members = match get(&mut a, b"s") {
        Some(Value::OrSet(s)) => s.iter().map(|m| m.to_vec()).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(members, vec![b"x".to_vec(), b"y".to_vec()]);
}

/// A worker that does not hold a key sends its requests to a replica on its own node when
/// there is one (no network hop; a partitioned node keeps serving the keys it holds), and
/// to any replica otherwise.
#[test]
fn requests_go_to_a_replica_on_this_node_first() {
    let view = Arc::new(ViewState::of(
        vec![node("a", 2), node("b", 2), node("c", 2)],
        ReplicationTable::new(),
        default_vector(2, 1),
    ));
    let mut shards: Vec<Shard> = (0..2)
        .map(|w| Shard::new(config("a", w), view.clone(), 10 + w as u64, fixed_clock()))
        .collect();
    let (mut via_this_node, mut elsewhere) = (0, 0);
    for i in 0..200 {
        let key = format!("k{i}");
        let replicas = view.replicas(key.as_bytes());
        let here: Vec<Replica> = replicas
            .iter()
            .copied()
            .filter(|r| r.node == node_key("a"))
            .collect();
        for s in shards.iter_mut() {
            for _ in 0..20 {
                match s.route(key.as_bytes()) {
                    Route::Local => assert!(replicas.contains(&s.me())),
                    Route::Remote(r) if here.is_empty() => {
                        assert!(replicas.contains(&r));
                        elsewhere += 1;
                    }
                    Route::Remote(r) => {
                        assert_eq!(vec![r], here, "{key}: a replica on this node");
                        via_this_node += 1;
                    }
                }
            }
        }
    }
    assert!(
        via_this_node > 100 && elsewhere > 100,
        "{via_this_node} {elsewhere}"
    );
}

/// A client-supplied LWW timestamp far ahead of the worker's clock is refused (it would win
/// every later write and drag the clock along); one within the bound is accepted, and a
/// later SET still wins over it once the clock passes it.
#[test]
fn far_future_client_timestamps_are_refused() {
    let mut s = shard(0, 1);
    let now_ms = 1_700_000_000_000u64;
    let at = |ms: u64| lattice::Timestamp::new(ms << 16, 7);
    let put = |s: &mut Shard, ts| {
        s.execute(Op::Put {
            key: &b"k"[..],
            value: Value::Lww(lattice::Lww::new(ts, lattice::Blob::from(&b"v"[..]))),
        })
    };
    match put(&mut s, lattice::Timestamp::new(u64::MAX, 7)) {
        OpResult::Error(NodeError::InvalidArgument(m)) => {
            assert!(m.contains("ahead of this node's clock"), "{m}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(get(&mut s, b"k"), None);
    let ahead = Limits::default().max_clock_ahead_ms;
    assert!(matches!(
        put(&mut s, at(now_ms + ahead + 1)),
        OpResult::Error(NodeError::InvalidArgument(_))
    ));
    assert!(matches!(put(&mut s, at(now_ms + ahead)), OpResult::Done));
    // The worker's clock did not jump to u64::MAX: a delete is ordered after the accepted
    // write (the clock observed it), and a new write after that.
    assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 1);
    assert_eq!(get(&mut s, b"k"), None);
}
