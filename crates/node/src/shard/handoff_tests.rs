//! Hand-off between workers whose views disagree (a leave, seen at different times).

use std::sync::Arc;

use lattice::Value;

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

fn view(nodes: &[&str], version: u64) -> Arc<ViewState> {
    let mut v = ViewState::of(
        nodes.iter().map(|n| node(n, 1)).collect(),
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    v.version = version;
    Arc::new(v)
}

fn value(s: &mut Shard, key: &[u8]) -> Option<Value> {
    match s.execute(Op::Get { key }) {
        OpResult::Value(v) => v,
        other => panic!("unexpected {other:?}"),
    }
}

/// Worker a leaves: its view no longer has it and gives key k to b, while b still has the
/// view before the leave, which gives k to a. Each hands k to the other. b takes a's copy,
/// passes it back to a, and drops it once a acknowledged; b's acknowledgement of a's copy
/// — given before b passed it back, delivered late — must not let a drop k too: a now
/// answers for it, and sends it again. (Simulation seed 60 lost an acknowledged write
/// this way when node n2 left.)
#[test]
fn a_key_handed_back_during_a_leave_is_not_dropped_on_an_older_acknowledgement() {
    let before = view(&["a", "b"], 1);
    let after = view(&["b"], 2);
    let mut a = Shard::new(config("a", 0), before.clone(), 1, fixed_clock());
    let mut b = Shard::new(config("b", 0), before.clone(), 2, fixed_clock());
    let key = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| before.replicas(k.as_bytes()) == vec![a.me()])
        .expect("a key of a");
    let key = key.as_bytes();
    let write = Op::CounterAdd { key, delta: 7 };
    assert_eq!(a.execute(write), OpResult::Int(7));
    let written = value(&mut a, key);
    assert!(written.is_some());

    // a leaves: its key goes to b.
    a.set_view_now(after.clone());
    let to_b = a.take_gossip();
    assert_eq!(to_b.len(), 1);
    assert_eq!(to_b[0].to, b.me());
    assert!(to_b[0].durable());

    // b, still on the old view, takes it and acknowledges it (the answer is slow)...
    b.merge_handoff(to_b[0].entries.clone()).unwrap();
    assert!(b.stores(key));
    // ...and, not a replica under its view, hands it to a, which takes it back.
    let to_a = b.take_gossip();
    assert_eq!(to_a.len(), 1);
    assert_eq!(to_a[0].to, a.me());
    assert!(to_a[0].durable());
    a.merge_handoff(to_a[0].entries.clone()).unwrap();
    // a's acknowledgement reaches b: b drops its copy.
    b.delivered(a.me(), &to_a[0].handoffs);
    assert!(!b.stores(key), "b dropped k on a's word");
    // b's acknowledgement of the first copy arrives: it is older than what a answers for.
    a.delivered(b.me(), &to_b[0].handoffs);
    assert!(a.stores(key), "a dropped the last copy of k");
    assert_eq!(value(&mut a, key), written);

    // a sends k again; b, on the new view by now, keeps it, and a drops it.
    b.set_view_now(after);
    let again = a.take_gossip();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].to, b.me());
    b.merge_handoff(again[0].entries.clone()).unwrap();
    a.delivered(b.me(), &again[0].handoffs);
    assert!(!a.stores(key));
    assert!(!b.has_gossip(), "b is k's replica now");
    assert_eq!(value(&mut b, key), written);
}

/// An ordinary gossip batch (no durable answer asked: its sender keeps the records) of a
/// key already being handed off, with nothing new in it, does not start the hand-off over.
#[test]
fn plain_gossip_of_a_key_being_handed_off_changes_nothing() {
    let before = view(&["a", "b"], 1);
    let after = view(&["b"], 2);
    let mut a = Shard::new(config("a", 0), before.clone(), 1, fixed_clock());
    let key = (0..100)
        .map(|i| format!("k{i}"))
        .find(|k| before.replicas(k.as_bytes()) == vec![a.me()])
        .expect("a key of a");
    let key = key.as_bytes();
    a.execute(Op::CounterAdd { key, delta: 7 });
    a.set_view_now(after);
    let to_b = a.take_gossip();
    assert_eq!(to_b.len(), 1);
    let copy = to_b[0].entries.clone();
    a.merge_gossip(copy).unwrap();
    assert!(!a.has_gossip(), "nothing new to send");
    a.delivered(to_b[0].to, &to_b[0].handoffs);
    assert!(!a.stores(key), "the acknowledgement still counts");
}
