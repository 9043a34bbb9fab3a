//! RESP commands and their mapping onto lattice operations.
//!
//! | commands | lattice | notes |
//! |---|---|---|
//! | GET, SET [NX\|XX] \[GET\], MGET, MSET | `Lww` | timestamps from the worker's hybrid logical clock; GET also reads a `Counter` as its decimal value |
//! | INCR, INCRBY, DECR, DECRBY | `Counter` (PN), or `Lww` | a missing key becomes a counter; a string holding an integer is rewritten (`strings`) |
//! | SADD, SREM, SMEMBERS, SISMEMBER, SCARD | `OrSet` (add-wins) | SMEMBERS/SISMEMBER/SCARD also read grow-only and ordered sets |
//! | DEL, EXISTS, TYPE | any | DEL writes a tombstone |
//! | SETNX, GETSET, GETDEL, APPEND, STRLEN, GETRANGE, SETRANGE, INCRBYFLOAT, MSETNX | `Lww` | `strings`: read-modify-writes run as one op at the key's worker; MSETNX is one unit |
//! | SET … EX/PX/EXAT/PXAT/KEEPTTL, SETEX, PSETEX, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT, TTL, PTTL, PERSIST, GETEX | the record's `Expiry` (LWW) | `expiry`: absolute deadlines, any type; reclaimed in the background (`shard::expiry`) |
//! | EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, SCRIPT LOAD\|EXISTS\|FLUSH | — | `scripting`: Lua 5.1, one op on the worker holding the script's keys; FCALL / FUNCTION refused |
//! | LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LRANGE, LLEN, LINDEX, LSET, LREM, LTRIM, LINSERT, LPOS, LMOVE, RPOPLPUSH, BLPOP, BRPOP, BLMOVE, BRPOPLPUSH | `List` | `lists`: sequence CRDT; LMOVE's keys share a worker; blocking pops wait at the connection |
//! | MULTI, EXEC, DISCARD, WATCH, UNWATCH | — | `txn`: queued per connection; WATCH needs keys with one replica |
//! | HSET, HMSET, HSETNX, HGET, HMGET, HGETALL, HDEL, HEXISTS, HLEN, HKEYS, HVALS, HSTRLEN, HINCRBY, HINCRBYFLOAT, HRANDFIELD, HSCAN | `Hash` (field → LWW register, removals as tombstones) | `hash`: one `Op::Hash` per command, run at the key's worker (`shard::hash`) |
//! | ZADD [NX\|XX] [GT\|LT] \[CH\] \[INCR\], ZINCRBY, ZSCORE, ZMSCORE, ZREM, ZCARD, ZCOUNT, ZLEXCOUNT, ZRANK, ZREVRANK, ZRANGE [BYSCORE\|BYLEX] \[REV\] \[LIMIT\] \[WITHSCORES\], ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZREVRANGE, ZPOPMIN, ZPOPMAX, ZREMRANGEBYRANK, ZREMRANGEBYSCORE, ZREMRANGEBYLEX, ZSCAN | `SortedSet` (member → LWW score, removals as tombstones, order index) | `zset`: one `Op::Zset` per command (`shard::zset`) |
//! | SUBSCRIBE, UNSUBSCRIBE, PSUBSCRIBE, PUNSUBSCRIBE, SSUBSCRIBE, SUNSUBSCRIBE, PUBLISH, SPUBLISH, PUBSUB, RESET | — | `pubsub`: no lattice, messages are not stored; fan-out to every node ([`crate::pubsub`]) |
//! | PING, ECHO, HELLO, SELECT 0, QUIT, AUTH, ACL, CLIENT, COMMAND, CONFIG GET, INFO, DBSIZE, TIME, LASTSAVE, SAVE, BGSAVE, WAIT | — | connection and server commands (`server`, `info`, `acl`) |
//! | KEYS, SCAN, RANDOMKEY, FLUSHDB, FLUSHALL, RENAME, RENAMENX, COPY, TOUCH, OBJECT, MEMORY USAGE, EXPIRETIME, PEXPIRETIME | any | `keys`: listing asks every worker (primary replicas, hash order); SWAPDB/MOVE refused |
//! | SINTER, SUNION, SDIFF, *STORE, SINTERCARD, SMOVE, SPOP, SRANDMEMBER, SMISMEMBER, SSCAN | `OrSet` | `sets`: reads gather one `Get` per key; STORE/SMOVE write after reading |
//!
//! On a node with users, a connection must authenticate before anything but AUTH, HELLO
//! and QUIT (`-NOAUTH`); reads need the `read` permission, writes `write`, and every key
//! of a command must match the user's patterns (`-NOPERM`).
//!
//! A key's lattice type is fixed by its first write; a command for another type gets
//! `-WRONGTYPE` (unlike Redis, `SET` does not replace a set or a counter: `DEL` it first).
//! Multi-master behaviour of each family: docs/protocol.md.

