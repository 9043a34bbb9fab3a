//! Transactions: `MULTI`, `EXEC`, `DISCARD`, `WATCH`, `UNWATCH`.
//!
//! After `MULTI` a connection queues its commands (`+QUEUED`) instead of running them.
//! Errors Redis finds at queue time — an unknown command, a wrong number of arguments, and
//! here also a full queue — are answered at once and make `EXEC` answer `-EXECABORT`
//! with nothing applied. `EXEC` plans every queued command and submits all their ops as
//! one request: ops on one worker run in order, back to back, and the reply is the array
//! of each command's reply (a command failing at run time, e.g. `WRONGTYPE`, is its
//! element, as in Redis).
//!
//! `WATCH` reads a fingerprint of each key's record at the key's only replica
//! ([`Op::Version`]) and is refused for a key with several replicas (a concurrent write at
//! another replica could go unseen: a lost update). `EXEC` after `WATCH` sends one
//! [`Op::Exec`] to the watched keys' worker, which compares the fingerprints and runs the
//! queued ops there as one unit — or nothing, answering the null array, if one changed.
//! Every key of such a transaction must live on that worker (else `-CROSSSLOT`, nothing
//! applied). See docs/protocol.md.
//!
//! The queueing and the watch list are plain state ([`Txn`]); running `EXEC` is
//! [`exec`].

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use wire::resp::{self, Args, Version};

use super::commands::{self, arity_error, permit, plan, Cmd, Plan};
use super::reply::{encode, err, ready, Shape};
use super::server::{self, Server};
use super::ConnState;
use crate::ack::Ack;
use crate::auth::{Permission, User};
use crate::core::Routing;
use crate::driver::worker::{Answer, Worker};
use crate::front::pipeline::Replies;
use crate::op::{Guard, Op, OpResult};

/// Most commands one transaction may queue.
pub(super) const MAX_QUEUED: usize = 10_000;
/// Most bytes of arguments one transaction may queue.
pub(super) const MAX_QUEUED_BYTES: usize = 16 << 20;

/// A command queued after `MULTI`, with its own copy of its bytes.
#[derive(Debug)]
pub(super) struct Queued {
    buf: Vec<u8>,
    args: Args,
}

impl Queued {
    fn new(cmd: &Cmd<'_>) -> Queued {
        // The arguments are spans of the input up to the last one's end (or of the args'
        // own scratch buffer, for quoted inline arguments).
        let end = (0..cmd.len())
            .filter_map(|i| cmd.args.range(i))
            .map(|r| r.end)
            .max()
            .unwrap_or(0);
        Queued {
            buf: cmd.buf[..end.min(cmd.buf.len())].to_vec(),
            args: cmd.args.clone(),
        }
    }

    fn cmd(&self) -> Cmd<'_> {
        Cmd {
            buf: &self.buf,
            args: &self.args,
        }
    }
}

/// What a watched key's fingerprint is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Slot {
    /// `WATCH`'s answer has not arrived yet.
    Pending,
    /// The record's fingerprint at `WATCH`.
    Version(u64),
}

/// Watched keys, shared with the encoder of `WATCH`'s reply (which fills them in).
#[derive(Debug, Default)]
struct Watched {
    /// Bumped when the list is cleared, so a late `WATCH` answer is not stored.
    generation: u64,
    keys: Vec<(Vec<u8>, Slot)>,
}

/// A connection's transaction state.
#[derive(Debug, Default)]
pub struct Txn {
    /// The queued commands, from `MULTI` to `EXEC` / `DISCARD`.
    queue: Option<Vec<Queued>>,
    /// Bytes queued so far.
    bytes: usize,
    /// A command was refused at queue time: `EXEC` answers `-EXECABORT`.
    aborted: bool,
    watched: Rc<RefCell<Watched>>,
}

/// What `EXEC` is to run.
#[derive(Debug)]
pub(super) struct Transaction {
    pub(super) commands: Vec<Queued>,
    /// Watched keys and their fingerprints.
    pub(super) guards: Vec<(Vec<u8>, u64)>,
}

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

