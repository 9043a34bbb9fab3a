//! The RESP target: a client connection's bytes on the RESP port.
//!
//! Input: one byte of choices (bit 0: a node with users; bits 1–7: how the bytes are split
//! into reads, 0 = one read), then the bytes the client sends.
//!
//! Checks:
//! - the incremental parser ([`CommandParser`]) fed the bytes in reads gives the same
//!   commands and the same error as parsing the whole buffer, under the node's limits and
//!   under small ones (which reach every limit);
//! - every command parsed, re-encoded as multibulk, parses back to the same arguments;
//! - the node (RESP codec, commands, cores of a two-worker node in memory) answers every
//!   command with exactly one well-formed reply (a protocol error with one error reply,
//!   then the connection closes), and stops after `QUIT`;
//! - the client-side reply parser, given the same bytes as a server's, agrees with its
//!   measuring pass (`skip_reply`) and never panics.

use node::fuzzing::{self, Port};
use wire::resp::{self, parse_command, Args, CommandParser, Limits};

use crate::input;

/// One outcome of parsing: a command's arguments, or the error that ends the connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A command (empty for a blank line, `*0` or `*-1`).
    Command(Vec<Vec<u8>>),
    /// A protocol error.
    Error(String),
}

/// Limits small enough for short inputs to reach each of them.
pub const SMALL: Limits = Limits {
    max_bulk_len: 64,
    max_args: 8,
    max_inline_len: 48,
    max_request_len: 160,
};

/// The limits the RESP port of the in-memory node parses with (as `Resp::new` sets them).
pub fn node_limits() -> Limits {
    let l = fuzzing::config(false).limits;
    Limits {
        max_bulk_len: l.max_frame_size,
        max_args: l.max_request_items.saturating_add(1),
        max_inline_len: 64 * 1024,
        max_request_len: l.max_request_bytes,
    }
}

/// Parses `buf` whole with the stateless parser, command after command.
pub fn parse_whole(buf: &[u8], limits: &Limits) -> Vec<Parsed> {
    let mut out = Vec::new();
    let mut args = Args::new();
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        match parse_command(rest, limits, &mut args) {
            Ok(None) => break,
            Ok(Some(n)) => {
                assert!(
                    n > 0 && n <= rest.len(),
                    "consumed {n} of {} bytes",
                    rest.len()
                );
                out.push(Parsed::Command(
                    args.iter(rest).map(<[u8]>::to_vec).collect(),
                ));
                pos += n;
            }
            Err(e) => {
                out.push(Parsed::Error(e.to_string()));
                break;
            }
        }
    }
    out
}

/// Parses `reads` as a connection does: one [`CommandParser`], the buffer growing read by
/// read and shrinking by each command taken.
pub fn parse_incremental(reads: &[&[u8]], limits: &Limits) -> Vec<Parsed> {
    let mut out = Vec::new();
    let mut parser = CommandParser::new();
    let mut args = Args::new();
    let mut buf: Vec<u8> = Vec::new();
    for read in reads {
        buf.extend_from_slice(read);
        loop {
            if buf.is_empty() {
                break;
            }
            match parser.parse(&buf, limits, &mut args) {
                Ok(None) => break,
                Ok(Some(n)) => {
                    assert!(
                        n > 0 && n <= buf.len(),
                        "consumed {n} of {} bytes",
                        buf.len()
                    );
                    out.push(Parsed::Command(
                        args.iter(&buf).map(<[u8]>::to_vec).collect(),
                    ));
                    buf.drain(..n);
                }
                Err(e) => {
                    out.push(Parsed::Error(e.to_string()));
                    return out;
                }
            }
        }
    }
    out
}

