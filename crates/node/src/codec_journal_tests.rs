//! `JournalBuf` and the record encoder against the protobuf messages they replace
//! (in `codec`'s tests: `codec_journal` does not depend on `codec`).

use bytes::Bytes;
use lattice::{Counter, Expiry, Lww, Record, Timestamp, Value};
use prost::Message;

use super::{decode_journal, encode_journal, JournalEntry};
use crate::codec_journal::{put_lww_record, put_record, JournalBuf, MAX_JOURNAL_PAYLOAD};

fn records() -> Vec<Record> {
    let ts = |time, writer| Timestamp::new(time, writer);
    let lww = |t: Timestamp, v: &[u8]| Some(Value::Lww(Lww::new(t, Box::from(v))));
    let mut out = vec![
        Record::tombstone(ts(5, 1)),
        Record::tombstone(ts(0, 0)),
        Record::new(ts(1 << 40, 77), lww(ts(1 << 40, 77), b"value")),
        Record::new(ts(0, 0), lww(ts(0, 0), b"")),
        Record::new(ts(3, 0), lww(ts(0, 9), &[7u8; 300])),
        Record::new(ts(u64::MAX, u64::MAX), lww(ts(u64::MAX, 1), b"x")),
        Record::new(
            ts(9, 9),
            Some(Value::Counter(Counter::new().add_delta(3, 4).unwrap())),
        ),
    ];
    let expiries = [
        Expiry::new(ts(8, 2), Some(0)),
        Expiry::new(ts(8, 2), Some(1_900_000_000_000)),
        Expiry::new(ts(0, 0), None),
    ];
    for e in expiries {
        for mut r in out.clone().into_iter().take(4) {
            r.expiry = Some(Box::new(e));
            out.push(r);
        }
    }
    out
}

fn keys() -> Vec<Vec<u8>> {
    vec![
        b"k".to_vec(),
        Vec::new(),
        vec![b'a'; 200],
        b"\x00\xff".to_vec(),
    ]
}

#[test]
fn writes_what_encode_journal_writes() {
    for key in keys() {
        for record in records() {
            let mut buf = JournalBuf::new();
            buf.push_merge(&key, &record);
            buf.push_drop(&key);
            let entries = vec![
                JournalEntry::Merge(Bytes::from(key.clone()), record.clone()),
                JournalEntry::Drop(Bytes::from(key.clone())),
            ];
            assert_eq!(buf.len(), 2);
            let payloads = buf.take();
            assert_eq!(payloads.len(), 1);
            assert_eq!(payloads[0], encode_journal(&entries), "{record:?}");
            assert_eq!(decode_journal(&payloads[0]).unwrap(), entries);
            assert!(buf.is_empty() && buf.take().is_empty());
        }
    }
}

#[test]
fn puts_records_as_their_protobuf_messages() {
    for record in records() {
        let mut buf = vec![9];
        put_record(&mut buf, &record);
        let pb = wire::convert::record_to_pb(&record).encode_to_vec();
        assert_eq!(buf[1..], pb[..], "{record:?}");
    }
    let ts = Timestamp::new(1 << 41, 3);
    let mut buf = Vec::new();
    put_lww_record(&mut buf, ts, b"packed");
    let record = Record::new(
        ts,
        Some(Value::Lww(Lww::new(ts, Box::from(&b"packed"[..])))),
    );
    assert_eq!(buf, wire::convert::record_to_pb(&record).encode_to_vec());
}

#[test]
fn splits_payloads_at_the_limit_in_order() {
    let mut buf = JournalBuf::new();
    let value = vec![1u8; MAX_JOURNAL_PAYLOAD / 3];
    let mut expect = Vec::new();
    for i in 0..7u64 {
        let key = format!("key{i}").into_bytes();
        let ts = Timestamp::new(i + 1, 1);
        let record = Record::new(ts, Some(Value::Lww(Lww::new(ts, Box::from(&value[..])))));
        buf.push_merge(&key, &record);
        expect.push(JournalEntry::Merge(Bytes::from(key), record));
    }
    let payloads = buf.take();
    assert!(payloads.len() >= 3, "{} payloads", payloads.len());
    assert!(payloads.iter().all(|p| p.len() <= MAX_JOURNAL_PAYLOAD));
    let back: Vec<JournalEntry> = payloads
        .iter()
        .flat_map(|p| decode_journal(p).unwrap())
        .collect();
    assert_eq!(back, expect);
}

#[test]
fn a_reused_buffer_holds_the_next_payload_and_only_its_changes() {
    let mut buf = JournalBuf::new();
    let record = records().remove(1);
    buf.push_merge(b"old", &record);
    let old = buf.take().remove(0);
    // The log hands the written payload's buffer back (with its bytes still in it).
    let mut spent = Vec::from(old.try_into_mut().expect("the only reference"));
    spent.reserve(1 << 16);
    let capacity = spent.capacity();
    buf.reuse(spent);
    buf.push_merge(b"new", &record);
    let next = buf.take().remove(0);
    assert_eq!(
        decode_journal(&next).unwrap(),
        vec![JournalEntry::Merge(
            Bytes::from_static(b"new"),
            record.clone()
        )]
    );
    // Built in the reused allocation, not a fresh one.
    let next = Vec::from(next.try_into_mut().expect("the only reference"));
    assert_eq!(next.capacity(), capacity);
    // A buffer above 1 MiB is not kept.
    buf.reuse(Vec::with_capacity(2 << 20));
    buf.push_drop(b"k");
    let small = Vec::from(buf.take().remove(0).try_into_mut().unwrap());
    assert!(small.capacity() < 1 << 20, "{}", small.capacity());
}
