//! Server-side command parser.
//!
//! [`CommandParser`] (and its stateless form [`parse_command`]) reads one command from the front of the connection's read buffer. It
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
//! caller calls again with the same bytes plus whatever arrived since. A [`CommandParser`]
//! remembers how far it got (the bulk strings already read, or how much of an inline line
//! was searched for its newline) and resumes there, so a command arriving in many small
//! pieces — one byte at a time, in the worst case — is parsed in time linear in its size.
//! [`parse_command`] is the stateless form: each call starts over from the beginning of the
//! command, which costs time proportional to the number of arguments received so far (bulk
//! bodies are skipped by length, never scanned). Malformed input is reported as soon as the
//! first offending byte is seen, so a prefix of any buffer yields either `Ok(None)` or exactly
//! what the whole buffer yields.
//!
//! # Limits
//! [`Limits`] bounds every count and length before anything is allocated for it: a bulk
//! string, the number of arguments, an inline line, and a whole command
//! ([`Limits::max_request_len`], checked as each bulk length is declared, so a command that
//! announces more than the limit is refused before its data is read).
//!
//! # Strictness
//! Lengths follow Redis's `string2ll` rules (decimal, no `+`, no leading zeros, no spaces).
//! Where Redis silently skips two bytes it assumes to be `\r\n` (after a length line and after
//! a bulk body), this parser insists that they are `\r\n`.
//!
//! # Layout
//! - this module: [`Limits`], [`ParseError`], [`CommandParser`] and the multibulk form;
//! - `args`: [`Args`], the arguments of a parsed command;
//! - `inline`: the inline form.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

mod args;
mod inline;
#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests;
#[cfg(test)]
#[allow(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]
mod tests_incremental;

use std::fmt;

use args::Span;
pub use args::{Args, ArgsIter};

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
    /// Largest accepted multibulk command, in bytes, counted from its `*` to the end of its
    /// last bulk string. A command is refused as soon as its header and the bulk lengths
    /// declared so far add up to more, before the bulk data arrives. Not applied to replies.
    pub max_request_len: usize,
}

impl Limits {
    /// The defaults: 512 MiB bulk strings and 64 KiB inline lines (as in Redis), 1 048 576
    /// arguments (Redis 6's cap; Redis 7 allows up to `i32::MAX`), and 1 GiB commands (Redis's
    /// `client-query-buffer-limit`).
    pub const DEFAULT: Limits = Limits {
        max_bulk_len: 512 * 1024 * 1024,
        max_args: 1024 * 1024,
        max_inline_len: 64 * 1024,
        max_request_len: 1024 * 1024 * 1024,
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
    /// A bulk string, multibulk count, inline line or whole command above the configured
    /// limit.
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

/// Parses ONE command from the front of `buf`, starting over from its first byte.
///
/// - `Ok(None)`: incomplete, more bytes are needed (nothing consumed; `args` is left empty).
/// - `Ok(Some(consumed))`: a whole command occupies `buf[..consumed]`; `args` was cleared and
///   filled with its arguments (see [`Args`]). An empty command — an empty or blank inline
///   line, `*0\r\n` or `*-1\r\n` — yields `Ok(Some(consumed))` with `args` empty; the caller
///   skips it.
/// - `Err(_)`: the input is malformed or over a limit; the connection must be closed after
///   replying with the error (`args` is left empty).
///
/// A server reading a connection should keep a [`CommandParser`] instead, which resumes
/// where the previous call stopped.
///
/// # Errors
/// [`ParseError::TooLarge`] for a multibulk count above `limits.max_args`, a bulk length above
/// `limits.max_bulk_len`, a command declaring more than `limits.max_request_len` bytes, or an
/// inline line longer than `limits.max_inline_len` (or with more than `limits.max_args`
/// arguments); [`ParseError::Protocol`] for malformed input. The texts are Redis's where
/// Redis has one: `invalid multibulk length`, `expected '$', got 'x'`, `invalid bulk length`,
/// `unbalanced quotes in request`, `too big inline request`; and `expected CRLF after bulk
/// data` where Redis does not check.
pub fn parse_command(
    buf: &[u8],
    limits: &Limits,
    args: &mut Args,
) -> Result<Option<usize>, ParseError> {
    let mut parser = CommandParser::new();
    let result = parser.parse(buf, limits, args);
    if result == Ok(None) {
        args.clear();
    }
    result
}

/// How far an incomplete command was parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Progress {
    /// Nothing of a command read yet.
    #[default]
    Start,
    /// A multibulk command whose header and first bulk strings (in `Args`) were read:
    /// `remaining` bulk strings are still to come, the next one starting at `pos`; if its
    /// length line was read too, `body` is where its data starts and ends.
    Multibulk {
        remaining: usize,
        pos: usize,
        body: Option<(usize, usize)>,
    },
    /// An inline command whose first `scanned` bytes hold no newline.
    Inline { scanned: usize },
}

/// An incremental command parser: one per connection, called again after every read.
///
/// [`parse`](CommandParser::parse) takes the connection's buffer from the start of the
/// command being parsed. When it returns `Ok(None)` it remembers how far it got, and the next
/// call must pass the same bytes again (plus whatever arrived since): it resumes there
/// instead of starting over. Between calls, `args` holds the arguments read so far and must
/// not be touched. After `Ok(Some(consumed))` the caller drops `buf[..consumed]` and the next
/// call starts a new command; after an error the connection is closed (a new call starts
/// over).
///
/// Every call costs time proportional to the bytes it has not looked at before (plus, at
/// most, one length line it looks at again), so a command arriving one byte at a time is
/// parsed in linear time.
#[derive(Clone, Debug, Default)]
pub struct CommandParser {
    progress: Progress,
    /// Bytes examined since the parser was made (tests check that it stays linear).
    examined: usize,
}

impl CommandParser {
    /// A parser at the start of a command.
    pub fn new() -> Self {
        Self::default()
    }

