//! Operations forwarded between nodes: [`Op`] and [`OpResult`] in their protobuf form
//! (`Forward` / `ForwardResults`), so a node can run a request on the worker of another node
//! that holds the key, exactly as it would run it locally.

use bytes::Bytes;
use lattice::LatticeType;
use wire::convert::{value_from_pb, value_to_pb};
use wire::pb::{self, forward_op::Kind, forward_result::Result as R};

use crate::error::NodeError;
use crate::op::{Condition, Op, OpResult};

/// Encodes an op for forwarding.
pub fn op_to_pb(op: &Op<Bytes>) -> pb::ForwardOp {
    let mut out = pb::ForwardOp {
        key: op.key_bytes().clone(),
        ..Default::default()
    };
    match op {
        Op::Get { .. } => out.kind = Kind::Get as i32,
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
    }
    out
}

/// Decodes a forwarded op.
pub fn op_from_pb(op: pb::ForwardOp) -> Result<Op<Bytes>, NodeError> {
    let bad = |what: &str| NodeError::BadRequest(format!("forwarded op: {what}"));
    let key = op.key;
    Ok(
        match Kind::try_from(op.kind).map_err(|_| bad("unknown kind"))? {
            Kind::Get => Op::Get { key },
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
        },
    )
}

/// Encodes a result.
pub fn result_to_pb(r: &OpResult) -> pb::ForwardResult {
    let result = match r {
        OpResult::Value(v) => R::Value(pb::GetResult {
            value: v.as_ref().map(value_to_pb),
        }),
        OpResult::Int(n) => R::Int(*n),
        OpResult::Type(t) => R::Type(t.map_or(pb::LatticeType::Unspecified, |t| {
            pb::LatticeType::try_from(t as i32).unwrap_or(pb::LatticeType::Unspecified)
        }) as i32),
        OpResult::Done => R::Done(true),
        OpResult::Error(e) => R::Error(e.to_pb()),
    };
    pb::ForwardResult {
        result: Some(result),
    }
}

/// Decodes a result.
pub fn result_from_pb(r: pb::ForwardResult) -> OpResult {
    let unavailable = |what: &str| OpResult::Error(NodeError::Unavailable(what.to_string()));
    match r.result {
        Some(R::Value(g)) => match g.value.as_ref().map(value_from_pb).transpose() {
            Ok(v) => OpResult::Value(v),
            Err(e) => unavailable(&format!("bad value from a peer: {e}")),
        },
        Some(R::Int(n)) => OpResult::Int(n),
        Some(R::Type(t)) => OpResult::Type(u8::try_from(t).ok().and_then(LatticeType::from_u8)),
        Some(R::Done(_)) => OpResult::Done,
        Some(R::Error(e)) => OpResult::Error(error_from_pb(e)),
        None => unavailable("empty result from a peer"),
    }
}

/// A peer's error as a node error (so it reaches the client with its meaning).
pub fn error_from_pb(e: pb::Error) -> NodeError {
    use pb::ErrorCode as C;
    match C::try_from(e.code).unwrap_or(C::Unspecified) {
        C::Redirect => NodeError::Redirect(e.redirect),
        C::ShuttingDown => NodeError::ShuttingDown,
        C::BadRequest => NodeError::BadRequest(e.message),
        C::InvalidArgument => NodeError::InvalidArgument(e.message),
        // The remaining errors are answered to the client with the peer's own wording.
        _ => NodeError::Remote {
            code: e.code,
            message: e.message,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lattice::{Max, Value};

    #[test]
    fn ops_and_results_round_trip() {
        let k = Bytes::from_static(b"k");
        let ops = vec![
            Op::Get { key: k.clone() },
            Op::Exists { key: k.clone() },
            Op::TypeOf { key: k.clone() },
            Op::SetContains {
                key: k.clone(),
                member: Bytes::from_static(b"m"),
            },
            Op::SetLen { key: k.clone() },
            Op::Put {
                key: k.clone(),
                value: Value::Max(Max(3)),
            },
            Op::Delete { key: k.clone() },
            Op::Assign {
                key: k.clone(),
                value: Bytes::from_static(b"v"),
                condition: Condition::IfAbsent,
            },
            Op::SetAdd {
                key: k.clone(),
                members: vec![Bytes::from_static(b"a")],
            },
            Op::SetRemove {
                key: k.clone(),
                members: vec![Bytes::from_static(b"a")],
            },
            Op::CounterAdd { key: k, delta: -4 },
        ];
        for op in ops {
            assert_eq!(op_from_pb(op_to_pb(&op)).unwrap(), op);
        }
        for r in [
            OpResult::Value(Some(Value::Max(Max(1)))),
            OpResult::Value(None),
            OpResult::Int(-3),
            OpResult::Type(Some(LatticeType::OrSet)),
            OpResult::Type(None),
            OpResult::Done,
            OpResult::Error(NodeError::Overflow),
        ] {
            let back = result_from_pb(result_to_pb(&r));
            match (&r, &back) {
                (OpResult::Error(a), OpResult::Error(b)) => {
                    assert_eq!(a.code(), b.code());
                    assert_eq!(a.resp_message(), b.resp_message());
                }
                _ => assert_eq!(back, r),
            }
        }
    }
}
