//! Changes waiting for the write-ahead log, encoded as they happen.
//!
//! A memory-tier worker with a log queues every change to its store (see
//! `shard::journal`). Queueing a copy of each key and record and encoding the batch later
//! cost every write two allocations and copies of its value, then the encoding's own; a
//! [`JournalBuf`] instead appends each change's encoding at once to the payload being
//! built. The bytes are exactly what `codec::encode_journal`
//! makes of the same changes (a `Replicate` message whose entries are the changes, in
//! order): records of the common shapes (a tombstone, a last-writer-wins value, with or
//! without an expiry) are written field by field here, any other value through its
//! protobuf message. `decode_journal` reads both; the tests hold the two encodings equal.

use bytes::Bytes;
use lattice::{Expiry, Record, Timestamp, Value};
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, WireType};
use prost::Message;

/// Largest log payload a worker writes (well under the log's record limit); a larger batch
/// of changes is split, each change replaying on its own.
pub const MAX_JOURNAL_PAYLOAD: usize = 4 << 20;

/// Largest emptied payload buffer kept for the next payload ([`JournalBuf::reuse`]).
const REUSE_MAX_BYTES: usize = 1 << 20;

/// Changes queued for the write-ahead log, as finished log payloads and the one being
/// built.
#[derive(Debug)]
pub struct JournalBuf {
    /// Payloads already full (each at most about [`MAX_JOURNAL_PAYLOAD`] bytes).
    full: Vec<Bytes>,
    /// The payload being built: encoded `Replicate.entries` fields.
    current: Vec<u8>,
    /// Changes queued, in every payload.
    changes: usize,
    /// The size of the last payload taken, to size the next one's buffer once.
    last_size: usize,
    /// Payloads end before this many bytes (one larger change gets a payload of its own).
    max_payload: usize,
    /// An emptied buffer of a payload already written, for the next payload.
    spare: Option<Vec<u8>>,
}

impl Default for JournalBuf {
    fn default() -> Self {
        JournalBuf::with_max_payload(MAX_JOURNAL_PAYLOAD)
    }
}

impl JournalBuf {
    /// An empty queue of payloads of at most about [`MAX_JOURNAL_PAYLOAD`] bytes.
    pub fn new() -> JournalBuf {
        JournalBuf::default()
    }

    /// An empty queue of payloads of at most about `max_payload` bytes.
    pub fn with_max_payload(max_payload: usize) -> JournalBuf {
        JournalBuf {
            full: Vec::new(),
            current: Vec::new(),
            changes: 0,
            last_size: 0,
            max_payload,
            spare: None,
        }
    }

    /// Changes queued.
    pub fn len(&self) -> usize {
        self.changes
    }

    /// True if nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.changes == 0
    }

    /// Queues `record` merged into `key`.
    pub fn push_merge(&mut self, key: &[u8], record: &Record) {
        match Shape::of(record) {
            Some(shape) => {
                let len = entry_len(key, Some(shape.len()));
                self.make_room(len);
                put_entry(&mut self.current, key, len, |buf| shape.put(buf));
            }
            None => {
                let pb = wire::convert::record_to_pb(record);
                let record_len = pb.encoded_len();
                let len = entry_len(key, Some(record_len));
                self.make_room(len);
                put_entry(&mut self.current, key, len, |buf| {
                    put_len_prefix(buf, 2, record_len);
                    pb.encode_raw(buf);
                });
            }
        }
        self.changes += 1;
    }

    /// Queues the removal of `key`.
    pub fn push_drop(&mut self, key: &[u8]) {
        let len = entry_len(key, None);
        self.make_room(len);
        put_entry(&mut self.current, key, len, |_| {});
        self.changes += 1;
    }

    /// Keeps `buf` (a payload buffer the log is done with) to build the next payload in:
    /// a payload per few milliseconds in fresh memory cost the worker a page fault and the
    /// kernel's zeroing of the page each time. The larger of two offered is kept; one above
    /// 1 MiB is dropped (steady traffic's payloads are far smaller, and a burst of large
    /// ones should not leave every worker holding megabytes).
    pub fn reuse(&mut self, mut buf: Vec<u8>) {
        if buf.capacity() > REUSE_MAX_BYTES {
            return;
        }
        if self
            .spare
            .as_ref()
            .is_some_and(|s| s.capacity() >= buf.capacity())
        {
            return;
        }
        buf.clear();
        self.spare = Some(buf);
    }

    /// The queued changes as log payloads, in order, leaving the queue empty.
    pub fn take(&mut self) -> Vec<Bytes> {
        if !self.current.is_empty() {
            self.last_size = self.current.len();
            self.full
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        self.changes = 0;
        std::mem::take(&mut self.full)
    }

    /// Starts a new payload if an entry of `len` bytes (its body) would take the current
    /// one past the payload limit.
    fn make_room(&mut self, len: usize) {
        let framed = 1 + encoded_len_varint(len as u64) + len;
        if !self.current.is_empty() && self.current.len() + framed > self.max_payload {
            self.full
                .push(Bytes::from(std::mem::take(&mut self.current)));
        }
        if self.current.capacity() == 0 {
            if let Some(spare) = self.spare.take() {
                self.current = spare;
            }
            // Sized like the last payload taken, once (not above the usual limit).
            let hint = self.last_size.clamp(256, MAX_JOURNAL_PAYLOAD);
            self.current.reserve(hint.max(framed));
        }
    }
}

