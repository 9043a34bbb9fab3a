//! Deadlines on a shard: reads, writes, conditions and background reclamation.

use std::sync::Arc;

use lattice::{Lattice, Value};

use super::super::tests::{config, node};
use super::*;
use crate::clock::ManualClock;
use crate::op::{Guard, Op};
use crate::view::{default_vector, ReplicationTable, ViewState};

const T0: u64 = 1_700_000_000_000;

fn shard_with_clock() -> (Shard, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let view = ViewState::of(
        vec![node("n", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    let s = Shard::new(config("n", 0), Arc::new(view), 7, clock.clone());
    (s, clock)
}

fn int(r: OpResult) -> i64 {
    match r {
        OpResult::Int(n) => n,
        other => panic!("unexpected {other:?}"),
    }
}

fn set_ex(s: &mut Shard, key: &[u8], v: &[u8], deadline: Deadline) -> i64 {
    int(s.execute(Op::AssignTtl {
        key,
        value: v,
        condition: Condition::Always,
        deadline,
    }))
}

fn ttl(s: &mut Shard, key: &[u8]) -> i64 {
    int(s.execute(Op::Ttl { key }))
}

fn exists(s: &mut Shard, key: &[u8]) -> bool {
    int(s.execute(Op::Exists { key })) == 1
}

#[test]
fn an_expired_key_reads_as_missing_at_its_deadline() {
    let (mut s, clock) = shard_with_clock();
    assert_eq!(set_ex(&mut s, b"k", b"v", Deadline::In(1000)), 1);
    assert_eq!(ttl(&mut s, b"k"), 1000);
    clock.advance(999);
    assert!(exists(&mut s, b"k"));
    assert!(matches!(s.read(b"k"), Ok(Some(_))));
    clock.advance(1);
    assert!(!exists(&mut s, b"k"));
    assert!(matches!(s.read(b"k"), Ok(None)));
    assert_eq!(ttl(&mut s, b"k"), -2);
}

#[test]
fn expired_keys_are_reclaimed_in_bounded_steps_by_a_tombstone_at_the_deadline() {
    let (mut s, clock) = shard_with_clock();
    for i in 0..10u8 {
        set_ex(&mut s, &[i], b"v", Deadline::In(100));
    }
    set_ex(&mut s, b"later", b"v", Deadline::In(10_000));
    assert_eq!(s.deadlines_indexed(), 11);
    assert_eq!(s.expire_step(100), 0, "nothing due yet");
    clock.advance(100);
    assert_eq!(s.expire_step(4), 4, "bounded");
    assert_eq!(s.expire_step(100), 6);
    assert_eq!(s.deadlines_indexed(), 1);
    let r = s.record_of(&[0]).unwrap().unwrap();
    assert!(r.is_tombstone());
    assert_eq!(r.epoch.physical_ms(), T0 + 100, "stamped at the deadline");
    assert!(exists(&mut s, b"later"));
}

#[test]
fn replicas_reclaiming_at_different_moments_write_the_same_tombstone() {
    let (mut a, clock_a) = shard_with_clock();
    let (mut b, clock_b) = shard_with_clock();
    set_ex(&mut a, b"k", b"v", Deadline::In(50));
    let written = a.record_of(b"k").unwrap().unwrap();
    b.merge_into_store(b"k", written).unwrap();
    clock_a.advance(60);
    clock_b.advance(5_000);
    a.expire_step(10);
    b.expire_step(10);
    assert_eq!(a.record_of(b"k").unwrap(), b.record_of(b"k").unwrap());
    // A write after the deadline wins over the tombstone.
    let mut late = a.record_of(b"k").unwrap().unwrap();
    let ts = lattice::Timestamp::new((T0 + 70) << 16, 9);
    late.merge(lattice::Record::new(
        ts,
        Some(Value::Lww(lattice::Lww::new(ts, b"new"[..].into()))),
    ));
    assert!(!late.is_tombstone());
}

#[test]
fn expire_conditions_persist_and_keepttl() {
    let (mut s, clock) = shard_with_clock();
    let expire = |s: &mut Shard, d, when| {
        int(s.execute(Op::Expire {
            key: &b"k"[..],
            deadline: d,
            when,
        }))
    };
    assert_eq!(
        expire(&mut s, Deadline::In(10), ExpireWhen::Always),
        0,
        "missing"
    );
    s.execute(Op::Assign {
        key: &b"k"[..],
        value: &b"v"[..],
        condition: Condition::Always,
    });
    assert_eq!(ttl(&mut s, b"k"), -1);
    assert_eq!(expire(&mut s, Deadline::In(10_000), ExpireWhen::Xx), 0);
    assert_eq!(
        expire(&mut s, Deadline::In(10_000), ExpireWhen::Gt),
        0,
        "none is infinite"
    );
    assert_eq!(expire(&mut s, Deadline::In(10_000), ExpireWhen::Nx), 1);
    assert_eq!(expire(&mut s, Deadline::In(5_000), ExpireWhen::Gt), 0);
    assert_eq!(expire(&mut s, Deadline::In(5_000), ExpireWhen::Lt), 1);
    assert_eq!(ttl(&mut s, b"k"), 5_000);
    // KEEPTTL keeps it; a plain SET clears it, as Redis.
    set_ex(&mut s, b"k", b"w", Deadline::Keep);
    assert_eq!(ttl(&mut s, b"k"), 5_000);
    assert_eq!(expire(&mut s, Deadline::Persist, ExpireWhen::Always), 1);
    assert_eq!(ttl(&mut s, b"k"), -1);
    assert_eq!(expire(&mut s, Deadline::Persist, ExpireWhen::Always), 0);
    set_ex(&mut s, b"k", b"x", Deadline::In(100));
    s.execute(Op::Assign {
        key: &b"k"[..],
        value: &b"y"[..],
        condition: Condition::Always,
    });
    assert_eq!(ttl(&mut s, b"k"), -1);
    // A deadline in the past deletes at once.
    assert_eq!(expire(&mut s, Deadline::At(T0 - 1), ExpireWhen::Always), 1);
    assert!(!exists(&mut s, b"k"));
    // Any type expires; a write to an expired counter starts a new one.
    s.execute(Op::CounterAdd {
        key: &b"c"[..],
        delta: 5,
    });
    int(s.execute(Op::Expire {
        key: &b"c"[..],
        deadline: Deadline::In(10),
        when: ExpireWhen::Always,
    }));
    clock.advance(10);
    assert_eq!(
        int(s.execute(Op::CounterAdd {
            key: &b"c"[..],
            delta: 1
        })),
        1
    );
}

#[test]
fn watch_guards_see_every_write_and_units_run_whole() {
    let (mut s, _) = shard_with_clock();
    let v0 = int(s.execute(Op::Version { key: &b"w"[..] }));
    s.execute(Op::Assign {
        key: &b"w"[..],
        value: &b"1"[..],
        condition: Condition::Always,
    });
    let v1 = int(s.execute(Op::Version { key: &b"w"[..] }));
    assert_ne!(v0, v1);
    let unit = |version: i64| Op::Exec {
        key: &b"w"[..],
        guards: vec![(&b"w"[..], Guard::Version(version as u64))],
        ops: vec![Op::Assign {
            key: &b"w"[..],
            value: &b"2"[..],
            condition: Condition::Always,
        }],
    };
    assert_eq!(
        s.execute(unit(v0)),
        OpResult::Int(0),
        "a changed key aborts"
    );
    assert!(matches!(s.execute(unit(v1)), OpResult::Multi(r) if r == [OpResult::Int(1)]));
    assert_eq!(
        s.execute(unit(v1)),
        OpResult::Int(0),
        "its own write changed it"
    );
}

#[test]
fn refreshing_a_deadline_keeps_one_index_entry_per_key() {
    let (mut s, clock) = shard_with_clock();
    set_ex(&mut s, b"session", b"v", Deadline::In(1_000));
    for i in 0..100 {
        s.execute(Op::Expire {
            key: &b"session"[..],
            deadline: Deadline::In(2_000 + i),
            when: ExpireWhen::Always,
        });
    }
    assert_eq!(s.deadlines_indexed(), 1);
    clock.advance(1_500);
    assert_eq!(s.expire_step(10), 0, "moved to its new deadline");
    assert!(exists(&mut s, b"session"));
    clock.advance(1_000);
    assert_eq!(s.expire_step(10), 1);
    assert_eq!(s.deadlines_indexed(), 0);
}

/// The reclamation sweep skips its pass when this says there is nothing to find: only a
/// stored tombstone makes it true.
#[test]
fn holds_tombstones_only_while_a_delete_is_stored() {
    let (mut s, _clock) = shard_with_clock();
    assert!(!s.holds_tombstones(), "an empty shard");
    let set = |s: &mut Shard| {
        s.execute(Op::Assign {
            key: &b"k"[..],
            value: &b"v"[..],
            condition: Condition::Always,
        })
    };
    assert_eq!(int(set(&mut s)), 1);
    assert!(!s.holds_tombstones(), "a live key only");
    assert_eq!(int(s.execute(Op::Delete { key: &b"k"[..] })), 1);
    assert!(s.holds_tombstones(), "the delete's tombstone");
    assert_eq!(int(set(&mut s)), 1);
    assert!(!s.holds_tombstones(), "written again: live");
}

#[test]
fn the_writes_of_a_batch_share_one_clock_reading_and_stay_ordered() {
    let (mut s, clock) = shard_with_clock();
    let put = |s: &mut Shard, key: &'static [u8]| {
        s.execute(Op::Assign {
            key,
            value: b"v",
            condition: Condition::Always,
        })
    };
    let stamp = |s: &Shard, key: &[u8]| s.store().get(key).map(|r| r.epoch());
    s.begin_batch();
    put(&mut s, b"a");
    clock.advance(5);
    put(&mut s, b"b");
    s.end_batch();
    put(&mut s, b"c");
    let (a, b, c) = (
        stamp(&s, b"a").unwrap(),
        stamp(&s, b"b").unwrap(),
        stamp(&s, b"c").unwrap(),
    );
    assert_eq!(
        a.physical_ms(),
        T0,
        "the batch's first write reads the clock"
    );
    assert_eq!(
        b.physical_ms(),
        T0,
        "later writes of the batch reuse that reading"
    );
    assert!(b > a, "the hybrid clock still orders the batch's writes");
    assert_eq!(
        c.physical_ms(),
        T0 + 5,
        "after the batch, writes read the clock again"
    );
}

#[test]
fn the_quiet_mark_moves_with_writes_and_is_withheld_while_a_deadline_waits_for_its_sweep() {
    let (mut s, clock) = shard_with_clock();
    let start = s.quiet_mark().expect("nothing expiring");
    assert_eq!(set_ex(&mut s, b"k", b"v", Deadline::In(1000)), 1);
    let written = s.quiet_mark().expect("the deadline is still ahead");
    assert_ne!(written, start, "a write moves it");
    assert!(exists(&mut s, b"k"));
    assert_eq!(s.quiet_mark(), Some(written), "a read does not");
    // Past the deadline the key reads as absent with no change to the store: no mark
    // until the sweep has reclaimed it (a change of its own).
    clock.advance(1000);
    assert_eq!(s.quiet_mark(), None);
    s.expire_step(EXPIRE_STEP_KEYS);
    let swept = s.quiet_mark().expect("reclaimed");
    assert_ne!(swept, written);
}
