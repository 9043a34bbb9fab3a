//! Forwarded ops: [`Op`] to and from `ForwardOp`, for the peer plane.

use bytes::Bytes;
use wire::convert::{value_from_pb, value_to_pb};
use wire::pb::{self, forward_op::Kind};

use crate::error::NodeError;
use crate::op::{Condition, Deadline, ExpireWhen, Guard, Op};

/// Encodes an op for forwarding.
pub fn op_to_pb(op: &Op<Bytes>) -> pb::ForwardOp {
    let mut out = pb::ForwardOp {
        key: op.key_bytes().clone(),
        ..Default::default()
    };
    match op {
        Op::Get { .. } => out.kind = Kind::Get as i32,
        Op::GetMeta { .. } => out.kind = Kind::GetMeta as i32,
        Op::Exists { .. } => out.kind = Kind::Exists as i32,
        Op::TypeOf { .. } => out.kind = Kind::TypeOf as i32,
        Op::SetContains { member, .. } => {
            out.kind = Kind::SetContains as i32;
            out.arg = member.clone();
        }
        Op::SetLen { .. } => out.kind = Kind::SetLen as i32,
        Op::Put { value, .. } => {
            out.kind = Kind::Put as i32;
            out.value = Some(value_to_pb(value));
        }
        Op::Delete { .. } => out.kind = Kind::Delete as i32,
        Op::Assign {
            value, condition, ..
        } => {
            out.kind = Kind::Assign as i32;
            out.arg = value.clone();
            out.condition = match condition {
                Condition::Always => pb::update::Condition::Always,
                Condition::IfAbsent => pb::update::Condition::IfAbsent,
                Condition::IfPresent => pb::update::Condition::IfPresent,
            } as i32;
        }
        Op::SetAdd { members, .. } => {
            out.kind = Kind::SetAdd as i32;
            out.members = members.clone();
        }
        Op::SetRemove { members, .. } => {
            out.kind = Kind::SetRemove as i32;
            out.members = members.clone();
        }
        Op::CounterAdd { delta, .. } => {
            out.kind = Kind::CounterAdd as i32;
            out.delta = *delta;
        }
        Op::GetSet { value, .. } => {
            out.kind = Kind::GetSet as i32;
            out.arg = value.clone();
        }
        Op::GetDel { .. } => out.kind = Kind::GetDel as i32,
        Op::Append { value, .. } => {
            out.kind = Kind::Append as i32;
            out.arg = value.clone();
        }
        Op::SetRange { offset, value, .. } => {
            out.kind = Kind::SetRange as i32;
            out.arg = value.clone();
            out.delta = i64::try_from(*offset).unwrap_or(i64::MAX);
        }
        Op::IncrByFloat { by, .. } => {
            out.kind = Kind::IncrByFloat as i32;
            out.by = *by;
        }
        Op::IncrBy { delta, .. } => {
            out.kind = Kind::IncrBy as i32;
            out.delta = *delta;
        }
        Op::AssignTtl {
            value,
            condition,
            deadline,
            ..
        } => {
            out.kind = Kind::AssignTtl as i32;
            out.arg = value.clone();
            out.condition = condition_to_pb(*condition) as i32;
            (out.deadline_kind, out.deadline_ms) = deadline_to_pb(Some(*deadline));
        }
        Op::Expire { deadline, when, .. } => {
            out.kind = Kind::Expire as i32;
            (out.deadline_kind, out.deadline_ms) = deadline_to_pb(Some(*deadline));
            out.expire_when = match when {
                ExpireWhen::Always => 0,
                ExpireWhen::Nx => 1,
                ExpireWhen::Xx => 2,
                ExpireWhen::Gt => 3,
                ExpireWhen::Lt => 4,
                ExpireWhen::LtXx => 5,
            };
        }
        Op::Ttl { .. } => out.kind = Kind::Ttl as i32,
        Op::GetEx { deadline, .. } => {
            out.kind = Kind::GetEx as i32;
            (out.deadline_kind, out.deadline_ms) = deadline_to_pb(*deadline);
        }
        Op::Version { .. } => out.kind = Kind::Version as i32,
        Op::Exec { guards, ops, .. } => {
            out.kind = Kind::Exec as i32;
            out.ops = ops.iter().map(op_to_pb).collect();
            out.guards = guards
                .iter()
                .map(|(key, g)| pb::ForwardGuard {
                    key: key.clone(),
                    absent: *g == Guard::Absent,
                    version: match g {
                        Guard::Version(v) => *v,
                        Guard::Absent => 0,
                    },
                })
                .collect();
        }
        // ---- lists (helper B) ----
        Op::List { op, .. } => {
            out.kind = Kind::List as i32;
            out.list = Some(crate::list_op::to_pb(op));
        }
        // Redis hashes and sorted sets: the command and its arguments as `members`.
        Op::Hash { args, .. } => {
            out.kind = Kind::Hash as i32;
            out.members = args.clone();
        }
        Op::Zset { args, .. } => {
            out.kind = Kind::Zset as i32;
            out.members = args.clone();
        }
        Op::SetPop { count, .. } => {
            out.kind = Kind::SetPop as i32;
            out.delta = i64::try_from(*count).unwrap_or(i64::MAX);
        }
        Op::ExpireTime { .. } => out.kind = Kind::ExpireTime as i32,
        Op::Script {
            body,
            keys,
            args,
            read_only,
            resp3,
            ..
        } => {
            out.kind = Kind::Script as i32;
            out.arg = body.clone();
            out.delta = keys.len() as i64;
            out.members = keys.iter().chain(args).cloned().collect();
            out.script_flags = u32::from(*read_only) | (u32::from(*resp3) << 1);
        }
    }
    out
}

