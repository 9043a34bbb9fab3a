//! Reads and writes of the native protocol.

use std::rc::Rc;

use bytes::Bytes;
use wire::convert::value_from_pb;
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use super::{answer, encode, error, Shape};
use crate::ack::Ack;
use crate::core::Routing;
use crate::driver::worker::{Answer, Worker};
use crate::error::NodeError;
use crate::front::pipeline::Replies;
use crate::op::{Condition, Op, OpResult};
use crate::subscribe::value_version;

fn decode_put(put: pb::Put) -> Result<Op<Bytes>, NodeError> {
    let value = put
        .value
        .as_ref()
        .ok_or_else(|| NodeError::BadRequest("Put without a value".into()))?;
    let value = value_from_pb(value).map_err(|e| NodeError::BadRequest(e.to_string()))?;
    Ok(Op::Put {
        key: put.key,
        value,
    })
}

fn decode_update(update: pb::Update) -> Result<Op<Bytes>, NodeError> {
    use pb::update::Op as U;
    let key = update.key;
    match update.op {
        Some(U::Assign(a)) => Ok(Op::Assign {
            key,
            value: a.value,
            condition: match pb::update::Condition::try_from(a.condition) {
                Ok(pb::update::Condition::IfAbsent) => Condition::IfAbsent,
                Ok(pb::update::Condition::IfPresent) => Condition::IfPresent,
                Ok(pb::update::Condition::Always) => Condition::Always,
                Err(_) => {
                    return Err(NodeError::BadRequest(format!(
                        "unknown condition {}",
                        a.condition
                    )))
                }
            },
        }),
        Some(U::SetAdd(s)) => Ok(Op::SetAdd {
            key,
            members: s.members,
        }),
        Some(U::SetRemove(s)) => Ok(Op::SetRemove {
            key,
            members: s.members,
        }),
        Some(U::CounterAdd(c)) => Ok(Op::CounterAdd {
            key,
            delta: c.delta,
        }),
        None => Err(NodeError::BadRequest("Update without an operation".into())),
    }
}

/// Runs ops and queues the response: one op at once when it needs only this worker.
fn run(
    w: &Rc<Worker>,
    routing: Routing,
    id: u64,
    shape: Shape,
    mut ops: Vec<Op<Bytes>>,
    ack: Ack,
    replies: &mut Replies,
) {
    let max = w.shared.config.limits.max_request_items;
    if ops.len() > max {
        let e = NodeError::InvalidArgument(format!(
            "{} items exceed the {max}-item request limit",
            ops.len()
        ));
        return error(replies, id, &e);
    }
    if ops.len() == 1 {
        let op = ops.pop().expect("one op");
        match w.try_local(op, ack, routing) {
            Ok(result) => return answer(replies, id, shape, Answer::Ready(vec![result])),
            Err(op) => ops.push(op),
        }
    }
    answer(replies, id, shape, w.submit(ops, ack, routing));
}

/// A data request.
pub(super) fn handle(
    w: &Rc<Worker>,
    routing: Routing,
    id: u64,
    op: ReqOp,
    ack: Ack,
    replies: &mut Replies,
) {
    match op {
        ReqOp::Get(g) => run(
            w,
            routing,
            id,
            Shape::Get,
            vec![Op::Get { key: g.key }],
            ack,
            replies,
        ),
        ReqOp::Delete(d) => run(
            w,
            routing,
            id,
            Shape::Ack,
            vec![Op::Delete { key: d.key }],
            ack,
            replies,
        ),
        ReqOp::Put(p) => match decode_put(p) {
            Ok(op) => run(w, routing, id, Shape::Ack, vec![op], ack, replies),
            Err(e) => error(replies, id, &e),
        },
        ReqOp::Update(u) => match decode_update(u) {
            Ok(op) => run(w, routing, id, Shape::Ack, vec![op], ack, replies),
            Err(e) => error(replies, id, &e),
        },
        ReqOp::GetMany(g) => {
            let ops = if g.metadata_only {
                g.keys.into_iter().map(|key| Op::GetMeta { key }).collect()
            } else {
                g.keys.into_iter().map(|key| Op::Get { key }).collect()
            };
            run(w, routing, id, Shape::Multi, ops, ack, replies)
        }
        ReqOp::DeleteMany(d) => {
            let ops = d.keys.into_iter().map(|key| Op::Delete { key }).collect();
            run(w, routing, id, Shape::Multi, ops, ack, replies)
        }
        ReqOp::PutMany(p) => {
            // A malformed item fails the whole request: nothing is written.
            let ops: Result<Vec<_>, _> = p.puts.into_iter().map(decode_put).collect();
            match ops {
                Ok(ops) => run(w, routing, id, Shape::Multi, ops, ack, replies),
                Err(e) => error(replies, id, &e),
            }
        }
        ReqOp::GetAll(g) => answer(replies, id, Shape::Get, w.get_all(g.key)),
        ReqOp::PutAll(p) => {
            let put = pb::Put {
                key: p.key,
                value: p.value,
            };
            match decode_put(put) {
                Ok(op) => {
                    let replicas = w.core().shard().replicas(op.key()).len();
                    let ack = Ack {
                        replicas: replicas.max(1),
                        durable: ack.durable,
                        quiet: false,
                    };
                    run(w, routing, id, Shape::Ack, vec![op], ack, replies)
                }
                Err(e) => error(replies, id, &e),
            }
        }
        ReqOp::GetDelta(d) => {
            let version = d.version;
            let a = w.submit(vec![Op::Get { key: d.key }], Ack::MERGED, routing);
            replies.answer(a, move |results, o| {
                let resp = match results.into_iter().next() {
                    Some(OpResult::Value(value)) => {
                        let encoded = value.as_ref().map(wire::convert::value_to_pb);
                        let now = encoded.as_ref().map_or(0, value_version);
                        let changed = now != version;
                        pb::Response {
                            id,
                            result: Some(RespResult::Delta(pb::GetDeltaResult {
                                changed,
                                value: if changed { encoded } else { None },
                                version: now,
                            })),
                        }
                    }
                    Some(OpResult::Error(e)) => super::error_response(id, &e),
                    _ => super::error_response(id, &NodeError::Unavailable("no result".into())),
                };
                encode(&resp, o);
            });
        }
        _ => {
            let e = NodeError::BadRequest("not a data request".into());
            error(replies, id, &e);
        }
    }
}
