//! Redis sorted-set commands: `ZADD`, `ZINCRBY`, `ZSCORE`, `ZMSCORE`, `ZREM`, `ZCARD`,
//! `ZCOUNT`, `ZLEXCOUNT`, `ZRANK`, `ZREVRANK`, `ZRANGE` (rank, `BYSCORE`, `BYLEX`, `REV`,
//! `LIMIT`, `WITHSCORES`), `ZRANGEBYSCORE`, `ZREVRANGEBYSCORE`, `ZRANGEBYLEX`,
//! `ZREVRANGEBYLEX`, `ZREVRANGE`, `ZPOPMIN`, `ZPOPMAX`, `ZREMRANGEBYRANK`,
//! `ZREMRANGEBYSCORE`, `ZREMRANGEBYLEX`, `ZSCAN`.
//!
//! Each is one [`Op::Zset`] carrying the command's arguments, run at the key's worker
//! (`shard::zset`); the arguments are checked here first.

use super::coll_reply::CollReply;
use super::commands::{arity_error, Cmd, Plan};
use super::reply::{err, Shape};
use crate::op::Op;
use crate::shard::{parse_zset, ZsetCmd};

const NAMES: [&[u8]; 22] = [
    b"ZADD",
    b"ZINCRBY",
    b"ZSCORE",
    b"ZMSCORE",
    b"ZREM",
    b"ZCARD",
    b"ZCOUNT",
    b"ZLEXCOUNT",
    b"ZRANK",
    b"ZREVRANK",
    b"ZRANGE",
    b"ZREVRANGE",
    b"ZRANGEBYSCORE",
    b"ZREVRANGEBYSCORE",
    b"ZRANGEBYLEX",
    b"ZREVRANGEBYLEX",
    b"ZPOPMIN",
    b"ZPOPMAX",
    b"ZREMRANGEBYRANK",
    b"ZREMRANGEBYSCORE",
    b"ZREMRANGEBYLEX",
    b"ZSCAN",
];

/// The plan of sorted-set command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    if !NAMES.contains(&name) {
        return None;
    }
    if cmd.len() < 2 {
        return Some(Plan::Reply(arity_error(cmd)));
    }
    let rest: Vec<&[u8]> = (2..cmd.len()).map(|i| cmd.arg(i)).collect();
    let parsed = match parse_zset(name, &rest) {
        Ok(p) => p,
        Err(e) => return Some(Plan::Reply(err(&format!("ERR {e}")))),
    };
    let coll = Shape::Coll;
    let shape = match parsed {
        ZsetCmd::Add { flags, .. } if flags.incr => coll(CollReply::Item),
        ZsetCmd::Add { .. }
        | ZsetCmd::Rem(_)
        | ZsetCmd::Card
        | ZsetCmd::Count(_)
        | ZsetCmd::RemRange(_) => Shape::Int,
        ZsetCmd::Score(_) | ZsetCmd::Rank(..) => coll(CollReply::Item),
        ZsetCmd::MScore(_) => coll(CollReply::Array),
        ZsetCmd::Range(r) if r.withscores => coll(CollReply::Scored { nested: true }),
        ZsetCmd::Range(_) => coll(CollReply::Array),
        ZsetCmd::Pop { count, .. } => coll(CollReply::Scored {
            nested: count.is_some(),
        }),
        ZsetCmd::Scan(_) => coll(CollReply::Scan),
    };
    let mut args = Vec::with_capacity(rest.len() + 1);
    args.push(cmd.arg(0));
    args.extend(rest);
    Some(Plan::One(
        shape,
        Op::Zset {
            key: cmd.arg(1),
            args,
        },
    ))
}
