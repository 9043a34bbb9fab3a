//! The native protocol on client ports: length-prefixed protobuf frames
//! (`proto/latticekv.proto`), pipelined, answered in request order.
//!
//! On a worker's own port, requests for keys the worker does not hold get a `REDIRECT`
//! naming the workers that do; on the shared front port they are forwarded. Subscriptions
//! are never forwarded, on any port: the connection's worker must hold the keys; their
//! pushes (`id = 0`) go out between batches of responses.
//!
//! Bad input: an undecodable frame gets a `BAD_REQUEST` response (id 0) and the connection
//! goes on (framing is intact); a frame above `max_frame_size` or `max_request_bytes` gets
//! `FRAME_TOO_LARGE` and the connection is closed (the stream cannot be resynchronised). A
//! request reading several values whose reply would exceed `max_reply_bytes` gets
//! `INVALID_ARGUMENT` as a whole. Peer-plane messages and
//! operator requests in their old form are refused with a `BAD_REQUEST` naming where they
//! belong. Other clients are unaffected.
//!
//! Authentication: on a node with users, every request but `GetTopology` before a
//! successful `Auth` gets `UNAUTHENTICATED`, and each request needs its permission
//! (`access`).
//!
//! # Layout
//! - this module: the codec, dispatch, responses;
//! - `access`: what each request needs of the connection's user;
//! - `data`: reads and writes;
//! - `info`: topology, status, locations, holds, admin requests;
//! - `subscribe`: a connection's subscriptions.

pub(crate) mod access;
mod data;
mod info;
mod subscribe;

use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use prost::Message;
use wire::convert::value_to_pb;
use wire::frame::{self, FrameError, HEADER_LEN};
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use super::pipeline::{Codec, Replies, Step};
use crate::auth::{User, Users};
use crate::core::Routing;
use crate::driver::worker::{Answer, Worker};
use crate::error::NodeError;
use crate::op::OpResult;

pub(crate) use subscribe::ConnectionSubscriptions;

/// How the results of a request's ops become its response.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// One op answered with a `GetResult`.
    Get,
    /// One op answered with an `Ack`.
    Ack,
    /// Several ops answered with a `MultiResult`.
    Multi,
}

/// One native-protocol connection's state.
pub struct Native {
    /// Shared front port (forward) or a worker's own port (redirect).
    routing: Routing,
    /// Largest frame accepted.
    max_frame: usize,
    /// Dropped with the connection, which ends its subscriptions.
    subs: ConnectionSubscriptions,
    /// The user the connection acts as: `None` until it authenticates on a node with users.
    user: Option<Arc<User>>,
    /// The node's users.
    users: Arc<Users>,
    /// In a slot kept for administrators: nothing but `Auth` until an admin logs in.
    admins_only: bool,
    /// The connection presented a certificate the cluster's CA signed.
    node_certificate: bool,
    /// The operation `next` ran last (for the request counts).
    last: Option<crate::stats::requests::Command>,
    /// Keys the request `next` ran last reads or writes (a batch's keys; 1 otherwise), kept
    /// only under `LATTICEKV_FAULT=slow-request-us` (else always 1).
    keys: u32,
}

impl Native {
    /// A connection on `w`: `front` for the shared front port; `node_certificate` if it
    /// presented a certificate the cluster's CA signed.
    pub fn new(w: &Rc<Worker>, front: bool, node_certificate: bool) -> Native {
        Native {
            routing: if front {
                Routing::Forward
            } else {
                Routing::Redirect
            },
            max_frame: w.shared.config.limits.max_native_request(),
            subs: ConnectionSubscriptions::new(w),
            user: w.shared.users.initial(),
            users: w.shared.users.clone(),
            admins_only: false,
            node_certificate,
            last: None,
            keys: 1,
        }
    }
}

/// Appends a response; one too large for a frame (over 4 GiB, which the reply limit keeps
/// far away) is answered with an error instead, never with a truncated length.
fn encode(resp: &pb::Response, out: &mut Vec<u8>) {
    if let Err(e) = frame::try_encode(resp, out) {
        let error = raw_error(resp.id, pb::ErrorCode::InvalidArgument, e.to_string());
        frame::encode(&error, out);
    }
}

