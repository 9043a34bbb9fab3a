//! The RESP driver: one connection, `pipeline` commands per round.
//!
//! Commands are built from precomputed templates (everything but the key, value or member
//! bytes is fixed for a run) into a buffer reused across rounds. Replies are measured with
//! [`wire::resp::skip_reply`] without being built; a reply whose first byte is `-` (or RESP3's
//! blob error `!`) is an error.

use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use wire::resp::{encode, skip_reply, Limits};

use crate::args::WriteType;
use crate::clock::micros;
use crate::error::BenchError;
use crate::keys::member;
use crate::setup::{ConnCtx, Setup};
use crate::workload::{Action, OpKind, Slot};

/// The argument after the key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arg {
    None,
    Value,
    Member,
    One,
}

/// A command with a fixed shape: `head` + key + `mid` + argument + `\r\n`.
#[derive(Clone, Debug)]
struct Template {
    head: Vec<u8>,
    mid: Vec<u8>,
    arg: Arg,
}

impl Template {
    fn new(name: &[u8], key_size: usize, arg: Arg, arg_len: usize) -> Template {
        let mut head = Vec::new();
        encode::array_header(&mut head, if arg == Arg::None { 2 } else { 3 });
        encode::bulk(&mut head, name);
        encode::bulk_header(&mut head, key_size);
        let mut mid = b"\r\n".to_vec();
        if arg != Arg::None {
            encode::bulk_header(&mut mid, arg_len);
        }
        Template { head, mid, arg }
    }

    #[inline]
    fn push(&self, out: &mut Vec<u8>, key: &[u8], setup: &Setup, variant: u16) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(key);
        out.extend_from_slice(&self.mid);
        let arg: &[u8] = match self.arg {
            Arg::None => return,
            Arg::Value => setup.values.get(usize::from(variant)),
            Arg::Member => member(usize::from(variant)),
            Arg::One => b"1",
        };
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// The read and write commands of a run.
#[derive(Clone, Debug)]
pub struct Commands {
    read: Template,
    write: Template,
}

impl Commands {
    /// Commands for `write_type` with keys of `key_size` and values of `value_size` bytes:
    /// `GET`/`SET`, `GET`/`INCRBY k 1`, or `SISMEMBER`/`SADD` with a 3-byte member.
    pub fn new(write_type: WriteType, key_size: usize, value_size: usize) -> Commands {
        let member_len = member(0).len();
        let (read, write) = match write_type {
            WriteType::Lww => (
                Template::new(b"GET", key_size, Arg::None, 0),
                Template::new(b"SET", key_size, Arg::Value, value_size),
            ),
            WriteType::Counter => (
                Template::new(b"GET", key_size, Arg::None, 0),
                Template::new(b"INCRBY", key_size, Arg::One, 1),
            ),
            WriteType::Orset => (
                Template::new(b"SISMEMBER", key_size, Arg::Member, member_len),
                Template::new(b"SADD", key_size, Arg::Member, member_len),
            ),
        };
        Commands { read, write }
    }

    /// Appends the command for `slot`'s `action`.
    #[inline]
    pub fn push(&self, out: &mut Vec<u8>, action: Action, setup: &Setup, slot: &Slot) {
        let t = match action {
            Action::Read => &self.read,
            Action::Write => &self.write,
        };
        t.push(out, setup.keys.get(slot.key), setup, slot.variant);
    }
}

/// One RESP connection with its buffers.
struct Conn {
    stream: TcpStream,
    addr: String,
    out: Vec<u8>,
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

const LIMITS: Limits = Limits::DEFAULT;

impl Conn {
    async fn connect(addr: &str) -> Result<Conn, BenchError> {
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|source| BenchError::Connect {
                addr: addr.to_string(),
                source,
            })?;
        let _ = stream.set_nodelay(true);
        Ok(Conn {
            stream,
            addr: addr.to_string(),
            out: Vec::with_capacity(16 * 1024),
            buf: vec![0; 64 * 1024],
            start: 0,
            end: 0,
        })
    }

    fn failed(&self, reason: impl ToString) -> BenchError {
        BenchError::Connection {
            addr: self.addr.clone(),
            reason: reason.to_string(),
        }
    }

