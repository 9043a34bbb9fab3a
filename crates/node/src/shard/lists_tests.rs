//! Lists under multi-master replication: two workers replicating one list, written
//! concurrently, converge by gossip to the documented result (docs/protocol.md, Lists).

use std::sync::Arc;

use bytes::Bytes;
use lattice::{Timestamp, Value};

use super::tests::{config, fixed_clock, node};
use super::Shard;
use crate::codec::{op_from_pb, op_to_pb};
use crate::list_op::ListOp;
use crate::op::{Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

const KEY: &[u8] = b"q";

/// Two workers of one node, both replicas of `KEY`.
fn pair() -> (Shard, Shard) {
    let mut table = ReplicationTable::new();
    table.insert(
        Box::from(KEY),
        (Timestamp::new(1 << 16, 9), default_vector(1, 2)),
    );
    let view = Arc::new(ViewState::of(
        vec![node("n", 2)],
        table,
        default_vector(1, 1),
    ));
    let a = Shard::new(config("n", 0), view.clone(), 100, fixed_clock());
    let b = Shard::new(config("n", 1), view, 101, fixed_clock());
    assert!(a.is_replica(KEY) && b.is_replica(KEY));
    (a, b)
}

fn run(s: &mut Shard, op: ListOp<&'static [u8]>) -> OpResult {
    s.execute(Op::List { key: KEY, op })
}

fn push(s: &mut Shard, front: bool, values: &[&'static [u8]]) {
    let r = run(
        s,
        ListOp::Push {
            values: values.to_vec(),
            front,
            if_exists: false,
        },
    );
    assert!(matches!(r, OpResult::Int(_)), "{r:?}");
}

fn items(s: &mut Shard) -> Vec<Vec<u8>> {
    match run(s, ListOp::Range { start: 0, stop: -1 }) {
        OpResult::Multi(items) => items
            .into_iter()
            .map(|r| match r {
                OpResult::Value(Some(Value::Lww(l))) => l.value.to_vec(),
                other => panic!("{other:?}"),
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

fn pop(s: &mut Shard, front: bool) -> Option<Vec<u8>> {
    match run(s, ListOp::Pop { front, count: None }) {
        OpResult::Value(Some(Value::Lww(l))) => Some(l.value.to_vec()),
        OpResult::Value(None) => None,
        other => panic!("{other:?}"),
    }
}

/// Both workers send their changesets to each other.
fn gossip(a: &mut Shard, b: &mut Shard) {
    let to_b = a.take_gossip();
    let to_a = b.take_gossip();
    for o in to_b {
        b.merge_gossip(o.entries).unwrap();
    }
    for o in to_a {
        a.merge_gossip(o.entries).unwrap();
    }
}

#[test]
fn concurrent_pushes_both_survive_in_the_same_order_everywhere() {
    let (mut a, mut b) = pair();
    push(&mut a, false, &[b"base"]);
    gossip(&mut a, &mut b);
    push(&mut a, true, &[b"a1", b"a2"]);
    push(&mut b, true, &[b"b1"]);
    push(&mut a, false, &[b"a-tail"]);
    push(&mut b, false, &[b"b-tail"]);
    gossip(&mut a, &mut b);
    let (xa, xb) = (items(&mut a), items(&mut b));
    assert_eq!(xa, xb);
    assert_eq!(xa.len(), 6);
    assert!(xa.contains(&b"base".to_vec()));
    // Each replica's own pushes keep their order relative to each other.
    let at = |v: &[u8]| xa.iter().position(|x| x == v).unwrap();
    assert!(at(b"a2") < at(b"a1") && at(b"a1") < at(b"base"));
    assert!(at(b"base") < at(b"a-tail") && at(b"base") < at(b"b-tail"));
}

#[test]
fn concurrent_pops_of_one_element_both_return_it_and_remove_it_once() {
    let (mut a, mut b) = pair();
    push(&mut a, false, &[b"job1", b"job2", b"job3"]);
    gossip(&mut a, &mut b);
    // Both replicas pop the head before exchanging deltas: at-least-once delivery.
    assert_eq!(pop(&mut a, true), Some(b"job1".to_vec()));
    assert_eq!(pop(&mut b, true), Some(b"job1".to_vec()));
    gossip(&mut a, &mut b);
    assert_eq!(items(&mut a), vec![b"job2".to_vec(), b"job3".to_vec()]);
    assert_eq!(items(&mut a), items(&mut b));
    // Pops of different elements on each side remove both.
    assert_eq!(pop(&mut a, true), Some(b"job2".to_vec()));
    assert_eq!(pop(&mut b, false), Some(b"job3".to_vec()));
    gossip(&mut a, &mut b);
    assert_eq!(items(&mut a), Vec::<Vec<u8>>::new());
    assert_eq!(run(&mut b, ListOp::Len), OpResult::Int(0));
    assert_eq!(a.execute(Op::Exists { key: KEY }), OpResult::Int(0));
}

#[test]
fn lset_concurrent_with_a_pop_of_that_element_loses() {
    let (mut a, mut b) = pair();
    push(&mut a, false, &[b"x", b"y"]);
    gossip(&mut a, &mut b);
    assert_eq!(
        run(
            &mut a,
            ListOp::Set {
                index: 0,
                value: b"X"
            }
        ),
        OpResult::Done
    );
    assert_eq!(pop(&mut b, true), Some(b"x".to_vec()));
    gossip(&mut a, &mut b);
    assert_eq!(items(&mut a), vec![b"y".to_vec()]);
    assert_eq!(items(&mut b), vec![b"y".to_vec()]);
}

#[test]
fn a_queue_that_pushes_and_pops_forever_stays_small() {
    let (mut a, mut b) = pair();
    let mut sizes = Vec::new();
    for round in 0..200 {
        push(&mut a, false, &[b"job"]);
        if round % 2 == 0 {
            gossip(&mut a, &mut b);
        }
        let _ = pop(&mut b, true);
        gossip(&mut a, &mut b);
        sizes.push(a.store.size_of(KEY));
    }
    assert_eq!(items(&mut a), items(&mut b));
    // The record does not grow with the number of pushes and pops.
    assert!(sizes[199] <= sizes[20] + 64, "{:?}", &sizes[..]);
}

#[test]
fn list_ops_round_trip_through_forwarding() {
    let b = |s: &'static str| Bytes::from_static(s.as_bytes());
    let ops = [
        ListOp::Push {
            values: vec![b("a"), b("b")],
            front: true,
            if_exists: true,
        },
        ListOp::Pop {
            front: false,
            count: Some(3),
        },
        ListOp::Pop {
            front: true,
            count: None,
        },
        ListOp::Range { start: -3, stop: 7 },
        ListOp::Len,
        ListOp::Index { index: -1 },
        ListOp::Set {
            index: 2,
            value: b("v"),
        },
        ListOp::Rem {
            count: -2,
            value: b("x"),
        },
        ListOp::Trim { start: 1, stop: -1 },
        ListOp::Insert {
            after: true,
            pivot: b("p"),
            value: b("v"),
        },
        ListOp::Move {
            dest: b("d"),
            from_front: false,
            to_front: true,
        },
        ListOp::Pos {
            value: b("x"),
            rank: -2,
            count: Some(0),
            maxlen: 9,
        },
        ListOp::Pos {
            value: b("x"),
            rank: 1,
            count: None,
            maxlen: 0,
        },
    ];
    for op in ops {
        let op = Op::List { key: b("k"), op };
        assert_eq!(op_from_pb(op_to_pb(&op)).unwrap(), op);
    }
}

#[test]
fn a_list_type_survives_forwarding() {
    let r = OpResult::Type(Some(lattice::LatticeType::List));
    let back = crate::codec::result_from_pb(crate::codec::result_to_pb(&r));
    assert_eq!(back, r);
}