use std::rc::Rc;

use wire::resp::{Args, Version};

use super::acl;
use super::expiry;
use super::pubsub;
// ---- lists (helper B) ----
use super::keys;
use super::reply::{encode, encode_get, err, Shape};
use super::server::{self, Server};
use super::sets;
use super::strings;
use super::txn;
use super::ConnState;
use super::{blocking, lists};
use super::{hash, zset};
use crate::ack::Ack;
use crate::auth::{AuthError, Permission, User};
use crate::core::Routing;
use crate::driver::worker::Worker;
use crate::front::pipeline::Replies;
use crate::op::{Condition, Op};

/// A command with its arguments, borrowed from the connection's read buffer.
#[derive(Clone, Copy)]
pub(super) struct Cmd<'a> {
    pub(super) buf: &'a [u8],
    pub(super) args: &'a Args,
}

impl<'a> Cmd<'a> {
    pub(super) fn len(&self) -> usize {
        self.args.len()
    }
    /// Argument `i` (empty if out of range; callers check `len` first).
    pub(super) fn arg(&self, i: usize) -> &'a [u8] {
        self.args.get(self.buf, i).unwrap_or_default()
    }
    pub(super) fn name_lower(&self) -> String {
        String::from_utf8_lossy(self.arg(0)).to_lowercase()
    }
}

pub(super) fn arity_error(cmd: &Cmd<'_>) -> Vec<u8> {
    err(&format!(
        "ERR wrong number of arguments for '{}' command",
        cmd.name_lower()
    ))
}

pub(super) fn syntax_error() -> Vec<u8> {
    err("ERR syntax error")
}

/// An integer argument, in the canonical form Redis accepts (no `+`, no leading zeros).
pub(super) fn parse_i64(b: &[u8]) -> Option<i64> {
    crate::shard::parse_strict_i64(b)
}

/// Upper-cases a command name into a fixed buffer (no allocation); `None` if too long to be
/// a command we know.
fn upper(name: &[u8]) -> Option<([u8; 16], usize)> {
    if name.len() > 16 {
        return None;
    }
    let mut buf = [0u8; 16];
    for (d, s) in buf.iter_mut().zip(name) {
        *d = s.to_ascii_uppercase();
    }
    Some((buf, name.len()))
}