fn condition_to_pb(c: Condition) -> pb::update::Condition {
    match c {
        Condition::Always => pb::update::Condition::Always,
        Condition::IfAbsent => pb::update::Condition::IfAbsent,
        Condition::IfPresent => pb::update::Condition::IfPresent,
    }
}

fn condition_from_pb(c: i32) -> Condition {
    match pb::update::Condition::try_from(c) {
        Ok(pb::update::Condition::IfAbsent) => Condition::IfAbsent,
        Ok(pb::update::Condition::IfPresent) => Condition::IfPresent,
        _ => Condition::Always,
    }
}

fn deadline_to_pb(d: Option<Deadline>) -> (u32, u64) {
    match d {
        None => (0, 0),
        Some(Deadline::In(ms)) => (1, ms),
        Some(Deadline::At(at)) => (2, at),
        Some(Deadline::Persist) => (3, 0),
        Some(Deadline::Keep) => (4, 0),
    }
}

fn deadline_from_pb(kind: u32, ms: u64) -> Option<Deadline> {
    match kind {
        1 => Some(Deadline::In(ms)),
        2 => Some(Deadline::At(ms)),
        3 => Some(Deadline::Persist),
        4 => Some(Deadline::Keep),
        _ => None,
    }
}

/// Decodes a forwarded op.
pub fn op_from_pb(op: pb::ForwardOp) -> Result<Op<Bytes>, NodeError> {
    let bad = |what: &str| NodeError::BadRequest(format!("forwarded op: {what}"));
    let key = op.key;
    Ok(
        match Kind::try_from(op.kind).map_err(|_| bad("unknown kind"))? {
            Kind::Get => Op::Get { key },
            Kind::GetMeta => Op::GetMeta { key },
            Kind::Exists => Op::Exists { key },
            Kind::TypeOf => Op::TypeOf { key },
            Kind::SetContains => Op::SetContains {
                key,
                member: op.arg,
            },
            Kind::SetLen => Op::SetLen { key },
            Kind::Put => {
                let value = op.value.as_ref().ok_or_else(|| bad("put without value"))?;
                Op::Put {
                    key,
                    value: value_from_pb(value).map_err(|e| bad(&e.to_string()))?,
                }
            }
            Kind::Delete => Op::Delete { key },
            Kind::Assign => Op::Assign {
                key,
                value: op.arg,
                condition: match pb::update::Condition::try_from(op.condition) {
                    Ok(pb::update::Condition::IfAbsent) => Condition::IfAbsent,
                    Ok(pb::update::Condition::IfPresent) => Condition::IfPresent,
                    _ => Condition::Always,
                },
            },
            Kind::SetAdd => Op::SetAdd {
                key,
                members: op.members,
            },
            Kind::SetRemove => Op::SetRemove {
                key,
                members: op.members,
            },
            Kind::CounterAdd => Op::CounterAdd {
                key,
                delta: op.delta,
            },
            Kind::GetSet => Op::GetSet { key, value: op.arg },
            Kind::GetDel => Op::GetDel { key },
            Kind::Append => Op::Append { key, value: op.arg },
            Kind::SetRange => Op::SetRange {
                key,
                offset: u64::try_from(op.delta).map_err(|_| bad("negative offset"))?,
                value: op.arg,
            },
            Kind::IncrByFloat => Op::IncrByFloat { key, by: op.by },
            Kind::IncrBy => Op::IncrBy {
                key,
                delta: op.delta,
            },
            Kind::AssignTtl => Op::AssignTtl {
                key,
                value: op.arg,
                condition: condition_from_pb(op.condition),
                deadline: deadline_from_pb(op.deadline_kind, op.deadline_ms)
                    .ok_or_else(|| bad("assignment without a deadline"))?,
            },
            Kind::Expire => Op::Expire {
                key,
                deadline: deadline_from_pb(op.deadline_kind, op.deadline_ms)
                    .ok_or_else(|| bad("expire without a deadline"))?,
                when: match op.expire_when {
                    0 => ExpireWhen::Always,
                    1 => ExpireWhen::Nx,
                    2 => ExpireWhen::Xx,
                    3 => ExpireWhen::Gt,
                    4 => ExpireWhen::Lt,
                    5 => ExpireWhen::LtXx,
                    _ => return Err(bad("unknown expire condition")),
                },
            },
            Kind::Ttl => Op::Ttl { key },
            Kind::GetEx => Op::GetEx {
                key,
                deadline: deadline_from_pb(op.deadline_kind, op.deadline_ms),
            },
            Kind::Version => Op::Version { key },
            Kind::Exec => {
                if op.ops.iter().any(|o| o.kind == Kind::Exec as i32) {
                    return Err(bad("nested exec"));
                }
                Op::Exec {
                    key,
                    guards: op
                        .guards
                        .into_iter()
                        .map(|g| {
                            let guard = if g.absent {
                                Guard::Absent
                            } else {
                                Guard::Version(g.version)
                            };
                            (g.key, guard)
                        })
                        .collect(),
                    ops: op
                        .ops
                        .into_iter()
                        .map(op_from_pb)
                        .collect::<Result<_, _>>()?,
                }
            }
            // ---- lists (helper B) ----
            Kind::List => Op::List {
                key,
                op: crate::list_op::from_pb(op.list.ok_or_else(|| bad("list op without list"))?)?,
            },
            // Redis hashes and sorted sets.
            Kind::Hash => Op::Hash {
                key,
                args: op.members,
            },
            Kind::Zset => Op::Zset {
                key,
                args: op.members,
            },
            Kind::SetPop => Op::SetPop {
                key,
                count: u64::try_from(op.delta).map_err(|_| bad("negative count"))?,
            },
            Kind::ExpireTime => Op::ExpireTime { key },
            Kind::Script => {
                let n = usize::try_from(op.delta)
                    .ok()
                    .filter(|n| *n <= op.members.len())
                    .ok_or_else(|| bad("script key count out of range"))?;
                let mut keys = op.members;
                let args = keys.split_off(n);
                Op::Script {
                    key,
                    body: op.arg,
                    keys,
                    args,
                    read_only: op.script_flags & 1 != 0,
                    resp3: op.script_flags & 2 != 0,
                }
            }
        },
    )
}