    /// Reads more bytes into the buffer.
    async fn fill(&mut self) -> Result<(), BenchError> {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let len = self.buf.len() * 2;
                self.buf.resize(len, 0);
            }
        }
        match self.stream.read(&mut self.buf[self.end..]).await {
            Ok(0) => Err(self.failed("closed by the server")),
            Ok(n) => {
                self.end += n;
                Ok(())
            }
            Err(e) => Err(self.failed(e)),
        }
    }

    /// Sends the requests of `phase` for `slots`, then reads their replies, adding each
    /// reply's latency (from the write to the read that brought it in) to its slot.
    async fn exec(
        &mut self,
        setup: &Setup,
        commands: &Commands,
        slots: &mut [Slot],
        phase: usize,
        first_error: &mut Option<String>,
    ) -> Result<(), BenchError> {
        self.out.clear();
        let mut expected = 0;
        for slot in slots.iter() {
            if let Some(action) = slot.kind.action(phase) {
                commands.push(&mut self.out, action, setup, slot);
                expected += 1;
            }
        }
        if expected == 0 {
            return Ok(());
        }
        let sent = Instant::now();
        if let Err(e) = self.stream.write_all(&self.out).await {
            return Err(self.failed(e));
        }
        let mut pending = slots.iter_mut().filter(|s| s.kind.action(phase).is_some());
        let mut arrived = sent;
        let mut got = 0;
        while got < expected {
            let available = &self.buf[self.start..self.end];
            match skip_reply(available, &LIMITS) {
                Ok(Some(len)) => {
                    let reply = &available[..len];
                    let error = matches!(reply.first(), Some(b'-' | b'!'));
                    if error && first_error.is_none() {
                        *first_error = Some(error_text(reply));
                    }
                    if let Some(slot) = pending.next() {
                        slot.latency_us += micros(arrived - sent);
                        slot.error |= error;
                    }
                    self.start += len;
                    got += 1;
                }
                Ok(None) => {
                    self.fill().await?;
                    arrived = Instant::now();
                }
                Err(e) => {
                    return Err(BenchError::Protocol {
                        addr: self.addr.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        }
        Ok(())
    }
}

/// The text of an error reply, without the type byte and line end.
fn error_text(reply: &[u8]) -> String {
    let text = reply.strip_prefix(b"-").unwrap_or(reply);
    let text = text.strip_suffix(b"\r\n").unwrap_or(text);
    String::from_utf8_lossy(text).into_owned()
}

/// Runs one connection until its source is exhausted or the run stops.
pub(crate) async fn run(ctx: &mut ConnCtx) -> Result<(), BenchError> {
    let setup = ctx.setup.clone();
    let commands = Commands::new(setup.write_type, setup.keys.key_size(), setup.values.size());
    let mut conn = Conn::connect(&setup.addr).await?;
    let mut slots = Vec::new();
    let mut first_error = None;
    while ctx.next_round(&mut slots).await {
        conn.exec(&setup, &commands, &mut slots, 0, &mut first_error)
            .await?;
        if slots.iter().any(|s| s.kind == OpKind::Rmw) {
            conn.exec(&setup, &commands, &mut slots, 1, &mut first_error)
                .await?;
        }
        ctx.control
            .finish_round(&slots, &mut ctx.stats.borrow_mut(), &mut first_error);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{BenchArgs, Protocol};
    use wire::resp::reply::command;

    #[test]
    fn templates_match_the_wire_encoder() {
        let args = BenchArgs {
            keys: 100,
            value_size: 10,
            ..BenchArgs::default()
        };
        let setup = Setup::local(&args, Protocol::Resp);
        let key = setup.keys.get(7).to_vec();
        let slot = Slot::new(7, OpKind::Rmw, 3);
        let cases: [(WriteType, [&[&[u8]]; 2]); 3] = [
            (
                WriteType::Lww,
                [&[b"GET", &key], &[b"SET", &key, setup.values.get(3)]],
            ),
            (
                WriteType::Counter,
                [&[b"GET", &key], &[b"INCRBY", &key, b"1"]],
            ),
            (
                WriteType::Orset,
                [&[b"SISMEMBER", &key, b"m03"], &[b"SADD", &key, b"m03"]],
            ),
        ];
        for (t, [read, write]) in cases {
            let c = Commands::new(t, 16, 10);
            for (action, args) in [(Action::Read, read), (Action::Write, write)] {
                let mut got = Vec::new();
                c.push(&mut got, action, &setup, &slot);
                let mut want = Vec::new();
                command(&mut want, args);
                assert_eq!(
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&want)
                );
            }
        }
        assert_eq!(error_text(b"-WRONGTYPE bad\r\n"), "WRONGTYPE bad");
    }
}
