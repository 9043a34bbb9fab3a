//! Client-side reply parser and command encoder, used by the load generator and by tests.
//!
//! [`parse_reply`] reads one complete reply of any RESP2 or RESP3 type, including RESP3's
//! streamed strings (`$?` with `;<len>` chunks) and streamed aggregates (`*?`, `~?`, `%?`...
//! closed by `.`), and attributes (`|`), which it attaches to the reply they annotate.
//! [`skip_reply`] finds the length of the next reply without building it.
//!
//! Both are iterative (an explicit stack, never recursion), so deeply nested input cannot
//! overflow the thread's stack; nesting beyond [`MAX_REPLY_DEPTH`] aggregates is rejected.
//! Like the command parser, they return `Ok(None)` for a prefix of a reply and never panic on
//! any input.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use super::encode;
use super::parse::{Limits, ParseError};

mod lines;
use lines::*;

/// Deepest nesting of aggregates [`parse_reply`] and [`skip_reply`] accept (attributes count
/// as a level); deeper input is a [`ParseError::Protocol`].
pub const MAX_REPLY_DEPTH: usize = 512;

/// Longest line accepted for a number (`:`, `,`, and the lengths of strings and aggregates).
const MAX_NUMBER_LINE: usize = 128;

/// One reply from a server.
///
/// Which variants appear depends on the protocol version: a RESP2 server sends a missing value
/// as `Bulk(None)` or `Array(None)` and maps as flat arrays; a RESP3 server sends `Null`,
/// `Map`, `Set`, `Double`, `Boolean`, `Verbatim`, `Push`...
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `+<text>`: a simple string such as `OK`.
    Simple(Vec<u8>),
    /// `-<text>` or RESP3's blob error `!<len>`: the error message, code included
    /// (`ERR ...`, `WRONGTYPE ...`).
    Error(Vec<u8>),
    /// `:<n>`.
    Integer(i64),
    /// `$<len>` (or RESP3's streamed `$?`, reassembled); `None` for RESP2's null `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*<n>` (or `*?`); `None` for RESP2's null array `*-1`.
    Array(Option<Vec<Reply>>),
    /// RESP3's `_`.
    Null,
    /// RESP3's `,<double>` (including `inf`, `-inf`, `nan`).
    Double(f64),
    /// RESP3's `#t` / `#f`.
    Boolean(bool),
    /// RESP3's `(<digits>`: an integer of any size, as its decimal text.
    BigNumber(Vec<u8>),
    /// RESP3's `=<len>`: text in a format such as `txt` or `mkd`.
    Verbatim {
        /// The three-byte format, e.g. `*b"txt"`.
        format: [u8; 3],
        /// The text after `<format>:`.
        text: Vec<u8>,
    },
    /// RESP3's `%<n>`: key/value pairs in the order received.
    Map(Vec<(Reply, Reply)>),
    /// RESP3's `~<n>`.
    Set(Vec<Reply>),
    /// RESP3's `><n>`: an out-of-band message (pub/sub, invalidation).
    Push(Vec<Reply>),
    /// RESP3's `|<n>`: attributes (key/value pairs) annotating the reply that follows them.
    Attribute {
        /// The attribute pairs.
        attrs: Vec<(Reply, Reply)>,
        /// The reply they annotate.
        reply: Box<Reply>,
    },
}

/// Parses one complete reply from the front of `buf`: `Ok(Some((reply, consumed)))`, or
/// `Ok(None)` if `buf` holds only part of one.
///
/// Strings are limited to `limits.max_bulk_len` bytes and aggregates to `limits.max_args`
/// elements (pairs, for maps); `limits.max_inline_len` is not used.
///
/// # Errors
/// [`ParseError::TooLarge`] for a string or aggregate over the limits,
/// [`ParseError::Protocol`] for anything malformed, including nesting deeper than
/// [`MAX_REPLY_DEPTH`]. The stream cannot be resynchronised after either.
pub fn parse_reply(buf: &[u8], limits: &Limits) -> Result<Option<(Reply, usize)>, ParseError> {
    // Validate and measure first: incomplete input then costs no allocation, and the builder
    // only ever sees a complete, valid reply.
    let Some(len) = skip_reply(buf, limits)? else {
        return Ok(None);
    };
    let reply = buf.get(..len).unwrap_or_default();
    let mut builder = Builder::new(limits, len);
    match drive(reply, limits, &mut builder)? {
        Some(n) if n == len => builder.finish().map(|r| Some((r, len))),
        _ => Err(internal_error()),
    }
}

