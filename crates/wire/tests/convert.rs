//! Protobuf conversion: every lattice type round-trips, and hostile input is an error, never
//! a panic.

use lattice::{
    Bool, CausalVersion, CausalWriter, Counter, Lattice, Lww, Map, Max, Min, MultiKeyCausal, OrSet,
    OrderedSet, Priority, Record, Set, SingleKeyCausal, Timestamp, Value, VectorClock,
};
use proptest::prelude::*;
use prost::Message;
use wire::convert::{record_from_pb, record_to_pb, value_from_pb, value_to_pb, ConvertError};
use wire::pb;

fn blob(s: &str) -> Box<[u8]> {
    s.as_bytes().into()
}

fn samples() -> Vec<Value> {
    let ts = Timestamp::new(5 << 16, 3);
    let mut orset: OrSet<Box<[u8]>> = OrSet::new();
    let _ = orset.add(1, blob("a"));
    let _ = orset.add(2, blob("b"));
    let _ = orset.remove(&b"a"[..]);
    let mut counter = Counter::new();
    counter.merge(counter.add_delta(9, -4).unwrap());
    counter.merge(counter.add_delta(8, 10).unwrap());
    let mut w1 = CausalWriter::new(1);
    let mut w2 = CausalWriter::new(2);
    let empty = VectorClock::new();
    let mut causal = SingleKeyCausal::new(w1.next_clock(&empty), blob("x"));
    causal.merge(SingleKeyCausal::new(w2.next_clock(&empty), blob("y")));
    let dep = (blob("other"), w1.next_clock(&empty));
    let multi = MultiKeyCausal::next_version(None, &mut w2, [dep], blob("z"));
    let mut multi2 = MultiKeyCausal::new(CausalVersion {
        clock: w1.next_clock(&empty),
        deps: Default::default(),
        value: blob("w"),
    });
    multi2.merge(multi);
    let mut inner: Map<Box<[u8]>, Value> = Map::new();
    inner.insert_merge(blob("n"), Value::Max(Max(2)));
    let mut map: Map<Box<[u8]>, Value> = Map::new();
    map.insert_merge(blob("nested"), Value::Map(inner));
    map.insert_merge(blob("flag"), Value::Bool(Bool(true)));
    vec![
        Value::Lww(Lww::new(ts, blob("hello"))),
        Value::Set([blob("p"), blob("q")].into_iter().collect::<Set<_>>()),
        Value::OrderedSet(
            [blob("b"), blob("a")]
                .into_iter()
                .collect::<OrderedSet<_>>(),
        ),
        Value::OrSet(Box::new(orset)),
        Value::Max(Max(i64::MIN)),
        Value::Min(Min(i64::MAX)),
        Value::Bool(Bool(false)),
        Value::Counter(counter),
        Value::Map(map),
        Value::Priority(Priority {
            priority: -1.5,
            value: blob("job"),
        }),
        Value::SingleKeyCausal(causal),
        Value::MultiKeyCausal(multi2),
    ]
}

#[test]
fn every_type_round_trips() {
    let values = samples();
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
        value: None
    })
    .is_err());
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
