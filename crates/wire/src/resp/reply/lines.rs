//! The lines and numbers of the reply format: `\r\n`-terminated lines of bounded length,
//! lengths and integers, blobs, and the chunks of RESP3 streamed strings.
#![deny(
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic
)]

use super::super::parse::{check_crlf, Limits, ParseError};
use super::MAX_NUMBER_LINE;

/// Outcome of looking for a `\r\n`-terminated line.
pub(super) enum Line<'a> {
    Incomplete,
    /// No `\r` within the allowed length.
    TooLong,
    /// A `\n` without `\r`, or a `\r` followed by something other than `\n`.
    Bad,
    /// The line's content and the position after its `\r\n`.
    Done(&'a [u8], usize),
}

/// Reads a line of at most `max` bytes starting at `pos`.
pub(super) fn read_line(buf: &[u8], pos: usize, max: usize) -> Line<'_> {
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
pub(super) fn text_line<'a>(
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
pub(super) fn number_line<'a>(
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
pub(super) fn parse_length(line: &[u8]) -> Option<i64> {
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
pub(super) fn parse_digits(digits: &[u8]) -> Option<u64> {
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
pub(super) fn parse_integer(line: &[u8]) -> Option<i64> {
    match line {
        [b'-', digits @ ..] => 0i64.checked_sub_unsigned(parse_digits(digits)?),
        [b'+', digits @ ..] => i64::try_from(parse_digits(digits)?).ok(),
        digits => i64::try_from(parse_digits(digits)?).ok(),
    }
}

/// `[+-]?<digits>`, of any length.
pub(super) fn is_big_number(line: &[u8]) -> bool {
    let digits = match line {
        [b'-' | b'+', digits @ ..] => digits,
        digits => digits,
    };
    !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
}

/// Reads `len` bytes at `start` followed by `\r\n`.
pub(super) fn read_blob(
    buf: &[u8],
    start: usize,
    len: usize,
) -> Result<Option<(&[u8], usize)>, ParseError> {
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
pub(super) fn string_length(line: &[u8], limits: &Limits) -> Result<usize, ParseError> {
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
pub(super) fn walk_chunks<'a>(
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
pub(super) fn describe_byte(b: u8) -> String {
    if b == b' ' || b.is_ascii_graphic() {
        format!("'{}'", char::from(b))
    } else {
        format!("'\\x{b:02x}'")
    }
}
