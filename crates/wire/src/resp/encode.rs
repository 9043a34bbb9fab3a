//! Server-side reply encoder.
//!
//! Each function appends one reply (or the header of an aggregate, whose elements the caller
//! appends next) to an output buffer, without intermediate allocation. Where RESP2 and RESP3
//! differ, the function takes the connection's [`Version`] (RESP2 until the client sends
//! `HELLO 3`) and emits what Redis emits for that version.
//!
//! Numbers are formatted as Redis formats them: integers in plain decimal, doubles through
//! Redis's `d2string` rules (integral values as integers, otherwise the shortest
//! representation that reads back exactly, in exponent form for very large or small
//! magnitudes; `inf`, `-inf`, `nan`).

use std::fmt::Write as _;

/// The line terminator of every RESP element.
pub const CRLF: &[u8] = b"\r\n";

/// Protocol version of a connection (`HELLO 3` switches to RESP3, `HELLO 2` back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Version {
    /// RESP2, the default for a new connection.
    #[default]
    Resp2,
    /// RESP3.
    Resp3,
}

/// Appends a simple string: `+OK\r\n`. `\r` and `\n`, which a simple string cannot hold, are
/// written as spaces.
pub fn simple(out: &mut Vec<u8>, s: &str) {
    out.reserve(s.len() + 3);
    out.push(b'+');
    push_line(out, s.as_bytes());
    out.extend_from_slice(CRLF);
}

/// Appends an error: `-ERR unknown command\r\n`.
///
/// `msg` starts with the error code (`"ERR ..."`, `"WRONGTYPE ..."`); a leading `-` is
/// dropped rather than doubled. As Redis does, trailing `\r`/`\n` are trimmed and any other
/// `\r`/`\n` is written as a space, so the message cannot break the protocol.
pub fn error(out: &mut Vec<u8>, msg: &str) {
    let bytes = msg.as_bytes();
    let bytes = bytes.strip_prefix(b"-").unwrap_or(bytes);
    let end = bytes
        .iter()
        .rposition(|&b| b != b'\r' && b != b'\n')
        .map_or(0, |last| last + 1);
    let bytes = bytes.get(..end).unwrap_or_default();
    out.reserve(bytes.len() + 3);
    out.push(b'-');
    push_line(out, bytes);
    out.extend_from_slice(CRLF);
}

/// Appends `bytes`, replacing `\r` and `\n` with spaces.
fn push_line(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.iter().any(|&b| b == b'\r' || b == b'\n') {
        out.extend(
            bytes
                .iter()
                .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
    } else {
        out.extend_from_slice(bytes);
    }
}

/// Appends an integer: `:42\r\n`.
pub fn integer(out: &mut Vec<u8>, n: i64) {
    line_with_int(out, b':', n);
}

/// Appends a bulk string: `$5\r\nhello\r\n`.
pub fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.reserve(b.len() + 16);
    bulk_header(out, b.len());
    out.extend_from_slice(b);
    out.extend_from_slice(CRLF);
}

/// Appends only the header of a bulk string of `len` bytes (`$<len>\r\n`); the caller then
/// sends exactly `len` bytes and [`CRLF`] (e.g. to write a large value without copying it).
pub fn bulk_header(out: &mut Vec<u8>, len: usize) {
    line_with_uint(out, b'$', len as u64);
}

/// Appends a null (a missing value): `$-1\r\n` (RESP2, the null bulk string) / `_\r\n` (RESP3).
pub fn null(out: &mut Vec<u8>, v: Version) {
    out.extend_from_slice(match v {
        Version::Resp2 => b"$-1\r\n",
        Version::Resp3 => b"_\r\n",
    });
}

/// Appends a null array (e.g. a timed-out `BLPOP`): `*-1\r\n` (RESP2) / `_\r\n` (RESP3).
pub fn null_array(out: &mut Vec<u8>, v: Version) {
    out.extend_from_slice(match v {
        Version::Resp2 => b"*-1\r\n",
        Version::Resp3 => b"_\r\n",
    });
}

/// Appends the header of an array of `n` elements, which the caller appends next: `*n\r\n`.
pub fn array_header(out: &mut Vec<u8>, n: usize) {
    line_with_uint(out, b'*', n as u64);
}

