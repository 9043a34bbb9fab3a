//! `RENAME`, `RENAMENX` and `COPY` of every Redis type: the source's value is read and
//! written to the destination as a new incarnation (see docs/protocol.md, "Keys and
//! server").

use std::rc::Rc;

use lattice::Value;
use wire::resp;

use super::keys_reply::members;
use super::reply::{err, ready, redis_type_name};
use super::sets::run_ops;
use crate::ack::Ack;
use crate::core::Routing;
use crate::driver::worker::Worker;
use crate::error::NodeError;
use crate::list_op::ListOp;
use crate::op::{Deadline, ExpireWhen, Op, OpResult};

/// `RENAME`/`RENAMENX`/`COPY`: reads the source's value and deadline, writes them to the
/// destination as a new incarnation (after a tombstone, so whatever it held is replaced),
/// then (not for `COPY`) deletes the source.
pub(super) async fn rename(
    w: &Rc<Worker>,
    src: &[u8],
    dest: &[u8],
    nx: bool,
    copy: bool,
) -> Vec<u8> {
    let int = |n: i64| ready(|o| resp::integer(o, n));
    let reads = vec![
        Op::Get { key: src },
        Op::ExpireTime { key: src },
        Op::Exists { key: dest },
    ];
    let results = run_ops(w, reads).await;
    if let Some(OpResult::Error(e)) = results.iter().find(|r| matches!(r, OpResult::Error(_))) {
        return err(&e.resp_message());
    }
    let Some(OpResult::Value(Some(value))) = results.first() else {
        return if copy { int(0) } else { err("ERR no such key") };
    };
    if src == dest {
        return if copy {
            err("ERR source and destination objects are the same")
        } else if nx {
            int(0)
        } else {
            ready(|o| resp::simple(o, "OK"))
        };
    }
    if nx && results.get(2) == Some(&OpResult::Int(1)) {
        return int(0);
    }
    let deadline = match results.get(1) {
        Some(OpResult::Int(at)) if *at >= 0 => Some(*at as u64),
        _ => None,
    };
    let mut writes = vec![Op::Delete { key: dest }];
    // What the writes borrow: members, field/value pairs, scores printed.
    let set_members: Vec<&[u8]>;
    let scores: Vec<String>;
    match value {
        Value::Lww(l) => writes.push(Op::Assign {
            key: dest,
            value: &l.value[..],
            condition: crate::op::Condition::Always,
        }),
        Value::Counter(c) => match i64::try_from(c.value()) {
            Ok(n) => writes.push(Op::CounterAdd {
                key: dest,
                delta: n,
            }),
            Err(_) => return err(&NodeError::Overflow.resp_message()),
        },
        Value::OrSet(_) => {
            set_members = members(value).unwrap_or_default();
            writes.push(Op::SetAdd {
                key: dest,
                members: set_members,
            });
        }
        // A hash: one HSET of every field.
        Value::Hash(h) if !h.is_empty() => {
            let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 2 * h.len());
            args.push(b"HSET");
            for (field, v) in h.iter() {
                args.push(&field[..]);
                args.push(&v[..]);
            }
            writes.push(Op::Hash { key: dest, args });
        }
        // A sorted set: one ZADD of every member (a score prints as the shortest decimal
        // that reads back as the same number).
        Value::SortedSet(z) if !z.is_empty() => {
            scores = z.iter().map(|(_, score)| score.to_string()).collect();
            let mut args: Vec<&[u8]> = Vec::with_capacity(1 + 2 * z.len());
            args.push(b"ZADD");
            for ((member, _), score) in z.iter().zip(&scores) {
                args.push(score.as_bytes());
                args.push(&member[..]);
            }
            writes.push(Op::Zset { key: dest, args });
        }
        // A list: one RPUSH of its elements, in order.
        Value::List(l) if !l.is_empty() => writes.push(Op::List {
            key: dest,
            op: ListOp::Push {
                values: l.values().map(|v| &v[..]).collect(),
                front: false,
                if_exists: false,
            },
        }),
        Value::Hash(_) | Value::SortedSet(_) | Value::List(_) => {
            // An emptied collection does not exist, as in Redis.
            return if copy { int(0) } else { err("ERR no such key") };
        }
        other => {
            return err(&format!(
                "ERR {} of a {} key is not supported",
                if copy { "COPY" } else { "RENAME" },
                redis_type_name(other.lattice_type())
            ))
        }
    }
    if let Some(at) = deadline {
        writes.push(Op::Expire {
            key: dest,
            deadline: Deadline::At(at),
            when: ExpireWhen::Always,
        });
    }
    if !copy {
        writes.push(Op::Delete { key: src });
    }
    // Quiet parts: the command's own events follow, as Redis names them.
    let quiet = Ack {
        quiet: true,
        ..Ack::MERGED
    };
    let results = w.submit(writes, quiet, Routing::Forward).results().await;
    if let Some(OpResult::Error(e)) = results.iter().find(|r| matches!(r, OpResult::Error(_))) {
        return err(&e.resp_message());
    }
    let events: &[(&'static str, &[u8])] = if copy {
        &[("copy_to", dest)]
    } else {
        &[("rename_from", src), ("rename_to", dest)]
    };
    crate::pubsub::events::publish_command(w, crate::notify::GENERIC, events);
    match (copy, nx) {
        (false, false) => ready(|o| resp::simple(o, "OK")),
        _ => int(1),
    }
}