impl Txn {
    /// True between `MULTI` and `EXEC` / `DISCARD`.
    pub fn in_multi(&self) -> bool {
        self.queue.is_some()
    }

    /// Commands queued since `MULTI` (`None`: not in a transaction; `CLIENT LIST`'s `multi`).
    pub fn queued(&self) -> Option<usize> {
        self.queue.as_ref().map(Vec::len)
    }

    /// `MULTI`.
    pub(super) fn begin(&mut self) -> Vec<u8> {
        if self.in_multi() {
            return err("ERR MULTI calls can not be nested");
        }
        self.queue = Some(Vec::new());
        self.bytes = 0;
        self.aborted = false;
        ready(|o| resp::simple(o, "OK"))
    }

    /// Queues `cmd` (after `MULTI`): `+QUEUED`, or the queue-time error (which aborts the
    /// transaction). `arity` is the command's Redis arity, `None` if unknown.
    pub(super) fn queue(&mut self, cmd: &Cmd<'_>, arity: Option<i64>) -> Vec<u8> {
        let Some(queue) = self.queue.as_mut() else {
            return err("ERR no transaction");
        };
        let argc = cmd.len() as i64;
        let refusal = match arity {
            None => Some(commands::unknown(cmd)),
            Some(a) if (a >= 0 && argc != a) || (a < 0 && argc < -a) => Some(arity_error(cmd)),
            Some(_) => None,
        };
        if let Some(reply) = refusal {
            self.aborted = true;
            return reply;
        }
        let q = Queued::new(cmd);
        let size = q.buf.len() + 16 * cmd.len();
        if queue.len() >= MAX_QUEUED || self.bytes + size > MAX_QUEUED_BYTES {
            self.aborted = true;
            return err(&format!(
                "ERR transaction too large (at most {MAX_QUEUED} commands and \
                 {MAX_QUEUED_BYTES} bytes): it will be discarded at EXEC"
            ));
        }
        self.bytes += size;
        queue.push(q);
        ready(|o| resp::simple(o, "QUEUED"))
    }

    /// Pub/sub: a command refused inside the transaction aborts it (`EXEC` answers
    /// `-EXECABORT`), as a queue-time error does.
    pub(super) fn abort(&mut self) {
        if self.in_multi() {
            self.aborted = true;
        }
    }

    /// `DISCARD`: drops the queue and the watched keys.
    pub(super) fn discard(&mut self) -> Vec<u8> {
        if self.queue.take().is_none() {
            return err("ERR DISCARD without MULTI");
        }
        self.unwatch();
        ready(|o| resp::simple(o, "OK"))
    }

    /// `EXEC`: the transaction to run, or the reply if there is none to run. Either way the
    /// connection leaves the transaction and forgets its watched keys.
    pub(super) fn take(&mut self) -> Result<Transaction, Vec<u8>> {
        let Some(commands) = self.queue.take() else {
            return Err(err("ERR EXEC without MULTI"));
        };
        let watched = std::mem::take(&mut self.watched.borrow_mut().keys);
        self.unwatch();
        if self.aborted {
            return Err(err(EXECABORT));
        }
        let mut guards = Vec::with_capacity(watched.len());
        for (key, slot) in watched {
            match slot {
                Slot::Version(v) => guards.push((key, v)),
                Slot::Pending => {
                    return Err(err(
                        "ERR EXEC before WATCH was answered: wait for WATCH's reply before \
                         sending EXEC (nothing was applied)",
                    ))
                }
            }
        }
        Ok(Transaction { commands, guards })
    }

    /// `UNWATCH` (and the end of a transaction).
    pub(super) fn unwatch(&mut self) {
        let mut w = self.watched.borrow_mut();
        w.generation += 1;
        w.keys.clear();
    }