fn error_response(id: u64, e: &NodeError) -> pb::Response {
    pb::Response {
        id,
        result: Some(RespResult::Error(e.to_pb())),
    }
}

fn raw_error(id: u64, code: pb::ErrorCode, message: String) -> pb::Response {
    pb::Response {
        id,
        result: Some(RespResult::Error(pb::Error {
            code: code as i32,
            message,
            redirect: Vec::new(),
        })),
    }
}

fn respond(replies: &mut Replies, id: u64, result: RespResult) {
    let resp = pb::Response {
        id,
        result: Some(result),
    };
    replies.emit(|o| encode(&resp, o));
}

fn error(replies: &mut Replies, id: u64, e: &NodeError) {
    let resp = error_response(id, e);
    replies.emit(|o| encode(&resp, o));
}

fn key_result(r: OpResult) -> pb::KeyResult {
    use pb::key_result::Result as K;
    let result = match r {
        OpResult::Value(v) => K::Get(pb::GetResult {
            value: v.as_ref().map(value_to_pb),
        }),
        OpResult::Int(n) => K::Ack(pb::Ack { count: n }),
        // The native protocol sends no Exec (a RESP transaction's unit).
        OpResult::Done | OpResult::Type(_) | OpResult::Multi(_) | OpResult::Reply(_) => {
            K::Ack(pb::Ack { count: 0 })
        }
        OpResult::Error(e) => K::Error(e.to_pb()),
    };
    pb::KeyResult {
        result: Some(result),
    }
}

fn build_response(id: u64, shape: Shape, results: Vec<OpResult>) -> pb::Response {
    // A reply over the limit fails the request as a whole.
    if let Some(e) = results.iter().find_map(|r| match r {
        OpResult::Error(e @ NodeError::ReplyTooLarge { .. }) => Some(e),
        _ => None,
    }) {
        return error_response(id, e);
    }
    let result = match shape {
        Shape::Multi => RespResult::Multi(pb::MultiResult {
            results: results.into_iter().map(key_result).collect(),
        }),
        Shape::Get | Shape::Ack => match results.into_iter().next() {
            Some(OpResult::Error(e)) => RespResult::Error(e.to_pb()),
            Some(OpResult::Value(v)) => RespResult::Get(pb::GetResult {
                value: v.as_ref().map(value_to_pb),
            }),
            Some(OpResult::Int(n)) => RespResult::Ack(pb::Ack { count: n }),
            Some(OpResult::Done | OpResult::Type(_) | OpResult::Multi(_) | OpResult::Reply(_)) => {
                RespResult::Ack(pb::Ack { count: 0 })
            }
            None => RespResult::Error(NodeError::Unavailable("no result".into()).to_pb()),
        },
    };
    pb::Response {
        id,
        result: Some(result),
    }
}

/// Queues the response built from `answer`'s results.
fn answer(replies: &mut Replies, id: u64, shape: Shape, a: Answer) {
    replies.answer(a, move |results, o| {
        encode(&build_response(id, shape, results), o)
    });
}

impl Codec for Native {
    fn next(&mut self, w: &Rc<Worker>, buf: &mut BytesMut, replies: &mut Replies) -> Step {
        let len = match frame::frame_len(buf, self.max_frame) {
            Ok(None) => return Step::Need,
            Ok(Some(len)) => len,
            Err(FrameError::TooLarge { len, max }) => {
                let resp = raw_error(
                    0,
                    pb::ErrorCode::FrameTooLarge,
                    format!("frame of {len} bytes exceeds the {max}-byte limit"),
                );
                replies.emit(|o| encode(&resp, o));
                return Step::Close;
            }
        };
        let body = buf.split_to(HEADER_LEN + len).freeze().slice(HEADER_LEN..);
        let decoded = pb::Request::decode(body);
        self.last = Some(crate::stats::requests::native_command(
            decoded.as_ref().ok().and_then(|r| r.op.as_ref()),
        ));
        // Only a node started with `slow-request-us` (testing only) weighs its requests.
        if w.shared.faults.slow_request.is_some() {
            self.keys = decoded.as_ref().map_or(1, keys_of);
        }
        match decoded {
            Ok(req) if self.admins_only => return self.admin_gate(req, replies),
            Ok(req) => {
                let timed = !informational(&req);
                self.handle(w, req, replies);
                if !timed {
                    return Step::RanUntimed;
                }
            }
            Err(e) => {
                let resp = raw_error(
                    0,
                    pb::ErrorCode::BadRequest,
                    format!("undecodable request: {e}"),
                );
                replies.emit(|o| encode(&resp, o));
            }
        }
        Step::Ran
    }

