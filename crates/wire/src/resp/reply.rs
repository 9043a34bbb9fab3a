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
use super::parse::{check_crlf, Limits, ParseError};

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

/// Outcome of looking for a `\r\n`-terminated line.
enum Line<'a> {
    Incomplete,
    /// No `\r` within the allowed length.
    TooLong,
    /// A `\n` without `\r`, or a `\r` followed by something other than `\n`.
    Bad,
    /// The line's content and the position after its `\r\n`.
    Done(&'a [u8], usize),
}

/// Reads a line of at most `max` bytes starting at `pos`.
fn read_line(buf: &[u8], pos: usize, max: usize) -> Line<'_> {
    let rest = buf.get(pos..).unwrap_or_default();
    let window = rest.get(..max.saturating_add(1)).unwrap_or(rest);
    match window.iter().position(|&b| b == b'\r' || b == b'\n') {
        Some(i) => match (window.get(i), rest.get(i + 1)) {
            (Some(b'\r'), Some(b'\n')) => {
                Line::Done(rest.get(..i).unwrap_or_default(), pos + i + 2)
            }
            (Some(b'\r'), None) => Line::Incomplete,
            _ => Line::Bad,
        },
        None if rest.len() > max => Line::TooLong,
        None => Line::Incomplete,
    }
}

/// Reads a line holding text (simple strings, errors, big numbers).
fn text_line<'a>(
    buf: &'a [u8],
    pos: usize,
    limits: &Limits,
) -> Result<Option<(&'a [u8], usize)>, ParseError> {
    match read_line(buf, pos, limits.max_bulk_len) {
        Line::Incomplete => Ok(None),
        Line::TooLong => Err(ParseError::too_large("line too long")),
        Line::Bad => Err(ParseError::protocol("expected CRLF at end of line")),
        Line::Done(line, next) => Ok(Some((line, next))),
    }
}

/// Reads a short line holding a number; `what` is the error text if it is malformed.
fn number_line<'a>(
    buf: &'a [u8],
    pos: usize,
    what: &str,
) -> Result<Option<(&'a [u8], usize)>, ParseError> {
    match read_line(buf, pos, MAX_NUMBER_LINE) {
        Line::Incomplete => Ok(None),
        Line::TooLong | Line::Bad => Err(ParseError::protocol(what)),
        Line::Done(line, next) => Ok(Some((line, next))),
    }
}

/// A length: `-1` or a non-negative decimal without sign or leading zeros.
fn parse_length(line: &[u8]) -> Option<i64> {
    if line == b"-1" {
        return Some(-1);
    }
    match line {
        [b'0'] => Some(0),
        [b'1'..=b'9', ..] => parse_digits(line).and_then(|v| i64::try_from(v).ok()),
        _ => None,
    }
}

/// One or more ASCII digits as a `u64`.
fn parse_digits(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &c| {
        if c.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(c - b'0'))
        } else {
            None
        }
    })
}

/// `[+-]?<digits>` within the range of an `i64`.
fn parse_integer(line: &[u8]) -> Option<i64> {
    match line {
        [b'-', digits @ ..] => 0i64.checked_sub_unsigned(parse_digits(digits)?),
        [b'+', digits @ ..] => i64::try_from(parse_digits(digits)?).ok(),
        digits => i64::try_from(parse_digits(digits)?).ok(),
    }
}