    /// `WATCH keys`: adds them as pending; returns a function that stores their
    /// fingerprints (or forgets them, if WATCH failed) once the answer is known.
    fn watch(&mut self, keys: Vec<Vec<u8>>) -> impl FnOnce(Option<Vec<u64>>) + 'static {
        let shared = self.watched.clone();
        let (generation, start) = {
            let mut w = shared.borrow_mut();
            let start = w.keys.len();
            w.keys.extend(keys.into_iter().map(|k| (k, Slot::Pending)));
            (w.generation, start)
        };
        move |versions| {
            let mut w = shared.borrow_mut();
            if w.generation != generation {
                return;
            }
            match versions {
                Some(versions) => {
                    for (slot, v) in w.keys[start..].iter_mut().zip(versions) {
                        slot.1 = Slot::Version(v);
                    }
                }
                None => {
                    w.keys.truncate(start);
                }
            }
        }
    }
}

/// Handles the transaction commands and queues commands inside `MULTI`; false if `cmd`
/// is to run as usual.
pub(super) fn intercept(
    w: &Rc<Worker>,
    state: &mut ConnState,
    cmd: &Cmd<'_>,
    user: Option<&User>,
    replies: &mut Replies,
) -> bool {
    let name = cmd.arg(0);
    let is = |n: &str| name.eq_ignore_ascii_case(n.as_bytes());
    let reply = if is("MULTI") {
        if cmd.len() != 1 {
            arity_error(cmd)
        } else {
            state.txn.begin()
        }
    } else if is("EXEC") {
        if cmd.len() != 1 {
            arity_error(cmd)
        } else {
            return exec(w, state, user, replies);
        }
    } else if is("DISCARD") {
        if cmd.len() != 1 {
            arity_error(cmd)
        } else {
            state.txn.discard()
        }
    } else if is("WATCH") {
        if cmd.len() < 2 {
            arity_error(cmd)
        } else if state.txn.in_multi() {
            err("ERR WATCH inside MULTI is not allowed")
        } else {
            watch(w, state, cmd, user, replies);
            return true;
        }
    } else if is("UNWATCH") {
        if cmd.len() != 1 {
            arity_error(cmd)
        } else {
            state.txn.unwatch();
            ready(|o| resp::simple(o, "OK"))
        }
    } else if state.txn.in_multi() && !is("QUIT") {
        let arity = server::arity(&cmd.name_lower());
        state.txn.queue(cmd, arity)
    } else {
        return false;
    };
    replies.emit(|o| o.extend_from_slice(&reply));
    true
}

/// `WATCH`: reads each key's fingerprint at its only replica.
fn watch(
    w: &Rc<Worker>,
    state: &mut ConnState,
    cmd: &Cmd<'_>,
    user: Option<&User>,
    replies: &mut Replies,
) {
    let keys: Vec<&[u8]> = (1..cmd.len()).map(|i| cmd.arg(i)).collect();
    if let Some(Err(e)) = user.map(|u| u.check(Permission::Read, keys.iter().copied())) {
        return replies.emit(|o| o.extend_from_slice(&super::acl::noperm(&e, cmd)));
    }
    let store = state.txn.watch(keys.iter().map(|k| k.to_vec()).collect());
    let ops = keys.iter().map(|&key| Op::Version { key }).collect();
    let answer = w.submit(ops, Ack::MERGED, Routing::Forward);
    replies.answer(answer, move |results, o| {
        let versions: Option<Vec<u64>> = results
            .iter()
            .map(|r| match r {
                OpResult::Int(v) => Some(*v as u64),
                _ => None,
            })
            .collect();
        let failed = versions.is_none();
        store(versions);
        match results.iter().find(|r| matches!(r, OpResult::Error(_))) {
            Some(OpResult::Error(e)) => super::reply::write_error(o, e),
            _ if failed => resp::error(o, "ERR WATCH failed"),
            _ => resp::simple(o, "OK"),
        }
    });
}

/// How one queued command's reply is made.
enum Part {
    /// From `len` results starting at `start`.
    Ops {
        shape: Shape,
        start: usize,
        len: usize,
    },
    /// Known.
    Bytes(Vec<u8>),
    /// A server command answered by asking the workers.
    Server(Server),
}

