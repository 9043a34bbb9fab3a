//! The native target: a client connection's bytes on a native port.
//!
//! Input: one byte of choices (bit 0: a node with users; bit 1: a worker's own port rather
//! than the shared front port; bit 2: the harness frames the requests itself; bits 3–7:
//! how the bytes are split into reads, 0 = one read), then either the raw bytes the client
//! sends or, framed, a sequence of request bodies (each a two-byte length and the bytes),
//! which the harness prefixes with their lengths so mutations reach the protobuf decoder.
//!
//! Checks:
//! - every request that decodes re-encodes to bytes that decode to the same request, and
//!   every value in it that converts to a lattice value converts back to the same value;
//! - the node (native codec, authentication, dispatch, cores of a two-worker node in
//!   memory) answers every frame with exactly one well-formed `Response` carrying the
//!   request's id (0 for a frame that does not decode), in order, and closes the connection
//!   only after a frame over the size limit (with one `FRAME_TOO_LARGE` answer).

use node::fuzzing::{self, Port};
use prost::Message;
use wire::frame::{self, HEADER_LEN};
use wire::pb::{self, request::Op, response::Result as R};

use crate::input::{self, Input};

/// What the node should answer: the ids of the frames it runs, and whether it closes.
struct Expected {
    ids: Vec<u64>,
    closed: bool,
    /// A forced leave: the node would stop, after a grace in real time (not run here).
    forced_leave: bool,
}

/// The native target (see the module docs).
pub fn native(data: &[u8]) {
    let mut inp = Input::new(data);
    let choices = inp.u8();
    let with_users = choices & 1 == 1;
    let port = if choices & 2 == 2 {
        Port::Own
    } else {
        Port::Front
    };
    let bytes = if choices & 4 == 4 {
        let mut framed = Vec::new();
        while !inp.is_empty() {
            let body = inp.chunk(4096);
            framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
            framed.extend_from_slice(body);
        }
        framed
    } else {
        inp.rest().to_vec()
    };
    let reads = input::reads(&bytes, choices >> 3);

    let max = fuzzing::config(with_users).limits.max_native_request();
    let expected = expected(&bytes, max);
    if expected.forced_leave {
        return;
    }
    let session = fuzzing::serve_client(port, with_users, &reads);
    let mut ids = Vec::new();
    let mut out = &session.out[..];
    while !out.is_empty() {
        let len = match frame::frame_len(out, usize::MAX) {
            Ok(Some(len)) => len,
            other => panic!("the node wrote a partial frame: {other:?}"),
        };
        let resp = pb::Response::decode(&out[HEADER_LEN..HEADER_LEN + len])
            .expect("the node wrote a response that does not decode");
        out = &out[HEADER_LEN + len..];
        if !matches!(resp.result, Some(R::Notification(_))) {
            ids.push(resp.id);
        }
        if let Some(R::Error(e)) = &resp.result {
            assert!(
                pb::ErrorCode::try_from(e.code).is_ok(),
                "an error code clients do not know: {}",
                e.code
            );
        }
    }
    assert_eq!(session.closed, expected.closed, "the connection closed");
    let mut want = expected.ids;
    if expected.closed {
        want.push(0);
    }
    assert_eq!(ids, want, "response ids for the frames sent");
}

/// Walks the frames of `bytes` as the node should, checking each request that decodes.
fn expected(bytes: &[u8], max: usize) -> Expected {
    let mut ids = Vec::new();
    let mut forced_leave = false;
    let mut rest = bytes;
    loop {
        match frame::frame_len(rest, max) {
            Ok(None) => {
                return Expected {
                    ids,
                    closed: false,
                    forced_leave,
                }
            }
            Err(_) => {
                return Expected {
                    ids,
                    closed: true,
                    forced_leave,
                }
            }
            Ok(Some(len)) => {
                let body = &rest[HEADER_LEN..HEADER_LEN + len];
                match pb::Request::decode(body) {
                    Ok(req) => {
                        check_request(&req);
                        if let Some(Op::Admin(pb::Admin {
                            op: Some(pb::admin::Op::Leave(l)),
                        })) = &req.op
                        {
                            forced_leave |= l.force;
                        }
                        ids.push(req.id);
                    }
                    Err(_) => ids.push(0),
                }
                rest = &rest[HEADER_LEN + len..];
            }
        }
    }
}

/// A decoded request re-encodes to the same request; its values convert both ways.
fn check_request(req: &pb::Request) {
    let encoded = req.encode_to_vec();
    let back = pb::Request::decode(&encoded[..]).expect("a re-encoded request decodes");
    assert_eq!(
        back.encode_to_vec(),
        encoded,
        "a request re-encoded differs"
    );
    let values: Vec<&pb::Value> = match &req.op {
        Some(Op::Put(p)) => p.value.iter().collect(),
        Some(Op::PutAll(p)) => p.value.iter().collect(),
        Some(Op::PutMany(p)) => p.puts.iter().filter_map(|p| p.value.as_ref()).collect(),
        _ => Vec::new(),
    };
    for v in values {
        check_value(v);
    }
}

/// A value that converts to a lattice value converts back to one that converts the same.
pub fn check_value(v: &pb::Value) {
    if let Ok(value) = wire::convert::value_from_pb(v) {
        let pb1 = wire::convert::value_to_pb(&value);
        let again = wire::convert::value_from_pb(&pb1).expect("a converted value converts back");
        let pb2 = wire::convert::value_to_pb(&again);
        assert_eq!(
            pb1.encode_to_vec(),
            pb2.encode_to_vec(),
            "a value converted both ways differs"
        );
    }
}
