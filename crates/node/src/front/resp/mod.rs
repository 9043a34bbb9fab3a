//! The Redis protocol (RESP2, and RESP3 after `HELLO 3`) mapped onto lattices.
//!
//! A connection parses every complete command it has read, runs them (keys of other
//! workers are forwarded), then writes all replies in order with one write — so pipelined
//! clients such as `redis-benchmark -P 16` cost one read and one write per batch (see
//! [`crate::front::pipeline`]).
//!
//! Bad input: a protocol error gets `-ERR Protocol error: …` and the connection is closed,
//! as Redis does — so does a command declaring more than `max_request_bytes` (refused
//! before its data is read); an unknown command gets `-ERR unknown command …` and the connection goes
//! on. Other connections are unaffected.
//!
//! # Layout
//! - this module: the codec and a connection's state;
//! - [`commands`]: data commands and their mapping onto lattice operations;
//! - `server`: connection and server commands;
//! - `reply`: encoding replies;
//! - `expiry`: TTL commands;
//! - `strings`: string commands beyond GET/SET;
//! - `txn`: MULTI / EXEC / DISCARD / WATCH / UNWATCH;
//! - `scripting`: EVAL / EVALSHA / SCRIPT, and the commands a script calls;
//! - `pubsub`: (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, (S)PUBLISH, PUBSUB, RESET.
//! - `lists`: list commands; `blocking`: the blocking pops.
//! - `hash`, `zset`: hash and sorted-set commands, `coll_reply`: their replies.
//! - `keys`, `keys_reply`, `glob`, `info`: the key space (KEYS, SCAN, FLUSHDB, RENAME, …),
//!   their reply shapes, glob patterns, INFO;
//! - `sets`: set commands beyond SADD/SREM/SMEMBERS.
//! - `listing`: the key listing across the cluster (pages from every node).

mod acl;
// ---- lists (helper B) ----
mod blocking;
pub mod commands;
mod counted;
mod expiry;
// ---- lists (helper B) ----
mod lists;
mod reply;
mod server;
// Scripts (EVAL).
pub(crate) mod scripting;
mod strings;
mod txn;
// Pub/sub.
mod pubsub;
// Redis hashes and sorted sets.
mod coll_reply;
mod hash;
mod zset;
// keys, server and sets
mod client;
mod info;
mod keys;
mod keys_reply;
pub(crate) mod listing;
mod prefetch;
mod rename;
mod sets;

use std::rc::Rc;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use wire::resp::{self, Args, CommandParser, Version};

use super::pipeline::{Codec, Replies, Step};
use crate::auth::{Permission, User, Users};
use crate::driver::worker::Worker;

pub use server::REDIS_COMPAT_VERSION;

/// Per-connection protocol state.
#[derive(Debug)]
pub struct ConnState {
    /// RESP2 until `HELLO 3`.
    pub version: Version,
    /// `CLIENT SETNAME`.
    pub name: Option<Vec<u8>>,
    /// Set by `QUIT`: close after replying.
    pub quit: bool,
    /// A connection id for `CLIENT ID` / `HELLO`.
    pub id: u64,
    /// The user the connection acts as: `None` until it authenticates on a node with users.
    pub user: Option<Arc<User>>,
    /// The node's users.
    pub users: Arc<Users>,
    /// In a slot kept for administrators: nothing but AUTH / HELLO until an admin logs in.
    pub admins_only: bool,
    /// `MULTI`'s queue and `WATCH`'s keys.
    pub txn: txn::Txn,
    /// The node's scripts (`EVALSHA`, `SCRIPT`).
    pub scripts: Arc<crate::script::ScriptCache>,
    /// Pub/sub: the connection's subscriptions and their queue of messages.
    pub pubsub: pubsub::ConnSubscriptions,
    // ---- keys and server ----
    /// The connection in the node's registry (`CLIENT LIST`/`KILL`); its id is `id`.
    pub client: crate::clients::Registration,
    /// The last command's name for `CLIENT LIST` (`client|list` for a subcommand).
    pub last_cmd: String,
    /// A command ran since the registry was last updated (see `client::publish`).
    pub unpublished: bool,
    /// What the registry was last given of the connection.
    pub shown: client::Shown,
}

/// One RESP connection.
pub struct Resp {
    state: ConnState,
    limits: resp::Limits,
    /// Resumes a partly received command where it stopped (linear in its size).
    parser: CommandParser,
    args: Args,
    /// The keys of the next requests of a pipelined batch, asked into the CPU's cache.
    prefetch: prefetch::Prefetch,
    /// The command `next` ran last (for the request counts).
    last: Option<crate::stats::requests::Command>,
}

impl Resp {
    /// A connection on `w`, from an unknown peer.
    pub fn new(w: &Worker) -> Resp {
        Resp::accepted(w, crate::clients::Peer::default())
    }