/// What a command needs.
pub(super) enum Plan<'a> {
    /// GET: read one key (without copying the value when this worker holds it).
    Get(&'a [u8]),
    /// Run one op on the worker holding its key; encode the result with the shape.
    One(Shape, Op<&'a [u8]>),
    /// Run ops on the workers holding their keys; encode the results with the shape.
    Ops(Shape, Vec<Op<&'a [u8]>>),
    /// The reply is known.
    Reply(Vec<u8>),
    /// A server command.
    Server(Server),
    /// A script (`EVAL`): one op, owning its bytes (`EVALSHA` takes them from the cache).
    Script(Op<bytes::Bytes>),
}

/// Runs one command on `w`, queueing its reply.
pub(super) fn run(w: &Rc<Worker>, state: &mut ConnState, cmd: &Cmd<'_>, replies: &mut Replies) {
    let v = state.version;
    // RESP has no acknowledgement options: the node's default applies.
    let ack = Ack::MERGED;
    let user = match &state.user {
        Some(u) => Some(u.clone()),
        // AUTH, HELLO and QUIT check (or need no) authentication themselves.
        None if acl::allowed_before_auth(cmd.arg(0)) => None,
        None => return replies.emit(|o| o.extend_from_slice(&err(acl::NOAUTH))),
    };
    // Pub/sub (and RESP2's subscribed mode).
    if pubsub::intercept(w, state, cmd, user.as_deref(), replies) {
        return;
    }
    if txn::intercept(w, state, cmd, user.as_deref(), replies) {
        return;
    }
    // ---- lists (helper B) ----
    if blocking::blocking(w, state, cmd, user.as_deref(), replies) {
        return;
    }
    let plan = plan(cmd, state);
    if let Some(Err(e)) = user.map(|u| permit(&u, &plan)) {
        return replies.emit(|o| o.extend_from_slice(&acl::noperm(&e, cmd)));
    }
    match plan {
        Plan::Get(key) => {
            let local = w.read_local(key, |record| replies.emit(|o| encode_get(o, v, record)));
            if local.is_none() {
                submit(w, v, Shape::Get, vec![Op::Get { key }], ack, replies);
            }
        }
        Plan::One(shape, op) => match w.try_local(op, ack, Routing::Forward) {
            Ok(result) => replies.emit(|o| encode(o, v, &shape, std::slice::from_ref(&result))),
            Err(op) => submit(w, v, shape, vec![op], ack, replies),
        },
        Plan::Ops(shape, list) => submit(w, v, shape, list, ack, replies),
        Plan::Script(op) => {
            let answer = w.submit(vec![op], ack, Routing::Forward);
            replies.answer(answer, move |results, o| {
                encode(o, v, &Shape::Script, &results)
            });
        }
        Plan::Reply(bytes) | Plan::Server(Server::Reply(bytes)) => {
            replies.emit(|o| o.extend_from_slice(&bytes))
        }
        Plan::Server(what) => {
            let w = w.clone();
            replies.later(async move { server::ask_workers(&w, what, v).await });
        }
    }
}

/// Checks that `user` may run `plan`: reads need `read`, writes `write` (both for SET …
/// GET), DBSIZE `read`; every key must match the user's patterns.
pub(super) fn permit(user: &User, plan: &Plan<'_>) -> Result<(), AuthError> {
    let check_ops = |ops: &[Op<&[u8]>]| {
        if ops.iter().any(|o| !o.is_write()) {
            user.check(Permission::Read, [])?;
        }
        if ops.iter().any(|o| o.is_write()) {
            user.check(Permission::Write, [])?;
        }
        user.check_keys(ops.iter().flat_map(|o| o.keys()))
    };
    match plan {
        Plan::Get(key) => user.check(Permission::Read, [*key]),
        Plan::One(_, op) => check_ops(std::slice::from_ref(op)),
        Plan::Ops(_, ops) => check_ops(ops),
        Plan::Script(op) => {
            // The commands a script calls are not checked one by one: a user limited to
            // some keys may not run scripts.
            if !user.all_keys() {
                return Err(AuthError::Key {
                    user: user.name().to_string(),
                });
            }
            check_ops(&[Op::Get { key: op.key() }])?;
            if op.is_write() {
                user.check(Permission::Write, [])?;
            }
            Ok(())
        }
        Plan::Server(Server::DbSize) => user.check(Permission::Read, []),
        // A node-wide setting.
        Plan::Server(Server::Notify(..)) => user.check(Permission::Admin, []),
        // keys, server and sets
        Plan::Server(Server::Keys(job)) => {
            if matches!(job, keys::KeyJob::Flush) {
                user.check(Permission::Admin, [])?;
            }
            if job.keys().is_empty() && !user.all_keys() {
                // Listing would show keys outside the user's patterns.
                return Err(AuthError::Key {
                    user: user.name().to_string(),
                });
            }
            let need = if job.writes() {
                Permission::Write
            } else {
                Permission::Read
            };
            user.check(Permission::Read, [])?;
            user.check(need, [])?;
            user.check_keys(job.keys())
        }
        Plan::Server(Server::Sets(job)) => {
            user.check(Permission::Read, [])?;
            user.check(Permission::Write, [])?;
            user.check_keys(job.keys())
        }
        Plan::Reply(_) | Plan::Server(_) => Ok(()),
    }
}

/// Runs ops wherever their keys live; the reply is encoded once their results are known.
fn submit(
    w: &Rc<Worker>,
    v: Version,
    shape: Shape,
    list: Vec<Op<&[u8]>>,
    ack: Ack,
    replies: &mut Replies,
) {
    let answer = w.submit(list, ack, Routing::Forward);
    replies.answer(answer, move |results, o| encode(o, v, &shape, &results));
}

/// Decides what a command needs (no I/O, no waiting).
pub(super) fn plan<'a>(cmd: &Cmd<'a>, state: &mut ConnState) -> Plan<'a> {
    if let Some(p) = plan_data(cmd) {
        return p;
    }
    let Some((name, n)) = upper(cmd.arg(0)) else {
        return Plan::Reply(unknown(cmd));
    };
    if let Some(p) = super::scripting::plan(&name[..n], cmd, state) {
        return p;
    }
    match server::plan(&name[..n], cmd, state) {
        Some(s) => Plan::Server(s),
        None => Plan::Reply(unknown(cmd)),
    }
}

