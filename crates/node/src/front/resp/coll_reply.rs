//! Replies of Redis hash and sorted-set commands, from the items their ops answer (see
//! `shard::coll`): byte strings, nils, integers, and scores (a `Priority` whose value is the
//! member), shaped per RESP version — maps, doubles and nested pairs in RESP3.

use lattice::Value;
use wire::resp::{self, Version};

use crate::op::OpResult;

/// How the items become the reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum CollReply {
    /// One item (`HGET`, `ZSCORE`, `ZADD … INCR`, `ZRANK`, `HRANDFIELD key`).
    Item,
    /// An array of items (`HMGET`, `HKEYS`, `ZRANGE`, `ZMSCORE`, `HRANDFIELD key n`).
    Array,
    /// Alternating fields and values as a map (`HGETALL`).
    Map,
    /// Alternating fields and values as pairs: nested in RESP3 (`HRANDFIELD … WITHVALUES`).
    Pairs,
    /// Scored members: member, score, … — in RESP3 nested pairs if `nested` (`ZRANGE …
    /// WITHSCORES`, `ZPOPMIN key n`), else flat with doubles (`ZPOPMIN key`).
    Scored {
        /// RESP3: one `[member, score]` array per member.
        nested: bool,
    },
    /// `HSCAN`/`ZSCAN`: the cursor, then the entries (scores as strings).
    Scan,
}

/// Encodes the op's `result` as `shape` says.
pub(crate) fn encode(out: &mut Vec<u8>, v: Version, shape: CollReply, result: Option<&OpResult>) {
    let items: &[OpResult] = match result {
        Some(OpResult::Multi(items)) => items,
        Some(one) => std::slice::from_ref(one),
        None => &[],
    };
    match shape {
        CollReply::Item => match result {
            Some(r) => item(out, v, r),
            None => resp::null(out, v),
        },
        CollReply::Array => {
            resp::array_header(out, items.len());
            for r in items {
                item(out, v, r);
            }
        }
        CollReply::Map => {
            resp::map_header(out, items.len() / 2, v);
            for r in items {
                item(out, v, r);
            }
        }
        CollReply::Pairs => {
            let nested = v == Version::Resp3;
            pairs_header(out, items.len() / 2, nested);
            for pair in items.chunks(2) {
                if nested {
                    resp::array_header(out, 2);
                }
                for r in pair {
                    item(out, v, r);
                }
            }
        }
        CollReply::Scored { nested } => {
            let nested = nested && v == Version::Resp3;
            pairs_header(out, items.len(), nested);
            for r in items {
                if nested {
                    resp::array_header(out, 2);
                }
                scored_pair(out, v, r);
            }
        }
        CollReply::Scan => {
            resp::array_header(out, 2);
            let (cursor, rest) = items
                .split_first()
                .map_or((None, items), |(c, r)| (Some(c), r));
            match cursor {
                Some(c) => item(out, v, c),
                None => resp::bulk(out, b"0"),
            }
            let flat: usize = rest.iter().map(|r| if is_scored(r) { 2 } else { 1 }).sum();
            resp::array_header(out, flat);
            for r in rest {
                // Scan replies carry scores as strings in both protocols.
                scored_pair(out, Version::Resp2, r);
            }
        }
    }
}

/// `n` pairs: `*n` of 2-arrays (nested) or `*2n` flat.
fn pairs_header(out: &mut Vec<u8>, n: usize, nested: bool) {
    resp::array_header(out, if nested { n } else { n * 2 });
}

fn is_scored(r: &OpResult) -> bool {
    matches!(r, OpResult::Value(Some(Value::Priority(_))))
}

/// A scored member as member, score; any other item as itself.
fn scored_pair(out: &mut Vec<u8>, v: Version, r: &OpResult) {
    match r {
        OpResult::Value(Some(Value::Priority(p))) => {
            resp::bulk(out, &p.value);
            resp::double(out, p.priority, v);
        }
        other => item(out, v, other),
    }
}

/// One item: a byte string, nil, an integer, or a score (a double).
fn item(out: &mut Vec<u8>, v: Version, r: &OpResult) {
    match r {
        OpResult::Value(Some(Value::Lww(l))) => resp::bulk(out, &l.value),
        OpResult::Value(Some(Value::Priority(p))) => resp::double(out, p.priority, v),
        OpResult::Int(n) => resp::integer(out, *n),
        OpResult::Error(e) => super::reply::write_error(out, e),
        _ => resp::null(out, v),
    }
}
