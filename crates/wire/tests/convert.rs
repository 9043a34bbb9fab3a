//! Protobuf conversion: every lattice type round-trips, and hostile input is an error, never
//! a panic.

use lattice::{Expiry, Record, Timestamp};
use proptest::prelude::*;
use prost::Message;
use wire::convert::{record_from_pb, record_to_pb, value_from_pb, value_to_pb, ConvertError};
use wire::pb;

#[test]
fn every_type_round_trips() {
    let values = testkit::values::one_of_each();
    assert_eq!(
        values.len(),
        lattice::LatticeType::ALL.len(),
        "one sample per type"
    );
    for v in values {
        let pb = value_to_pb(&v);
        // Through bytes too, as on the wire.
        let bytes = pb.encode_to_vec();
        let decoded = pb::Value::decode(&bytes[..]).unwrap();
        assert_eq!(value_from_pb(&decoded).unwrap(), v);
        let record = Record::new(Timestamp::new(1, 1), Some(v));
        assert_eq!(record_from_pb(&record_to_pb(&record)).unwrap(), record);
    }
    let tomb = Record::tombstone(Timestamp::new(9, 9));
    assert_eq!(record_from_pb(&record_to_pb(&tomb)).unwrap(), tomb);
}

#[test]
fn missing_fields_are_errors() {
    assert_eq!(
        value_from_pb(&pb::Value { kind: None }),
        Err(ConvertError::Missing("Value.kind"))
    );
    let lww = pb::Value {
        kind: Some(pb::value::Kind::Lww(pb::LwwValue {
            ts: None,
            value: Default::default(),
        })),
    };
    assert_eq!(
        value_from_pb(&lww),
        Err(ConvertError::Missing("LwwValue.ts"))
    );
    assert!(record_from_pb(&pb::Record {
        epoch: None,
        value: None,
        expiry: None,
    })
    .is_err());
    assert!(record_from_pb(&pb::Record {
        epoch: Some(pb::Timestamp::default()),
        value: None,
        expiry: Some(pb::Expiry {
            ts: None,
            at_ms: Some(1)
        }),
    })
    .is_err());
}

#[test]
fn deadlines_travel_with_records_and_old_records_have_none() {
    let ts = Timestamp::new(5 << 16, 2);
    let mut r = Record::new(
        ts,
        Some(lattice::Value::Lww(lattice::Lww::new(ts, b"v"[..].into()))),
    );
    for at in [Some(1_700_000_000_000), None] {
        r.expiry = Some(Box::new(Expiry::new(ts, at)));
        let bytes = record_to_pb(&r).encode_to_vec();
        let back = record_from_pb(&pb::Record::decode(&bytes[..]).unwrap()).unwrap();
        assert_eq!(back, r);
    }
    // A record encoded before deadlines existed: the same bytes as fields 1 and 2 alone.
    let old = pb::Record {
        epoch: Some(wire::convert::timestamp_to_pb(ts)),
        value: None,
        expiry: None,
    }
    .encode_to_vec();
    let back = record_from_pb(&pb::Record::decode(&old[..]).unwrap()).unwrap();
    assert_eq!(back.expiry, None);
    assert_eq!(back, Record::tombstone(ts));
}

#[test]
fn deeply_nested_maps_are_refused() {
    let mut v = pb::Value {
        kind: Some(pb::value::Kind::Bool(true)),
    };
    for _ in 0..50 {
        v = pb::Value {
            kind: Some(pb::value::Kind::Map(pb::MapValue {
                entries: vec![pb::map_value::Entry {
                    key: "k".into(),
                    value: Some(v),
                }],
            })),
        };
    }
    assert_eq!(value_from_pb(&v), Err(ConvertError::TooDeep));
}

proptest! {
    /// Arbitrary bytes decoded as a request, then converted, never panic.
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(req) = pb::Request::decode(&bytes[..]) {
            if let Some(pb::request::Op::Put(p)) = req.op {
                if let Some(v) = p.value {
                    let _ = value_from_pb(&v);
                }
            }
        }
        if let Ok(v) = pb::Value::decode(&bytes[..]) {
            let _ = value_from_pb(&v);
        }
        if let Ok(r) = pb::Record::decode(&bytes[..]) {
            let _ = record_from_pb(&r);
        }
    }
}