/// Cheap skip for benchmarks: length of the next complete reply without building it.
///
/// Accepts and rejects exactly what [`parse_reply`] does, and allocates only for replies
/// nested more than 16 levels deep.
///
/// # Errors
/// As [`parse_reply`].
pub fn skip_reply(buf: &[u8], limits: &Limits) -> Result<Option<usize>, ParseError> {
    // Fast path: most replies are not aggregates.
    match read_item(buf, 0, limits)? {
        None => Ok(None),
        Some((Item::Open(..) | Item::End, _)) => drive(buf, limits, &mut Skip),
        Some((_, len)) => Ok(Some(len)),
    }
}

/// Encodes a command as multibulk (client side): `*<n>\r\n` then `$<len>\r\n<arg>\r\n` for
/// each argument.
pub fn command(out: &mut Vec<u8>, args: &[&[u8]]) {
    let len: usize = args.iter().map(|a| a.len() + 16).sum();
    out.reserve(len + 16);
    encode::array_header(out, args.len());
    for arg in args {
        encode::bulk(out, arg);
    }
}

fn internal_error() -> ParseError {
    ParseError::protocol("internal error: reply parsed inconsistently")
}

/// An aggregate type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Array,
    Set,
    Map,
    Push,
    Attribute,
}

impl Kind {
    /// Whether the elements come in key/value pairs.
    fn pairs(self) -> bool {
        matches!(self, Kind::Map | Kind::Attribute)
    }
}