    /// Forgets a partly parsed command: the next call starts over (e.g. after the caller
    /// replaced its buffer).
    pub fn reset(&mut self) {
        self.progress = Progress::Start;
    }

    /// True if a command was partly parsed and more bytes are awaited.
    pub fn in_progress(&self) -> bool {
        self.progress != Progress::Start
    }

    /// Parses one command from the front of `buf`, resuming where the last call stopped (see
    /// the [type docs](CommandParser)); results as for [`parse_command`], except that after
    /// `Ok(None)` `args` holds the arguments read so far.
    ///
    /// # Errors
    /// As [`parse_command`].
    pub fn parse(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        args: &mut Args,
    ) -> Result<Option<usize>, ParseError> {
        if self.progress == Progress::Start {
            args.clear();
        }
        let result = match self.progress {
            Progress::Start => match buf.first() {
                None => Ok(None),
                Some(b'*') => self.multibulk_header(buf, limits, args),
                Some(_) => self.inline(buf, limits, args, 0),
            },
            Progress::Multibulk { .. } => self.multibulk_body(buf, limits, args),
            Progress::Inline { scanned } => self.inline(buf, limits, args, scanned),
        };
        if result != Ok(None) {
            self.progress = Progress::Start;
        }
        if result.is_err() {
            args.clear();
        }
        result
    }

    fn inline(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        args: &mut Args,
        mut scanned: usize,
    ) -> Result<Option<usize>, ParseError> {
        let result = inline::parse_inline(buf, limits, args, &mut scanned, &mut self.examined);
        self.progress = Progress::Inline { scanned };
        result
    }

    /// Reads `*<count>\r\n`, then the bulk strings.
    fn multibulk_header(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        args: &mut Args,
    ) -> Result<Option<usize>, ParseError> {
        let (count, pos) = match read_decimal(buf, 1, true, &mut self.examined) {
            Decimal::Incomplete => return Ok(None),
            Decimal::Invalid => return Err(ParseError::protocol("invalid multibulk length")),
            Decimal::Value(count, next) => (count, next),
        };
        // Like Redis, any count <= 0 (`*0`, `*-1`) is an empty command.
        let count = usize::try_from(count).unwrap_or(0);
        if count > limits.max_args {
            return Err(ParseError::too_large("invalid multibulk length"));
        }
        // Every bulk string takes at least 6 bytes (`$0\r\n\r\n`).
        if count.saturating_mul(6).saturating_add(pos) > limits.max_request_len {
            return Err(request_too_large(limits));
        }
        self.progress = Progress::Multibulk {
            remaining: count,
            pos,
            body: None,
        };
        self.multibulk_body(buf, limits, args)
    }

