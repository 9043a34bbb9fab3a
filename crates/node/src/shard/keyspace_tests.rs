//! Listing a node's keys across its workers (`keyspace`), and `SPOP`.

use std::sync::Arc;

use lattice::{LatticeType, Value};

use super::tests::{config, fixed_clock, node};
use super::*;
use crate::op::{Condition, Op, OpResult};
use crate::view::{default_vector, ReplicationTable, ViewState};

fn shards(workers: usize) -> Vec<Shard> {
    let view = Arc::new(ViewState::of(
        vec![node("n", workers)],
        ReplicationTable::new(),
        default_vector(1, 1),
    ));
    (0..workers as u32)
        .map(|w| {
            Shard::new(
                config("n", w),
                view.clone(),
                7 + u64::from(w),
                fixed_clock(),
            )
        })
        .collect()
}

fn put(shards: &mut [Shard], key: &[u8]) {
    let s = shards.iter_mut().find(|s| s.is_replica(key)).unwrap();
    let op = Op::Assign {
        key,
        value: &b"v"[..],
        condition: Condition::Always,
    };
    assert_eq!(s.execute(op), OpResult::Int(1));
}

/// Pages as `front::resp::keys` merges them: keys below the smallest stop.
fn scan_all(shards: &[Shard], count: usize) -> (Vec<Vec<u8>>, usize) {
    let (mut from, mut out, mut calls) = (0u64, Vec::new(), 0);
    let keep = |_: &[u8], _: Option<LatticeType>| true;
    loop {
        calls += 1;
        let pages: Vec<ScanPage> = shards
            .iter()
            .map(|s| s.scan_keys(from, count, &keep))
            .collect();
        let next = pages.iter().filter_map(|p| p.next).min();
        for p in pages {
            out.extend(
                p.keys
                    .into_iter()
                    .filter(|(h, _)| next.is_none_or(|n| *h < n))
                    .map(|(_, k)| k.into_vec()),
            );
        }
        match next {
            Some(n) => from = n,
            None => return (out, calls),
        }
    }
}

#[test]
fn a_scan_in_pages_lists_every_key_once_across_workers() {
    let mut s = shards(3);
    let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("key:{i}").into_bytes()).collect();
    for k in &keys {
        put(&mut s, k);
    }
    let (mut listed, calls) = scan_all(&s, 50);
    assert!(calls > 10, "{calls} pages for 2000 keys at COUNT 50");
    listed.sort();
    let mut expected = keys.clone();
    expected.sort();
    assert_eq!(listed, expected, "every key exactly once");
    let counted: u64 = s.iter().map(|s| s.keyspace_counts().0).sum();
    assert_eq!(counted, 2000);
    // Deleted keys are not listed; a filter applies after visiting.
    let victim = &keys[5][..];
    let owner = s.iter_mut().find(|x| x.is_replica(victim)).unwrap();
    owner.execute(Op::Delete { key: victim });
    let (listed, _) = scan_all(&s, 10_000);
    assert_eq!(listed.len(), 1999);
    assert!(!listed.iter().any(|k| k == victim));
}

#[test]
fn spop_removes_random_members_and_returns_them() {
    let mut s = shards(1).pop().unwrap();
    let members: Vec<&[u8]> = vec![b"a", b"b", b"c", b"d"];
    s.execute(Op::SetAdd {
        key: &b"s"[..],
        members: members.clone(),
    });
    let popped = match s.execute(Op::SetPop {
        key: &b"s"[..],
        count: 3,
    }) {
        OpResult::Value(Some(Value::Set(p))) => p,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(popped.len(), 3);
    assert_eq!(s.execute(Op::SetLen { key: &b"s"[..] }), OpResult::Int(1));
    for m in popped.iter() {
        assert_eq!(
            s.execute(Op::SetContains {
                key: &b"s"[..],
                member: &m[..],
            }),
            OpResult::Int(0)
        );
    }
    assert_eq!(
        s.execute(Op::SetPop {
            key: &b"nope"[..],
            count: 1,
        }),
        OpResult::Value(None)
    );
    assert_eq!(
        s.execute(Op::ExpireTime { key: &b"s"[..] }),
        OpResult::Int(-1)
    );
    assert_eq!(
        s.execute(Op::ExpireTime { key: &b"nope"[..] }),
        OpResult::Int(-2)
    );
}