/// `[+-]?<digits>`, of any length.
fn is_big_number(line: &[u8]) -> bool {
    let digits = match line {
        [b'-' | b'+', digits @ ..] => digits,
        digits => digits,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// Reads `len` bytes at `start` followed by `\r\n`.
fn read_blob(buf: &[u8], start: usize, len: usize) -> Result<Option<(&[u8], usize)>, ParseError> {
    let end = start
        .checked_add(len)
        .ok_or_else(|| ParseError::too_large("invalid bulk length"))?;
    match check_crlf(buf, end) {
        None => Ok(None),
        Some(Err(())) => Err(ParseError::protocol("expected CRLF after bulk data")),
        Some(Ok(next)) => Ok(buf.get(start..end).map(|data| (data, next))),
    }
}

/// The length of a string from its header line, checked against the limit.
fn string_length(line: &[u8], limits: &Limits) -> Result<usize, ParseError> {
    let len = parse_length(line)
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| ParseError::protocol("invalid bulk length"))?;
    if len > limits.max_bulk_len {
        return Err(ParseError::too_large("invalid bulk length"));
    }
    Ok(len)
}

/// Walks the chunks of a streamed string starting at `pos` (`;<len>\r\n<bytes>\r\n`... then
/// `;0\r\n`), handing each chunk's bytes to `chunk`; returns the position after the last one.
fn walk_chunks<'a>(
    buf: &'a [u8],
    mut pos: usize,
    limits: &Limits,
    mut chunk: impl FnMut(&'a [u8]),
) -> Result<Option<usize>, ParseError> {
    let mut total = 0usize;
    loop {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b';') => {}
            Some(_) => return Err(ParseError::protocol("expected ';' in streamed string")),
        }
        let Some((line, next)) = number_line(buf, pos + 1, "invalid chunk length")? else {
            return Ok(None);
        };
        let len = parse_length(line)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| ParseError::protocol("invalid chunk length"))?;
        if len == 0 {
            return Ok(Some(next));
        }
        total = total.saturating_add(len);
        if total > limits.max_bulk_len {
            return Err(ParseError::too_large("invalid bulk length"));
        }
        let Some((data, after)) = read_blob(buf, next, len)? else {
            return Ok(None);
        };
        chunk(data);
        pos = after;
    }
}

