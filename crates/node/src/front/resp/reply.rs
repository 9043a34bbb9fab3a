//! RESP replies: how a command's op results are encoded, and the error replies.

use lattice::{LatticeType, Value};
use store::RecordRef;
use wire::resp::{self, Version};

use crate::error::NodeError;
use crate::op::OpResult;

/// How a command's op results become its reply.
#[derive(Debug)]
pub(crate) enum Shape {
    /// GET: bulk string, or null.
    Get,
    /// SET: +OK if written, null if the NX/XX condition failed.
    Set,
    /// SET … GET: the old value (bulk or null), then the write's outcome is not reported.
    SetGet,
    /// An integer reply from the single result.
    Int,
    /// The sum of all integer results (DEL, EXISTS with several keys).
    Sum,
    /// MGET: an array of bulk strings or nulls (values of other types read as null).
    MultiGet,
    /// +OK unless some op failed (MSET).
    Ok,
    /// SMEMBERS: a set of members.
    Members,
    /// TYPE: a simple string.
    Type,
    /// STRLEN: the length of the string (a counter's decimal form), 0 if absent.
    StrLen,
    /// GETRANGE start end: those bytes of the string.
    Range(i64, i64),
    /// MSETNX: 1 if the unit ran, 0 if a guard failed.
    AllOrNone,
    /// TTL: PTTL's ms as seconds, rounded as Redis does (negative codes kept).
    TtlSeconds,
    // ---- lists (helper B) ----
    /// A list reply (`lists`).
    List(super::lists::ListShape),
    // Redis hashes and sorted sets.
    /// A hash or sorted-set reply from its items (`coll_reply`).
    Coll(super::coll_reply::CollReply),
    // ---- keys, server and sets ----
    /// The keys, server and set commands' shapes (`keys_reply`).
    Keys(super::keys_reply::KeyShape),
    /// A script's reply, encoded where it ran (`scripting`).
    Script,
}

/// An error reply.
pub(crate) fn err(msg: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(msg.len() + 3);
    resp::error(&mut out, msg);
    out
}

/// A reply built by `f`.
pub(crate) fn ready(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    f(&mut out);
    out
}

/// Encodes a GET reply straight from the stored record.
pub(crate) fn encode_get(
    out: &mut Vec<u8>,
    v: Version,
    record: Result<Option<RecordRef<'_>>, NodeError>,
) {
    match record {
        Err(e) => write_error(out, &e),
        Ok(None) => resp::null(out, v),
        Ok(Some(RecordRef::Lww { value, .. })) => resp::bulk(out, value),
        Ok(Some(RecordRef::Full(r))) => match &r.value {
            Some(Value::Lww(l)) => resp::bulk(out, &l.value),
            Some(Value::Counter(c)) => resp::bulk(out, c.value().to_string().as_bytes()),
            Some(other) => write_error(out, &NodeError::wrong_type("lww", other.lattice_type())),
            None => resp::null(out, v),
        },
    }
}

pub(crate) fn write_error(out: &mut Vec<u8>, e: &NodeError) {
    resp::error(out, &e.resp_message());
}

