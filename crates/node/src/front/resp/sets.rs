//! Set commands beyond SADD/SREM/SMEMBERS/SISMEMBER/SCARD: `SINTER`, `SUNION`, `SDIFF`,
//! their `*STORE` forms, `SINTERCARD`, `SMOVE`, `SPOP`, `SRANDMEMBER`, `SMISMEMBER`,
//! `SSCAN`.
//!
//! Reads of several keys gather one `Get` per key from wherever each key lives and compute
//! the answer here (`keys_reply`). `SPOP` is one op at the key's worker (`Op::SetPop`).
//! `*STORE` and `SMOVE` write after reading, in steps (a [`SetJob`]): the read, then the
//! writes, each routed to the key's worker — not one atomic unit when the keys live on
//! different workers (see docs/protocol.md, "Sets").

use std::rc::Rc;

use wire::resp::{self, Version};

use super::commands::{arity_error, parse_i64, syntax_error, Cmd, Plan};
use super::keys_reply::{algebra, sets_of, Algebra, KeyShape, MAX_RANDOM_MEMBERS};
use super::reply::{err, ready, Shape};
use crate::ack::Ack;
use crate::core::Routing;
use crate::driver::worker::Worker;
use crate::error::NodeError;
use crate::op::{Op, OpResult};

/// A set command that writes after it read (run by `server::ask_workers`).
#[derive(Debug)]
pub(crate) enum SetJob {
    /// `SINTERSTORE`/`SUNIONSTORE`/`SDIFFSTORE destination key…`.
    Store {
        /// Which operation.
        op: Algebra,
        /// The destination.
        dest: Vec<u8>,
        /// The sources.
        keys: Vec<Vec<u8>>,
    },
    /// `SMOVE source destination member`.
    Move {
        /// The source.
        src: Vec<u8>,
        /// The destination.
        dest: Vec<u8>,
        /// The member.
        member: Vec<u8>,
    },
}

impl SetJob {
    /// Every key the job reads or writes, and whether it writes (for permissions).
    pub(crate) fn keys(&self) -> Vec<&[u8]> {
        match self {
            SetJob::Store { dest, keys, .. } => std::iter::once(&dest[..])
                .chain(keys.iter().map(|k| &k[..]))
                .collect(),
            SetJob::Move { src, dest, .. } => vec![&src[..], &dest[..]],
        }
    }
}

/// What a set command needs: a plan, a job, or `None` if `name` is not one.
pub(super) enum SetPlan<'a> {
    /// Run now.
    Plan(Plan<'a>),
    /// Read then write.
    Job(SetJob),
}