    /// A connection on `w` from `peer`.
    pub fn accepted(w: &Worker, peer: crate::clients::Peer) -> Resp {
        let limits = &w.shared.config.limits;
        let client = w.shared.clients.register(peer);
        Resp {
            state: ConnState {
                version: Version::Resp2,
                name: None,
                quit: false,
                id: client.client().id,
                user: w.shared.users.initial(),
                users: w.shared.users.clone(),
                admins_only: false,
                txn: txn::Txn::default(),
                scripts: w.shared.scripts.clone(),
                pubsub: pubsub::ConnSubscriptions::default(),
                client,
                last_cmd: String::new(),
                unpublished: false,
                shown: client::Shown::default(),
            },
            limits: resp::Limits {
                max_bulk_len: limits.max_frame_size,
                max_args: limits.max_request_items.saturating_add(1),
                max_inline_len: 64 * 1024,
                max_request_len: limits.max_request_bytes,
            },
            parser: CommandParser::new(),
            args: Args::default(),
            prefetch: prefetch::Prefetch::default(),
            last: None,
        }
    }
}

/// The reply of a connection over the limit.
const TOO_MANY: &[u8] = b"-ERR max number of clients reached\r\n";

/// A command on a connection in an administrators' slot: AUTH or HELLO run, and the
/// connection stays (with their answer) if they made it an admin's; anything else gets the
/// max-clients error and closes it.
fn admin_gate(
    w: &Rc<Worker>,
    state: &mut ConnState,
    cmd: &commands::Cmd<'_>,
    replies: &mut Replies,
) -> Step {
    let name = cmd.name_lower();
    if name == "auth" || name == "hello" {
        let mut answer = Replies::default();
        commands::run(w, state, cmd, &mut answer);
        let admin = state
            .user
            .as_ref()
            .is_some_and(|u| u.has(Permission::Admin));
        if admin && answer.direct() {
            state.admins_only = false;
            replies.emit(|o| o.extend_from_slice(&answer.out));
            return Step::Ran;
        }
    }
    replies.emit(|o| o.extend_from_slice(TOO_MANY));
    Step::Close
}

impl Codec for Resp {
    fn next(&mut self, w: &Rc<Worker>, buf: &mut BytesMut, replies: &mut Replies) -> Step {
        if self.state.client.client().is_killed() {
            // `CLIENT KILL` from another connection: nothing more runs.
            return Step::Close;
        }
        match self.parser.parse(buf, &self.limits, &mut self.args) {
            Ok(None) => {
                self.prefetch.reset();
                Step::Need
            }
            Ok(Some(consumed)) => {
                self.prefetch.after_request(
                    w,
                    buf.get(consumed..).unwrap_or_default(),
                    &self.limits,
                );
                let mut step = Step::Ran;
                self.last = None;
                if !self.args.is_empty() {
                    self.last = Some(counted::command(self.args.get(buf, 0).unwrap_or_default()));
                    let cmd = commands::Cmd {
                        buf,
                        args: &self.args,
                    };
                    if self.state.admins_only {
                        step = admin_gate(w, &mut self.state, &cmd, replies);
                    } else {
                        commands::run(w, &mut self.state, &cmd, replies);
                    }
                    client::ran(&mut self.state, &cmd);
                }
                buf.advance(consumed);
                step
            }
            Err(e) => {
                let msg = match e {
                    resp::ParseError::Protocol(m) | resp::ParseError::TooLarge(m) => m,
                };
                replies.emit(|o| resp::error(o, &format!("ERR Protocol error: {msg}")));
                Step::Close
            }
        }
    }

    fn batch_ran(&mut self, at: std::time::Instant) {
        client::publish(&mut self.state, at);
    }

    fn too_many(&self) -> Vec<u8> {
        TOO_MANY.to_vec()
    }

    fn last_command(&self) -> Option<crate::stats::requests::Command> {
        self.last
    }

    fn is_error(reply: &[u8]) -> bool {
        crate::stats::requests::resp_is_error(reply)
    }

    fn admins_only(&mut self) -> bool {
        self.state.admins_only = self.state.user.is_none();
        self.state.admins_only
    }

    fn dropped(out: &mut Vec<u8>) {
        out.extend_from_slice(b"-TRYAGAIN the request was dropped\r\n");
    }

    fn quit(&self) -> bool {
        // A subscriber that fell behind its output limit is disconnected.
        self.state.quit || self.state.pubsub.killed() || self.state.client.client().is_killed()
    }

    // Pub/sub.
    fn next_push(&mut self) -> impl std::future::Future<Output = Vec<u8>> {
        // `CLIENT KILL` of a waiting connection is `kill_signal`'s.
        self.state.pubsub.next_push(self.state.version)
    }

    fn drain_pushes(&mut self, out: &mut Vec<u8>) {
        self.state.pubsub.drain(out, self.state.version);
    }

    fn waits_for_pushes(&self) -> bool {
        self.state.pubsub.any()
    }

    fn kill_signal(&self) -> impl std::future::Future<Output = ()> + 'static {
        let client = self.state.client.client().clone();
        async move { client.wait_killed().await }
    }

    fn killed(&self) -> impl std::future::Future<Output = ()> {
        let client = self.state.client.client().clone();
        let pubsub = self.state.pubsub.wait_killed();
        async move {
            tokio::select! {
                _ = pubsub => {}
                _ = client.wait_killed() => {}
            }
        }
    }
}