    fn too_many(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let resp = raw_error(
            0,
            pb::ErrorCode::TooManyConnections,
            "too many connections".into(),
        );
        encode(&resp, &mut out);
        out
    }

    fn admins_only(&mut self) -> bool {
        self.admins_only = self.user.is_none();
        self.admins_only
    }

    fn last_command(&self) -> Option<crate::stats::requests::Command> {
        self.last
    }

    fn last_keys(&self) -> u32 {
        self.keys
    }

    fn is_error(reply: &[u8]) -> bool {
        crate::stats::requests::native_is_error(reply)
    }

    fn dropped(out: &mut Vec<u8>) {
        let e = NodeError::Unavailable("the request was dropped".into());
        encode(&error_response(0, &e), out);
    }

    fn next_push(&mut self) -> impl std::future::Future<Output = Vec<u8>> {
        self.subs.next_push()
    }

    fn drain_pushes(&mut self, out: &mut Vec<u8>) {
        self.subs.drain_into(out);
    }

    fn waits_for_pushes(&self) -> bool {
        self.subs.any()
    }
}

/// Keys `req` reads or writes: a batch's (`GetMany`, `PutMany`, `DeleteMany`), else 1.
fn keys_of(req: &pb::Request) -> u32 {
    let n = match &req.op {
        Some(ReqOp::GetMany(g)) => g.keys.len(),
        Some(ReqOp::PutMany(p)) => p.puts.len(),
        Some(ReqOp::DeleteMany(d)) => d.keys.len(),
        _ => 1,
    };
    u32::try_from(n).unwrap_or(u32::MAX).max(1)
}

/// Whether `req` asks about the cluster rather than for data (topology, status, ping,
/// locations, holds, operator requests): such requests are not timed in the statistics.
pub(crate) fn informational(req: &pb::Request) -> bool {
    matches!(
        req.op,
        Some(
            ReqOp::Topology(_)
                | ReqOp::Status(_)
                | ReqOp::Ping(_)
                | ReqOp::Locate(_)
                | ReqOp::Holds(_)
                | ReqOp::Admin(_)
        )
    )
}