/// Encodes the results of a command's ops as its RESP reply.
pub(crate) fn encode(out: &mut Vec<u8>, v: Version, shape: &Shape, results: &[OpResult]) {
    // An error in any op is the command's reply (multi-key commands fail as a whole).
    if let Some(e) = results.iter().find_map(|r| match r {
        OpResult::Error(e) => Some(e),
        _ => None,
    }) {
        write_error(out, e);
        return;
    }
    let first = results.first();
    match shape {
        Shape::Script => match first {
            Some(OpResult::Reply(bytes)) => out.extend_from_slice(bytes),
            _ => resp::error(out, "ERR the script gave no reply"),
        },
        Shape::Get => match first {
            Some(OpResult::Value(Some(value))) => match value {
                Value::Lww(l) => resp::bulk(out, &l.value),
                Value::Counter(c) => resp::bulk(out, c.value().to_string().as_bytes()),
                other => write_error(out, &NodeError::wrong_type("lww", other.lattice_type())),
            },
            _ => resp::null(out, v),
        },
        Shape::Set => match first {
            Some(OpResult::Int(0)) => resp::null(out, v),
            _ => resp::simple(out, "OK"),
        },
        Shape::SetGet => match first {
            Some(OpResult::Value(Some(Value::Lww(l)))) => resp::bulk(out, &l.value),
            _ => resp::null(out, v),
        },
        Shape::Int => match first {
            Some(OpResult::Int(n)) => resp::integer(out, *n),
            _ => resp::integer(out, 0),
        },
        Shape::Sum => {
            let sum = results
                .iter()
                .map(|r| match r {
                    OpResult::Int(n) => *n,
                    _ => 0,
                })
                .sum();
            resp::integer(out, sum)
        }
        Shape::MultiGet => {
            resp::array_header(out, results.len());
            for r in results {
                match r {
                    OpResult::Value(Some(Value::Lww(l))) => resp::bulk(out, &l.value),
                    OpResult::Value(Some(Value::Counter(c))) => {
                        resp::bulk(out, c.value().to_string().as_bytes())
                    }
                    _ => resp::null(out, v),
                }
            }
        }
        Shape::Ok => resp::simple(out, "OK"),
        Shape::Members => match first {
            Some(OpResult::Value(Some(value))) => match value {
                Value::OrSet(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                Value::Set(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                Value::OrderedSet(s) => {
                    resp::set_header(out, s.len(), v);
                    for m in s.iter() {
                        resp::bulk(out, m);
                    }
                }
                other => write_error(out, &NodeError::wrong_type("a set", other.lattice_type())),
            },
            _ => resp::set_header(out, 0, v),
        },
        Shape::StrLen | Shape::Range(..) => {
            let s: Vec<u8> = match first {
                Some(OpResult::Value(Some(Value::Lww(l)))) => l.value.to_vec(),
                Some(OpResult::Value(Some(Value::Counter(c)))) => c.value().to_string().into(),
                Some(OpResult::Value(Some(other))) => {
                    return write_error(out, &NodeError::wrong_type("lww", other.lattice_type()))
                }
                _ => Vec::new(),
            };
            match shape {
                Shape::Range(start, end) => {
                    resp::bulk(out, super::strings::range(&s, *start, *end))
                }
                _ => resp::integer(out, s.len() as i64),
            }
        }
        Shape::TtlSeconds => match first {
            Some(OpResult::Int(ms)) if *ms >= 0 => resp::integer(out, (ms + 500) / 1000),
            Some(OpResult::Int(code)) => resp::integer(out, *code),
            _ => resp::integer(out, -2),
        },
        Shape::AllOrNone => match first {
            Some(OpResult::Multi(results)) => match results.iter().find_map(|r| match r {
                OpResult::Error(e) => Some(e),
                _ => None,
            }) {
                Some(e) => write_error(out, e),
                None => resp::integer(out, 1),
            },
            _ => resp::integer(out, 0),
        },
        // ---- lists (helper B) ----
        Shape::List(s) => super::lists::encode(out, v, s, first),
        Shape::Type => match first {
            Some(OpResult::Type(Some(t))) => resp::simple(out, redis_type_name(*t)),
            _ => resp::simple(out, "none"),
        },
        // Redis hashes and sorted sets.
        Shape::Coll(c) => super::coll_reply::encode(out, v, *c, first),
        // keys, server and sets
        Shape::Keys(k) => super::keys_reply::encode(out, v, k, results),
    }
}

/// The Redis type name of a lattice type (TYPE command): Redis's names where one fits.
pub(crate) fn redis_type_name(t: LatticeType) -> &'static str {
    match t {
        LatticeType::Lww | LatticeType::Counter => "string",
        LatticeType::OrSet | LatticeType::Set => "set",
        LatticeType::OrderedSet => "zset",
        LatticeType::Map => "hash",
        // Redis hashes and sorted sets.
        LatticeType::Hash => "hash",
        LatticeType::SortedSet => "zset",
        other => other.name(),
    }
}
