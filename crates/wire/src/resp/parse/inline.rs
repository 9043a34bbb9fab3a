//! The inline form (`SET k v\r\n`): one line, split the way Redis's `sdssplitargs` splits it.

use super::{Args, Limits, ParseError, Span};

/// Parses an inline command (one line) from the front of `buf`, of which the first
/// `*scanned` bytes are known to hold no newline (0 on a first call): the search resumes
/// there, so a line arriving byte by byte is scanned once in all. On `Ok(None)`, `*scanned`
/// is updated for the next call. `work` counts the bytes examined.
pub(super) fn parse_inline(
    buf: &[u8],
    limits: &Limits,
    args: &mut Args,
    scanned: &mut usize,
    work: &mut usize,
) -> Result<Option<usize>, ParseError> {
    // A line of `max_inline_len` bytes plus "\r\n" fits in `window` bytes; if the newline is
    // not among them, the line is too long whatever comes next.
    let window = limits.max_inline_len.saturating_add(2);
    let searched_end = buf.len().min(window);
    let from = (*scanned).min(searched_end);
    let found = buf
        .get(from..searched_end)
        .unwrap_or_default()
        .iter()
        .position(|&b| b == b'\n');
    *work += found.map_or(searched_end - from, |p| p + 1);
    let Some(newline) = found.map(|p| from + p) else {
        *scanned = searched_end;
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
    *work += line.len();
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
