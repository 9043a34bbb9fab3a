//! List commands: `LPUSH`, `RPUSH`, `LPUSHX`, `RPUSHX`, `LPOP`, `RPOP`, `LRANGE`, `LLEN`,
//! `LINDEX`, `LSET`, `LREM`, `LTRIM`, `LINSERT`, `LPOS`, `LMOVE`, `RPOPLPUSH`, and the blocking
//! `BLPOP`, `BRPOP`, `BLMOVE`, `BRPOPLPUSH`.
//!
//! Each command is one [`ListOp`] run at the key's worker (`shard::lists`). `LMOVE`'s keys
//! must share a worker (`-CROSSSLOT` otherwise, nothing moved).
//!
//! Blocking pops: `blocking`.

use std::time::Duration;

use lattice::Value;
use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, syntax_error, Cmd, Plan};
use super::reply::{err, Shape};
use crate::list_op::ListOp;
use crate::op::{Op, OpResult};

/// Longest timeout honoured (longer ones wait this long).
const MAX_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How a list reply is encoded.
#[derive(Debug)]
pub(crate) enum ListShape {
    /// An array of elements (`LRANGE`, pops with a count); a null array if absent.
    Items,
    /// `[key, element]` (`BLPOP` inside `MULTI`), or a null array.
    KeyItem(Vec<u8>),
    /// `LPOS` without `COUNT`: an integer, or null.
    Index,
    /// `LPOS … COUNT`: an array of integers.
    Indexes,
}

pub(super) fn bulk_of(r: &OpResult) -> Option<&[u8]> {
    match r {
        OpResult::Value(Some(Value::Lww(l))) => Some(&l.value),
        _ => None,
    }
}

/// Encodes a list reply.
pub(super) fn encode(out: &mut Vec<u8>, v: Version, shape: &ListShape, first: Option<&OpResult>) {
    match (shape, first) {
        (ListShape::Items, Some(OpResult::Multi(items))) => {
            resp::array_header(out, items.len());
            for i in items {
                resp::bulk(out, bulk_of(i).unwrap_or_default());
            }
        }
        (ListShape::KeyItem(key), Some(r)) if bulk_of(r).is_some() => {
            resp::array_header(out, 2);
            resp::bulk(out, key);
            resp::bulk(out, bulk_of(r).unwrap_or_default());
        }
        (ListShape::Index, Some(OpResult::Int(i))) => resp::integer(out, *i),
        (ListShape::Index, _) => resp::null(out, v),
        (ListShape::Indexes, Some(OpResult::Multi(items))) => {
            resp::array_header(out, items.len());
            for i in items {
                resp::integer(out, if let OpResult::Int(n) = i { *n } else { 0 });
            }
        }
        (ListShape::Indexes, _) => resp::array_header(out, 0),
        _ => resp::null_array(out, v),
    }
}

const NOT_INT: &str = "ERR value is not an integer or out of range";

fn side(b: &[u8]) -> Option<bool> {
    if b.eq_ignore_ascii_case(b"LEFT") {
        Some(true)
    } else if b.eq_ignore_ascii_case(b"RIGHT") {
        Some(false)
    } else {
        None
    }
}

fn list<'a>(shape: Shape, key: &'a [u8], op: ListOp<&'a [u8]>) -> Plan<'a> {
    Plan::One(shape, Op::List { key, op })
}

