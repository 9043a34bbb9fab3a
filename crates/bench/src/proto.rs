//! Allocation-free encoding of the native requests the benchmark sends, and scanning of the
//! responses (id, error or not) without decoding them.
//!
//! The messages are those of `crates/wire/proto/latticekv.proto`; encoding them by hand
//! avoids building `prost` structs (and copying keys and values into `Bytes`) for every
//! operation. The unit tests decode every encoded request with `prost` and compare it with
//! the expected message, and scan `prost`-encoded responses.

use prost::Message;
use wire::frame::HEADER_LEN;
use wire::pb;

/// Protobuf wire type of varints.
const VARINT: u32 = 0;
/// Protobuf wire type of length-delimited fields.
const LEN: u32 = 2;

// Field numbers (latticekv.proto).
const REQUEST_ID: u32 = 1;
const REQUEST_GET: u32 = 2;
const REQUEST_UPDATE: u32 = 5;
const REQUEST_GET_MANY: u32 = 6;
const REQUEST_PUT_MANY: u32 = 7;
const UPDATE_KEY: u32 = 1;
const UPDATE_ASSIGN: u32 = 2;
const UPDATE_SET_ADD: u32 = 3;
const UPDATE_COUNTER_ADD: u32 = 5;
const VALUE_LWW: u32 = 1;
const VALUE_OR_SET: u32 = 3;
const VALUE_COUNTER: u32 = 8;
const RESPONSE_ID: u32 = 1;
const RESPONSE_ERROR: u32 = 2;
const RESPONSE_MULTI: u32 = 5;
const KEY_RESULT_ERROR: u32 = 1;

/// Bytes of `v` as a varint.
#[inline]
fn varint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

#[inline]
fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Every field number used here is below 16, so a tag is one byte.
#[inline]
fn put_tag(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    out.push(((field << 3) | wire_type) as u8);
}

/// Encoded size of a length-delimited field whose content is `n` bytes.
#[inline]
fn len_field(n: usize) -> usize {
    1 + varint_len(n as u64) + n
}

/// Encoded size of a varint field (absent when 0, as proto3 encoders do).
#[inline]
fn uint_field(v: u64) -> usize {
    if v == 0 {
        0
    } else {
        1 + varint_len(v)
    }
}

#[inline]
fn put_len_header(out: &mut Vec<u8>, field: u32, n: usize) {
    put_tag(out, field, LEN);
    put_varint(out, n as u64);
}

#[inline]
fn put_bytes(out: &mut Vec<u8>, field: u32, b: &[u8]) {
    put_len_header(out, field, b.len());
    out.extend_from_slice(b);
}

#[inline]
fn put_uint(out: &mut Vec<u8>, field: u32, v: u64) {
    if v != 0 {
        put_tag(out, field, VARINT);
        put_varint(out, v);
    }
}

/// Appends one `Request{id, <op_field>: <op_len bytes written by write_op>}` frame.
#[inline]
fn request(
    out: &mut Vec<u8>,
    id: u64,
    op_field: u32,
    op_len: usize,
    write_op: impl FnOnce(&mut Vec<u8>),
) {
    let body = uint_field(id) + len_field(op_len);
    out.reserve(HEADER_LEN + body);
    out.extend_from_slice(&(body as u32).to_be_bytes());
    let start = out.len();
    put_uint(out, REQUEST_ID, id);
    put_len_header(out, op_field, op_len);
    write_op(out);
    debug_assert_eq!(out.len() - start, body, "request size");
}

/// `Get{key}`.
pub fn get(out: &mut Vec<u8>, id: u64, key: &[u8]) {
    request(out, id, REQUEST_GET, len_field(key.len()), |out| {
        put_bytes(out, 1, key)
    });
}

/// `Update{key, assign{value}}` (condition ALWAYS).
pub fn update_assign(out: &mut Vec<u8>, id: u64, key: &[u8], value: &[u8]) {
    let assign = len_field(value.len());
    let op = len_field(key.len()) + len_field(assign);
    request(out, id, REQUEST_UPDATE, op, |out| {
        put_bytes(out, UPDATE_KEY, key);
        put_len_header(out, UPDATE_ASSIGN, assign);
        put_bytes(out, 1, value);
    });
}