/// The RESP target (see the module docs).
pub fn resp(data: &[u8]) {
    let Some((&choices, body)) = data.split_first() else {
        return;
    };
    let with_users = choices & 1 == 1;
    let reads = input::reads(body, choices >> 1);

    for limits in [SMALL, node_limits()] {
        let whole = parse_whole(body, &limits);
        let incremental = parse_incremental(&reads, &limits);
        assert_eq!(
            whole, incremental,
            "the same bytes parsed whole and in reads differ"
        );
        for parsed in &whole {
            if let Parsed::Command(args) = parsed {
                if args.is_empty() {
                    continue;
                }
                let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let mut encoded = Vec::new();
                resp::reply::command(&mut encoded, &refs);
                let back = parse_whole(&encoded, &node_limits());
                assert_eq!(back, vec![parsed.clone()], "a command re-encoded differs");
            }
        }
    }

    // The node: one reply per command that runs.
    let session = fuzzing::serve_client(Port::Resp, with_users, &reads);
    let expected = expected_replies(&parse_whole(body, &node_limits()));
    let replies = count_replies(&session.out);
    assert!(
        expected.admits(replies, session.closed),
        "replies written for the commands sent: {replies}, closed: {}; expected {} replies, \
         closed: {} (or closed after a CLIENT KILL, from reply {:?})",
        session.closed,
        expected.replies,
        expected.closed,
        expected.kill_from,
    );

    client_side(body);
}

/// What the node should write for `parsed`.
struct Expected {
    replies: usize,
    closed: bool,
    /// A `CLIENT KILL` may name this very connection (its id, address, user, …; as in
    /// Redis, it is then closed after the reply that ran it): from the reply of the first
    /// one on, the node may close the connection after any reply.
    kill_from: Option<usize>,
}

impl Expected {
    fn admits(&self, replies: usize, closed: bool) -> bool {
        (replies, closed) == (self.replies, self.closed)
            || (closed
                && self
                    .kill_from
                    .is_some_and(|k| (k..=self.replies).contains(&replies)))
    }
}

fn expected_replies(parsed: &[Parsed]) -> Expected {
    let mut replies = 0;
    let mut kill_from = None;
    for p in parsed {
        match p {
            Parsed::Command(args) if args.is_empty() => {}
            Parsed::Command(args) => {
                replies += 1;
                if args.len() > 1
                    && args[0].eq_ignore_ascii_case(b"CLIENT")
                    && args[1].eq_ignore_ascii_case(b"KILL")
                {
                    kill_from.get_or_insert(replies);
                }
                if args[0].eq_ignore_ascii_case(b"QUIT") {
                    return Expected {
                        replies,
                        closed: true,
                        kill_from,
                    };
                }
            }
            Parsed::Error(_) => {
                return Expected {
                    replies: replies + 1,
                    closed: true,
                    kill_from,
                }
            }
        }
    }
    Expected {
        replies,
        closed: false,
        kill_from,
    }
}

/// Counts the replies in `out`, which must be whole, well-formed replies.
fn count_replies(out: &[u8]) -> usize {
    let limits = Limits {
        max_bulk_len: usize::MAX,
        max_args: usize::MAX,
        ..Limits::DEFAULT
    };
    let mut pos = 0;
    let mut n = 0;
    while pos < out.len() {
        match resp::parse_reply(&out[pos..], &limits) {
            Ok(Some((_, len))) => {
                assert!(len > 0);
                pos += len;
                n += 1;
            }
            Ok(None) => panic!(
                "an incomplete reply at byte {pos}: {:?}",
                String::from_utf8_lossy(&out[pos..])
            ),
            Err(e) => panic!(
                "a malformed reply at byte {pos} ({e}): {:?}",
                String::from_utf8_lossy(&out[pos..])
            ),
        }
    }
    n
}

/// The client's reply parser on the same bytes: its measuring pass and its parse agree.
fn client_side(buf: &[u8]) {
    let mut pos = 0;
    while pos < buf.len() {
        let rest = &buf[pos..];
        let skipped = resp::skip_reply(rest, &SMALL);
        let parsed = resp::parse_reply(rest, &SMALL);
        match (skipped, parsed) {
            (Ok(Some(a)), Ok(Some((_, b)))) => {
                assert_eq!(
                    a, b,
                    "skip_reply and parse_reply measure a reply differently"
                );
                assert!(a > 0);
                pos += a;
            }
            (Ok(None), Ok(None)) | (Err(_), Err(_)) => return,
            (s, p) => panic!("skip_reply {s:?} but parse_reply {p:?}"),
        }
    }
}