/// `'x'`, or `'\xHH'` for an unprintable byte.
fn describe_byte(b: u8) -> String {
    if b == b' ' || b.is_ascii_graphic() {
        format!("'{}'", char::from(b))
    } else {
        format!("'\\x{b:02x}'")
    }
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
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests {
    use super::super::encode::Version;
    use super::super::parse::{parse_command, Args};
    use super::*;
    use proptest::prelude::*;

    fn parse(buf: &[u8]) -> Result<Option<(Reply, usize)>, ParseError> {
        parse_reply(buf, &Limits::default())
    }

    /// Parses `buf` as exactly one reply, checking `skip_reply` and every prefix on the way.
    fn one(buf: &[u8]) -> Reply {
        let (reply, n) = parse(buf).unwrap().unwrap();
        assert_eq!(n, buf.len(), "{:?}", String::from_utf8_lossy(buf));
        assert_eq!(skip_reply(buf, &Limits::default()), Ok(Some(n)));
        for end in 0..buf.len() {
            assert_eq!(parse(&buf[..end]), Ok(None), "{:?}", &buf[..end]);
            assert_eq!(skip_reply(&buf[..end], &Limits::default()), Ok(None));
        }
        reply
    }

    fn bulk(b: &[u8]) -> Reply {
        Reply::Bulk(Some(b.to_vec()))
    }

    fn simple(s: &str) -> Reply {
        Reply::Simple(s.as_bytes().to_vec())
    }

    fn protocol(text: &str) -> Result<Option<(Reply, usize)>, ParseError> {
        Err(ParseError::Protocol(text.to_owned()))
    }

    #[test]
    fn resp2_types() {
        assert_eq!(one(b"+OK\r\n"), simple("OK"));
        assert_eq!(one(b"+\r\n"), simple(""));
        assert_eq!(
            one(b"-ERR unknown command\r\n"),
            Reply::Error(b"ERR unknown command".to_vec())
        );
        assert_eq!(one(b":0\r\n"), Reply::Integer(0));
        assert_eq!(one(b":-42\r\n"), Reply::Integer(-42));
        assert_eq!(one(b":+7\r\n"), Reply::Integer(7));
        assert_eq!(one(b":-9223372036854775808\r\n"), Reply::Integer(i64::MIN));
        assert_eq!(one(b":9223372036854775807\r\n"), Reply::Integer(i64::MAX));
        assert_eq!(one(b"$5\r\nhello\r\n"), bulk(b"hello"));
        assert_eq!(one(b"$0\r\n\r\n"), bulk(b""));
        assert_eq!(one(b"$4\r\n\r\n\r\n\r\n"), bulk(b"\r\n\r\n"));
        assert_eq!(one(b"$-1\r\n"), Reply::Bulk(None));
        assert_eq!(one(b"*-1\r\n"), Reply::Array(None));
        assert_eq!(one(b"*0\r\n"), Reply::Array(Some(vec![])));
        assert_eq!(
            one(b"*3\r\n:1\r\n$-1\r\n*2\r\n+a\r\n*0\r\n"),
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Bulk(None),
                Reply::Array(Some(vec![simple("a"), Reply::Array(Some(vec![]))])),
            ]))
        );
    }

    #[test]
    fn resp3_types() {
        assert_eq!(one(b"_\r\n"), Reply::Null);
        assert_eq!(one(b",1.5\r\n"), Reply::Double(1.5));
        assert_eq!(one(b",-3\r\n"), Reply::Double(-3.0));
        assert_eq!(one(b",1e+21\r\n"), Reply::Double(1e21));
        assert_eq!(one(b",inf\r\n"), Reply::Double(f64::INFINITY));
        assert_eq!(one(b",-inf\r\n"), Reply::Double(f64::NEG_INFINITY));
        assert!(matches!(one(b",nan\r\n"), Reply::Double(d) if d.is_nan()));
        assert_eq!(one(b"#t\r\n"), Reply::Boolean(true));
        assert_eq!(one(b"#f\r\n"), Reply::Boolean(false));
        assert_eq!(
            one(b"(3492890328409238509324850943850943825024385\r\n"),
            Reply::BigNumber(b"3492890328409238509324850943850943825024385".to_vec())
        );
        assert_eq!(one(b"(-12\r\n"), Reply::BigNumber(b"-12".to_vec()));
        assert_eq!(
            one(b"!21\r\nSYNTAX invalid syntax\r\n"),
            Reply::Error(b"SYNTAX invalid syntax".to_vec())
        );
        assert_eq!(
            one(b"=15\r\ntxt:Some string\r\n"),
            Reply::Verbatim {
                format: *b"txt",
                text: b"Some string".to_vec()
            }
        );
        assert_eq!(
            one(b"=4\r\nmkd:\r\n"),
            Reply::Verbatim {
                format: *b"mkd",
                text: vec![]
            }
        );
        assert_eq!(
            one(b"%2\r\n+first\r\n:1\r\n+second\r\n_\r\n"),
            Reply::Map(vec![
                (simple("first"), Reply::Integer(1)),
                (simple("second"), Reply::Null),
            ])
        );
        assert_eq!(one(b"%0\r\n"), Reply::Map(vec![]));
        assert_eq!(
            one(b"~2\r\n+a\r\n#f\r\n"),
            Reply::Set(vec![simple("a"), Reply::Boolean(false)])
        );
        assert_eq!(
            one(b">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"),
            Reply::Push(vec![bulk(b"message"), bulk(b"ch"), bulk(b"hi")])
        );
    }

    #[test]
    fn attributes_annotate_the_next_reply() {
        let attrs = || vec![(simple("ttl"), Reply::Integer(3))];
        assert_eq!(
            one(b"|1\r\n+ttl\r\n:3\r\n$1\r\nv\r\n"),
            Reply::Attribute {
                attrs: attrs(),
                reply: Box::new(bulk(b"v"))
            }
        );
        // Inside an aggregate, an attribute is not an element of its own.
        assert_eq!(
            one(b"*2\r\n:1\r\n|1\r\n+ttl\r\n:3\r\n*1\r\n:2\r\n"),
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Attribute {
                    attrs: attrs(),
                    reply: Box::new(Reply::Array(Some(vec![Reply::Integer(2)])))
                }
            ]))
        );
        // Consecutive attributes merge; an empty one annotates with nothing.
        assert_eq!(
            one(b"|1\r\n+ttl\r\n:3\r\n|0\r\n|1\r\n+k\r\n+v\r\n:5\r\n"),
            Reply::Attribute {
                attrs: vec![
                    (simple("ttl"), Reply::Integer(3)),
                    (simple("k"), simple("v"))
                ],
                reply: Box::new(Reply::Integer(5))
            }
        );
        // Attribute values may be aggregates with attributes of their own.
        assert_eq!(
            one(b"|1\r\n+a\r\n|1\r\n+b\r\n+c\r\n*0\r\n+OK\r\n"),
            Reply::Attribute {
                attrs: vec![(
                    simple("a"),
                    Reply::Attribute {
                        attrs: vec![(simple("b"), simple("c"))],
                        reply: Box::new(Reply::Array(Some(vec![])))
                    }
                )],
                reply: Box::new(simple("OK"))
            }
        );
        // An attribute alone is not a reply yet.
        assert_eq!(parse(b"|1\r\n+ttl\r\n:3\r\n"), Ok(None));
        assert_eq!(
            parse(b"*?\r\n|1\r\n+ttl\r\n:3\r\n.\r\n"),
            protocol("attribute without a reply")
        );
    }

    #[test]
    fn streamed_replies() {
        assert_eq!(
            one(b"$?\r\n;4\r\nHell\r\n;5\r\no wor\r\n;2\r\nld\r\n;0\r\n"),
            bulk(b"Hello world")
        );
        assert_eq!(one(b"$?\r\n;0\r\n"), bulk(b""));
        assert_eq!(
            one(b"*?\r\n:1\r\n*?\r\n.\r\n$?\r\n;1\r\nx\r\n;0\r\n.\r\n"),
            Reply::Array(Some(vec![
                Reply::Integer(1),
                Reply::Array(Some(vec![])),
                bulk(b"x")
            ]))
        );
        assert_eq!(
            one(b"%?\r\n+a\r\n:1\r\n+b\r\n:2\r\n.\r\n"),
            Reply::Map(vec![
                (simple("a"), Reply::Integer(1)),
                (simple("b"), Reply::Integer(2))
            ])
        );
        assert_eq!(one(b"~?\r\n.\r\n"), Reply::Set(vec![]));
        assert_eq!(one(b">?\r\n+x\r\n.\r\n"), Reply::Push(vec![simple("x")]));
        assert_eq!(
            parse(b"%?\r\n+a\r\n.\r\n"),
            protocol("map without a value for its last key")
        );
        assert_eq!(parse(b".\r\n"), protocol("unexpected end of aggregate"));
        assert_eq!(
            parse(b"*2\r\n:1\r\n.\r\n"),
            protocol("unexpected end of aggregate")
        );
        assert_eq!(
            parse(b"$?\r\n:1\r\n"),
            protocol("expected ';' in streamed string")
        );
        assert_eq!(parse(b"$?\r\n;x\r\n"), protocol("invalid chunk length"));
        assert_eq!(parse(b"$?\r\n;-1\r\n"), protocol("invalid chunk length"));
        assert_eq!(
            parse(b"$?\r\n;1\r\nab"),
            protocol("expected CRLF after bulk data")
        );
        let small = Limits {
            max_bulk_len: 4,
            ..Limits::default()
        };
        assert_eq!(
            parse_reply(b"$?\r\n;3\r\nabc\r\n;2\r\n", &small),
            Err(ParseError::TooLarge("invalid bulk length".into()))
        );
    }

    #[test]
    fn malformed_replies() {
        let cases: &[(&[u8], &str)] = &[
            (b"@x\r\n", "invalid reply type byte '@'"),
            (b"\r\n", "invalid reply type byte '\\x0d'"),
            (b"+OK\n", "expected CRLF at end of line"),
            (b"+OK\rX", "expected CRLF at end of line"),
            (b"-ERR\n", "expected CRLF at end of line"),
            (b":\r\n", "invalid integer"),
            (b":12a\r\n", "invalid integer"),
            (b":-\r\n", "invalid integer"),
            (b": 1\r\n", "invalid integer"),
            (b":9223372036854775808\r\n", "invalid integer"),
            (b":1\n", "invalid integer"),
            (b"$-2\r\n", "invalid bulk length"),
            (b"$01\r\na\r\n", "invalid bulk length"),
            (b"$+1\r\na\r\n", "invalid bulk length"),
            (b"$\r\n", "invalid bulk length"),
            (b"$1x\r\n", "invalid bulk length"),
            (b"$3\r\nabcX", "expected CRLF after bulk data"),
            (b"$3\r\nabc\rX", "expected CRLF after bulk data"),
            (b"!-1\r\n", "invalid bulk length"),
            (b"=-1\r\n", "invalid bulk length"),
            (b"!?\r\n", "invalid bulk length"),
            (b"=3\r\ntxt\r\n", "invalid verbatim string"),
            (b"=5\r\ntxtx1\r\n", "invalid verbatim string"),
            (b"*-2\r\n", "invalid multibulk length"),
            (b"%-1\r\n", "invalid multibulk length"),
            (b"~x\r\n", "invalid multibulk length"),
            (b"*1 \r\n", "invalid multibulk length"),
            (b"_x\r\n", "invalid null"),
            (b"#x\r\n", "invalid boolean"),
            (b"#\r\n", "invalid boolean"),
            (b",\r\n", "invalid double"),
            (b",abc\r\n", "invalid double"),
            (b"(\r\n", "invalid big number"),
            (b"(12a\r\n", "invalid big number"),
            (b".x\r\n", "invalid end marker"),
            (b"*1\r\n;1\r\n", "invalid reply type byte ';'"),
        ];
        for (input, text) in cases {
            assert_eq!(
                parse(input),
                protocol(text),
                "{:?}",
                String::from_utf8_lossy(input)
            );
            assert_eq!(
                skip_reply(input, &Limits::default()),
                Err(ParseError::protocol(text))
            );
        }
        // A number line never needs more than MAX_NUMBER_LINE bytes.
        let long = vec![b'1'; 200];
        assert_eq!(
            parse(&[&b":"[..], &long].concat()),
            protocol("invalid integer")
        );
    }

    #[test]
    fn limits_apply_to_replies() {
        let limits = Limits {
            max_bulk_len: 4,
            max_args: 2,
            max_inline_len: 0,
            ..Limits::DEFAULT
        };
        let too_large = |text: &str| Err(ParseError::TooLarge(text.to_owned()));
        let p = |b: &[u8]| parse_reply(b, &limits);
        assert!(p(b"$4\r\nabcd\r\n").unwrap().is_some());
        assert_eq!(p(b"$5\r\n"), too_large("invalid bulk length"));
        assert_eq!(p(b"=9\r\n"), too_large("invalid bulk length"));
        assert!(p(b"*2\r\n:1\r\n:2\r\n").unwrap().is_some());
        assert!(p(b"%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n").unwrap().is_some());
        assert_eq!(p(b"*3\r\n"), too_large("invalid multibulk length"));
        assert_eq!(p(b"%3\r\n"), too_large("invalid multibulk length"));
        assert!(p(b"+abcd\r\n").unwrap().is_some());
        assert_eq!(p(b"+abcd"), Ok(None));
        assert_eq!(p(b"+abcde"), too_large("line too long"));
        assert_eq!(p(b"+abcde\r\n"), too_large("line too long"));
    }

    #[test]
    fn nesting_is_limited_without_recursion() {
        let nested = |depth: usize| {
            let mut buf = b"*1\r\n".repeat(depth);
            buf.extend_from_slice(b":1\r\n");
            buf
        };
        let (reply, n) = parse(&nested(MAX_REPLY_DEPTH)).unwrap().unwrap();
        assert_eq!(n, MAX_REPLY_DEPTH * 4 + 4);
        let mut depth = 0;
        let mut cur = &reply;
        while let Reply::Array(Some(items)) = cur {
            depth += 1;
            cur = &items[0];
        }
        assert_eq!((depth, cur), (MAX_REPLY_DEPTH, &Reply::Integer(1)));
        let too_deep = protocol("reply nested too deeply");
        assert_eq!(parse(&nested(MAX_REPLY_DEPTH + 1)), too_deep);
        assert_eq!(parse(&nested(1_000_000)), too_deep);
        assert_eq!(parse(&b"|1\r\n".repeat(100_000)), too_deep);
        assert_eq!(parse(&b"*?\r\n".repeat(100_000)), too_deep);
        assert_eq!(parse(&b"*1\r\n".repeat(MAX_REPLY_DEPTH)), Ok(None));
        // Deep but within the limit, and wider than the inline frame stack.
        let mut buf = b"*2\r\n".repeat(40);
        buf.extend_from_slice(&b":1\r\n".repeat(41));
        assert_eq!(skip_reply(&buf, &Limits::default()), Ok(Some(buf.len())));
        assert_eq!(parse(&buf).unwrap().unwrap().1, buf.len());
    }

    #[test]
    fn pipelined_replies() {
        let buf = b"+OK\r\n:1\r\n$-1\r\n*1\r\n$1\r\na\r\n_\r\n";
        let mut pos = 0;
        let mut replies = Vec::new();
        while pos < buf.len() {
            let n = skip_reply(&buf[pos..], &Limits::default())
                .unwrap()
                .unwrap();
            let (reply, m) = parse(&buf[pos..]).unwrap().unwrap();
            assert_eq!(n, m);
            replies.push(reply);
            pos += n;
        }
        assert_eq!(
            replies,
            vec![
                simple("OK"),
                Reply::Integer(1),
                Reply::Bulk(None),
                Reply::Array(Some(vec![bulk(b"a")])),
                Reply::Null
            ]
        );
    }

    #[test]
    fn command_encoding() {
        let mut out = Vec::new();
        command(&mut out, &[b"SET", b"key", b"a\r\nb"]);
        assert_eq!(
            out,
            b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$4\r\na\r\nb\r\n".to_vec()
        );
        let mut args = Args::new();
        let n = parse_command(&out, &Limits::default(), &mut args).unwrap();
        assert_eq!(n, Some(out.len()));
        assert_eq!(
            args.iter(&out).collect::<Vec<_>>(),
            vec![b"SET" as &[u8], b"key", b"a\r\nb"]
        );
        out.clear();
        command(&mut out, &[]);
        assert_eq!(out, b"*0\r\n");
    }

    /// What a server writes with the `encode` functions, for the round-trip tests.
    #[derive(Debug, Clone)]
    enum Value {
        Simple(String),
        Error(String),
        Integer(i64),
        Bulk(Vec<u8>),
        Null,
        NullArray,
        Double(f64),
        Boolean(bool),
        Verbatim(Vec<u8>),
        Array(Vec<Value>),
        Set(Vec<Value>),
        Map(Vec<(Value, Value)>),
        Push(Vec<Value>),
    }

    fn emit(out: &mut Vec<u8>, value: &Value, v: Version) {
        match value {
            Value::Simple(s) => encode::simple(out, s),
            Value::Error(e) => encode::error(out, e),
            Value::Integer(n) => encode::integer(out, *n),
            Value::Bulk(b) => encode::bulk(out, b),
            Value::Null => encode::null(out, v),
            Value::NullArray => encode::null_array(out, v),
            Value::Double(d) => encode::double(out, *d, v),
            Value::Boolean(b) => encode::boolean(out, *b, v),
            Value::Verbatim(t) => encode::verbatim(out, t, v),
            Value::Array(items) => {
                encode::array_header(out, items.len());
                items.iter().for_each(|i| emit(out, i, v));
            }
            Value::Set(items) => {
                encode::set_header(out, items.len(), v);
                items.iter().for_each(|i| emit(out, i, v));
            }
            Value::Push(items) => {
                encode::push_header(out, items.len(), v);
                items.iter().for_each(|i| emit(out, i, v));
            }
            Value::Map(pairs) => {
                encode::map_header(out, pairs.len(), v);
                for (k, val) in pairs {
                    emit(out, k, v);
                    emit(out, val, v);
                }
            }
        }
    }

    /// The reply a client should read for `value` sent with version `v`.
    fn expected(value: &Value, v: Version) -> Reply {
        let resp3 = v == Version::Resp3;
        let all = |items: &[Value]| items.iter().map(|i| expected(i, v)).collect::<Vec<_>>();
        match value {
            Value::Simple(s) => Reply::Simple(s.as_bytes().to_vec()),
            Value::Error(e) => Reply::Error(e.as_bytes().to_vec()),
            Value::Integer(n) => Reply::Integer(*n),
            Value::Bulk(b) => Reply::Bulk(Some(b.clone())),
            Value::Null if resp3 => Reply::Null,
            Value::Null => Reply::Bulk(None),
            Value::NullArray if resp3 => Reply::Null,
            Value::NullArray => Reply::Array(None),
            Value::Double(d) if resp3 => Reply::Double(*d),
            Value::Double(d) => {
                let mut out = Vec::new();
                encode::double(&mut out, *d, Version::Resp3);
                Reply::Bulk(Some(out[1..out.len() - 2].to_vec()))
            }
            Value::Boolean(b) if resp3 => Reply::Boolean(*b),
            Value::Boolean(b) => Reply::Integer(i64::from(*b)),
            Value::Verbatim(t) if resp3 => Reply::Verbatim {
                format: *b"txt",
                text: t.clone(),
            },
            Value::Verbatim(t) => Reply::Bulk(Some(t.clone())),
            Value::Array(items) => Reply::Array(Some(all(items))),
            Value::Set(items) if resp3 => Reply::Set(all(items)),
            Value::Push(items) if resp3 => Reply::Push(all(items)),
            Value::Set(items) | Value::Push(items) => Reply::Array(Some(all(items))),
            Value::Map(pairs) if resp3 => Reply::Map(
                pairs
                    .iter()
                    .map(|(k, val)| (expected(k, v), expected(val, v)))
                    .collect(),
            ),
            Value::Map(pairs) => Reply::Array(Some(
                pairs
                    .iter()
                    .flat_map(|(k, val)| [expected(k, v), expected(val, v)])
                    .collect(),
            )),
        }
    }

    fn value_strategy() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            "[a-zA-Z0-9 ]{0,12}".prop_map(Value::Simple),
            "(ERR|WRONGTYPE|NOSCRIPT) [a-z ]{0,12}".prop_map(Value::Error),
            any::<i64>().prop_map(Value::Integer),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::Bulk),
            Just(Value::Null),
            Just(Value::NullArray),
            any::<f64>()
                .prop_filter("NaN is not equal to itself", |d| !d.is_nan())
                .prop_map(Value::Double),
            any::<bool>().prop_map(Value::Boolean),
            proptest::collection::vec(any::<u8>(), 0..24).prop_map(Value::Verbatim),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let items = proptest::collection::vec(inner.clone(), 0..6);
            prop_oneof![
                items.clone().prop_map(Value::Array),
                items.clone().prop_map(Value::Set),
                items.prop_map(Value::Push),
                proptest::collection::vec((inner.clone(), inner), 0..4).prop_map(Value::Map),
            ]
        })
    }

    /// Bytes that look like RESP often enough to reach deep into the parser.
    fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop_oneof![
            proptest::sample::select(vec![
                &b"*"[..],
                b"$",
                b"%",
                b"~",
                b"|",
                b">",
                b"+",
                b"-",
                b":",
                b",",
                b"#",
                b"_",
                b"(",
                b"=",
                b"!",
                b".",
                b";",
                b"?",
                b"\r\n",
                b"\r",
                b"\n",
                b"-1",
                b"txt:",
                b"inf",
            ])
            .prop_map(<[u8]>::to_vec),
            (0u32..12).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..3),
        ];
        proptest::collection::vec(token, 0..48).prop_map(|parts| parts.concat())
    }

    /// `parse_reply` and `skip_reply` agree, never panic, and are consistent on prefixes.
    fn check_bytes(buf: &[u8], limits: &Limits) {
        let parsed = parse_reply(buf, limits);
        let skipped = skip_reply(buf, limits);
        match (&parsed, &skipped) {
            (Ok(Some((_, n))), Ok(Some(m))) => {
                assert_eq!(n, m);
                assert!(*n > 0 && *n <= buf.len());
            }
            (Ok(None), Ok(None)) => {}
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("parse {parsed:?} vs skip {skipped:?}"),
        }
        for end in 0..buf.len() {
            match skip_reply(&buf[..end], limits) {
                Ok(None) => {}
                other => assert_eq!(other, skipped, "prefix of {end} bytes"),
            }
        }
    }

    proptest! {
        #[test]
        fn round_trips_with_the_encoder(value in value_strategy()) {
            for v in [Version::Resp2, Version::Resp3] {
                let mut out = Vec::new();
                emit(&mut out, &value, v);
                let (reply, n) = parse(&out).unwrap().unwrap();
                prop_assert_eq!(n, out.len());
                prop_assert_eq!(&reply, &expected(&value, v));
                prop_assert_eq!(skip_reply(&out, &Limits::default()), Ok(Some(n)));
                for end in 0..out.len() {
                    prop_assert_eq!(parse(&out[..end]), Ok(None));
                }
                // Followed by another reply, the first is still read alone.
                out.extend_from_slice(b"+next\r\n");
                prop_assert_eq!(parse(&out).unwrap().unwrap().1, n);
            }
        }

        #[test]
        fn commands_round_trip_through_the_server_parser(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..32), 0..8)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            let mut out = Vec::new();
            command(&mut out, &refs);
            let mut parsed = Args::new();
            let n = parse_command(&out, &Limits::default(), &mut parsed).unwrap();
            prop_assert_eq!(n, Some(out.len()));
            prop_assert_eq!(parsed.iter(&out).collect::<Vec<_>>(), refs);
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            check_bytes(&buf, &Limits::default());
        }

        #[test]
        fn resp_like_bytes_never_panic(buf in resp_like_bytes()) {
            check_bytes(&buf, &Limits::default());
            check_bytes(&buf, &Limits { max_bulk_len: 3, max_args: 2, max_inline_len: 0, ..Limits::DEFAULT });
        }
    }
}