/// One token of the reply stream.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Item<'a> {
    Simple(&'a [u8]),
    Error(&'a [u8]),
    Integer(i64),
    Bulk(Option<&'a [u8]>),
    /// A streamed string's chunks, from the first `;` to the end of the closing `;0\r\n`.
    StreamedBulk(&'a [u8]),
    NullArray,
    Null,
    Double(f64),
    Boolean(bool),
    BigNumber(&'a [u8]),
    Verbatim([u8; 3], &'a [u8]),
    /// An aggregate header; `None` for a streamed aggregate (ends at `End`).
    Open(Kind, Option<usize>),
    /// `.`: the end of a streamed aggregate.
    End,
}

/// Reads the token starting at `pos`: `Ok(Some((item, next)))`, or `Ok(None)` if incomplete.
fn read_item<'a>(
    buf: &'a [u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(Item<'a>, usize)>, ParseError> {
    let Some(&kind) = buf.get(pos) else {
        return Ok(None);
    };
    let body = pos + 1;
    macro_rules! line {
        ($reader:expr) => {
            match $reader? {
                Some(found) => found,
                None => return Ok(None),
            }
        };
    }
    let item = match kind {
        b'+' | b'-' | b'(' => {
            let (line, next) = line!(text_line(buf, body, limits));
            let item = match kind {
                b'+' => Item::Simple(line),
                b'-' => Item::Error(line),
                _ if is_big_number(line) => Item::BigNumber(line),
                _ => return Err(ParseError::protocol("invalid big number")),
            };
            (item, next)
        }
        b':' => {
            let (line, next) = line!(number_line(buf, body, "invalid integer"));
            let n = parse_integer(line).ok_or_else(|| ParseError::protocol("invalid integer"))?;
            (Item::Integer(n), next)
        }
        b',' => {
            let (line, next) = line!(number_line(buf, body, "invalid double"));
            let d = std::str::from_utf8(line)
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
                .ok_or_else(|| ParseError::protocol("invalid double"))?;
            (Item::Double(d), next)
        }
        b'#' => match line!(number_line(buf, body, "invalid boolean")) {
            (b"t", next) => (Item::Boolean(true), next),
            (b"f", next) => (Item::Boolean(false), next),
            _ => return Err(ParseError::protocol("invalid boolean")),
        },
        b'_' => match line!(number_line(buf, body, "invalid null")) {
            (b"", next) => (Item::Null, next),
            _ => return Err(ParseError::protocol("invalid null")),
        },
        b'.' => match line!(number_line(buf, body, "invalid end marker")) {
            (b"", next) => (Item::End, next),
            _ => return Err(ParseError::protocol("invalid end marker")),
        },
        b'$' | b'!' | b'=' => {
            let (line, start) = line!(number_line(buf, body, "invalid bulk length"));
            if kind == b'$' && line == b"?" {
                let end = line!(walk_chunks(buf, start, limits, |_| {}));
                let chunks = buf.get(start..end).unwrap_or_default();
                (Item::StreamedBulk(chunks), end)
            } else if kind == b'$' && line == b"-1" {
                (Item::Bulk(None), start)
            } else {
                let len = string_length(line, limits)?;
                let (data, next) = line!(read_blob(buf, start, len));
                let item = match kind {
                    b'$' => Item::Bulk(Some(data)),
                    b'!' => Item::Error(data),
                    _ => match data {
                        [a, b, c, b':', text @ ..] => Item::Verbatim([*a, *b, *c], text),
                        _ => return Err(ParseError::protocol("invalid verbatim string")),
                    },
                };
                (item, next)
            }
        }
        b'*' | b'~' | b'%' | b'|' | b'>' => {
            let kind = match kind {
                b'*' => Kind::Array,
                b'~' => Kind::Set,
                b'%' => Kind::Map,
                b'|' => Kind::Attribute,
                _ => Kind::Push,
            };
            let (line, next) = line!(number_line(buf, body, "invalid multibulk length"));
            if line == b"?" {
                (Item::Open(kind, None), next)
            } else if kind == Kind::Array && line == b"-1" {
                (Item::NullArray, next)
            } else {
                let n = parse_length(line)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| ParseError::protocol("invalid multibulk length"))?;
                if n > limits.max_args {
                    return Err(ParseError::too_large("invalid multibulk length"));
                }
                (Item::Open(kind, Some(n)), next)
            }
        }
        other => {
            let text = format!("invalid reply type byte {}", describe_byte(other));
            return Err(ParseError::Protocol(text));
        }
    };
    Ok(Some(item))
}

/// Receives the structure found by [`drive`].
trait Sink<'a> {
    /// A complete non-aggregate reply.
    fn scalar(&mut self, item: Item<'a>) -> Result<(), ParseError>;
    /// The start of an aggregate.
    fn open(&mut self, kind: Kind, len: Option<usize>);
    /// The end of the innermost open aggregate.
    fn close(&mut self) -> Result<(), ParseError>;
}

/// A sink that builds nothing.
struct Skip;

impl<'a> Sink<'a> for Skip {
    fn scalar(&mut self, _: Item<'a>) -> Result<(), ParseError> {
        Ok(())
    }

    fn open(&mut self, _: Kind, _: Option<usize>) {}

    fn close(&mut self) -> Result<(), ParseError> {
        Ok(())
    }
}

/// An open aggregate while [`drive`] walks a reply.
#[derive(Clone, Copy, Debug)]
struct Frame {
    kind: Kind,
    /// Elements still expected, or `None` for a streamed aggregate.
    remaining: Option<usize>,
    /// For a streamed aggregate: whether an odd number of elements has been seen so far.
    odd: bool,
    /// Whether an attribute was just read and still awaits the reply it annotates.
    attr_pending: bool,
}

const INLINE_FRAMES: usize = 16;

/// A stack of frames that lives on the call stack up to [`INLINE_FRAMES`] deep.
struct FrameStack {
    inline: [Frame; INLINE_FRAMES],
    len: usize,
    spill: Vec<Frame>,
}

impl FrameStack {
    fn new() -> Self {
        let empty = Frame {
            kind: Kind::Array,
            remaining: None,
            odd: false,
            attr_pending: false,
        };
        FrameStack {
            inline: [empty; INLINE_FRAMES],
            len: 0,
            spill: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.len
    }

    fn push(&mut self, frame: Frame) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = frame,
            None => self.spill.push(frame),
        }
        self.len += 1;
    }

    fn pop(&mut self) {
        if self.len > INLINE_FRAMES {
            self.spill.pop();
        }
        self.len = self.len.saturating_sub(1);
    }

    fn last_mut(&mut self) -> Option<&mut Frame> {
        if self.len > INLINE_FRAMES {
            self.spill.last_mut()
        } else {
            self.inline.get_mut(self.len.checked_sub(1)?)
        }
    }
}

/// What the item just read completed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Done {
    /// A reply (an element of the enclosing aggregate).
    Element,
    /// An attribute, which is not an element: the reply it annotates comes next.
    Attribute,
}

impl Done {
    fn of(kind: Kind) -> Done {
        if kind == Kind::Attribute {
            Done::Attribute
        } else {
            Done::Element
        }
    }
}

/// Walks one reply from the start of `buf`, reporting its structure to `sink`; returns its
/// length, or `None` if incomplete.
fn drive<'a, S: Sink<'a>>(
    buf: &'a [u8],
    limits: &Limits,
    sink: &mut S,
) -> Result<Option<usize>, ParseError> {
    let mut stack = FrameStack::new();
    let mut pos = 0;
    loop {
        let Some((item, next)) = read_item(buf, pos, limits)? else {
            return Ok(None);
        };
        pos = next;
        let mut done = match item {
            Item::Open(kind, len) => {
                if stack.len() >= MAX_REPLY_DEPTH {
                    return Err(ParseError::protocol("reply nested too deeply"));
                }
                let remaining = match len {
                    Some(n) if kind.pairs() => Some(
                        n.checked_mul(2)
                            .ok_or_else(|| ParseError::too_large("invalid multibulk length"))?,
                    ),
                    other => other,
                };
                sink.open(kind, len);
                if remaining == Some(0) {
                    sink.close()?;
                    Done::of(kind)
                } else {
                    stack.push(Frame {
                        kind,
                        remaining,
                        odd: false,
                        attr_pending: false,
                    });
                    continue;
                }
            }
            Item::End => {
                let frame = match stack.last_mut() {
                    Some(frame) if frame.remaining.is_none() => *frame,
                    _ => return Err(ParseError::protocol("unexpected end of aggregate")),
                };
                if frame.attr_pending {
                    return Err(ParseError::protocol("attribute without a reply"));
                }
                if frame.kind.pairs() && frame.odd {
                    return Err(ParseError::protocol("map without a value for its last key"));
                }
                stack.pop();
                sink.close()?;
                Done::of(frame.kind)
            }
            scalar => {
                sink.scalar(scalar)?;
                Done::Element
            }
        };
        // Account for what completed in the enclosing aggregates, closing those it fills.
        loop {
            let Some(frame) = stack.last_mut() else {
                if done == Done::Element {
                    return Ok(Some(pos));
                }
                // A top-level attribute: the reply it annotates follows.
                break;
            };
            if done == Done::Attribute {
                frame.attr_pending = true;
                break;
            }
            frame.attr_pending = false;
            match &mut frame.remaining {
                None => {
                    frame.odd = !frame.odd;
                    break;
                }
                Some(remaining) => {
                    *remaining = remaining.saturating_sub(1);
                    if *remaining > 0 {
                        break;
                    }
                    done = Done::of(frame.kind);
                    stack.pop();
                    sink.close()?;
                }
            }
        }
    }
}

/// An aggregate being built (or, at the bottom of the stack, the top level).
struct Level {
    kind: Option<Kind>,
    items: Vec<Reply>,
    /// Attributes waiting to be attached to the next reply at this level.
    attrs: Option<Vec<(Reply, Reply)>>,
}

/// A sink that builds the [`Reply`].
struct Builder<'l> {
    limits: &'l Limits,
    /// Upper bound on the elements of any aggregate (each takes at least three bytes).
    max_elements: usize,
    levels: Vec<Level>,
}