/// The plan of list command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    let argc = cmd.len();
    let arity = || Some(Plan::Reply(arity_error(cmd)));
    let key = cmd.arg(1);
    let int = |i: usize| parse_i64(cmd.arg(i));
    Some(match name {
        b"LPUSH" | b"RPUSH" | b"LPUSHX" | b"RPUSHX" => {
            if argc < 3 {
                return arity();
            }
            let op = ListOp::Push {
                values: (2..argc).map(|i| cmd.arg(i)).collect(),
                front: name[0] == b'L',
                if_exists: name.len() == 6,
            };
            list(Shape::Int, key, op)
        }
        b"LPOP" | b"RPOP" => {
            if !(2..=3).contains(&argc) {
                return arity();
            }
            let front = name[0] == b'L';
            if argc == 2 {
                return Some(list(Shape::Get, key, ListOp::Pop { front, count: None }));
            }
            match int(2).and_then(|c| u64::try_from(c).ok()) {
                None => Plan::Reply(err("ERR value is out of range, must be positive")),
                Some(c) => list(
                    Shape::List(ListShape::Items),
                    key,
                    ListOp::Pop {
                        front,
                        count: Some(c),
                    },
                ),
            }
        }
        b"LRANGE" | b"LTRIM" => {
            if argc != 4 {
                return arity();
            }
            let (Some(start), Some(stop)) = (int(2), int(3)) else {
                return Some(Plan::Reply(err(NOT_INT)));
            };
            if name == b"LRANGE" {
                list(
                    Shape::List(ListShape::Items),
                    key,
                    ListOp::Range { start, stop },
                )
            } else {
                list(Shape::Ok, key, ListOp::Trim { start, stop })
            }
        }
        b"LLEN" => {
            if argc != 2 {
                return arity();
            }
            list(Shape::Int, key, ListOp::Len)
        }
        b"LINDEX" => {
            if argc != 3 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(index) => list(Shape::Get, key, ListOp::Index { index }),
            }
        }
        b"LSET" => {
            if argc != 4 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(index) => list(
                    Shape::Ok,
                    key,
                    ListOp::Set {
                        index,
                        value: cmd.arg(3),
                    },
                ),
            }
        }
        b"LREM" => {
            if argc != 4 {
                return arity();
            }
            match int(2) {
                None => Plan::Reply(err(NOT_INT)),
                Some(count) => list(
                    Shape::Int,
                    key,
                    ListOp::Rem {
                        count,
                        value: cmd.arg(3),
                    },
                ),
            }
        }
        b"LPOS" => {
            if argc < 3 || argc.is_multiple_of(2) {
                return if argc < 3 {
                    arity()
                } else {
                    Some(Plan::Reply(syntax_error()))
                };
            }
            let (mut rank, mut count, mut maxlen) = (1i64, None, 0u64);
            for i in (3..argc).step_by(2) {
                let opt = cmd.arg(i);
                let Some(n) = int(i + 1) else {
                    return Some(Plan::Reply(err(NOT_INT)));
                };
                if opt.eq_ignore_ascii_case(b"RANK") {
                    if n == 0 || n == i64::MIN {
                        return Some(Plan::Reply(err(
                            "ERR RANK can't be zero: use 1 to start from the first match, 2 \
                             from the second ... or use negative to start from the end of the \
                             list",
                        )));
                    }
                    rank = n;
                } else if opt.eq_ignore_ascii_case(b"COUNT") {
                    let Ok(c) = u64::try_from(n) else {
                        return Some(Plan::Reply(err("ERR COUNT can't be negative")));
                    };
                    count = Some(c);
                } else if opt.eq_ignore_ascii_case(b"MAXLEN") {
                    let Ok(m) = u64::try_from(n) else {
                        return Some(Plan::Reply(err("ERR MAXLEN can't be negative")));
                    };
                    maxlen = m;
                } else {
                    return Some(Plan::Reply(syntax_error()));
                }
            }
            let shape = if count.is_some() {
                ListShape::Indexes
            } else {
                ListShape::Index
            };
            let op = ListOp::Pos {
                value: cmd.arg(2),
                rank,
                count,
                maxlen,
            };
            list(Shape::List(shape), key, op)
        }
        b"LINSERT" => {
            if argc != 5 {
                return arity();
            }
            let where_ = cmd.arg(2);
            let after = if where_.eq_ignore_ascii_case(b"AFTER") {
                true
            } else if where_.eq_ignore_ascii_case(b"BEFORE") {
                false
            } else {
                return Some(Plan::Reply(syntax_error()));
            };
            let op = ListOp::Insert {
                after,
                pivot: cmd.arg(3),
                value: cmd.arg(4),
            };
            list(Shape::Int, key, op)
        }
        b"LMOVE" | b"BLMOVE" => {
            if argc != if name == b"LMOVE" { 5 } else { 6 } {
                return arity();
            }
            let (Some(from_front), Some(to_front)) = (side(cmd.arg(3)), side(cmd.arg(4))) else {
                return Some(Plan::Reply(syntax_error()));
            };
            if name == b"BLMOVE" {
                if let Err(e) = timeout(cmd.arg(5)) {
                    return Some(Plan::Reply(e));
                }
            }
            let op = ListOp::Move {
                dest: cmd.arg(2),
                from_front,
                to_front,
            };
            list(Shape::Get, key, op)
        }
        b"RPOPLPUSH" | b"BRPOPLPUSH" => {
            if argc != if name == b"RPOPLPUSH" { 3 } else { 4 } {
                return arity();
            }
            if name == b"BRPOPLPUSH" {
                if let Err(e) = timeout(cmd.arg(3)) {
                    return Some(Plan::Reply(e));
                }
            }
            let op = ListOp::Move {
                dest: cmd.arg(2),
                from_front: false,
                to_front: true,
            };
            list(Shape::Get, key, op)
        }
        // Inside MULTI (outside, `blocking` runs them): the non-blocking pop.
        b"BLPOP" | b"BRPOP" => {
            if argc < 3 {
                return arity();
            }
            if let Err(e) = timeout(cmd.arg(argc - 1)) {
                return Some(Plan::Reply(e));
            }
            if argc > 3 {
                return Some(Plan::Reply(err(
                    "ERR BLPOP/BRPOP with several keys inside MULTI is not supported by \
                     latticekv (the keys may be on different workers): use one key",
                )));
            }
            let op = ListOp::Pop {
                front: name[1] == b'L',
                count: None,
            };
            list(Shape::List(ListShape::KeyItem(key.to_vec())), key, op)
        }
        _ => return None,
    })
}

/// A blocking command's timeout: `None` waits forever.
pub(super) fn timeout(arg: &[u8]) -> Result<Option<Duration>, Vec<u8>> {
    let secs = std::str::from_utf8(arg)
        .ok()
        .filter(|s| !s.is_empty() && s.trim() == *s)
        .and_then(|s| s.parse::<f64>().ok())
        .filter(|x| x.is_finite())
        .ok_or_else(|| err("ERR timeout is not a float or out of range"))?;
    if secs < 0.0 {
        return Err(err("ERR timeout is negative"));
    }
    if secs == 0.0 {
        return Ok(None);
    }
    Ok(Some(Duration::from_secs_f64(secs).min(MAX_TIMEOUT)))
}
