//! Server-side command parser.
//!
//! [`parse_command`] reads one command from the front of the connection's read buffer. It
//! accepts the two request forms Redis accepts:
//!
//! - **Multibulk** (what every client library, `redis-cli` and `redis-benchmark` send): a buffer
//!   starting with `*` holds `*<n>\r\n` followed by `n` bulk strings `$<len>\r\n<bytes>\r\n`.
//! - **Inline** (what a human types into `telnet`/`nc`): any other first byte starts one line
//!   ending in `\n` (a `\r` just before it is dropped), split into arguments the way Redis's
//!   `sdssplitargs` splits them, with double- and single-quoted arguments.
//!
//! # The [`Args`] design
//! A parsed command is described by an [`Args`] that the connection keeps and reuses, so that
//! after warm-up parsing allocates nothing. Each argument is a *span*:
//!
//! - a range into the caller's buffer, for every multibulk argument and every unquoted inline
//!   argument: no bytes are copied, and [`Args::range`] hands the range out so a server holding
//!   its buffer as `bytes::Bytes` can take a zero-copy slice;
//! - a range into the `Args`'s own scratch buffer, for inline arguments that contained quotes
//!   (their escapes had to be decoded, so they no longer exist verbatim in the input).
//!
//! Arguments are read back with [`Args::get`] / [`Args::iter`], passing the same buffer that was
//! given to [`parse_command`] (ranges are relative to the start of that slice). The multibulk
//! path never touches the scratch buffer.
//!
//! # Incremental parsing
//! `Ok(None)` means the buffer holds only a prefix of a command; nothing is consumed, and the
//! caller calls again with the same bytes plus whatever arrived since. Each call starts over
//! from the beginning of the command; this costs time proportional to the number of arguments
//! received so far (bulk bodies are skipped by length, never scanned). Malformed input is
//! reported as soon as the first offending byte is seen, so a prefix of any buffer yields either
//! `Ok(None)` or exactly what the whole buffer yields.
//!
//! # Strictness
//! Lengths follow Redis's `string2ll` rules (decimal, no `+`, no leading zeros, no spaces).
//! Where Redis silently skips two bytes it assumes to be `\r\n` (after a length line and after
//! a bulk body), this parser insists that they are `\r\n`.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use std::fmt;
use std::ops::Range;

/// Limits enforced while parsing (all configurable by the server).
///
/// The reply parser ([`super::reply`]) applies the same limits to replies: `max_bulk_len` to
/// every string, `max_args` to the element count of every aggregate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted bulk string, in bytes (Redis's `proto-max-bulk-len`).
    pub max_bulk_len: usize,
    /// Most arguments in one command (most elements in one aggregate reply).
    pub max_args: usize,
    /// Longest accepted inline command line, in bytes, not counting its line terminator.
    pub max_inline_len: usize,
}

impl Limits {
    /// The defaults: 512 MiB bulk strings and 64 KiB inline lines (as in Redis), 1 048 576
    /// arguments (Redis 6's cap; Redis 7 allows up to `i32::MAX`).
    pub const DEFAULT: Limits = Limits {
        max_bulk_len: 512 * 1024 * 1024,
        max_args: 1024 * 1024,
        max_inline_len: 64 * 1024,
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Why a buffer cannot be parsed. The connection cannot be resynchronised after either kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// Malformed input (text says what); the server replies `-ERR Protocol error: <text>` and
    /// closes the connection.
    Protocol(String),
    /// A bulk string, multibulk count or inline line above the configured limit.
    TooLarge(String),
}

impl ParseError {
    /// The text describing the problem, e.g. `invalid bulk length`, as it follows
    /// `Protocol error: ` in the error reply.
    pub fn text(&self) -> &str {
        match self {
            ParseError::Protocol(text) | ParseError::TooLarge(text) => text,
        }
    }

    pub(super) fn protocol(text: &str) -> Self {
        ParseError::Protocol(text.to_owned())
    }

    pub(super) fn too_large(text: &str) -> Self {
        ParseError::TooLarge(text.to_owned())
    }
}

/// Formats as `Protocol error: <text>`, the message Redis sends (after `ERR `) before closing
/// the connection: `encode::error(out, &format!("ERR {e}"))`.
impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocol error: {}", self.text())
    }
}

impl std::error::Error for ParseError {}

/// Where one argument's bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Span {
    /// `buf[start..end]` of the buffer given to [`parse_command`].
    Input { start: usize, end: usize },
    /// `scratch[start..end]` of the [`Args`] itself (a decoded quoted inline argument).
    Scratch { start: usize, end: usize },
}