impl<'l> Builder<'l> {
    fn new(limits: &'l Limits, reply_len: usize) -> Self {
        Builder {
            limits,
            max_elements: reply_len / 3,
            levels: vec![Level {
                kind: None,
                items: Vec::with_capacity(1),
                attrs: None,
            }],
        }
    }

    fn push(&mut self, reply: Reply) -> Result<(), ParseError> {
        let level = self.levels.last_mut().ok_or_else(internal_error)?;
        let reply = match level.attrs.take() {
            Some(attrs) => Reply::Attribute {
                attrs,
                reply: Box::new(reply),
            },
            None => reply,
        };
        level.items.push(reply);
        Ok(())
    }

    fn finish(mut self) -> Result<Reply, ParseError> {
        match self.levels.pop() {
            Some(Level {
                kind: None,
                mut items,
                attrs: None,
            }) if items.len() == 1 && self.levels.is_empty() => {
                items.pop().ok_or_else(internal_error)
            }
            _ => Err(internal_error()),
        }
    }
}

/// Splits a flat key, value, key, value... list into pairs.
fn into_pairs(items: Vec<Reply>) -> Result<Vec<(Reply, Reply)>, ParseError> {
    let mut pairs = Vec::with_capacity(items.len() / 2);
    let mut items = items.into_iter();
    while let Some(key) = items.next() {
        let value = items.next().ok_or_else(internal_error)?;
        pairs.push((key, value));
    }
    Ok(pairs)
}

