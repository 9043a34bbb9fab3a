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
<<<<<<< HEAD
mod tests;
=======
mod tests {
    use super::*;
    use bytes::Bytes;
    use pb::request::Op;
    use wire::frame::frame_len;

    fn decode(frame: &[u8]) -> pb::Request {
        let len = frame_len(frame, 1 << 20).unwrap().unwrap();
        assert_eq!(HEADER_LEN + len, frame.len(), "one whole frame");
        pb::Request::decode(&frame[HEADER_LEN..]).unwrap()
    }

    fn b(s: &[u8]) -> Bytes {
        Bytes::copy_from_slice(s)
    }

    fn update(key: &[u8], op: pb::update::Op) -> Option<Op> {
        Some(Op::Update(pb::Update {
            key: b(key),
            op: Some(op),
        }))
    }

    #[test]
    fn single_requests_decode_with_prost() {
        let long = vec![7u8; 300];
        for (id, key) in [(1u64, &b"key:0001"[..]), (300, b""), (u64::MAX, &long[..])] {
            let mut out = Vec::new();
            get(&mut out, id, key);
            let want = Some(Op::Get(pb::Get { key: b(key) }));
            assert_eq!(
                decode(&out),
                pb::Request {
                    id,
                    op: want,
                    ..Default::default()
                }
            );

            for value in [&b"v"[..], b"", &long[..]] {
                out.clear();
                update_assign(&mut out, id, key, value);
                let op = pb::update::Op::Assign(pb::update::Assign {
                    value: b(value),
                    condition: 0,
                });
                assert_eq!(decode(&out).op, update(key, op));
            }

            for delta in [1i64, -1, 0, i64::MAX, i64::MIN] {
                out.clear();
                update_counter_add(&mut out, id, key, delta);
                let op = pb::update::Op::CounterAdd(pb::update::CounterAdd { delta });
                assert_eq!(decode(&out).op, update(key, op));
            }

            out.clear();
            update_set_add(&mut out, id, key, b"m01");
            let op = pb::update::Op::SetAdd(pb::update::SetAdd {
                members: vec![b(b"m01")],
            });
            let req = decode(&out);
            assert_eq!((req.id, req.op), (id, update(key, op)));
        }
    }

    #[test]
    fn batched_requests_decode_with_prost() {
        let keys: Vec<Vec<u8>> = (0..40)
            .map(|i| format!("key:{i:04}").into_bytes())
            .collect();
        let mut out = Vec::new();
        get_many(&mut out, 9, keys.len(), |i| keys[i].as_slice());
        let want = Op::GetMany(pb::GetMany {
            keys: keys.iter().map(|k| b(k)).collect(),
        });
        assert_eq!(
            decode(&out),
            pb::Request {
                id: 9,
                op: Some(want),
                ..Default::default()
            }
        );

        let value = [b'x'; 200];
        let values: Vec<PutValue> = (0..40u64)
            .map(|i| match i % 3 {
                0 => PutValue::Lww {
                    time: (1_700_000_000_000 << 16) + i,
                    writer: 0xdead_beef,
                    value: &value[..(i as usize * 5)],
                },
                1 => PutValue::Counter {
                    actor: 42,
                    increments: i * 1000,
                },
                _ => PutValue::OrSet {
                    member: b"m07",
                    actor: 1 << 40,
                    counter: i,
                },
            })
            .collect();
        out.clear();
        put_many(&mut out, 10, keys.len(), |i| {
            (keys[i].as_slice(), values[i])
        });
        let Some(Op::PutMany(pm)) = decode(&out).op else {
            panic!("PutMany");
        };
        assert_eq!(pm.puts.len(), 40);
        for (i, put) in pm.puts.iter().enumerate() {
            assert_eq!(put.key, b(&keys[i]));
            let kind = put.value.clone().unwrap().kind.unwrap();
            let want = match values[i] {
                PutValue::Lww {
                    time,
                    writer,
                    value,
                } => pb::value::Kind::Lww(pb::LwwValue {
                    ts: Some(pb::Timestamp { time, writer }),
                    value: b(value),
                }),
                PutValue::Counter { actor, increments } => {
                    pb::value::Kind::Counter(pb::CounterValue {
                        entries: vec![pb::counter_value::Entry {
                            actor,
                            increments,
                            decrements: 0,
                        }],
                    })
                }
                PutValue::OrSet {
                    member,
                    actor,
                    counter,
                } => {
                    let dot = pb::Dot { actor, counter };
                    pb::value::Kind::OrSet(pb::OrSetValue {
                        entries: vec![pb::or_set_value::Entry {
                            member: b(member),
                            dots: vec![dot],
                        }],
                        context: Some(pb::CausalContext {
                            vector: Default::default(),
                            cloud: vec![dot],
                        }),
                    })
                }
            };
            assert_eq!(kind, want, "put {i}");
            // And the value converts to a lattice value.
            wire::convert::value_from_pb(put.value.as_ref().unwrap()).unwrap();
        }
    }