/// The plan of set command `name` (upper case), or `None` if it is not one of this file's.
pub(super) fn plan<'a>(name: &[u8], cmd: &Cmd<'a>) -> Option<SetPlan<'a>> {
    let argc = cmd.len();
    let reply = |r: Vec<u8>| Some(SetPlan::Plan(Plan::Reply(r)));
    let gets = |from: usize, to: usize| -> Vec<Op<&'a [u8]>> {
        (from..to).map(|i| Op::Get { key: cmd.arg(i) }).collect()
    };
    let algebra_of = |n: &[u8]| match n {
        b"SINTER" | b"SINTERSTORE" => Algebra::Inter,
        b"SUNION" | b"SUNIONSTORE" => Algebra::Union,
        _ => Algebra::Diff,
    };
    let plan = match name {
        b"SINTER" | b"SUNION" | b"SDIFF" => {
            if argc < 2 {
                return reply(arity_error(cmd));
            }
            Plan::Ops(
                Shape::Keys(KeyShape::Algebra(algebra_of(name))),
                gets(1, argc),
            )
        }
        b"SINTERSTORE" | b"SUNIONSTORE" | b"SDIFFSTORE" => {
            if argc < 3 {
                return reply(arity_error(cmd));
            }
            return Some(SetPlan::Job(SetJob::Store {
                op: algebra_of(name),
                dest: cmd.arg(1).to_vec(),
                keys: (2..argc).map(|i| cmd.arg(i).to_vec()).collect(),
            }));
        }
        b"SINTERCARD" => {
            if argc < 3 {
                return reply(arity_error(cmd));
            }
            let n = match parse_i64(cmd.arg(1)) {
                Some(n) if n > 0 => n as usize,
                // Redis's message for a non-integer too.
                _ => return reply(err("ERR numkeys should be greater than 0")),
            };
            if n > argc - 2 {
                return reply(err(
                    "ERR Number of keys can't be greater than number of args",
                ));
            }
            let mut limit = 0u64;
            let mut i = 2 + n;
            while i < argc {
                if cmd.arg(i).eq_ignore_ascii_case(b"LIMIT") && i + 1 < argc {
                    match parse_i64(cmd.arg(i + 1)) {
                        Some(l) if l >= 0 => limit = l as u64,
                        _ => return reply(err("ERR LIMIT can't be negative")),
                    }
                    i += 2;
                } else {
                    return reply(syntax_error());
                }
            }
            Plan::Ops(Shape::Keys(KeyShape::InterCard(limit)), gets(2, 2 + n))
        }
        b"SMISMEMBER" => {
            if argc < 3 {
                return reply(arity_error(cmd));
            }
            let asked = (2..argc).map(|i| cmd.arg(i).to_vec()).collect();
            Plan::One(
                Shape::Keys(KeyShape::MisMember(asked)),
                Op::Get { key: cmd.arg(1) },
            )
        }
        b"SRANDMEMBER" => {
            let count = match argc {
                2 => None,
                3 => match parse_i64(cmd.arg(2)) {
                    Some(c) if c.unsigned_abs() <= MAX_RANDOM_MEMBERS => Some(c),
                    Some(_) => return reply(err("ERR value is out of range")),
                    None => return reply(err("ERR value is not an integer or out of range")),
                },
                _ => return reply(arity_error(cmd)),
            };
            Plan::One(
                Shape::Keys(KeyShape::RandMember(count)),
                Op::Get { key: cmd.arg(1) },
            )
        }
        b"SPOP" => {
            let count = match argc {
                2 => None,
                3 => match parse_i64(cmd.arg(2)) {
                    Some(c) if c >= 0 => Some(c as u64),
                    _ => {
                        return reply(err("ERR value is out of range, must be positive"));
                    }
                },
                _ => return reply(arity_error(cmd)),
            };
            Plan::One(
                Shape::Keys(KeyShape::Pop(count.is_some())),
                Op::SetPop {
                    key: cmd.arg(1),
                    count: count.unwrap_or(1),
                },
            )
        }
        b"SSCAN" => {
            if argc < 3 {
                return reply(arity_error(cmd));
            }
            let cursor = match super::keys::parse_cursor(cmd.arg(2)) {
                Ok(c) => c,
                Err(e) => return reply(e),
            };
            let mut pattern = None;
            let mut i = 3;
            while i < argc {
                let opt = cmd.arg(i);
                if opt.eq_ignore_ascii_case(b"MATCH") && i + 1 < argc {
                    pattern = Some(cmd.arg(i + 1).to_vec());
                } else if opt.eq_ignore_ascii_case(b"COUNT") && i + 1 < argc {
                    match parse_i64(cmd.arg(i + 1)) {
                        Some(c) if c >= 1 => {}
                        Some(_) => return reply(syntax_error()),
                        None => return reply(err("ERR value is not an integer or out of range")),
                    }
                } else {
                    return reply(syntax_error());
                }
                i += 2;
            }
            if cursor != 0 {
                // Every page is the whole set: there is no later page.
                return reply(ready(|o| {
                    resp::array_header(o, 2);
                    resp::bulk(o, b"0");
                    resp::array_header(o, 0);
                }));
            }
            Plan::One(
                Shape::Keys(KeyShape::SScan(pattern)),
                Op::Get { key: cmd.arg(1) },
            )
        }
        b"SMOVE" => {
            if argc != 4 {
                return reply(arity_error(cmd));
            }
            return Some(SetPlan::Job(SetJob::Move {
                src: cmd.arg(1).to_vec(),
                dest: cmd.arg(2).to_vec(),
                member: cmd.arg(3).to_vec(),
            }));
        }
        _ => return None,
    };
    Some(SetPlan::Plan(plan))
}