impl Native {
    fn pre_auth<'a>(&self, config: &'a crate::config::NodeConfig) -> access::PreAuth<'a> {
        access::PreAuth {
            open_membership: !config.peers_authenticated(),
            secret: config.cluster_secret.as_deref(),
            node_certificate: self.node_certificate,
        }
    }

    /// A request on a connection in an administrators' slot: an `Auth` as an admin lets it
    /// stay; anything else closes it.
    fn admin_gate(&mut self, req: pb::Request, replies: &mut Replies) -> Step {
        if let Some(ReqOp::Auth(a)) = &req.op {
            if let Ok(u) = self.users.authenticate(&a.user, a.password.as_bytes()) {
                if u.has(crate::auth::Permission::Admin) {
                    self.user = Some(u);
                    self.admins_only = false;
                    respond(replies, req.id, RespResult::Ack(pb::Ack { count: 1 }));
                    return Step::Ran;
                }
            }
        }
        let resp = raw_error(
            req.id,
            pb::ErrorCode::TooManyConnections,
            "too many connections (the remaining slots are for administrators)".into(),
        );
        replies.emit(|o| encode(&resp, o));
        Step::Close
    }

    fn handle(&mut self, w: &Rc<Worker>, req: pb::Request, replies: &mut Replies) {
        let id = req.id;
        let ack = crate::ack::Ack {
            replicas: req.ack_replicas as usize,
            durable: req.durable,
            quiet: false,
        };
        let Some(op) = req.op else {
            let e = NodeError::BadRequest("request without an operation".into());
            return error(replies, id, &e);
        };
        if let ReqOp::Auth(a) = &op {
            return match self.users.authenticate(&a.user, a.password.as_bytes()) {
                Ok(u) => {
                    self.user = Some(u);
                    respond(replies, id, RespResult::Ack(pb::Ack { count: 1 }))
                }
                Err(e) => error(replies, id, &NodeError::from_auth(e)),
            };
        }
        let allowed = match &self.user {
            Some(user) => access::permit(user, &op),
            None if access::before_auth(&op, &self.pre_auth(&w.shared.config)) => Ok(()),
            None => Err(crate::auth::AuthError::Required),
        };
        if let Err(e) = allowed {
            return error(replies, id, &NodeError::from_auth(e));
        }
        match op {
            ReqOp::Get(_)
            | ReqOp::Put(_)
            | ReqOp::Delete(_)
            | ReqOp::Update(_)
            | ReqOp::GetMany(_)
            | ReqOp::PutMany(_)
            | ReqOp::DeleteMany(_)
            | ReqOp::GetAll(_)
            | ReqOp::PutAll(_)
            | ReqOp::GetDelta(_) => data::handle(w, self.routing, id, op, ack, replies),
            ReqOp::Subscribe(s) => match self.subs.subscribe(s) {
                Ok(n) => respond(replies, id, RespResult::Ack(pb::Ack { count: n as i64 })),
                Err(e) => error(replies, id, &e),
            },
            ReqOp::Unsubscribe(u) => {
                let n = self.subs.unsubscribe(&u) as i64;
                respond(replies, id, RespResult::Ack(pb::Ack { count: n }));
            }
            ReqOp::Topology(_)
            | ReqOp::Status(_)
            | ReqOp::Ping(_)
            | ReqOp::Locate(_)
            | ReqOp::Holds(_)
            | ReqOp::Admin(_) => info::handle(w, id, op, replies),
            ReqOp::Auth(_) => {}
            ReqOp::Replicate(_)
            | ReqOp::Forward(_)
            | ReqOp::AntiEntropy(_)
            | ReqOp::SyncCluster(_)
            | ReqOp::Fetch(_) => {
                let e = NodeError::BadRequest(format!(
                    "{} is a peer-plane message: nodes send it to each other's peer port; \
                     client ports refuse it",
                    refused_name(&op)
                ));
                error(replies, id, &e);
            }
            ReqOp::SetReplication(_) | ReqOp::Leave(_) => {
                let e = NodeError::BadRequest(format!(
                    "{} is an operator request: send it as Request.admin",
                    refused_name(&op)
                ));
                error(replies, id, &e);
            }
        }
    }
}

/// The name of a refused request kind.
fn refused_name(op: &ReqOp) -> &'static str {
    match op {
        ReqOp::Replicate(_) => "Replicate",
        ReqOp::Forward(_) => "Forward",
        ReqOp::AntiEntropy(_) => "AntiEntropy",
        ReqOp::SyncCluster(_) => "SyncCluster",
        ReqOp::Fetch(_) => "Fetch",
        ReqOp::SetReplication(_) => "SetReplication",
        ReqOp::Leave(_) => "Leave",
        _ => "this request",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(op: ReqOp) -> pb::Request {
        pb::Request {
            id: 1,
            op: Some(op),
            ..Default::default()
        }
    }

    #[test]
    fn a_batch_weighs_its_keys_and_anything_else_one() {
        let keys = vec![bytes::Bytes::from_static(b"a"); 8];
        let many = request(ReqOp::GetMany(pb::GetMany {
            keys: keys.clone(),
            ..Default::default()
        }));
        assert_eq!(keys_of(&many), 8);
        let deletes = request(ReqOp::DeleteMany(pb::DeleteMany { keys }));
        assert_eq!(keys_of(&deletes), 8);
        let empty = request(ReqOp::GetMany(pb::GetMany::default()));
        assert_eq!(keys_of(&empty), 1);
        let ping = request(ReqOp::Ping(Default::default()));
        assert_eq!(keys_of(&ping), 1);
    }
}