/// Plans a data command — one whose ops run on the workers holding its keys, or whose
/// reply is known at once; `None` for the others (connection, server and script commands).
pub(super) fn plan_data<'a>(cmd: &Cmd<'a>) -> Option<Plan<'a>> {
    use Plan::{Ops, Reply};
    let Some((name, n)) = upper(cmd.arg(0)) else {
        return Some(Reply(unknown(cmd)));
    };
    let argc = cmd.len();
    let cmd = *cmd;
    Some(match &name[..n] {
        b"GET" => {
            if argc != 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            Plan::Get(cmd.arg(1))
        }
        b"SET" => set(&cmd),
        b"DEL" | b"UNLINK" => {
            if argc < 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            if argc == 2 {
                return Some(Plan::One(Shape::Sum, Op::Delete { key: cmd.arg(1) }));
            }
            let list = (1..argc).map(|i| Op::Delete { key: cmd.arg(i) }).collect();
            Ops(Shape::Sum, list)
        }
        b"EXISTS" => {
            if argc < 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            if argc == 2 {
                return Some(Plan::One(Shape::Sum, Op::Exists { key: cmd.arg(1) }));
            }
            let list = (1..argc).map(|i| Op::Exists { key: cmd.arg(i) }).collect();
            Ops(Shape::Sum, list)
        }
        b"TYPE" => {
            if argc != 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            Plan::One(Shape::Type, Op::TypeOf { key: cmd.arg(1) })
        }
        b"MGET" => {
            if argc < 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            let list = (1..argc).map(|i| Op::Get { key: cmd.arg(i) }).collect();
            Ops(Shape::MultiGet, list)
        }
        b"MSET" => {
            if argc < 3 || argc.is_multiple_of(2) {
                return Some(Reply(arity_error(&cmd)));
            }
            let list = (1..argc)
                .step_by(2)
                .map(|i| Op::Assign {
                    key: cmd.arg(i),
                    value: cmd.arg(i + 1),
                    condition: Condition::Always,
                })
                .collect();
            Ops(Shape::Ok, list)
        }
        b"INCR" | b"DECR" => {
            if argc != 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            let delta = if &name[..n] == b"INCR" { 1 } else { -1 };
            Plan::One(
                Shape::Int,
                Op::IncrBy {
                    key: cmd.arg(1),
                    delta,
                },
            )
        }
        b"INCRBY" | b"DECRBY" => {
            if argc != 3 {
                return Some(Reply(arity_error(&cmd)));
            }
            let Some(by) = parse_i64(cmd.arg(2)) else {
                return Some(Reply(err("ERR value is not an integer or out of range")));
            };
            let delta = if &name[..n] == b"INCRBY" {
                Some(by)
            } else {
                by.checked_neg()
            };
            let Some(delta) = delta else {
                return Some(Reply(err("ERR decrement would overflow")));
            };
            Plan::One(
                Shape::Int,
                Op::IncrBy {
                    key: cmd.arg(1),
                    delta,
                },
            )
        }
        b"SADD" | b"SREM" => {
            if argc < 3 {
                return Some(Reply(arity_error(&cmd)));
            }
            let key = cmd.arg(1);
            let members = (2..argc).map(|i| cmd.arg(i)).collect();
            let o = if &name[..n] == b"SADD" {
                Op::SetAdd { key, members }
            } else {
                Op::SetRemove { key, members }
            };
            Plan::One(Shape::Int, o)
        }
        b"SMEMBERS" => {
            if argc != 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            Plan::One(Shape::Members, Op::Get { key: cmd.arg(1) })
        }
        b"SISMEMBER" => {
            if argc != 3 {
                return Some(Reply(arity_error(&cmd)));
            }
            let o = Op::SetContains {
                key: cmd.arg(1),
                member: cmd.arg(2),
            };
            Plan::One(Shape::Int, o)
        }
        b"SCARD" => {
            if argc != 2 {
                return Some(Reply(arity_error(&cmd)));
            }
            Plan::One(Shape::Int, Op::SetLen { key: cmd.arg(1) })
        }
        other => {
            if let Some(p) = strings::plan(other, &cmd) {
                return Some(p);
            }
            if let Some(p) = expiry::plan(other, &cmd) {
                return Some(p);
            }
            // ---- lists (helper B) ----
            if let Some(p) = lists::plan(other, &cmd) {
                return Some(p);
            }
            // Redis hashes and sorted sets.
            if let Some(p) = hash::plan(other, &cmd).or_else(|| zset::plan(other, &cmd)) {
                return Some(p);
            }
            // keys, server and sets
            match keys::plan(other, &cmd) {
                Some(keys::KeyPlan::Plan(p)) => return Some(p),
                Some(keys::KeyPlan::Job(j)) => return Some(Plan::Server(Server::Keys(j))),
                None => {}
            }
            return match sets::plan(other, &cmd) {
                Some(sets::SetPlan::Plan(p)) => Some(p),
                Some(sets::SetPlan::Job(j)) => Some(Plan::Server(Server::Sets(j))),
                None => None,
            };
        }
    })
}