/// The arguments of the last command parsed by [`parse_command`]; keep one per connection and
/// reuse it, so parsing allocates nothing once its vectors have grown.
///
/// Arguments are read with the buffer that was passed to [`parse_command`] (see the
/// [module docs](self)); with another buffer, [`get`](Args::get) returns `None` for arguments
/// that do not fit in it.
#[derive(Clone, Debug, Default)]
pub struct Args {
    spans: Vec<Span>,
    scratch: Vec<u8>,
}

impl Args {
    /// An empty `Args`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty `Args` with room for `n` arguments before it allocates.
    pub fn with_capacity(n: usize) -> Self {
        Args {
            spans: Vec::with_capacity(n),
            scratch: Vec::new(),
        }
    }

    /// Number of arguments (the command name included).
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no arguments (an empty command, which the caller skips).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Removes all arguments, keeping the allocated capacity.
    pub fn clear(&mut self) {
        self.spans.clear();
        self.scratch.clear();
    }

    /// Releases memory kept from an unusually large command: afterwards there is room for at
    /// most about `args` arguments and `scratch_bytes` bytes of decoded inline arguments
    /// (the current arguments are kept).
    pub fn shrink_to(&mut self, args: usize, scratch_bytes: usize) {
        self.spans.shrink_to(args);
        self.scratch.shrink_to(scratch_bytes);
    }

    /// The bytes of argument `i`, where `buf` is the buffer the command was parsed from; `None`
    /// if `i >= len()` (or `buf` is not that buffer and is too short).
    pub fn get<'a>(&'a self, buf: &'a [u8], i: usize) -> Option<&'a [u8]> {
        self.spans.get(i).and_then(|span| self.resolve(buf, span))
    }

    /// The range of `buf` holding argument `i`, if it is stored verbatim in the input (always
    /// the case for multibulk commands; not for quoted inline arguments, whose escapes were
    /// decoded). Useful for zero-copy slicing of a shared buffer.
    pub fn range(&self, i: usize) -> Option<Range<usize>> {
        match self.spans.get(i)? {
            Span::Input { start, end } => Some(*start..*end),
            Span::Scratch { .. } => None,
        }
    }

    /// Iterates over the arguments' bytes, where `buf` is the buffer the command was parsed
    /// from (an argument that does not fit in `buf` reads as empty).
    pub fn iter<'a>(&'a self, buf: &'a [u8]) -> ArgsIter<'a> {
        ArgsIter {
            args: self,
            buf,
            spans: self.spans.iter(),
        }
    }

    fn resolve<'a>(&'a self, buf: &'a [u8], span: &Span) -> Option<&'a [u8]> {
        match *span {
            Span::Input { start, end } => buf.get(start..end),
            Span::Scratch { start, end } => self.scratch.get(start..end),
        }
    }

    fn push_input(&mut self, start: usize, end: usize) {
        self.spans.push(Span::Input { start, end });
    }
}

/// Iterator over the arguments of an [`Args`], from [`Args::iter`].
#[derive(Clone, Debug)]
pub struct ArgsIter<'a> {
    args: &'a Args,
    buf: &'a [u8],
    spans: std::slice::Iter<'a, Span>,
}

impl<'a> Iterator for ArgsIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let span = self.spans.next()?;
        Some(self.args.resolve(self.buf, span).unwrap_or_default())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.spans.size_hint()
    }
}

impl ExactSizeIterator for ArgsIter<'_> {}

/// Parses ONE command from the front of `buf`.
///
/// - `Ok(None)`: incomplete, more bytes are needed (nothing consumed; `args` is left empty).
/// - `Ok(Some(consumed))`: a whole command occupies `buf[..consumed]`; `args` was cleared and
///   filled with its arguments (see [`Args`]). An empty command — an empty or blank inline
///   line, `*0\r\n` or `*-1\r\n` — yields `Ok(Some(consumed))` with `args` empty; the caller
///   skips it.
/// - `Err(_)`: the input is malformed or over a limit; the connection must be closed after
///   replying with the error (`args` is left empty).
///
/// # Errors
/// [`ParseError::TooLarge`] for a multibulk count above `limits.max_args`, a bulk length above
/// `limits.max_bulk_len`, or an inline line longer than `limits.max_inline_len` (or with more
/// than `limits.max_args` arguments); [`ParseError::Protocol`] for malformed input. The texts
/// are Redis's where Redis has one: `invalid multibulk length`, `expected '$', got 'x'`,
/// `invalid bulk length`, `unbalanced quotes in request`, `too big inline request`; and
/// `expected CRLF after bulk data` where Redis does not check.
pub fn parse_command(
    buf: &[u8],
    limits: &Limits,
    args: &mut Args,
) -> Result<Option<usize>, ParseError> {
    args.clear();
    let result = match buf.first() {
        None => Ok(None),
        Some(b'*') => parse_multibulk(buf, limits, args),
        Some(_) => parse_inline(buf, limits, args),
    };
    if !matches!(result, Ok(Some(_))) {
        args.clear();
    }
    result
}

