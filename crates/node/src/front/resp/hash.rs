//! Redis hash commands: `HSET`, `HMSET`, `HSETNX`, `HGET`, `HMGET`, `HGETALL`, `HDEL`,
//! `HEXISTS`, `HLEN`, `HKEYS`, `HVALS`, `HSTRLEN`, `HINCRBY`, `HINCRBYFLOAT`,
//! `HRANDFIELD`, `HSCAN`.
//!
//! Each is one [`Op::Hash`] carrying the command's arguments, run at the key's worker
//! (`shard::hash`); the arguments are checked here first, so a bad one gets Redis's error
//! before anything is sent.

use super::coll_reply::CollReply;
use super::commands::{arity_error, Cmd, Plan};
use super::reply::{err, Shape};
use crate::op::Op;
use crate::shard::{parse_hash, HashCmd};

/// The plan of hash command `name` (upper case), or `None` if it is not one.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    let coll = |c| Shape::Coll(c);
    let mut shape = match name {
        b"HSET" | b"HSETNX" | b"HDEL" | b"HEXISTS" | b"HLEN" | b"HSTRLEN" | b"HINCRBY" => {
            Shape::Int
        }
        b"HMSET" => Shape::Ok,
        b"HGET" | b"HINCRBYFLOAT" | b"HRANDFIELD" => coll(CollReply::Item),
        b"HMGET" | b"HKEYS" | b"HVALS" => coll(CollReply::Array),
        b"HGETALL" => coll(CollReply::Map),
        b"HSCAN" => coll(CollReply::Scan),
        _ => return None,
    };
    if cmd.len() < 2 {
        return Some(Plan::Reply(arity_error(cmd)));
    }
    let rest: Vec<&[u8]> = (2..cmd.len()).map(|i| cmd.arg(i)).collect();
    match parse_hash(name, &rest) {
        Err(e) => return Some(Plan::Reply(err(&format!("ERR {e}")))),
        Ok(HashCmd::RandField {
            count: Some(_),
            with_values,
        }) => {
            shape = coll(if with_values {
                CollReply::Pairs
            } else {
                CollReply::Array
            })
        }
        Ok(_) => {}
    }
    let mut args = Vec::with_capacity(rest.len() + 1);
    args.push(cmd.arg(0));
    args.extend(rest);
    Some(Plan::One(
        shape,
        Op::Hash {
            key: cmd.arg(1),
            args,
        },
    ))
}
