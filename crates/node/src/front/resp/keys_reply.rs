//! Reply shapes of the keys, server and set commands (`keys`, `sets`): how their op
//! results become RESP replies. Kept apart from `reply` (which only dispatches here) so
//! neither imports the other's family.

use lattice::{LatticeType, Value};
use wire::resp::{self, Version};

use crate::error::NodeError;
use crate::glob;
use crate::op::OpResult;

/// Most elements `SRANDMEMBER` with a count answers (its reply is built in memory).
pub(crate) const MAX_RANDOM_MEMBERS: u64 = 1 << 20;

/// `SINTER`, `SUNION`, `SDIFF`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Algebra {
    /// Members of every set.
    Inter,
    /// Members of any set.
    Union,
    /// Members of the first set and of no other.
    Diff,
}

/// How the results of a keys, server or set command become its reply.
#[derive(Debug)]
pub(crate) enum KeyShape {
    /// `SINTER`/`SUNION`/`SDIFF` of the sets read (one `Get` per key): a set.
    Algebra(Algebra),
    /// `SINTERCARD … [LIMIT n]`: the intersection's size, at most `n` (0: no limit).
    InterCard(u64),
    /// `SMISMEMBER key m…`: 1 or 0 per member.
    MisMember(Vec<Vec<u8>>),
    /// `SRANDMEMBER key [count]`.
    RandMember(Option<i64>),
    /// `SSCAN key 0 [MATCH p]`: every member in one page (cursor 0), as Redis answers for
    /// small sets.
    SScan(Option<Vec<u8>>),
    /// `SPOP key [count]`: with a count an array, else one bulk string or null.
    Pop(bool),
    /// `OBJECT ENCODING key`.
    Encoding,
    /// `MEMORY USAGE key`: an estimate, bytes (the key's length is added).
    MemoryUsage(usize),
    /// `EXPIRETIME` (seconds) / `PEXPIRETIME` (ms): the absolute deadline, -1, -2.
    ExpireTime(bool),
    /// `OBJECT REFCOUNT/IDLETIME` from an `Exists`: this integer, or null if missing.
    IfExists(i64),
}

/// The members of a set value, or WRONGTYPE.
pub(crate) fn members(value: &Value) -> Result<Vec<&[u8]>, NodeError> {
    Ok(match value {
        Value::OrSet(s) => s.iter().map(|m| &m[..]).collect(),
        Value::Set(s) => s.iter().map(|m| &m[..]).collect(),
        Value::OrderedSet(s) => s.iter().map(|m| &m[..]).collect(),
        other => return Err(NodeError::wrong_type("a set", other.lattice_type())),
    })
}

/// The members of each set read (absent keys are empty sets), or the first error.
pub(crate) fn sets_of(results: &[OpResult]) -> Result<Vec<Vec<&[u8]>>, NodeError> {
    results
        .iter()
        .map(|r| match r {
            OpResult::Value(Some(v)) => members(v),
            OpResult::Error(e) => Err(e.clone()),
            _ => Ok(Vec::new()),
        })
        .collect()
}

/// `SINTER`/`SUNION`/`SDIFF` of `sets`, sorted (deterministic replies).
pub(crate) fn algebra<'a>(op: Algebra, sets: &[Vec<&'a [u8]>]) -> Vec<&'a [u8]> {
    use std::collections::BTreeSet;
    let Some((first, rest)) = sets.split_first() else {
        return Vec::new();
    };
    let mut acc: BTreeSet<&[u8]> = first.iter().copied().collect();
    for s in rest {
        let other: BTreeSet<&[u8]> = s.iter().copied().collect();
        match op {
            Algebra::Inter => acc.retain(|m| other.contains(m)),
            Algebra::Union => acc.extend(other),
            Algebra::Diff => acc.retain(|m| !other.contains(m)),
        }
    }
    acc.into_iter().collect()
}

fn error(out: &mut Vec<u8>, e: &NodeError) {
    resp::error(out, &e.resp_message());
}

fn first_value(results: &[OpResult]) -> Option<&Value> {
    match results.first() {
        Some(OpResult::Value(Some(v))) => Some(v),
        _ => None,
    }
}