/// Outcome of reading a `<decimal>\r\n` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decimal {
    /// The line is not complete yet (and is valid so far).
    Incomplete,
    /// Not a valid decimal line.
    Invalid,
    /// The value and the position just after the line's `\r\n`.
    Value(i64, usize),
}

/// Reads a decimal number followed by `\r\n` from `buf[pos..]` with Redis's `string2ll` rules:
/// at least one digit, no leading zeros (except `0` itself), no `+`, no whitespace, and a
/// leading `-` only if `allow_negative` (but never `-0`). Fails as soon as a byte that cannot
/// belong to such a line is seen, or the value overflows an `i64`.
fn read_decimal(buf: &[u8], mut pos: usize, allow_negative: bool) -> Decimal {
    let negative = match buf.get(pos) {
        None => return Decimal::Incomplete,
        Some(b'-') if allow_negative => {
            pos += 1;
            true
        }
        Some(_) => false,
    };
    let mut value: i64 = 0;
    let mut digits = 0usize;
    loop {
        match buf.get(pos) {
            None => return Decimal::Incomplete,
            Some(&c @ b'0'..=b'9') => {
                // "0" alone is fine, but nothing may follow a leading zero, nor "-0".
                if digits == 1 && value == 0 {
                    return Decimal::Invalid;
                }
                if c == b'0' && digits == 0 && negative {
                    return Decimal::Invalid;
                }
                let Some(next) = value
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(i64::from(c - b'0')))
                else {
                    return Decimal::Invalid;
                };
                value = next;
                digits += 1;
                pos += 1;
            }
            Some(b'\r') if digits > 0 => break,
            Some(_) => return Decimal::Invalid,
        }
    }
    match buf.get(pos + 1) {
        None => Decimal::Incomplete,
        Some(b'\n') => Decimal::Value(if negative { -value } else { value }, pos + 2),
        Some(_) => Decimal::Invalid,
    }
}

fn parse_multibulk(
    buf: &[u8],
    limits: &Limits,
    args: &mut Args,
) -> Result<Option<usize>, ParseError> {
    let (count, mut pos) = match read_decimal(buf, 1, true) {
        Decimal::Incomplete => return Ok(None),
        Decimal::Invalid => return Err(ParseError::protocol("invalid multibulk length")),
        Decimal::Value(count, next) => (count, next),
    };
    // Like Redis, any count <= 0 (`*0`, `*-1`) is an empty command.
    let count = usize::try_from(count).unwrap_or(0);
    if count > limits.max_args {
        return Err(ParseError::too_large("invalid multibulk length"));
    }
    for _ in 0..count {
        match buf.get(pos) {
            None => return Ok(None),
            Some(b'$') => {}
            Some(&other) => return Err(expected_dollar(other)),
        }
        let (len, start) = match read_decimal(buf, pos + 1, false) {
            Decimal::Incomplete => return Ok(None),
            Decimal::Invalid => return Err(ParseError::protocol("invalid bulk length")),
            Decimal::Value(len, next) => (len, next),
        };
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        if len > limits.max_bulk_len {
            return Err(ParseError::too_large("invalid bulk length"));
        }
        let Some(end) = start.checked_add(len) else {
            return Err(ParseError::too_large("invalid bulk length"));
        };
        pos = match check_crlf(buf, end) {
            Some(Ok(next)) => next,
            Some(Err(())) => return Err(ParseError::protocol("expected CRLF after bulk data")),
            None => return Ok(None),
        };
        args.push_input(start, end);
    }
    Ok(Some(pos))
}

/// Checks that `buf[pos..pos + 2]` is `\r\n`: `Some(Ok(pos + 2))` if so, `Some(Err(()))` if
/// a byte there differs, `None` if the bytes present so far match but some are missing.
pub(super) fn check_crlf(buf: &[u8], pos: usize) -> Option<Result<usize, ()>> {
    match buf.get(pos) {
        None => None,
        Some(b'\r') => match buf.get(pos + 1) {
            None => None,
            Some(b'\n') => Some(Ok(pos + 2)),
            Some(_) => Some(Err(())),
        },
        Some(_) => Some(Err(())),
    }
}

/// Redis's "expected '$', got 'x'", with an unprintable byte written as `\xHH`.
fn expected_dollar(got: u8) -> ParseError {
    let text = if got == b' ' || got.is_ascii_graphic() {
        format!("expected '$', got '{}'", char::from(got))
    } else {
        format!("expected '$', got '\\x{got:02x}'")
    };
    ParseError::Protocol(text)
}