    /// Reads the remaining bulk strings of a multibulk command.
    fn multibulk_body(
        &mut self,
        buf: &[u8],
        limits: &Limits,
        args: &mut Args,
    ) -> Result<Option<usize>, ParseError> {
        let Progress::Multibulk {
            mut remaining,
            mut pos,
            mut body,
        } = self.progress
        else {
            return Ok(None);
        };
        let work = &mut self.examined;
        let result = loop {
            if remaining == 0 {
                break Ok(Some(pos));
            }
            let (start, end) = match body {
                Some(span) => span,
                None => {
                    *work += 1;
                    match buf.get(pos) {
                        None => break Ok(None),
                        Some(b'$') => {}
                        Some(&other) => break Err(expected_dollar(other)),
                    }
                    let (len, start) = match read_decimal(buf, pos + 1, false, work) {
                        Decimal::Incomplete => break Ok(None),
                        Decimal::Invalid => break Err(ParseError::protocol("invalid bulk length")),
                        Decimal::Value(len, next) => (len, next),
                    };
                    let len = usize::try_from(len).unwrap_or(usize::MAX);
                    if len > limits.max_bulk_len {
                        break Err(ParseError::too_large("invalid bulk length"));
                    }
                    let Some(end) = start.checked_add(len) else {
                        break Err(ParseError::too_large("invalid bulk length"));
                    };
                    // This string and at least 6 bytes for each one after it.
                    let least = (remaining - 1)
                        .saturating_mul(6)
                        .saturating_add(end)
                        .saturating_add(2);
                    if least > limits.max_request_len {
                        break Err(request_too_large(limits));
                    }
                    body = Some((start, end));
                    (start, end)
                }
            };
            *work += 2;
            pos = match check_crlf(buf, end) {
                Some(Ok(next)) => next,
                Some(Err(())) => break Err(ParseError::protocol("expected CRLF after bulk data")),
                None => break Ok(None),
            };
            args.push_input(start, end);
            body = None;
            remaining -= 1;
        };
        self.progress = Progress::Multibulk {
            remaining,
            pos,
            body,
        };
        result
    }
}

/// The error for a command over [`Limits::max_request_len`].
fn request_too_large(limits: &Limits) -> ParseError {
    ParseError::TooLarge(format!(
        "command larger than the {}-byte request limit",
        limits.max_request_len
    ))
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
/// belong to such a line is seen, or the value overflows an `i64` (so it never reads more than
/// 22 bytes). `work` counts the bytes examined.
fn read_decimal(buf: &[u8], mut pos: usize, allow_negative: bool, work: &mut usize) -> Decimal {
    let start = pos;
    let result = read_decimal_at(buf, &mut pos, allow_negative);
    *work += pos - start + 1;
    result
}

fn read_decimal_at(buf: &[u8], pos: &mut usize, allow_negative: bool) -> Decimal {
    let negative = match buf.get(*pos) {
        None => return Decimal::Incomplete,
        Some(b'-') if allow_negative => {
            *pos += 1;
            true
        }
        Some(_) => false,
    };
    let mut value: i64 = 0;
    let mut digits = 0usize;
    loop {
        match buf.get(*pos) {
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
                *pos += 1;
            }
            Some(b'\r') if digits > 0 => break,
            Some(_) => return Decimal::Invalid,
        }
    }
    *pos += 1;
    match buf.get(*pos) {
        None => Decimal::Incomplete,
        Some(b'\n') => Decimal::Value(if negative { -value } else { value }, *pos + 1),
        Some(_) => Decimal::Invalid,
    }
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
