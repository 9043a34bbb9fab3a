//! The Redis protocol (RESP2, and RESP3 after `HELLO 3`) mapped onto lattices.
//!
//! A connection parses every complete command it has read, runs them (keys of other
//! workers are forwarded), then writes all replies in order with one write — so pipelined
//! clients such as `redis-benchmark -P 16` cost one read and one write per batch.
//!
//! Bad input: a protocol error gets `-ERR Protocol error: …` and the connection is closed,
//! as Redis does; an unknown command gets `-ERR unknown command …` and the connection goes
//! on. Other connections are unaffected.
//!
//! Command semantics are documented in `docs/protocol.md` (RESP section); see
//! [`commands`] for the mapping.

pub mod commands;

use std::collections::VecDeque;
use std::rc::Rc;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::resp::{self, Args, Version};

use crate::worker::{ConnectionPermit, LocalConnection, Pending, WorkerCtx, MAX_PIPELINE};

pub use commands::Shape;

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
}

/// A reply being produced, in command order.
pub enum Queued {
    /// Encoded.
    Ready(Vec<u8>),
    /// Waiting for forwarded ops.
    Ops {
        /// How the results become the reply.
        shape: Shape,
        /// The results.
        pending: Pending,
        /// The protocol version when the command ran.
        version: Version,
    },
    /// Ran already; its acknowledgement (the disk, other replicas) is awaited by a task of
    /// its own, so the commands behind it go on and share one fsync.
    Later(tokio::sync::oneshot::Receiver<Vec<u8>>),
}

/// Serves one RESP connection until the client quits or closes, or the node stops.
pub async fn serve(ctx: Rc<WorkerCtx>, mut stream: TcpStream, permit: Option<ConnectionPermit>) {
    let _alive = LocalConnection::new(&ctx);
    let _ = stream.set_nodelay(true);
    if permit.is_none() {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        return;
    }
    let limits = &ctx.shared.config.limits;
    let parse_limits = resp::Limits {
        max_bulk_len: limits.max_frame_size,
        max_args: limits.max_request_items.saturating_add(1),
        max_inline_len: 64 * 1024,
    };
    let mut state = ConnState {
        version: Version::Resp2,
        name: None,
        quit: false,
        id: fastrand::u64(1..u64::MAX >> 1),
    };
    let mut inbuf = BytesMut::with_capacity(16 * 1024);
    let mut out: Vec<u8> = Vec::with_capacity(16 * 1024);
    let mut args = Args::default();
    let mut queue: VecDeque<Queued> = VecDeque::new();
    let mut shutdown = ctx.shutdown();
    // False when the buffer may still hold complete requests (the pipeline bound stopped
    // the last round early): run those before waiting for more bytes.
    let mut need_read = true;
    loop {
        if need_read {
            // Read in large chunks: BytesMut only grows by 64 bytes when full.
            if inbuf.capacity() - inbuf.len() < 4096 {
                inbuf.reserve(16 * 1024);
            }
            let read = tokio::select! {
                r = stream.read_buf(&mut inbuf) => r,
                _ = shutdown.wait_for(|s| *s) => return,
            };
            match read {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
        let mut close = false;
        let mut commands = 0;
        while commands < MAX_PIPELINE && !state.quit {
            match resp::parse_command(&inbuf, &parse_limits, &mut args) {
                Ok(None) => break,
                Ok(Some(consumed)) => {
                    commands += 1;
                    if !args.is_empty() {
                        let direct = queue.is_empty();
                        let queued =
                            commands::run(&ctx, &mut state, &inbuf, &args, &mut out, direct).await;
                        match queued {
                            None => {}
                            Some(Queued::Ready(bytes)) if queue.is_empty() => {
                                out.extend_from_slice(&bytes)
                            }
                            Some(q) => queue.push_back(q),
                        }
                    }
                    inbuf.advance(consumed);
                }
                Err(e) => {
                    let msg = match e {
                        resp::ParseError::Protocol(m) | resp::ParseError::TooLarge(m) => m,
                    };
                    let mut bytes = Vec::new();
                    resp::error(&mut bytes, &format!("ERR Protocol error: {msg}"));
                    queue.push_back(Queued::Ready(bytes));
                    close = true;
                    break;
                }
            }
        }
        while let Some(q) = queue.pop_front() {
            match q {
                Queued::Ready(bytes) => out.extend_from_slice(&bytes),
                Queued::Ops {
                    shape,
                    pending,
                    version,
                } => {
                    let results = pending.resolve().await;
                    commands::encode(&mut out, version, &shape, &results);
                }
                Queued::Later(reply) => match reply.await {
                    Ok(bytes) => out.extend_from_slice(&bytes),
                    Err(_) => out.extend_from_slice(b"-TRYAGAIN the request was dropped\r\n"),
                },
            }
        }
        if !out.is_empty() && stream.write_all(&out).await.is_err() {
            return;
        }
        if close || state.quit {
            return;
        }
        need_read = commands < MAX_PIPELINE;
        out.clear();
        if inbuf.capacity() > 1024 * 1024 && inbuf.is_empty() {
            inbuf = BytesMut::with_capacity(16 * 1024);
        }
    }
}