/// Appends the header of a set of `n` elements: `*n\r\n` (RESP2) / `~n\r\n` (RESP3).
pub fn set_header(out: &mut Vec<u8>, n: usize, v: Version) {
    let kind = match v {
        Version::Resp2 => b'*',
        Version::Resp3 => b'~',
    };
    line_with_uint(out, kind, n as u64);
}

/// Appends the header of a map of `n` key/value pairs, which the caller appends next as key,
/// value, key, value...: `*<2n>\r\n` (RESP2, a flat array) / `%n\r\n` (RESP3).
pub fn map_header(out: &mut Vec<u8>, n: usize, v: Version) {
    match v {
        Version::Resp2 => line_with_uint(out, b'*', (n as u64).saturating_mul(2)),
        Version::Resp3 => line_with_uint(out, b'%', n as u64),
    }
}

/// Appends the header of an out-of-band push message of `n` elements (pub/sub messages,
/// invalidations): `*n\r\n` (RESP2) / `>n\r\n` (RESP3).
pub fn push_header(out: &mut Vec<u8>, n: usize, v: Version) {
    let kind = match v {
        Version::Resp2 => b'*',
        Version::Resp3 => b'>',
    };
    line_with_uint(out, kind, n as u64);
}

/// Appends a double: a bulk string (RESP2, e.g. `$3\r\n1.5\r\n`) / `,1.5\r\n` (RESP3).
///
/// Formatted as Redis does: `3` for 3.0, `0.1`, `1e+21`, `1.5e-7`, `-0`, `inf`, `-inf`,
/// `nan`.
pub fn double(out: &mut Vec<u8>, d: f64, v: Version) {
    let mut text = StackText::new();
    format_double(d, &mut text);
    match v {
        Version::Resp2 => bulk(out, text.as_bytes()),
        Version::Resp3 => {
            out.push(b',');
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(CRLF);
        }
    }
}

/// Appends a boolean: `:1\r\n` / `:0\r\n` (RESP2) / `#t\r\n` / `#f\r\n` (RESP3).
pub fn boolean(out: &mut Vec<u8>, b: bool, v: Version) {
    out.extend_from_slice(match (v, b) {
        (Version::Resp2, true) => b":1\r\n",
        (Version::Resp2, false) => b":0\r\n",
        (Version::Resp3, true) => b"#t\r\n",
        (Version::Resp3, false) => b"#f\r\n",
    });
}

/// Appends plain text meant for humans (`INFO`, `CLIENT LIST`...): a bulk string (RESP2) / a
/// verbatim string of format `txt` (RESP3): `=<len + 4>\r\ntxt:<text>\r\n`.
pub fn verbatim(out: &mut Vec<u8>, text: &[u8], v: Version) {
    match v {
        Version::Resp2 => bulk(out, text),
        Version::Resp3 => {
            out.reserve(text.len() + 20);
            line_with_uint(out, b'=', text.len() as u64 + 4);
            out.extend_from_slice(b"txt:");
            out.extend_from_slice(text);
            out.extend_from_slice(CRLF);
        }
    }
}

/// Appends `<kind><n>\r\n`.
fn line_with_uint(out: &mut Vec<u8>, kind: u8, n: u64) {
    let mut digits = Digits::new();
    let text = digits.format(n);
    out.reserve(text.len() + 3);
    out.push(kind);
    out.extend_from_slice(text);
    out.extend_from_slice(CRLF);
}

/// Appends `<kind><n>\r\n` for a signed `n`.
fn line_with_int(out: &mut Vec<u8>, kind: u8, n: i64) {
    let mut digits = Digits::new();
    let text = digits.format(n.unsigned_abs());
    out.reserve(text.len() + 4);
    out.push(kind);
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(text);
    out.extend_from_slice(CRLF);
}

/// "00" "01" ... "99": two decimal digits at a time.
const DIGIT_PAIRS: &[u8; 200] = b"\
0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Stack buffer for the decimal digits of a `u64` (at most 20).
struct Digits {
    buf: [u8; 20],
}