impl<'a> Sink<'a> for Builder<'_> {
    fn scalar(&mut self, item: Item<'a>) -> Result<(), ParseError> {
        let reply = match item {
            Item::Simple(s) => Reply::Simple(s.to_vec()),
            Item::Error(e) => Reply::Error(e.to_vec()),
            Item::Integer(n) => Reply::Integer(n),
            Item::Bulk(b) => Reply::Bulk(b.map(<[u8]>::to_vec)),
            Item::StreamedBulk(chunks) => {
                let mut data = Vec::new();
                walk_chunks(chunks, 0, self.limits, |c| data.extend_from_slice(c))?;
                Reply::Bulk(Some(data))
            }
            Item::NullArray => Reply::Array(None),
            Item::Null => Reply::Null,
            Item::Double(d) => Reply::Double(d),
            Item::Boolean(b) => Reply::Boolean(b),
            Item::BigNumber(n) => Reply::BigNumber(n.to_vec()),
            Item::Verbatim(format, text) => Reply::Verbatim {
                format,
                text: text.to_vec(),
            },
            Item::Open(..) | Item::End => return Err(internal_error()),
        };
        self.push(reply)
    }

    fn open(&mut self, kind: Kind, len: Option<usize>) {
        let elements = len.map_or(0, |n| if kind.pairs() { n.saturating_mul(2) } else { n });
        self.levels.push(Level {
            kind: Some(kind),
            items: Vec::with_capacity(elements.min(self.max_elements)),
            attrs: None,
        });
    }

    fn close(&mut self) -> Result<(), ParseError> {
        let level = self.levels.pop().ok_or_else(internal_error)?;
        let items = level.items;
        let reply = match level.kind.ok_or_else(internal_error)? {
            Kind::Array => Reply::Array(Some(items)),
            Kind::Set => Reply::Set(items),
            Kind::Push => Reply::Push(items),
            Kind::Map => Reply::Map(into_pairs(items)?),
            Kind::Attribute => {
                let attrs = into_pairs(items)?;
                let parent = self.levels.last_mut().ok_or_else(internal_error)?;
                parent.attrs.get_or_insert_with(Vec::new).extend(attrs);
                return Ok(());
            }
        };
        self.push(reply)
    }
}

#[cfg(test)]
mod tests;