    fn encode_response(resp: &pb::Response) -> Vec<u8> {
        resp.encode_to_vec()
    }

    #[test]
    fn scanning_responses() {
        use pb::response::Result as R;
        let error = pb::Error {
            code: pb::ErrorCode::WrongType as i32,
            message: "wrong type".into(),
            redirect: vec![],
        };
        let ack = encode_response(&pb::Response {
            id: 77,
            result: Some(R::Ack(pb::Ack { count: 1 })),
        });
        assert_eq!(
            scan_response(&ack),
            Some(Scanned {
                id: 77,
                error: None,
                multi: None
            })
        );
        let err = encode_response(&pb::Response {
            id: 78,
            result: Some(R::Error(error.clone())),
        });
        let s = scan_response(&err).unwrap();
        assert_eq!(s.id, 78);
        assert_eq!(
            error_text(s.error.unwrap()),
            "ERROR_CODE_WRONG_TYPE: wrong type"
        );
        assert!(!is_redirect(s.error.unwrap()));
        let moved = pb::Error {
            code: pb::ErrorCode::Redirect as i32,
            message: "moved".into(),
            redirect: vec!["127.0.0.1:1".into()],
        };
        assert!(is_redirect(&moved.encode_to_vec()));
        assert!(!is_redirect(b"\xff\xff"));
        let get = encode_response(&pb::Response {
            id: 1 << 40,
            result: Some(R::Get(pb::GetResult {
                value: Some(pb::Value {
                    kind: Some(pb::value::Kind::Bool(true)),
                }),
            })),
        });
        assert_eq!(scan_response(&get).unwrap().id, 1 << 40);
        assert!(scan_response(&get).unwrap().error.is_none());

        use pb::key_result::Result as K;
        let results = vec![
            K::Get(pb::GetResult { value: None }),
            K::Error(error.clone()),
            K::Ack(pb::Ack { count: 0 }),
            K::Error(error),
        ];
        let multi = encode_response(&pb::Response {
            id: 5,
            result: Some(R::Multi(pb::MultiResult {
                results: results
                    .into_iter()
                    .map(|r| pb::KeyResult { result: Some(r) })
                    .collect(),
            })),
        });
        let s = scan_response(&multi).unwrap();
        let mut errors = Vec::new();
        let n = key_results(s.multi.unwrap(), |e| errors.push(e.is_some())).unwrap();
        assert_eq!(n, 4);
        assert_eq!(errors, [false, true, false, true]);

        // Malformed input never panics.
        for cut in 0..multi.len() {
            if let Some(s) = scan_response(&multi[..cut]) {
                if let Some(m) = s.multi {
                    let _ = key_results(m, |_| {});
                }
            }
        }
        assert_eq!(scan_response(&[0x0b]), None);
        assert_eq!(scan_response(&[0x08, 0xff]), None);
        assert_eq!(scan_response(&[0x12, 0x05, 0x00]), None);
    }

    #[test]
    fn varint_sizes() {
        for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            assert_eq!(out.len(), varint_len(v), "{v}");
            let mut pos = 0;
            assert_eq!(read_varint(&out, &mut pos), Some(v));
        }
    }
}
>>>>>>> slo