impl Digits {
    fn new() -> Self {
        Digits { buf: [0; 20] }
    }

    /// Formats `n` in decimal, returning the digits (a suffix of the buffer).
    fn format(&mut self, mut n: u64) -> &[u8] {
        let mut start = self.buf.len();
        while n >= 100 {
            let pair = (n % 100) as usize * 2;
            n /= 100;
            start -= 2;
            self.buf[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        }
        if n >= 10 {
            let pair = n as usize * 2;
            start -= 2;
            self.buf[start..start + 2].copy_from_slice(&DIGIT_PAIRS[pair..pair + 2]);
        } else {
            start -= 1;
            self.buf[start] = b'0' + n as u8;
        }
        &self.buf[start..]
    }
}

/// A small text buffer on the stack; writes past its capacity fail with `fmt::Error`.
struct StackText {
    buf: [u8; 48],
    len: usize,
}

impl StackText {
    fn new() -> Self {
        StackText {
            buf: [0; 48],
            len: 0,
        }
    }

    fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or_default()
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.len..self.len + bytes.len()) {
            dst.copy_from_slice(bytes);
            self.len += bytes.len();
        }
    }
}

impl std::fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let dst = self
            .buf
            .get_mut(self.len..self.len + s.len())
            .ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len += s.len();
        Ok(())
    }
}

