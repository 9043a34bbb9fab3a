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
//! - `reply`: encoding replies.

mod acl;
pub mod commands;
mod reply;
mod server;

use std::rc::Rc;
use std::sync::Arc;

use bytes::{Buf, BytesMut};
use wire::resp::{self, Args, CommandParser, Version};

use super::pipeline::{Codec, Replies, Step};
use crate::auth::{User, Users};
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
}

/// One RESP connection.
pub struct Resp {
    state: ConnState,
    limits: resp::Limits,
    /// Resumes a partly received command where it stopped (linear in its size).
    parser: CommandParser,
    args: Args,
}

impl Resp {
    /// A connection on `w`.
    pub fn new(w: &Worker) -> Resp {
        let limits = &w.shared.config.limits;
        Resp {
            state: ConnState {
                version: Version::Resp2,
                name: None,
                quit: false,
                id: fastrand::u64(1..u64::MAX >> 1),
                user: w.shared.users.initial(),
                users: w.shared.users.clone(),
            },
            limits: resp::Limits {
                max_bulk_len: limits.max_frame_size,
                max_args: limits.max_request_items.saturating_add(1),
                max_inline_len: 64 * 1024,
                max_request_len: limits.max_request_bytes,
            },
            parser: CommandParser::new(),
            args: Args::default(),
        }
    }
}

impl Codec for Resp {
    fn next(&mut self, w: &Rc<Worker>, buf: &mut BytesMut, replies: &mut Replies) -> Step {
        match self.parser.parse(buf, &self.limits, &mut self.args) {
            Ok(None) => Step::Need,
            Ok(Some(consumed)) => {
                if !self.args.is_empty() {
                    let cmd = commands::Cmd {
                        buf,
                        args: &self.args,
                    };
                    commands::run(w, &mut self.state, &cmd, replies);
                }
                buf.advance(consumed);
                Step::Ran
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

    fn too_many(&self) -> Vec<u8> {
        b"-ERR max number of clients reached\r\n".to_vec()
    }

    fn dropped(out: &mut Vec<u8>) {
        out.extend_from_slice(b"-TRYAGAIN the request was dropped\r\n");
    }

    fn quit(&self) -> bool {
        self.state.quit
    }
}