/// `Update{key, counter_add{delta}}`.
pub fn update_counter_add(out: &mut Vec<u8>, id: u64, key: &[u8], delta: i64) {
    let zigzag = ((delta << 1) ^ (delta >> 63)) as u64;
    let add = uint_field(zigzag);
    let op = len_field(key.len()) + len_field(add);
    request(out, id, REQUEST_UPDATE, op, |out| {
        put_bytes(out, UPDATE_KEY, key);
        put_len_header(out, UPDATE_COUNTER_ADD, add);
        put_uint(out, 1, zigzag);
    });
}

/// `Update{key, set_add{members: [member]}}`.
pub fn update_set_add(out: &mut Vec<u8>, id: u64, key: &[u8], member: &[u8]) {
    let add = len_field(member.len());
    let op = len_field(key.len()) + len_field(add);
    request(out, id, REQUEST_UPDATE, op, |out| {
        put_bytes(out, UPDATE_KEY, key);
        put_len_header(out, UPDATE_SET_ADD, add);
        put_bytes(out, 1, member);
    });
}

/// `GetMany{keys}` with `n` keys, key `i` being `key(i)` (called twice per key).
pub fn get_many<'a>(out: &mut Vec<u8>, id: u64, n: usize, key: impl Fn(usize) -> &'a [u8]) {
    let op = (0..n).map(|i| len_field(key(i).len())).sum();
    request(out, id, REQUEST_GET_MANY, op, |out| {
        for i in 0..n {
            put_bytes(out, 1, key(i));
        }
    });
}

/// A lattice value written by `PutMany`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PutValue<'a> {
    /// `LwwValue{ts: {time, writer}, value}`.
    Lww {
        /// HLC time.
        time: u64,
        /// The writer id.
        writer: u64,
        /// The value bytes.
        value: &'a [u8],
    },
    /// `CounterValue{entries: [{actor, increments}]}`: the actor's cumulative increments.
    Counter {
        /// The actor.
        actor: u64,
        /// All increments this actor ever made to the key.
        increments: u64,
    },
    /// `OrSetValue` delta adding `member` with the fresh dot `(actor, counter)`: the entry
    /// `{member, dots: [dot]}` and the causal context `{cloud: [dot]}`.
    OrSet {
        /// The member added.
        member: &'a [u8],
        /// The dot's actor.
        actor: u64,
        /// The dot's counter (unique per actor).
        counter: u64,
    },
}

impl PutValue<'_> {
    /// Size of the encoded `Value` message.
    fn len(&self) -> usize {
        match *self {
            PutValue::Lww {
                time,
                writer,
                value,
            } => {
                let ts = uint_field(time) + uint_field(writer);
                len_field(len_field(ts) + len_field(value.len()))
            }
            PutValue::Counter { actor, increments } => {
                let entry = uint_field(actor) + uint_field(increments);
                len_field(len_field(entry))
            }
            PutValue::OrSet {
                member,
                actor,
                counter,
            } => {
                let dot = uint_field(actor) + uint_field(counter);
                let entry = len_field(member.len()) + len_field(dot);
                let context = len_field(dot);
                len_field(len_field(entry) + len_field(context))
            }
        }
    }

    /// Appends the `Value` message.
    fn write(&self, out: &mut Vec<u8>) {
        match *self {
            PutValue::Lww {
                time,
                writer,
                value,
            } => {
                let ts = uint_field(time) + uint_field(writer);
                put_len_header(out, VALUE_LWW, len_field(ts) + len_field(value.len()));
                put_len_header(out, 1, ts);
                put_uint(out, 1, time);
                put_uint(out, 2, writer);
                put_bytes(out, 2, value);
            }
            PutValue::Counter { actor, increments } => {
                let entry = uint_field(actor) + uint_field(increments);
                put_len_header(out, VALUE_COUNTER, len_field(entry));
                put_len_header(out, 1, entry);
                put_uint(out, 1, actor);
                put_uint(out, 2, increments);
            }
            PutValue::OrSet {
                member,
                actor,
                counter,
            } => {
                let dot = uint_field(actor) + uint_field(counter);
                let entry = len_field(member.len()) + len_field(dot);
                let context = len_field(dot);
                put_len_header(out, VALUE_OR_SET, len_field(entry) + len_field(context));
                put_len_header(out, 1, entry);
                put_bytes(out, 1, member);
                put_len_header(out, 2, dot);
                put_uint(out, 1, actor);
                put_uint(out, 2, counter);
                put_len_header(out, 2, context);
                put_len_header(out, 2, dot);
                put_uint(out, 1, actor);
                put_uint(out, 2, counter);
            }
        }
    }
}

