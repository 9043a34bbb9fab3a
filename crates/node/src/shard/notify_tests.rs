//! Keyspace events on a shard: off costs nothing, on records Redis's events for client
//! ops, and `expired` comes from background reclamation.

use std::sync::Arc;

use super::super::tests::{config, node};
use super::*;
use crate::clock::ManualClock;
use crate::op::{Condition, Op};
use crate::view::{default_vector, ReplicationTable, ViewState};

fn shard() -> (Shard, Arc<Flags>, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let view = ViewState::of(
        vec![node("n", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    let mut s = Shard::new(config("n", 0), Arc::new(view), 7, clock.clone());
    let flags = Arc::new(Flags::default());
    s.set_keyspace_flags(flags.clone());
    (s, flags, clock)
}

fn names(s: &mut Shard) -> Vec<(&'static str, Vec<u8>)> {
    s.take_key_events()
        .into_iter()
        .map(|e| (e.event, e.key.to_vec()))
        .collect()
}

fn set(key: &[u8]) -> Op<&[u8]> {
    Op::Assign {
        key,
        value: b"v",
        condition: Condition::Always,
    }
}

#[test]
fn nothing_is_recorded_while_off_or_without_k_or_e() {
    let (mut s, flags, _) = shard();
    s.execute(set(b"a"));
    assert!(names(&mut s).is_empty());
    flags.set(notify::parse(b"A").unwrap());
    s.execute(set(b"a"));
    assert!(names(&mut s).is_empty());
}

#[test]
fn client_ops_record_redis_events_and_only_changes() {
    let (mut s, flags, _) = shard();
    flags.set(notify::parse(b"KEA").unwrap());
    s.execute(set(b"a"));
    s.execute(Op::Delete { key: &b"a"[..] });
    s.execute(Op::Delete { key: &b"a"[..] });
    s.execute(Op::SetAdd {
        key: &b"s"[..],
        members: vec![&b"m"[..]],
    });
    s.execute(Op::SetRemove {
        key: &b"s"[..],
        members: vec![&b"m"[..]],
    });
    assert_eq!(
        names(&mut s),
        vec![
            ("set", b"a".to_vec()),
            ("del", b"a".to_vec()),
            ("sadd", b"s".to_vec()),
            ("srem", b"s".to_vec()),
            ("del", b"s".to_vec()),
        ]
    );
    // Classes filter; `n` and `m` are apart from `A`.
    flags.set(notify::parse(b"Kgnm").unwrap());
    s.execute(set(b"b"));
    s.execute(Op::Get { key: &b"nope"[..] });
    s.execute(Op::Delete { key: &b"b"[..] });
    assert_eq!(
        names(&mut s),
        vec![
            ("new", b"b".to_vec()),
            ("keymiss", b"nope".to_vec()),
            ("del", b"b".to_vec()),
        ]
    );
}

#[test]
fn reclaimed_keys_send_expired() {
    let (mut s, flags, clock) = shard();
    flags.set(notify::parse(b"Ex").unwrap());
    s.execute(Op::AssignTtl {
        key: &b"k"[..],
        value: &b"v"[..],
        condition: Condition::Always,
        deadline: Deadline::In(10),
    });
    assert!(names(&mut s).is_empty(), "set/expire are not class x");
    clock.advance(10);
    assert_eq!(s.expire_step(10), 1);
    assert_eq!(names(&mut s), vec![("expired", b"k".to_vec())]);
}