/// `EXEC`: runs the queued commands and answers the array of their replies.
fn exec(w: &Rc<Worker>, state: &mut ConnState, user: Option<&User>, replies: &mut Replies) -> bool {
    let t = match state.txn.take() {
        Ok(t) => t,
        Err(reply) => {
            replies.emit(|o| o.extend_from_slice(&reply));
            return true;
        }
    };
    let v = state.version;
    let mut parts = Vec::with_capacity(t.commands.len());
    let mut ops: Vec<Op<Bytes>> = Vec::new();
    for q in &t.commands {
        let cmd = q.cmd();
        let p = plan(&cmd, state);
        if let Some(Err(e)) = user.map(|u| permit(u, &p)) {
            parts.push(Part::Bytes(super::acl::noperm(&e, &cmd)));
            continue;
        }
        let start = ops.len();
        let shape = match p {
            Plan::Get(key) => {
                ops.push(Op::Get { key }.to_owned_op());
                Shape::Get
            }
            Plan::One(shape, op) => {
                ops.push(op.to_owned_op());
                shape
            }
            Plan::Ops(shape, list) => {
                ops.extend(list.iter().map(Op::to_owned_op));
                shape
            }
            Plan::Script(op) => {
                ops.push(op);
                Shape::Script
            }
            Plan::Reply(bytes) | Plan::Server(Server::Reply(bytes)) => {
                parts.push(Part::Bytes(bytes));
                continue;
            }
            Plan::Server(s) => {
                parts.push(Part::Server(s));
                continue;
            }
        };
        parts.push(Part::Ops {
            shape,
            start,
            len: ops.len() - start,
        });
    }
    let watched = !t.guards.is_empty();
    let answer = if watched {
        let key = Bytes::from(t.guards[0].0.clone());
        let guards = t
            .guards
            .into_iter()
            .map(|(k, version)| (Bytes::from(k), Guard::Version(version)))
            .collect();
        w.submit(
            vec![Op::Exec { key, guards, ops }],
            Ack::MERGED,
            Routing::Forward,
        )
    } else if ops.is_empty() {
        Answer::Ready(Vec::new())
    } else {
        w.submit(ops, Ack::MERGED, Routing::Forward)
    };
    let results = move |results: Vec<OpResult>| -> Result<Vec<OpResult>, Vec<u8>> {
        if !watched {
            return Ok(results);
        }
        match results.into_iter().next() {
            Some(OpResult::Multi(r)) => Ok(r),
            Some(OpResult::Error(e)) => Err(ready(|o| super::reply::write_error(o, &e))),
            // A watched key changed: nothing ran.
            _ => Err(ready(|o| resp::null_array(o, v))),
        }
    };
    if parts.iter().any(|p| matches!(p, Part::Server(_))) {
        let w = w.clone();
        replies.later(async move {
            let results = match results(answer.results().await) {
                Ok(r) => r,
                Err(reply) => return reply,
            };
            let mut out = Vec::new();
            resp::array_header(&mut out, parts.len());
            for part in parts {
                match part {
                    Part::Server(s) => out.extend(server::ask_workers(&w, s, v).await),
                    other => encode_part(&mut out, v, other, &results),
                }
            }
            out
        });
    } else {
        replies.answer(answer, move |r, o| match results(r) {
            Ok(results) => {
                resp::array_header(o, parts.len());
                for part in parts {
                    encode_part(o, v, part, &results);
                }
            }
            Err(reply) => o.extend_from_slice(&reply),
        });
    }
    true
}

fn encode_part(out: &mut Vec<u8>, v: Version, part: Part, results: &[OpResult]) {
    match part {
        Part::Ops { shape, start, len } => match results.get(start..start + len) {
            Some(r) => encode(out, v, &shape, r),
            None => resp::error(out, "ERR missing results"),
        },
        Part::Bytes(b) => out.extend_from_slice(&b),
        Part::Server(_) => resp::error(out, "ERR not available inside a transaction"),
    }
}

#[cfg(test)]
#[path = "txn_tests.rs"]
mod tests;