/// `PutMany{puts}` with `n` puts, put `i` being `item(i)` = (key, value) (called twice per
/// put, and must return the same both times).
pub fn put_many<'a>(
    out: &mut Vec<u8>,
    id: u64,
    n: usize,
    item: impl Fn(usize) -> (&'a [u8], PutValue<'a>),
) {
    let put_len = |i: usize| {
        let (key, value) = item(i);
        len_field(key.len()) + len_field(value.len())
    };
    let op = (0..n).map(|i| len_field(put_len(i))).sum();
    request(out, id, REQUEST_PUT_MANY, op, |out| {
        for i in 0..n {
            let (key, value) = item(i);
            put_len_header(out, 1, len_field(key.len()) + len_field(value.len()));
            put_bytes(out, 1, key);
            put_len_header(out, 2, value.len());
            value.write(out);
        }
    });
}

// ---- responses ------------------------------------------------------------------------------

/// One field's value.
enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn read_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// Reads the field at `pos`: `Some(None)` at the end, `None` if malformed.
fn next_field<'a>(buf: &'a [u8], pos: &mut usize) -> Option<Option<(u64, Field<'a>)>> {
    if *pos >= buf.len() {
        return Some(None);
    }
    let key = read_varint(buf, pos)?;
    let value = match key & 7 {
        0 => Field::Varint(read_varint(buf, pos)?),
        1 | 5 => {
            let n = if key & 7 == 1 { 8 } else { 4 };
            *pos = pos.checked_add(n).filter(|&p| p <= buf.len())?;
            Field::Fixed
        }
        2 => {
            let n = usize::try_from(read_varint(buf, pos)?).ok()?;
            let end = pos.checked_add(n).filter(|&e| e <= buf.len())?;
            let bytes = buf.get(*pos..end)?;
            *pos = end;
            Field::Bytes(bytes)
        }
        _ => return None,
    };
    Some(Some((key >> 3, value)))
}

/// What the benchmark needs of a `Response`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scanned<'a> {
    /// The response id.
    pub id: u64,
    /// The encoded `Error`, if the response is one.
    pub error: Option<&'a [u8]>,
    /// The encoded `MultiResult`, if the response is one.
    pub multi: Option<&'a [u8]>,
}

/// Scans a `Response` body; `None` if it is not valid protobuf.
pub fn scan_response(body: &[u8]) -> Option<Scanned<'_>> {
    let mut out = Scanned::default();
    let mut pos = 0;
    while let Some((field, value)) = next_field(body, &mut pos)? {
        match (field, value) {
            (f, Field::Varint(v)) if f == u64::from(RESPONSE_ID) => out.id = v,
            (f, Field::Bytes(b)) if f == u64::from(RESPONSE_ERROR) => out.error = Some(b),
            (f, Field::Bytes(b)) if f == u64::from(RESPONSE_MULTI) => out.multi = Some(b),
            _ => {}
        }
    }
    Some(out)
}

/// Calls `each` for every `KeyResult` of an encoded `MultiResult`, with its encoded `Error`
/// if it is one; returns how many there were (`None` if malformed).
pub fn key_results<'a>(multi: &'a [u8], mut each: impl FnMut(Option<&'a [u8]>)) -> Option<usize> {
    let mut pos = 0;
    let mut n = 0;
    while let Some((field, value)) = next_field(multi, &mut pos)? {
        let (1, Field::Bytes(result)) = (field, value) else {
            continue;
        };
        let mut error = None;
        let mut rpos = 0;
        while let Some((f, v)) = next_field(result, &mut rpos)? {
            if let (f, Field::Bytes(b)) = (f, v) {
                if f == u64::from(KEY_RESULT_ERROR) {
                    error = Some(b);
                }
            }
        }
        each(error);
        n += 1;
    }
    Some(n)
}

/// Whether an encoded `Error` is a redirect (the key lives elsewhere now).
pub fn is_redirect(error: &[u8]) -> bool {
    pb::Error::decode(error).is_ok_and(|e| e.code == pb::ErrorCode::Redirect as i32)
}

/// An encoded `Error` as text: `CODE: message`.
pub fn error_text(error: &[u8]) -> String {
    match pb::Error::decode(error) {
        Ok(e) => {
            let code = pb::ErrorCode::try_from(e.code)
                .map(|c| c.as_str_name().to_string())
                .unwrap_or_else(|_| format!("error code {}", e.code));
            format!("{code}: {}", e.message)
        }
        Err(_) => "undecodable error".to_string(),
    }
}

#[cfg(test)]
mod tests;
