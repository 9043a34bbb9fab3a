//! Hashes and sorted sets on a shard: commands as ops, liveness of emptied values,
//! deadlines, forwarding.

use std::sync::Arc;

use bytes::Bytes;
use lattice::Value;

use super::super::tests::{config, node};
use super::*;
use crate::clock::ManualClock;
use crate::op::{Deadline, ExpireWhen, Op};
use crate::shard::Shard;
use crate::view::{default_vector, ReplicationTable, ViewState};

fn shard() -> Shard {
    let clock = Arc::new(ManualClock::new(1_700_000_000_000));
    let view = ViewState::of(
        vec![node("n", 1)],
        ReplicationTable::new(),
        default_vector(1, 1),
    );
    Shard::new(config("n", 0), Arc::new(view), 7, clock)
}

fn hash(s: &mut Shard, line: &str) -> OpResult {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    s.execute(Op::Hash {
        key: words[1],
        args: [&[words[0]], &words[2..]].concat(),
    })
}

fn zset(s: &mut Shard, line: &str) -> OpResult {
    let words: Vec<&[u8]> = line.split(' ').map(str::as_bytes).collect();
    s.execute(Op::Zset {
        key: words[1],
        args: [&[words[0]], &words[2..]].concat(),
    })
}

fn text(r: &OpResult) -> String {
    match r {
        OpResult::Value(Some(Value::Lww(l))) => String::from_utf8_lossy(&l.value).into_owned(),
        OpResult::Value(Some(Value::Priority(p))) => {
            format!("{}={}", String::from_utf8_lossy(&p.value), p.priority)
        }
        OpResult::Value(None) => "nil".into(),
        OpResult::Int(n) => n.to_string(),
        OpResult::Multi(items) => items.iter().map(text).collect::<Vec<_>>().join(" "),
        other => format!("{other:?}"),
    }
}

#[test]
fn hash_commands_and_an_emptied_hash_is_gone_with_its_deadline() {
    let mut s = shard();
    assert_eq!(text(&hash(&mut s, "HSET h a 1 b 2 a 3")), "2");
    assert_eq!(text(&hash(&mut s, "HGETALL h")), "a 3 b 2");
    assert_eq!(text(&hash(&mut s, "HINCRBY h b 40")), "42");
    assert_eq!(text(&hash(&mut s, "HSETNX h a x")), "0");
    let expire = Op::Expire {
        key: &b"h"[..],
        deadline: Deadline::In(10_000),
        when: ExpireWhen::Always,
    };
    assert_eq!(text(&s.execute(expire)), "1");
    assert_eq!(text(&hash(&mut s, "HDEL h a b nope")), "2");
    assert_eq!(text(&s.execute(Op::Exists { key: &b"h"[..] })), "0");
    assert!(matches!(
        s.execute(Op::TypeOf { key: &b"h"[..] }),
        OpResult::Type(None)
    ));
    // Re-created: no deadline left from before.
    assert_eq!(text(&hash(&mut s, "HSET h c 1")), "1");
    assert_eq!(text(&s.execute(Op::Ttl { key: &b"h"[..] })), "-1");
    // Wrong type both ways.
    s.execute(Op::Assign {
        key: &b"str"[..],
        value: &b"v"[..],
        condition: crate::op::Condition::Always,
    });
    assert!(matches!(
        hash(&mut s, "HGET str f"),
        OpResult::Error(NodeError::WrongType { .. })
    ));
    assert!(matches!(
        zset(&mut s, "ZCARD h"),
        OpResult::Error(NodeError::WrongType { .. })
    ));
    // Errors found at the shard are Redis's.
    assert!(matches!(
        hash(&mut s, "HINCRBY h c 9223372036854775807"),
        OpResult::Error(NodeError::Overflow)
    ));
}

#[test]
fn sorted_set_commands() {
    let mut s = shard();
    assert_eq!(text(&zset(&mut s, "ZADD z 1 a 2 b 3 c")), "3");
    assert_eq!(text(&zset(&mut s, "ZADD z GT CH 0 a 5 b")), "1");
    assert_eq!(
        text(&zset(&mut s, "ZRANGE z 0 -1 WITHSCORES")),
        "a=1 c=3 b=5"
    );
    assert_eq!(text(&zset(&mut s, "ZRANGE z +inf (1 BYSCORE REV")), "b c");
    assert_eq!(text(&zset(&mut s, "ZINCRBY z 1.5 a")), "=2.5");
    assert_eq!(text(&zset(&mut s, "ZREVRANK z a")), "2");
    assert_eq!(text(&zset(&mut s, "ZPOPMAX z 2")), "b=5 c=3");
    assert!(matches!(
        zset(&mut s, "ZADD z INCR nan a"),
        OpResult::Error(NodeError::InvalidArgument(_))
    ));
    assert!(matches!(
        zset(&mut s, "ZADD z INCR -inf a"),
        OpResult::Value(Some(_))
    ));
    assert!(matches!(
        zset(&mut s, "ZADD z INCR inf a"),
        OpResult::Error(_)
    ));
    assert_eq!(text(&zset(&mut s, "ZPOPMIN z 5")), "a=-inf");
    assert_eq!(text(&s.execute(Op::Exists { key: &b"z"[..] })), "0");
}

#[test]
fn hash_and_sorted_set_ops_forward_intact() {
    let op = Op::Hash {
        key: Bytes::from_static(b"h"),
        args: vec![
            Bytes::from_static(b"HSET"),
            Bytes::from_static(b"f"),
            Bytes::from_static(b"v"),
        ],
    };
    assert_eq!(
        crate::codec::op_from_pb(crate::codec::op_to_pb(&op)).unwrap(),
        op
    );
    assert!(op.is_write());
    let op = Op::Zset {
        key: Bytes::from_static(b"z"),
        args: vec![
            Bytes::from_static(b"zrange"),
            Bytes::from_static(b"0"),
            Bytes::from_static(b"-1"),
        ],
    };
    assert_eq!(
        crate::codec::op_from_pb(crate::codec::op_to_pb(&op)).unwrap(),
        op
    );
    assert!(!op.is_write());
}