/// Formats `d` following Redis's `d2string` (Redis 7.2+): `nan`, `inf`, `-inf`, `0`, `-0`;
/// integral values within ±2^62 in plain decimal; otherwise the shortest round-tripping digit
/// string laid out like Redis's `fpconv_dtoa`: plain digits (padded with up to seven zeros)
/// for large integral values, a decimal point when the exponent is small, and otherwise
/// `d.ddde±x`.
fn format_double(d: f64, out: &mut StackText) {
    /// 2^62: up to here Redis prints integral doubles through its integer formatter.
    const INTEGER_RANGE: f64 = 4_611_686_018_427_387_904.0;

    if d.is_nan() {
        return out.push_bytes(b"nan");
    }
    if d.is_infinite() {
        return out.push_bytes(if d > 0.0 { b"inf" } else { b"-inf" });
    }
    if d == 0.0 {
        return out.push_bytes(if d.is_sign_negative() { b"-0" } else { b"0" });
    }
    if d.fract() == 0.0 && (-INTEGER_RANGE..=INTEGER_RANGE).contains(&d) {
        let mut digits = Digits::new();
        if d < 0.0 {
            out.push_bytes(b"-");
        }
        return out.push_bytes(digits.format(d.abs() as u64));
    }

    // Shortest round-tripping digits and the decimal exponent, from `{:e}` ("1.2345e-7").
    let mut sci = StackText::new();
    if write!(sci, "{:e}", d.abs()).is_err() {
        // Cannot happen (at most 17 digits and a 4-character exponent); Rust's own
        // formatting is still correct if it ever did.
        let _ = write!(out, "{d}");
        return;
    }
    let sci = sci.as_bytes();
    let (mantissa, exponent) = match sci.iter().position(|&b| b == b'e') {
        Some(e) => (
            sci.get(..e).unwrap_or_default(),
            sci.get(e + 1..).unwrap_or_default(),
        ),
        None => (sci, &b"0"[..]),
    };
    let mut digits = [0u8; 24];
    let mut ndigits = 0usize;
    for &b in mantissa.iter().filter(|b| b.is_ascii_digit()) {
        if let Some(slot) = digits.get_mut(ndigits) {
            *slot = b;
            ndigits += 1;
        }
    }
    let digits = digits.get(..ndigits).unwrap_or_default();
    let exp: i32 = std::str::from_utf8(exponent)
        .ok()
        .and_then(|e| e.parse().ok())
        .unwrap_or(0);
    let n = ndigits as i32;
    // The value is 0.<digits> * 10^(k + n), i.e. <digits> * 10^k.
    let k = exp - (n - 1);

    if d < 0.0 {
        out.push_bytes(b"-");
    }
    if k >= 0 && exp < n + 7 {
        // Integer: the digits, then k zeros.
        out.push_bytes(digits);
        for _ in 0..k {
            out.push_bytes(b"0");
        }
    } else if k < 0 && (k > -7 || exp.abs() < 4) {
        // Decimal without an exponent.
        let int_len = n + k;
        if int_len <= 0 {
            out.push_bytes(b"0.");
            for _ in 0..-int_len {
                out.push_bytes(b"0");
            }
            out.push_bytes(digits);
        } else {
            let (int_part, frac_part) = digits.split_at((int_len as usize).min(digits.len()));
            out.push_bytes(int_part);
            out.push_bytes(b".");
            out.push_bytes(frac_part);
        }
    } else {
        // d.ddd e±x
        let (first, rest) = digits.split_at(1.min(digits.len()));
        out.push_bytes(first);
        if !rest.is_empty() {
            out.push_bytes(b".");
            out.push_bytes(rest);
        }
        out.push_bytes(if exp < 0 { b"e-" } else { b"e+" });
        let mut exp_digits = Digits::new();
        out.push_bytes(exp_digits.format(u64::from(exp.unsigned_abs())));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        f(&mut out);
        out
    }

    fn both(f: impl Fn(&mut Vec<u8>, Version)) -> (Vec<u8>, Vec<u8>) {
        (enc(|o| f(o, Version::Resp2)), enc(|o| f(o, Version::Resp3)))
    }

    fn pair(a: &[u8], b: &[u8]) -> (Vec<u8>, Vec<u8>) {
        (a.to_vec(), b.to_vec())
    }

    #[test]
    fn version_defaults_to_resp2() {
        assert_eq!(Version::default(), Version::Resp2);
    }

    #[test]
    fn simple_strings() {
        assert_eq!(enc(|o| simple(o, "OK")), b"+OK\r\n");
        assert_eq!(enc(|o| simple(o, "")), b"+\r\n");
        assert_eq!(enc(|o| simple(o, "a\r\nb")), b"+a  b\r\n");
    }

    #[test]
    fn errors() {
        assert_eq!(
            enc(|o| error(o, "ERR unknown command 'x'")),
            b"-ERR unknown command 'x'\r\n"
        );
        assert_eq!(
            enc(|o| error(o, "WRONGTYPE Operation against a key")),
            b"-WRONGTYPE Operation against a key\r\n"
        );
        assert_eq!(enc(|o| error(o, "-ERR x")), b"-ERR x\r\n");
        assert_eq!(enc(|o| error(o, "ERR a\r\nb\nc\r\n\n")), b"-ERR a  b c\r\n");
        assert_eq!(enc(|o| error(o, "ERR \r")), b"-ERR \r\n");
        assert_eq!(enc(|o| error(o, "\r\n")), b"-\r\n");
    }

    #[test]
    fn integers() {
        for (n, text) in [
            (0i64, "0"),
            (7, "7"),
            (10, "10"),
            (99, "99"),
            (100, "100"),
            (-1, "-1"),
            (-100, "-100"),
            (1234567890, "1234567890"),
            (i64::MAX, "9223372036854775807"),
            (i64::MIN, "-9223372036854775808"),
        ] {
            assert_eq!(enc(|o| integer(o, n)), format!(":{text}\r\n").into_bytes());
        }
    }

    #[test]
    fn bulk_strings() {
        assert_eq!(enc(|o| bulk(o, b"hello")), b"$5\r\nhello\r\n");
        assert_eq!(enc(|o| bulk(o, b"")), b"$0\r\n\r\n");
        assert_eq!(enc(|o| bulk(o, b"a\r\nb")), b"$4\r\na\r\nb\r\n");
        assert_eq!(enc(|o| bulk_header(o, 1234)), b"$1234\r\n");
        let big = vec![b'x'; 12345];
        let out = enc(|o| bulk(o, &big));
        assert!(out.starts_with(b"$12345\r\nxxx"));
        assert_eq!(out.len(), 8 + 12345 + 2);
    }

    #[test]
    fn nulls() {
        assert_eq!(both(null), pair(b"$-1\r\n", b"_\r\n"));
        assert_eq!(both(null_array), pair(b"*-1\r\n", b"_\r\n"));
    }

    #[test]
    fn aggregate_headers() {
        assert_eq!(enc(|o| array_header(o, 0)), b"*0\r\n");
        assert_eq!(enc(|o| array_header(o, 3)), b"*3\r\n");
        assert_eq!(both(|o, v| set_header(o, 2, v)), pair(b"*2\r\n", b"~2\r\n"));
        assert_eq!(both(|o, v| map_header(o, 3, v)), pair(b"*6\r\n", b"%3\r\n"));
        assert_eq!(both(|o, v| map_header(o, 0, v)), pair(b"*0\r\n", b"%0\r\n"));
        assert_eq!(
            both(|o, v| push_header(o, 3, v)),
            pair(b"*3\r\n", b">3\r\n")
        );
    }

    #[test]
    fn doubles() {
        let cases: &[(f64, &str)] = &[
            (1.5, "1.5"),
            (3.0, "3"),
            (-3.0, "-3"),
            (0.0, "0"),
            (-0.0, "-0"),
            (0.1, "0.1"),
            (-0.25, "-0.25"),
            (1.0 / 3.0, "0.3333333333333333"),
            (123456.789, "123456.789"),
            (1.2345678, "1.2345678"),
            (0.0001, "0.0001"),
            (0.000001, "0.000001"),
            (1e-7, "1e-7"),
            (1.5e-7, "1.5e-7"),
            (0.0001234567, "1.234567e-4"),
            (1e21, "1e+21"),
            (1e15, "1000000000000000"),
            (4611686018427387904.0, "4611686018427387904"),
            (9223372036854775808.0, "9223372036854776000"),
            (123456789012345680000.0, "123456789012345680000"),
            (1.5e300, "1.5e+300"),
            (-1.5e300, "-1.5e+300"),
            (1e100, "1e+100"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (f64::NAN, "nan"),
        ];
        for &(d, text) in cases {
            let resp3 = format!(",{text}\r\n").into_bytes();
            let resp2 = format!("${}\r\n{text}\r\n", text.len()).into_bytes();
            assert_eq!(both(|o, v| double(o, d, v)), (resp2, resp3), "{d:e}");
        }
    }

    #[test]
    fn booleans() {
        assert_eq!(both(|o, v| boolean(o, true, v)), pair(b":1\r\n", b"#t\r\n"));
        assert_eq!(
            both(|o, v| boolean(o, false, v)),
            pair(b":0\r\n", b"#f\r\n")
        );
    }

    #[test]
    fn verbatim_strings() {
        assert_eq!(
            both(|o, v| verbatim(o, b"# Server\r\nredis_version:7.2.0\r\n", v)),
            pair(
                b"$31\r\n# Server\r\nredis_version:7.2.0\r\n\r\n",
                b"=35\r\ntxt:# Server\r\nredis_version:7.2.0\r\n\r\n"
            )
        );
        assert_eq!(
            both(|o, v| verbatim(o, b"", v)),
            pair(b"$0\r\n\r\n", b"=4\r\ntxt:\r\n")
        );
    }

    #[test]
    fn appends_to_existing_output() {
        let mut out = b"+OK\r\n".to_vec();
        integer(&mut out, 5);
        bulk(&mut out, b"x");
        assert_eq!(out, b"+OK\r\n:5\r\n$1\r\nx\r\n");
    }

    proptest! {
        #[test]
        fn integers_match_std(n in any::<i64>()) {
            let mut out = Vec::new();
            integer(&mut out, n);
            prop_assert_eq!(out, format!(":{n}\r\n").into_bytes());
        }

        #[test]
        fn doubles_read_back_exactly(bits in any::<u64>()) {
            let d = f64::from_bits(bits);
            let mut text = StackText::new();
            format_double(d, &mut text);
            let text = std::str::from_utf8(text.as_bytes()).unwrap();
            let back: f64 = text.parse().unwrap();
            if d.is_nan() {
                prop_assert!(back.is_nan());
            } else {
                prop_assert_eq!(back.to_bits(), d.to_bits(), "{}", text);
            }
            // The longest forms: 17 digits and 7 zeros, with a sign; or "-d.<16 digits>e-308".
            prop_assert!(text.len() <= 25, "{}", text);
        }
    }
}
