//! Bad input on every port — garbage, truncated frames, oversized frames, undecodable
//! protobuf, unknown RESP commands, malformed RESP — gets an error or a closed connection,
//! and the node keeps serving other clients.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{closed_by_peer, Native, NodeProc, Resp};
use wire::pb;

/// A fresh client can still write and read through every port.
fn assert_serving(node: &NodeProc, round: usize) {
    let key = format!("still-alive-{round}");
    node.cli_ok(&["put", &key, "yes"]);
    assert_eq!(node.cli_ok(&["get", &key]), "yes\n");
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"PING"], b"+PONG\r\n");
    for w in &node.workers {
        let mut n = Native::connect(*w);
        let resp = n.call(pb::request::Op::Ping(pb::Ping {}));
        assert!(matches!(resp.result, Some(pb::response::Result::Ack(_))));
    }
}

fn native_ports(node: &NodeProc) -> Vec<SocketAddr> {
    let mut ports = vec![node.native];
    ports.extend(&node.workers);
    ports
}

#[test]
fn garbage_on_native_ports_is_rejected_and_the_node_keeps_serving() {
    let node = NodeProc::start(&["--workers", "2"]);
    for (round, addr) in native_ports(&node).into_iter().enumerate() {
        // Text where a frame header should be: an absurd length → error, then close.
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut n = Native {
            stream: s.try_clone().unwrap(),
            next_id: 0,
        };
        let resp = n.read();
        match resp.result {
            Some(pb::response::Result::Error(e)) => {
                assert_eq!(e.code, pb::ErrorCode::FrameTooLarge as i32, "{e:?}")
            }
            other => panic!("expected FRAME_TOO_LARGE, got {other:?}"),
        }
        assert!(closed_by_peer(&mut s));

        // A well-framed body that is not a Request → BAD_REQUEST, connection stays usable.
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(&[0, 0, 0, 3, 0xff, 0xff, 0xff]).unwrap();
        let mut n = Native {
            stream: s,
            next_id: 10,
        };
        let resp = n.read();
        match resp.result {
            Some(pb::response::Result::Error(e)) => {
                assert_eq!(e.code, pb::ErrorCode::BadRequest as i32)
            }
            other => panic!("expected BAD_REQUEST, got {other:?}"),
        }
        let resp = n.call(pb::request::Op::Ping(pb::Ping {}));
        assert!(matches!(resp.result, Some(pb::response::Result::Ack(_))));

        // A request without an operation, and a Put without a value.
        let resp = n.call_raw(pb::Request {
            id: 77,
            op: None,
            ..Default::default()
        });
        assert!(
            matches!(resp.result, Some(pb::response::Result::Error(e)) if e.code == pb::ErrorCode::BadRequest as i32)
        );
        let put = pb::request::Op::Put(pb::Put {
            key: "k".into(),
            value: None,
        });
        let resp = n.call(put);
        assert!(
            matches!(resp.result, Some(pb::response::Result::Error(e)) if e.code == pb::ErrorCode::BadRequest as i32)
        );

        // A truncated frame: the node waits for the rest without blocking anyone else.
        let mut truncated = TcpStream::connect(addr).unwrap();
        truncated.write_all(&[0, 0, 0, 100, 1, 2, 3]).unwrap();
        assert_serving(&node, round);
        drop(truncated);

        // Random bytes.
        let mut s = TcpStream::connect(addr).unwrap();
        let junk: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let _ = s.write_all(&junk);
        let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
        let mut sink = [0u8; 1024];
        let _ = s.read(&mut sink);
        assert_serving(&node, round + 100);
    }
}

#[test]
fn oversized_frames_and_keys_get_clear_errors() {
    let node = NodeProc::start(&["--workers", "1"]);
    // Frame above the 32 MiB default limit.
    let mut s = TcpStream::connect(node.native).unwrap();
    s.write_all(&(64u32 << 20).to_be_bytes()).unwrap();
    let mut n = Native {
        stream: s.try_clone().unwrap(),
        next_id: 0,
    };
    let resp = n.read();
    assert!(
        matches!(resp.result, Some(pb::response::Result::Error(e)) if e.code == pb::ErrorCode::FrameTooLarge as i32)
    );
    assert!(closed_by_peer(&mut s));

    // A key above the 16 KiB key limit, on both protocols.
    let big_key = vec![b'k'; 17 * 1024];
    let mut n = Native::connect(node.native);
    let resp = n.call(pb::request::Op::Get(pb::Get {
        key: big_key.clone().into(),
    }));
    assert!(
        matches!(resp.result, Some(pb::response::Result::Error(e)) if e.code == pb::ErrorCode::KeyTooLarge as i32)
    );
    let mut r = Resp::connect(node.resp);
    r.send(&[b"SET", &big_key, b"v"]);
    assert!(r
        .line()
        .starts_with("-ERR key of 17408 bytes exceeds the 16384-byte limit"));
    // Reserved metadata keys.
    r.send(&[b"SET", b"\x00lkv\x00rep\x00x", b"v"]);
    assert!(r
        .line()
        .starts_with("-ERR keys starting with the reserved prefix"));
    assert_serving(&node, 0);
}

#[test]
fn malformed_resp_closes_only_that_connection() {
    let node = NodeProc::start(&["--workers", "2"]);
    let cases: &[&[u8]] = &[
        b"*2\r\n$3\r\nGET\r\n$abc\r\n",
        b"*1\r\n+PING\r\n",
        b"*99999999999999999999\r\n",
        b"*1\r\n$4\r\nPINGxx\r\n",
        b"SET \"unbalanced\r\n",
        b"*2\r\n$3\r\nSET\r\n$1000000000\r\n",
    ];
    for (i, case) in cases.iter().enumerate() {
        let mut c = Resp::connect(node.resp);
        c.stream.write_all(case).unwrap();
        let line = c.line();
        assert!(line.starts_with("-ERR Protocol error"), "case {i}: {line}");
        assert!(closed_by_peer(&mut c.stream), "case {i}");
    }
    // Unknown commands get an error and the connection goes on.
    let mut c = Resp::connect(node.resp);
    c.send(&[b"FLUSHEVERYTHING"]);
    assert!(c
        .line()
        .starts_with("-ERR unknown command 'FLUSHEVERYTHING'"));
    c.roundtrip(&[b"PING"], b"+PONG\r\n");
    // A truncated command waits; others are served meanwhile.
    let mut partial = Resp::connect(node.resp);
    partial
        .stream
        .write_all(b"*2\r\n$3\r\nGET\r\n$5\r\nab")
        .unwrap();
    assert_serving(&node, 0);
    partial.stream.write_all(b"cde\r\n").unwrap();
    partial.expect(b"$-1\r\n");
}
