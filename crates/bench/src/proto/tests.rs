//! Tests of `proto`.

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
        ..Default::default()
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
            PutValue::Counter { actor, increments } => pb::value::Kind::Counter(pb::CounterValue {
                entries: vec![pb::counter_value::Entry {
                    actor,
                    increments,
                    decrements: 0,
                }],
            }),
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