fn parse_inline(buf: &[u8], limits: &Limits, args: &mut Args) -> Result<Option<usize>, ParseError> {
    // A line of `max_inline_len` bytes plus "\r\n" fits in `window` bytes; if the newline is
    // not among them, the line is too long whatever comes next.
    let window = limits.max_inline_len.saturating_add(2);
    let searched = buf.get(..window).unwrap_or(buf);
    let Some(newline) = searched.iter().position(|&b| b == b'\n') else {
        // Without its newline, the line holds all of `buf` but a final `\r`.
        let least_len = buf.len() - usize::from(buf.last() == Some(&b'\r'));
        if least_len > limits.max_inline_len {
            return Err(ParseError::too_large("too big inline request"));
        }
        return Ok(None);
    };
    let line_len = match newline.checked_sub(1) {
        Some(cr) if buf.get(cr) == Some(&b'\r') => cr,
        _ => newline,
    };
    if line_len > limits.max_inline_len {
        return Err(ParseError::too_large("too big inline request"));
    }
    let line = buf.get(..line_len).unwrap_or_default();
    split_inline(line, limits, args)?;
    Ok(Some(newline + 1))
}

/// `isspace()` in the C locale: what `sdssplitargs` skips between arguments.
fn is_blank(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

/// Splits an inline line like Redis's `sdssplitargs`: arguments are separated by blanks; an
/// unquoted argument ends at a space, tab, `\r` or `\n`; a `"` or `'` inside an argument opens
/// a quoted section that ends the argument, and its closing quote must be followed by a blank
/// or the end of the line. Inside double quotes `\xHH`, `\n`, `\r`, `\t`, `\b`, `\a` are
/// decoded and `\<c>` stands for `c`; inside single quotes only `\'` is an escape.
fn split_inline(line: &[u8], limits: &Limits, args: &mut Args) -> Result<(), ParseError> {
    let mut pos = 0;
    loop {
        while line.get(pos).is_some_and(|&b| is_blank(b)) {
            pos += 1;
        }
        if pos >= line.len() {
            return Ok(());
        }
        if args.len() >= limits.max_args {
            return Err(ParseError::too_large(
                "too many arguments in inline request",
            ));
        }
        let start = pos;
        loop {
            match line.get(pos) {
                None | Some(b' ' | b'\t' | b'\r' | b'\n') => {
                    args.push_input(start, pos);
                    pos += 1;
                    break;
                }
                Some(&quote @ (b'"' | b'\'')) => {
                    let scratch_start = args.scratch.len();
                    args.scratch
                        .extend_from_slice(line.get(start..pos).unwrap_or_default());
                    pos = if quote == b'"' {
                        unquote_double(line, pos + 1, &mut args.scratch)?
                    } else {
                        unquote_single(line, pos + 1, &mut args.scratch)?
                    };
                    args.spans.push(Span::Scratch {
                        start: scratch_start,
                        end: args.scratch.len(),
                    });
                    break;
                }
                Some(_) => pos += 1,
            }
        }
    }
}

fn unbalanced() -> ParseError {
    ParseError::protocol("unbalanced quotes in request")
}

/// After a closing quote at `pos - 1`: the argument ends there, and the next byte must be a
/// blank or the end of the line.
fn after_closing_quote(line: &[u8], pos: usize) -> Result<usize, ParseError> {
    match line.get(pos) {
        Some(&b) if !is_blank(b) => Err(unbalanced()),
        _ => Ok(pos),
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Decodes a double-quoted section starting just after its opening quote into `out`; returns
/// the position just after the closing quote.
fn unquote_double(line: &[u8], mut pos: usize, out: &mut Vec<u8>) -> Result<usize, ParseError> {
    loop {
        match line.get(pos) {
            None => return Err(unbalanced()),
            Some(b'"') => return after_closing_quote(line, pos + 1),
            Some(b'\\') => {
                let escaped = line.get(pos + 1).copied().ok_or_else(unbalanced)?;
                let hex = line
                    .get(pos + 2)
                    .copied()
                    .and_then(hex_value)
                    .zip(line.get(pos + 3).copied().and_then(hex_value));
                match (escaped, hex) {
                    (b'x', Some((hi, lo))) => {
                        out.push((hi << 4) | lo);
                        pos += 4;
                    }
                    _ => {
                        out.push(match escaped {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                        pos += 2;
                    }
                }
            }
            Some(&b) => {
                out.push(b);
                pos += 1;
            }
        }
    }
}

/// Decodes a single-quoted section starting just after its opening quote into `out`; returns
/// the position just after the closing quote.
fn unquote_single(line: &[u8], mut pos: usize, out: &mut Vec<u8>) -> Result<usize, ParseError> {
    loop {
        match line.get(pos) {
            None => return Err(unbalanced()),
            Some(b'\\') if line.get(pos + 1) == Some(&b'\'') => {
                out.push(b'\'');
                pos += 2;
            }
            Some(b'\'') => return after_closing_quote(line, pos + 1),
            Some(&b) => {
                out.push(b);
                pos += 1;
            }
        }
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
    use super::*;
    use proptest::prelude::*;

    /// A parse result with the arguments copied out.
    type Parsed = Result<Option<(Vec<Vec<u8>>, usize)>, ParseError>;

    fn parse(buf: &[u8]) -> Parsed {
        parse_with(buf, &Limits::default())
    }

    fn parse_with(buf: &[u8], limits: &Limits) -> Parsed {
        let mut args = Args::new();
        let consumed = parse_command(buf, limits, &mut args)?;
        Ok(consumed.map(|n| (args.iter(buf).map(<[u8]>::to_vec).collect(), n)))
    }

    fn ok(buf: &[u8]) -> (Vec<Vec<u8>>, usize) {
        parse(buf).unwrap().unwrap()
    }

    fn vecs(items: &[&[u8]]) -> Vec<Vec<u8>> {
        items.iter().map(|a| a.to_vec()).collect()
    }

    fn multibulk(items: &[&[u8]]) -> Vec<u8> {
        let mut out = format!("*{}\r\n", items.len()).into_bytes();
        for item in items {
            out.extend_from_slice(format!("${}\r\n", item.len()).as_bytes());
            out.extend_from_slice(item);
            out.extend_from_slice(b"\r\n");
        }
        out
    }

    fn protocol(text: &str) -> Parsed {
        Err(ParseError::Protocol(text.to_owned()))
    }

    fn too_large(text: &str) -> Parsed {
        Err(ParseError::TooLarge(text.to_owned()))
    }

    #[test]
    fn multibulk_command() {
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nv\r\nx!\r\n";
        assert_eq!(ok(buf), (vecs(&[b"SET", b"k", b"v\r\nx!"]), buf.len()));
        let buf = b"*2\r\n$0\r\n\r\n$4\r\n\0\xff\r\n\r\n";
        assert_eq!(ok(buf), (vecs(&[b"", b"\0\xff\r\n"]), buf.len()));
    }

    #[test]
    fn multibulk_arguments_are_ranges_of_the_input() {
        let buf = b"*2\r\n$3\r\nGET\r\n$3\r\nkey\r\n";
        let mut args = Args::new();
        assert_eq!(
            parse_command(buf, &Limits::default(), &mut args),
            Ok(Some(buf.len()))
        );
        assert_eq!(args.len(), 2);
        assert_eq!(args.range(0), Some(8..11));
        assert_eq!(args.range(1), Some(17..20));
        assert_eq!(args.range(2), None);
        assert_eq!(args.get(buf, 1), Some(&b"key"[..]));
        assert_eq!(args.get(buf, 2), None);
        // A different, shorter buffer cannot resolve the ranges.
        assert_eq!(args.get(b"*2", 1), None);
        assert_eq!(args.iter(b"*2").collect::<Vec<_>>(), vec![b"", b""]);
    }

    #[test]
    fn empty_multibulk_commands() {
        assert_eq!(ok(b"*0\r\n"), (vec![], 4));
        assert_eq!(ok(b"*-1\r\n"), (vec![], 5));
        // Redis treats every non-positive count as an empty command.
        assert_eq!(ok(b"*-7\r\n$3\r\n"), (vec![], 5));
    }

    #[test]
    fn pipelined_commands_parse_one_after_another() {
        let mut buf = multibulk(&[b"PING"]);
        buf.extend_from_slice(b"GET k\r\n");
        buf.extend_from_slice(&multibulk(&[b"SET", b"a", b"b"]));
        buf.extend_from_slice(b"\r\n");
        buf.extend_from_slice(b"ECHO \"x y\"\n");
        let mut args = Args::new();
        let mut pos = 0;
        let mut seen = Vec::new();
        while pos < buf.len() {
            let rest = &buf[pos..];
            let n = parse_command(rest, &Limits::default(), &mut args)
                .unwrap()
                .unwrap();
            seen.push(args.iter(rest).map(<[u8]>::to_vec).collect::<Vec<_>>());
            pos += n;
        }
        assert_eq!(pos, buf.len());
        assert_eq!(
            seen,
            vec![
                vecs(&[b"PING"]),
                vecs(&[b"GET", b"k"]),
                vecs(&[b"SET", b"a", b"b"]),
                vec![],
                vecs(&[b"ECHO", b"x y"]),
            ]
        );
    }

    #[test]
    fn multibulk_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"*abc\r\n", "invalid multibulk length"),
            (b"*a", "invalid multibulk length"),
            (b"*\r\n", "invalid multibulk length"),
            (b"*01\r\n", "invalid multibulk length"),
            (b"*+1\r\n", "invalid multibulk length"),
            (b"* 1\r\n", "invalid multibulk length"),
            (b"*1 \r\n", "invalid multibulk length"),
            (b"*-0\r\n", "invalid multibulk length"),
            (b"*-\r\n", "invalid multibulk length"),
            (b"*1\n", "invalid multibulk length"),
            (b"*1\rX", "invalid multibulk length"),
            (b"*99999999999999999999\r\n", "invalid multibulk length"),
            (b"*1\r\nx", "expected '$', got 'x'"),
            (b"*1\r\n*1\r\n", "expected '$', got '*'"),
            (b"*1\r\n\r\n", "expected '$', got '\\x0d'"),
            (b"*2\r\n$1\r\na\r\n:1\r\n", "expected '$', got ':'"),
            (b"*1\r\n$abc\r\n", "invalid bulk length"),
            (b"*1\r\n$-1\r\n", "invalid bulk length"),
            (b"*1\r\n$\r\n", "invalid bulk length"),
            (b"*1\r\n$03\r\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$+3\r\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$3 \r\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$3\nabc\r\n", "invalid bulk length"),
            (b"*1\r\n$3\r\nabcXY", "expected CRLF after bulk data"),
            (b"*1\r\n$3\r\nabcX", "expected CRLF after bulk data"),
            (b"*1\r\n$3\r\nabc\rX", "expected CRLF after bulk data"),
            (b"*1\r\n$3\r\nabc\n", "expected CRLF after bulk data"),
            (b"*1\r\n$3\r\nabcd\r\n", "expected CRLF after bulk data"),
        ];
        for (input, text) in cases {
            assert_eq!(
                parse(input),
                protocol(text),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn limits_are_enforced() {
        let limits = Limits {
            max_bulk_len: 5,
            max_args: 2,
            max_inline_len: 8,
        };
        let p = |b: &[u8]| parse_with(b, &limits);
        assert_eq!(p(b"*3\r\n"), too_large("invalid multibulk length"));
        assert_eq!(p(b"*1\r\n$6\r\n"), too_large("invalid bulk length"));
        assert!(p(b"*2\r\n$5\r\nabcde\r\n$0\r\n\r\n").unwrap().is_some());
        // Inline: 8 bytes of line are fine, 9 are not, with or without the newline.
        assert_eq!(p(b"12345678\r\n").unwrap().unwrap().1, 10);
        assert_eq!(p(b"12345678\n").unwrap().unwrap().1, 9);
        assert_eq!(p(b"12345678\r"), Ok(None));
        assert_eq!(p(b"123456789"), too_large("too big inline request"));
        assert_eq!(p(b"123456789\r"), too_large("too big inline request"));
        assert_eq!(p(b"123456789\n"), too_large("too big inline request"));
        assert_eq!(p(b"1234567890"), too_large("too big inline request"));
        assert_eq!(
            p(b"a b c\r\n"),
            too_large("too many arguments in inline request")
        );
        assert_eq!(
            p(b"\"a\" b c\n"),
            too_large("too many arguments in inline request")
        );

        let defaults = Limits::default();
        assert_eq!(defaults.max_bulk_len, 512 << 20);
        assert_eq!(defaults.max_args, 1_048_576);
        assert_eq!(defaults.max_inline_len, 65_536);
        assert_eq!(
            parse(b"*1048577\r\n"),
            too_large("invalid multibulk length")
        );
        assert_eq!(
            parse(b"*1\r\n$536870913\r\n"),
            too_large("invalid bulk length")
        );
        assert_eq!(parse(b"*1048576\r\n$1\r\n"), Ok(None));
        assert_eq!(parse(b"*1\r\n$536870912\r\n"), Ok(None));
        let long = vec![b'a'; 65_537];
        assert_eq!(parse(&long), too_large("too big inline request"));
        // A huge length that fits an i64 but not the limit, with a limit of usize::MAX.
        let unlimited = Limits {
            max_bulk_len: usize::MAX,
            ..Limits::default()
        };
        assert_eq!(
            parse_with(b"*1\r\n$9223372036854775807\r\n", &unlimited),
            Ok(None)
        );
    }

    #[test]
    fn error_display() {
        let e = ParseError::Protocol("invalid bulk length".into());
        assert_eq!(e.to_string(), "Protocol error: invalid bulk length");
        assert_eq!(e.text(), "invalid bulk length");
        let e = ParseError::TooLarge("too big inline request".into());
        assert_eq!(e.to_string(), "Protocol error: too big inline request");
    }

    #[test]
    fn inline_commands() {
        assert_eq!(ok(b"PING\r\n"), (vecs(&[b"PING"]), 6));
        assert_eq!(ok(b"PING\n"), (vecs(&[b"PING"]), 5));
        assert_eq!(ok(b"\r\n"), (vec![], 2));
        assert_eq!(ok(b"\n"), (vec![], 1));
        assert_eq!(ok(b" \t \x0b\x0c\r\n"), (vec![], 7));
        assert_eq!(
            ok(b"  SET\tkey   value  \r\nGET"),
            (vecs(&[b"SET", b"key", b"value"]), 21)
        );
        // A lone \r inside the line separates arguments; \v does so only between them.
        assert_eq!(ok(b"a\rb\n"), (vecs(&[b"a", b"b"]), 4));
        assert_eq!(ok(b"a\x0bb \x0bc\n"), (vecs(&[b"a\x0bb", b"c"]), 7));
        // Binary bytes and a NUL are ordinary bytes.
        assert_eq!(ok(b"a\0b \xff\n"), (vecs(&[b"a\0b", b"\xff"]), 6));
    }

    #[test]
    fn inline_quoting() {
        let cases: &[(&[u8], &[&[u8]])] = &[
            (b"SET \"a b\" 'c d'\r\n", &[b"SET", b"a b", b"c d"]),
            (b"\"\" ''\n", &[b"", b""]),
            (
                b"\"\\x41\\x7a\\xff\\n\\r\\t\\b\\a\\\\\\\"\\q\"\n",
                &[b"Az\xff\n\r\t\x08\x07\\\"q"],
            ),
            // \x needs two hex digits, otherwise it is just an escaped 'x'.
            (b"\"\\x4g\" \"\\x\"\n", &[b"x4g", b"x"]),
            (b"'it\\'s' 'a\\b\\n\"'\n", &[b"it's", b"a\\b\\n\""]),
            (b"foo\"bar baz\" x\n", &[b"foobar baz", b"x"]),
            (b"foo'bar baz'\n", &[b"foobar baz"]),
            (b"\"a\"\t\"b\"\x0b'c'\n", &[b"a", b"b", b"c"]),
            (b"\"a\r\"\r\n", &[b"a\r"]),
            (b"x\"\n", &[]),
        ];
        for (input, expected) in cases {
            if expected.is_empty() {
                assert_eq!(parse(input), protocol("unbalanced quotes in request"));
            } else {
                assert_eq!(
                    ok(input),
                    (vecs(expected), input.len()),
                    "{:?}",
                    String::from_utf8_lossy(input)
                );
            }
        }
    }

    #[test]
    fn inline_quote_errors() {
        let cases: &[&[u8]] = &[
            b"SET \"a\r\n",
            b"SET 'a\r\n",
            b"\"a\"b\n",
            b"'a'b\n",
            b"\"a\"\"b\"\n",
            b"\"a\\\"\n",
            b"'a\\'\n",
            b"\"\\\n",
        ];
        for input in cases {
            assert_eq!(
                parse(input),
                protocol("unbalanced quotes in request"),
                "{:?}",
                String::from_utf8_lossy(input)
            );
        }
    }

    #[test]
    fn quoted_arguments_live_in_scratch() {
        let buf = b"SET \"k\" v\n";
        let mut args = Args::new();
        parse_command(buf, &Limits::default(), &mut args).unwrap();
        assert_eq!(args.range(0), Some(0..3));
        assert_eq!(args.range(1), None);
        assert_eq!(args.range(2), Some(8..9));
        assert_eq!(args.get(buf, 1), Some(&b"k"[..]));
        // Reuse clears the previous command, scratch included.
        let buf = b"'x' \"yz\"\n";
        parse_command(buf, &Limits::default(), &mut args).unwrap();
        assert_eq!(
            args.iter(buf).collect::<Vec<_>>(),
            vec![b"x" as &[u8], b"yz"]
        );
        // An incomplete or bad command leaves `args` empty.
        assert_eq!(
            parse_command(b"GET", &Limits::default(), &mut args),
            Ok(None)
        );
        assert!(args.is_empty());
        parse_command(buf, &Limits::default(), &mut args).unwrap();
        assert!(parse_command(b"*1\r\n$1\r\nab", &Limits::default(), &mut args).is_err());
        assert!(args.is_empty());
    }

    #[test]
    fn shrinking_keeps_the_arguments() {
        let buf = multibulk(&[&b"a"[..]; 1000]);
        let mut args = Args::with_capacity(4);
        parse_command(&buf, &Limits::default(), &mut args).unwrap();
        assert!(args.spans.capacity() >= 1000);
        let buf = b"GET \"k\"\n";
        parse_command(buf, &Limits::default(), &mut args).unwrap();
        args.shrink_to(8, 16);
        assert!(args.spans.capacity() < 1000);
        assert_eq!(
            args.iter(buf).collect::<Vec<_>>(),
            vec![b"GET" as &[u8], b"k"]
        );
    }

    #[test]
    fn every_prefix_of_a_valid_command_is_incomplete() {
        let commands: Vec<Vec<u8>> = vec![
            multibulk(&[b"SET", b"key", b"value"]),
            multibulk(&[b""]),
            multibulk(&[b"\r\n\r\n", b"x"]),
            b"*0\r\n".to_vec(),
            b"*-1\r\n".to_vec(),
            b"PING\r\n".to_vec(),
            b"SET \"a\\x41\" 'b c'\r\n".to_vec(),
            b"\r\n".to_vec(),
            b"\n".to_vec(),
        ];
        for cmd in &commands {
            for end in 0..cmd.len() {
                assert_eq!(parse(&cmd[..end]), Ok(None), "{:?}", &cmd[..end]);
            }
            assert_eq!(parse(cmd).unwrap().unwrap().1, cmd.len());
        }
    }

    /// Bytes that look like RESP often enough to reach deep into the parser.
    fn resp_like_bytes() -> impl Strategy<Value = Vec<u8>> {
        let token = prop_oneof![
            Just(b"*".to_vec()),
            Just(b"$".to_vec()),
            Just(b"\r\n".to_vec()),
            Just(b"\r".to_vec()),
            Just(b"\n".to_vec()),
            Just(b"\"".to_vec()),
            Just(b"'".to_vec()),
            Just(b"\\".to_vec()),
            Just(b"\\x".to_vec()),
            Just(b" ".to_vec()),
            Just(b"-".to_vec()),
            (0u32..30).prop_map(|n| n.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..4),
        ];
        proptest::collection::vec(token, 0..40).prop_map(|parts| parts.concat())
    }

    fn check_prefix_consistency(buf: &[u8], limits: &Limits) {
        let full = parse_with(buf, limits);
        if let Ok(Some((_, n))) = full {
            assert!(n > 0 && n <= buf.len());
            // The command does not depend on what follows it.
            assert_eq!(parse_with(&buf[..n], limits), full);
        }
        for end in 0..buf.len() {
            let part = parse_with(&buf[..end], limits);
            match (&part, &full) {
                (Ok(None), _) => {}
                (Ok(Some((_, n))), _) => {
                    assert!(*n <= end);
                    assert_eq!(&part, &full);
                }
                (Err(_), _) => assert_eq!(&part, &full),
            }
        }
    }

    proptest! {
        #[test]
        fn multibulk_round_trip(
            commands in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 0..12),
                1..4,
            )
        ) {
            let mut buf = Vec::new();
            for cmd in &commands {
                let refs: Vec<&[u8]> = cmd.iter().map(Vec::as_slice).collect();
                buf.extend_from_slice(&multibulk(&refs));
            }
            let mut args = Args::new();
            let mut pos = 0;
            for cmd in &commands {
                let rest = &buf[pos..];
                let n = parse_command(rest, &Limits::default(), &mut args).unwrap().unwrap();
                let got: Vec<Vec<u8>> = args.iter(rest).map(<[u8]>::to_vec).collect();
                prop_assert_eq!(&got, cmd);
                for (i, arg) in cmd.iter().enumerate() {
                    prop_assert_eq!(args.get(rest, i), Some(&arg[..]));
                    prop_assert!(args.range(i).is_some());
                }
                // Every strict prefix of the command is incomplete.
                for end in 0..n {
                    prop_assert_eq!(
                        parse_command(&rest[..end], &Limits::default(), &mut args),
                        Ok(None)
                    );
                }
                pos += n;
            }
            prop_assert_eq!(pos, buf.len());
        }

        #[test]
        fn inline_round_trip(
            words in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..12), 1..6)
        ) {
            // Quote every word with escapes, as redis-cli would print it.
            let mut line = Vec::new();
            for word in &words {
                line.push(b'"');
                for &b in word {
                    match b {
                        b'"' | b'\\' => line.extend_from_slice(&[b'\\', b]),
                        b'\n' => line.extend_from_slice(b"\\n"),
                        0x20..=0x7e => line.push(b),
                        _ => line.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
                    }
                }
                line.extend_from_slice(b"\" ");
            }
            line.extend_from_slice(b"\r\n");
            let (got, n) = parse(&line).unwrap().unwrap();
            prop_assert_eq!(got, words);
            prop_assert_eq!(n, line.len());
        }

        #[test]
        fn arbitrary_bytes_never_panic(buf in proptest::collection::vec(any::<u8>(), 0..200)) {
            let mut args = Args::new();
            match parse_command(&buf, &Limits::default(), &mut args) {
                Ok(Some(n)) => {
                    prop_assert!(n > 0 && n <= buf.len());
                    for i in 0..args.len() {
                        prop_assert!(args.get(&buf, i).is_some());
                    }
                }
                Ok(None) => prop_assert!(args.is_empty()),
                Err(_) => prop_assert!(args.is_empty()),
            }
        }

        #[test]
        fn resp_like_bytes_are_prefix_consistent(buf in resp_like_bytes()) {
            check_prefix_consistency(&buf, &Limits::default());
            let tight = Limits { max_bulk_len: 8, max_args: 3, max_inline_len: 10 };
            check_prefix_consistency(&buf, &tight);
        }
    }
}