/// Runs `ops` wherever their keys live and waits for their results.
pub(crate) async fn run_ops(w: &Rc<Worker>, ops: Vec<Op<&[u8]>>) -> Vec<OpResult> {
    w.submit(ops, Ack::MERGED, Routing::Forward).results().await
}

fn first_error(results: &[OpResult]) -> Option<NodeError> {
    results.iter().find_map(|r| match r {
        OpResult::Error(e) => Some(e.clone()),
        _ => None,
    })
}

fn error_reply(e: &NodeError) -> Vec<u8> {
    err(&e.resp_message())
}

/// Runs a set job: reads, then writes.
pub(crate) async fn run_job(w: &Rc<Worker>, job: SetJob, _v: Version) -> Vec<u8> {
    match job {
        SetJob::Store { op, dest, keys } => {
            let reads = keys.iter().map(|k| Op::Get { key: &k[..] }).collect();
            let results = run_ops(w, reads).await;
            let members: Vec<Vec<u8>> = match sets_of(&results) {
                Ok(sets) => algebra(op, &sets).into_iter().map(<[u8]>::to_vec).collect(),
                Err(e) => return error_reply(&e),
            };
            // The destination is replaced, whatever it held (as Redis): a tombstone, then
            // a new incarnation with the members, run back to back at its worker.
            let mut writes = vec![Op::Delete { key: &dest[..] }];
            if members.is_empty() {
                // Only the delete: its `del` event (if the key existed) is Redis's.
                let results = run_ops(w, writes).await;
                return match first_error(&results) {
                    Some(e) => error_reply(&e),
                    None => ready(|o| resp::integer(o, 0)),
                };
            }
            writes.push(Op::SetAdd {
                key: &dest[..],
                members: members.iter().map(|m| &m[..]).collect(),
            });
            // Quiet parts, then the command's own event as Redis names it.
            let quiet = Ack {
                quiet: true,
                ..Ack::MERGED
            };
            let results = w.submit(writes, quiet, Routing::Forward).results().await;
            if let Some(e) = first_error(&results) {
                return error_reply(&e);
            }
            let event = match op {
                Algebra::Inter => "sinterstore",
                Algebra::Union => "sunionstore",
                Algebra::Diff => "sdiffstore",
            };
            let events: &[(&'static str, &[u8])] = &[(event, &dest[..])];
            crate::pubsub::events::publish_command(w, crate::notify::SET, events);
            ready(|o| resp::integer(o, members.len() as i64))
        }
        SetJob::Move { src, dest, member } => {
            // Redis's checks first: both keys sets (or absent), the member in the source.
            let checks = vec![
                Op::SetContains {
                    key: &src[..],
                    member: &member[..],
                },
                Op::TypeOf { key: &dest[..] },
            ];
            let results = run_ops(w, checks).await;
            if let Some(e) = first_error(&results) {
                return error_reply(&e);
            }
            if let Some(OpResult::Type(Some(t))) = results.get(1) {
                if !matches!(t, lattice::LatticeType::OrSet) {
                    return error_reply(&NodeError::wrong_type("orset", *t));
                }
            }
            if results.first() != Some(&OpResult::Int(1)) {
                return ready(|o| resp::integer(o, 0));
            }
            if src == dest {
                return ready(|o| resp::integer(o, 1));
            }
            // Remove, and add only if this command removed it (a concurrent SMOVE of the
            // same member moves it once).
            let removed = run_ops(
                w,
                vec![Op::SetRemove {
                    key: &src[..],
                    members: vec![&member[..]],
                }],
            )
            .await;
            match removed.first() {
                Some(OpResult::Int(1)) => {}
                Some(OpResult::Error(e)) => return error_reply(e),
                _ => return ready(|o| resp::integer(o, 0)),
            }
            let added = run_ops(
                w,
                vec![Op::SetAdd {
                    key: &dest[..],
                    members: vec![&member[..]],
                }],
            )
            .await;
            match first_error(&added) {
                Some(e) => error_reply(&e),
                None => ready(|o| resp::integer(o, 1)),
            }
        }
    }
}