/// Encodes `results` as `shape` says (errors were handled by the caller).
pub(crate) fn encode(out: &mut Vec<u8>, v: Version, shape: &KeyShape, results: &[OpResult]) {
    match shape {
        KeyShape::Algebra(op) => match sets_of(results) {
            Ok(sets) => {
                let m = algebra(*op, &sets);
                resp::set_header(out, m.len(), v);
                m.iter().for_each(|x| resp::bulk(out, x));
            }
            Err(e) => error(out, &e),
        },
        KeyShape::InterCard(limit) => match sets_of(results) {
            Ok(sets) => {
                let n = algebra(Algebra::Inter, &sets).len() as u64;
                let n = if *limit > 0 { n.min(*limit) } else { n };
                resp::integer(out, n as i64)
            }
            Err(e) => error(out, &e),
        },
        KeyShape::MisMember(asked) => {
            let found = match first_value(results).map(members).transpose() {
                Ok(m) => m.unwrap_or_default(),
                Err(e) => return error(out, &e),
            };
            resp::array_header(out, asked.len());
            for m in asked {
                resp::integer(out, i64::from(found.contains(&&m[..])));
            }
        }
        KeyShape::RandMember(count) => {
            let found = match first_value(results).map(members).transpose() {
                Ok(m) => m.unwrap_or_default(),
                Err(e) => return error(out, &e),
            };
            random_members(out, v, &found, *count)
        }
        KeyShape::SScan(pattern) => {
            let found = match first_value(results).map(members).transpose() {
                Ok(m) => m.unwrap_or_default(),
                Err(e) => return error(out, &e),
            };
            let listed: Vec<&[u8]> = found
                .into_iter()
                .filter(|m| pattern.as_ref().is_none_or(|p| glob::matches_key(p, m)))
                .collect();
            resp::array_header(out, 2);
            resp::bulk(out, b"0");
            resp::array_header(out, listed.len());
            listed.iter().for_each(|m| resp::bulk(out, m));
        }
        KeyShape::Pop(with_count) => {
            let popped = match first_value(results).map(members).transpose() {
                Ok(m) => m.unwrap_or_default(),
                Err(e) => return error(out, &e),
            };
            if *with_count {
                resp::array_header(out, popped.len());
                popped.iter().for_each(|m| resp::bulk(out, m));
            } else {
                match popped.first() {
                    Some(m) => resp::bulk(out, m),
                    None => resp::null(out, v),
                }
            }
        }
        KeyShape::Encoding => match first_value(results) {
            Some(value) => resp::bulk(out, encoding(value).as_bytes()),
            None => resp::null(out, v),
        },
        KeyShape::MemoryUsage(key_len) => match first_value(results) {
            Some(value) => resp::integer(out, (estimate(value) + key_len + 56) as i64),
            None => resp::null(out, v),
        },
        KeyShape::IfExists(n) => match results.first() {
            Some(OpResult::Int(1)) => resp::integer(out, *n),
            _ => resp::null(out, v),
        },
        KeyShape::ExpireTime(seconds) => match results.first() {
            Some(OpResult::Int(at)) if *at >= 0 && *seconds => resp::integer(out, at / 1000),
            Some(OpResult::Int(n)) => resp::integer(out, *n),
            _ => resp::integer(out, -2),
        },
    }
}

/// `SRANDMEMBER`'s reply: one member (or null), `count` distinct ones, or with a negative
/// count `|count|` drawn with repetition.
fn random_members(out: &mut Vec<u8>, v: Version, found: &[&[u8]], count: Option<i64>) {
    let Some(count) = count else {
        return match found.get(fastrand::usize(..found.len().max(1))) {
            Some(m) => resp::bulk(out, m),
            None => resp::null(out, v),
        };
    };
    if count >= 0 {
        let take = usize::try_from(count)
            .unwrap_or(usize::MAX)
            .min(found.len());
        let mut picked: Vec<&[u8]> = found.to_vec();
        for i in 0..take {
            let j = fastrand::usize(i..picked.len());
            picked.swap(i, j);
        }
        picked.truncate(take);
        resp::array_header(out, take);
        picked.iter().for_each(|m| resp::bulk(out, m));
    } else {
        let n = if found.is_empty() {
            0
        } else {
            count.unsigned_abs() as usize
        };
        resp::array_header(out, n);
        for _ in 0..n {
            resp::bulk(out, found[fastrand::usize(..found.len())]);
        }
    }
}

/// The encoding Redis 7.2 would report for a value of this size: strings `int` /
/// `embstr` (≤ 44 bytes) / `raw`, sets `intset` / `listpack` / `hashtable` by Redis's
/// default thresholds; other types by their type's usual large encoding.
fn encoding(value: &Value) -> &'static str {
    match value {
        Value::Lww(l) => {
            if l.value.len() <= 20 && crate::shard::parse_strict_i64(&l.value).is_some() {
                "int"
            } else if l.value.len() <= 44 {
                "embstr"
            } else {
                "raw"
            }
        }
        Value::Counter(_) => "int",
        Value::OrSet(_) | Value::Set(_) | Value::OrderedSet(_) => {
            let m = members(value).unwrap_or_default();
            if m.len() <= 512
                && m.iter()
                    .all(|x| crate::shard::parse_strict_i64(x).is_some())
            {
                "intset"
            } else if m.len() <= 128 && m.iter().all(|x| x.len() <= 64) {
                "listpack"
            } else {
                "hashtable"
            }
        }
        other => match other.lattice_type() {
            LatticeType::Map => "hashtable",
            t if t.name().contains("list") => "quicklist",
            t if t.name().contains("sorted") => "skiplist",
            _ => "hashtable",
        },
    }
}

/// Approximate bytes of a value (`MEMORY USAGE`).
fn estimate(value: &Value) -> usize {
    match value {
        Value::Lww(l) => l.value.len() + 16,
        Value::Counter(_) => 24,
        other => match members(other) {
            Ok(m) => m.iter().map(|x| x.len() + 24).sum::<usize>() + 32,
            Err(_) => 64,
        },
    }
}