/// Redis's stream commands: not built, so refused naming what to use instead.
const STREAM_COMMANDS: [&str; 15] = [
    "XADD",
    "XRANGE",
    "XREVRANGE",
    "XLEN",
    "XREAD",
    "XREADGROUP",
    "XGROUP",
    "XACK",
    "XCLAIM",
    "XAUTOCLAIM",
    "XDEL",
    "XTRIM",
    "XINFO",
    "XPENDING",
    "XSETID",
];

/// The reply to a command latticekv does not implement (also at queue time in `MULTI`,
/// where it aborts the transaction as Redis does): streams get the alternatives named.
pub(super) fn unknown(cmd: &Cmd<'_>) -> Vec<u8> {
    let name = cmd.arg(0);
    if STREAM_COMMANDS
        .iter()
        .any(|c| c.as_bytes().eq_ignore_ascii_case(name))
    {
        return err(
            "ERR streams are not supported by latticekv: use lists (LPUSH with BLMOVE or \
             BRPOP) for queues, PUBLISH/SUBSCRIBE for fan-out; see docs/protocol.md",
        );
    }
    let mut msg = format!(
        "ERR unknown command '{}', with args beginning with: ",
        String::from_utf8_lossy(cmd.arg(0))
    );
    for i in 1..cmd.len().min(4) {
        msg.push('\'');
        msg.push_str(&String::from_utf8_lossy(cmd.arg(i)));
        msg.push_str("' ");
    }
    err(&msg)
}

fn set<'a>(cmd: &Cmd<'a>) -> Plan<'a> {
    if cmd.len() < 3 {
        return Plan::Reply(arity_error(cmd));
    }
    let mut condition = Condition::Always;
    let mut get = false;
    let mut deadline = None;
    let mut i = 3;
    while i < cmd.len() {
        let opt = cmd.arg(i);
        if opt.eq_ignore_ascii_case(b"NX") && condition == Condition::Always {
            condition = Condition::IfAbsent;
        } else if opt.eq_ignore_ascii_case(b"XX") && condition == Condition::Always {
            condition = Condition::IfPresent;
        } else if opt.eq_ignore_ascii_case(b"GET") {
            get = true;
        } else if opt.eq_ignore_ascii_case(b"KEEPTTL") && deadline.is_none() {
            deadline = Some(crate::op::Deadline::Keep);
        } else if deadline.is_none() && i + 1 < cmd.len() {
            match expiry::expiry_option(opt, cmd.arg(i + 1), "set") {
                Some(Ok(d)) => deadline = Some(d),
                Some(Err(reply)) => return Plan::Reply(reply),
                None => return Plan::Reply(syntax_error()),
            }
            i += 1;
        } else {
            return Plan::Reply(syntax_error());
        }
        i += 1;
    }
    let key = cmd.arg(1);
    let assign = match deadline {
        None => Op::Assign {
            key,
            value: cmd.arg(2),
            condition,
        },
        Some(deadline) => Op::AssignTtl {
            key,
            value: cmd.arg(2),
            condition,
            deadline,
        },
    };
    if get {
        // Read and write run back to back on the same worker, so nothing interleaves.
        Plan::Ops(Shape::SetGet, vec![Op::Get { key }, assign])
    } else {
        Plan::One(Shape::Set, assign)
    }
}