/// A record whose encoding is written field by field.
#[derive(Clone, Copy)]
struct Shape<'a> {
    epoch: Timestamp,
    /// `None`: a tombstone; `Some`: a last-writer-wins value.
    lww: Option<(Timestamp, &'a [u8])>,
    expiry: Option<&'a Expiry>,
}

impl<'a> Shape<'a> {
    /// The record's shape, if it is one of those written field by field.
    fn of(record: &'a Record) -> Option<Shape<'a>> {
        let lww = match &record.value {
            None => None,
            Some(Value::Lww(l)) => Some((l.ts, &l.value[..])),
            Some(_) => return None,
        };
        Some(Shape {
            epoch: record.epoch,
            lww,
            expiry: record.expiry.as_deref(),
        })
    }

    /// The length of the `Record` message.
    fn len(&self) -> usize {
        let mut len = framed_len(ts_len(self.epoch));
        if let Some((ts, value)) = self.lww {
            len += framed_len(framed_len(lww_len(ts, value)));
        }
        if let Some(e) = self.expiry {
            len += framed_len(expiry_len(e));
        }
        len
    }

    /// Writes field 2 of a `Gossip.Entry` (the record), with its length.
    fn put(&self, buf: &mut Vec<u8>) {
        put_len_prefix(buf, 2, self.len());
        self.put_body(buf);
    }

    /// Writes the `Record` message's fields.
    fn put_body(&self, buf: &mut Vec<u8>) {
        put_ts(buf, 1, self.epoch);
        if let Some((ts, value)) = self.lww {
            let lww = lww_len(ts, value);
            put_len_prefix(buf, 2, framed_len(lww));
            put_len_prefix(buf, 1, lww);
            put_ts(buf, 1, ts);
            if !value.is_empty() {
                put_len_prefix(buf, 2, value.len());
                buf.extend_from_slice(value);
            }
        }
        if let Some(e) = self.expiry {
            put_len_prefix(buf, 3, expiry_len(e));
            put_ts(buf, 1, e.ts);
            if let Some(at) = e.at_ms {
                encode_key(2, WireType::Varint, buf);
                encode_varint(at, buf);
            }
        }
    }
}

/// Appends the protobuf encoding of `record` (a `Record` message, as
/// `wire::convert::record_to_pb(record).encode_to_vec()` gives) to `buf`.
pub fn put_record(buf: &mut Vec<u8>, record: &Record) {
    match Shape::of(record) {
        Some(shape) => shape.put_body(buf),
        None => wire::convert::record_to_pb(record).encode_raw(buf),
    }
}

/// Appends the encoding [`put_record`] gives of a live LWW register written at `ts` whose
/// epoch is `ts` and which has no expiry (how the memory store packs most records).
pub fn put_lww_record(buf: &mut Vec<u8>, ts: Timestamp, value: &[u8]) {
    Shape {
        epoch: ts,
        lww: Some((ts, value)),
        expiry: None,
    }
    .put_body(buf);
}

/// The length of a `Gossip.Entry` with `key` and a record of `record` bytes (`None`: a
/// removal, no record).
fn entry_len(key: &[u8], record: Option<usize>) -> usize {
    let key_len = if key.is_empty() {
        0
    } else {
        framed_len(key.len())
    };
    key_len + record.map_or(0, framed_len)
}

/// Writes one `Replicate.entries` field: tag, length `len`, the key, then what `record`
/// writes.
fn put_entry(buf: &mut Vec<u8>, key: &[u8], len: usize, record: impl FnOnce(&mut Vec<u8>)) {
    put_len_prefix(buf, 1, len);
    if !key.is_empty() {
        put_len_prefix(buf, 1, key.len());
        buf.extend_from_slice(key);
    }
    record(buf);
}

/// A length-delimited field's tag (fields 1–15) and length, plus `len` bytes of body.
fn framed_len(len: usize) -> usize {
    1 + encoded_len_varint(len as u64) + len
}

fn put_len_prefix(buf: &mut Vec<u8>, field: u32, len: usize) {
    encode_key(field, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

/// The length of a `Timestamp` message (zero fields are not written).
fn ts_len(ts: Timestamp) -> usize {
    let field = |v: u64| if v == 0 { 0 } else { 1 + encoded_len_varint(v) };
    field(ts.time) + field(ts.writer)
}

fn put_ts(buf: &mut Vec<u8>, field: u32, ts: Timestamp) {
    put_len_prefix(buf, field, ts_len(ts));
    if ts.time != 0 {
        encode_key(1, WireType::Varint, buf);
        encode_varint(ts.time, buf);
    }
    if ts.writer != 0 {
        encode_key(2, WireType::Varint, buf);
        encode_varint(ts.writer, buf);
    }
}

/// The length of an `LwwValue` message.
fn lww_len(ts: Timestamp, value: &[u8]) -> usize {
    let value_len = if value.is_empty() {
        0
    } else {
        framed_len(value.len())
    };
    framed_len(ts_len(ts)) + value_len
}

/// The length of an `Expiry` message.
fn expiry_len(e: &Expiry) -> usize {
    framed_len(ts_len(e.ts)) + e.at_ms.map_or(0, |at| 1 + encoded_len_varint(at))
}
