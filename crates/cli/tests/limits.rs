//! Limits on what crosses the network, on real processes: an oversized request is refused
//! before its data is read, an amplifying MGET gets an error instead of a huge reply, a
//! stalled partial request and (if configured) an idle connection are closed, and clients at
//! the connection limit do not stop the cluster's peers. Every time, other clients keep
//! being served.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::Duration;

use common::cluster::*;
use common::{closed_by_peer, eventually, serial, Native, NodeProc, Resp};
use prost::Message;
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

/// A TOML config file holding `toml`, removed on drop.
struct Config(tempfile::TempDir);

impl Config {
    fn new(toml: &str) -> Config {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("node.toml"), toml).unwrap();
        Config(dir)
    }

    fn path(&self) -> String {
        let p: PathBuf = self.0.path().join("node.toml");
        p.to_str().unwrap().to_string()
    }
}

/// A client that was connected before the trouble still gets answers, and so does a new one.
fn still_serving(node: &NodeProc, old: &mut Resp, round: usize) {
    let key = format!("alive-{round}");
    old.roundtrip(&[b"SET", key.as_bytes(), b"yes"], b"+OK\r\n");
    old.roundtrip(&[b"GET", key.as_bytes()], b"$3\r\nyes\r\n");
    Resp::connect(node.resp).roundtrip(&[b"PING"], b"+PONG\r\n");
}

#[test]
fn an_oversized_request_is_refused_before_its_data_and_the_node_keeps_serving() {
    // Bulk strings up to 4 GiB, but whole requests up to 1 MiB.
    let config =
        Config::new("[limits]\nmax_frame_size = 4294967296\nmax_request_bytes = 1048576\n");
    let node = NodeProc::start(&["--config", &config.path(), "--workers", "2"]);
    let mut old = Resp::connect(node.resp);
    still_serving(&node, &mut old, 0);
    let refused = "-ERR Protocol error: command larger than the 1048576-byte request limit\r\n";

    // A 2 GiB bulk string: refused from its length line alone.
    let mut r = Resp::connect(node.resp);
    r.stream
        .write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2147483648\r\n")
        .unwrap();
    assert_eq!(r.line(), refused);
    assert!(closed_by_peer(&mut r.stream));
    still_serving(&node, &mut old, 1);

    // Bulk strings each under the limit whose declared total is over it: refused when the
    // second one is announced, before its data.
    let mut r = Resp::connect(node.resp);
    let mut cmd = b"*5\r\n$4\r\nMSET\r\n$1\r\na\r\n$800000\r\n".to_vec();
    cmd.extend_from_slice(&vec![b'x'; 800_000]);
    cmd.extend_from_slice(b"\r\n$1\r\nb\r\n$800000\r\n");
    r.stream.write_all(&cmd).unwrap();
    assert_eq!(r.line(), refused);
    assert!(closed_by_peer(&mut r.stream));
    still_serving(&node, &mut old, 2);
    // Nothing of the refused command ran.
    old.roundtrip(&[b"EXISTS", b"a"], b":0\r\n");

    // Natively, a frame announcing more than the request limit.
    let mut s = TcpStream::connect(node.native).unwrap();
    s.write_all(&(2u32 << 20).to_be_bytes()).unwrap();
    let mut n = Native {
        stream: s.try_clone().unwrap(),
        next_id: 0,
    };
    match n.read().result {
        Some(R::Error(e)) => {
            assert_eq!(e.code, pb::ErrorCode::FrameTooLarge as i32, "{e:?}");
            assert!(e.message.contains("1048576-byte limit"), "{e:?}");
        }
        other => panic!("expected FRAME_TOO_LARGE, got {other:?}"),
    }
    assert!(closed_by_peer(&mut s));
    still_serving(&node, &mut old, 3);
}

/// Reads one bulk string reply of `len` bytes (its header already checked by the caller).
fn skip_bulk(r: &mut Resp, len: usize) {
    assert_eq!(r.line(), format!("${len}\r\n"));
    let mut body = vec![0u8; len + 2];
    r.stream.read_exact(&mut body).unwrap();
    assert!(body.ends_with(b"\r\n"));
}

#[test]
fn an_amplifying_mget_gets_an_error_instead_of_its_reply() {
    // The defaults: 16 MiB values, a 64 MiB reply limit.
    let node = NodeProc::start(&["--workers", "2"]);
    let len = 15 << 20;
    let big = vec![b'v'; len];
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"SET", b"big", &big], b"+OK\r\n");

    // 1,000 times the same 15 MiB value would be a 15 GiB reply.
    let mut mget: Vec<&[u8]> = vec![b"MGET"];
    mget.extend(std::iter::repeat_n(&b"big"[..], 1000));
    r.send(&mget);
    assert_eq!(
        r.line(),
        "-ERR the reply would exceed the 67108864-byte reply limit (limits.max_reply_bytes): \
         ask for fewer keys at a time\r\n"
    );
    // The connection goes on, and a reply under the limit is answered in full.
    r.roundtrip(&[b"PING"], b"+PONG\r\n");
    r.send(&[b"MGET", b"big", b"missing", b"big"]);
    assert_eq!(r.line(), "*3\r\n");
    skip_bulk(&mut r, len);
    assert_eq!(r.line(), "$-1\r\n");
    skip_bulk(&mut r, len);
    // A pipeline of GETs of the value is fine: each reply is under the limit.
    let mut pipeline = Vec::new();
    for _ in 0..6 {
        pipeline.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$3\r\nbig\r\n");
    }
    r.stream.write_all(&pipeline).unwrap();
    for _ in 0..6 {
        skip_bulk(&mut r, len);
    }

    // Natively, GetMany of the same key 1,000 times.
    let mut n = Native::connect(node.native);
    let keys = vec![bytes::Bytes::from_static(b"big"); 1000];
    match n
        .call(Op::GetMany(pb::GetMany {
            keys,
            ..Default::default()
        }))
        .result
    {
        Some(R::Error(e)) => {
            assert_eq!(e.code, pb::ErrorCode::InvalidArgument as i32, "{e:?}");
            assert!(e.message.contains("reply limit"), "{e:?}");
        }
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
    let resp = n.call(Op::Ping(pb::Ping {}));
    assert!(matches!(resp.result, Some(R::Ack(_))));
    let mut old = Resp::connect(node.resp);
    still_serving(&node, &mut old, 0);
}

#[test]
fn a_stalled_partial_request_is_closed_and_idle_connections_are_not_by_default() {
    let config = Config::new("[limits]\npartial_request_timeout_secs = 1\n");
    let node = NodeProc::start(&["--config", &config.path()]);
    let mut idle = Resp::connect(node.resp);
    idle.roundtrip(&[b"PING"], b"+PONG\r\n");

    // Half a command, then nothing: closed after the partial-request timeout.
    let mut partial = Resp::connect(node.resp);
    partial
        .stream
        .write_all(b"*2\r\n$3\r\nGET\r\n$1\r\n")
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || closed_by_peer(
        &mut partial.stream
    )));
    // Half a native frame header, likewise.
    let mut native = TcpStream::connect(node.native).unwrap();
    native.write_all(&[0, 0]).unwrap();
    assert!(eventually(Duration::from_secs(10), || closed_by_peer(
        &mut native
    )));

    // The idle connection has been idle for longer than that: no idle timeout by default.
    idle.roundtrip(&[b"PING"], b"+PONG\r\n");
    still_serving(&node, &mut idle, 0);
    drop(node);

    // With an idle timeout, an idle connection is closed; the node keeps serving.
    let config = Config::new("[limits]\nidle_timeout_secs = 1\n");
    let node = NodeProc::start(&["--config", &config.path()]);
    let mut idle = Resp::connect(node.resp);
    idle.roundtrip(&[b"PING"], b"+PONG\r\n");
    assert!(eventually(Duration::from_secs(10), || closed_by_peer(
        &mut idle.stream
    )));
    let mut fresh = Resp::connect(node.resp);
    still_serving(&node, &mut fresh, 1);
}

/// A connection to a node's peer port, introduced as a cluster agent: the node's welcome.
fn peer_welcome(peer: SocketAddr) -> pb::PeerWelcome {
    let mut s = TcpStream::connect(peer).expect("peer port");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let hello = pb::PeerHello {
        version: 1,
        node_id: "visitor".into(),
        from_worker: None,
        to_worker: None,
        ..Default::default()
    };
    let mut frame = Vec::new();
    wire::frame::encode(&hello, &mut frame);
    s.write_all(&frame).unwrap();
    let mut header = [0u8; 4];
    s.read_exact(&mut header).unwrap();
    let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
    s.read_exact(&mut body).unwrap();
    pb::PeerWelcome::decode(&body[..]).unwrap()
}

#[test]
fn idle_clients_at_the_connection_limit_do_not_lock_out_peers() {
    let _serial = serial();
    let config = Config::new("[limits]\nmax_connections = 8\n");
    let path = config.path();
    let f = with(&flags("2", "1500"), &["--config", &path]);
    let nodes = cluster(&["a", "b"], &f, &[]);
    let (a, b) = (&nodes[0], &nodes[1]);

    // Eight idle clients take every client slot of `a`; a ninth is turned away.
    let mut idle = Vec::new();
    while idle.len() < 8 {
        let mut r = Resp::connect(a.resp);
        r.send(&[b"PING"]);
        match r.line().as_str() {
            "+PONG\r\n" => idle.push(r),
            // A slot still held by a connection of the cluster check that just closed.
            "-ERR max number of clients reached\r\n" => {}
            other => panic!("{other:?}"),
        }
    }
    let mut ninth = Resp::connect(a.resp);
    assert_eq!(ninth.line(), "-ERR max number of clients reached\r\n");

    // The peer plane goes on: `b` keeps seeing `a` alive for twice the failure timeout,
    // writes through `b` acknowledged by both replicas reach `a`, and a new connection to
    // `a`'s peer port is welcomed.
    assert!(stays(Duration::from_secs(3), || status_of(b, "a")
        == Some(pb::NodeStatus::Alive)));
    let mut c = Native::connect(b.native);
    for i in 0..20 {
        let req = pb::Request {
            id: i as u64 + 1,
            op: Some(Op::Put(pb::Put {
                key: format!("peer-ok-{i}").into_bytes().into(),
                value: Some(value_to_pb(&value(i))),
            })),
            ack_replicas: 2,
            ..Default::default()
        };
        let resp = c.call_raw(req);
        assert!(matches!(resp.result, Some(R::Ack(_))), "{resp:?}");
    }
    let welcome = peer_welcome(a.peer.expect("a printed its peer address"));
    assert!(welcome.error.is_none(), "{welcome:?}");
    assert_eq!(welcome.node_id, "a");

    // Once the idle clients leave, `a` serves clients again and holds what `b` replicated.
    drop(idle);
    assert!(eventually(Duration::from_secs(10), || {
        let mut r = Resp::connect(a.resp);
        r.send(&[b"GET", b"peer-ok-3"]);
        r.line() == "$7\r\n"
    }));
    assert_eq!(alive_members(a), 2);
    assert_eq!(alive_members(b), 2);
}

#[test]
fn slots_beyond_the_limit_are_kept_for_administrators() {
    let toml = format!(
        "[limits]\nmax_connections = 2\nadmin_connections = 1\n\n\
         [[users]]\nname = \"ops\"\npassword_sha256 = \"{}\"\n\
         permissions = [\"read\", \"write\", \"admin\"]\n\n\
         [[users]]\nname = \"app\"\npassword_sha256 = \"{}\"\npermissions = [\"read\", \"write\"]\n",
        node::auth::sha256_hex(b"ops-pw"),
        node::auth::sha256_hex(b"app-pw"),
    );
    let config = Config::new(&toml);
    let path = config.path();
    let node = NodeProc::start(&["--config", &path, "--disk-nodes", "0", "--workers", "1"]);
    const FULL: &[u8] = b"-ERR max number of clients reached\r\n";

    // Two application connections take every regular slot.
    let mut apps = Vec::new();
    while apps.len() < 2 {
        let mut r = Resp::connect(node.resp);
        r.send(&[b"AUTH", b"app", b"app-pw"]);
        match r.line().as_str() {
            "+OK\r\n" => apps.push(r),
            // A slot still held by a connection of the start-up check that just closed.
            "-ERR max number of clients reached\r\n" => {}
            other => panic!("{other:?}"),
        }
    }
    // A third application connection gets the administrators' slot only to be turned away:
    // before authenticating, and after authenticating as a user without `admin`.
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"PING"], FULL);
    assert!(closed_by_peer(&mut r.stream));
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"AUTH", b"app", b"app-pw"], FULL);
    assert!(closed_by_peer(&mut r.stream));

    // An operator gets in, and can work.
    let mut ops = Resp::connect(node.resp);
    ops.roundtrip(&[b"AUTH", b"ops", b"ops-pw"], b"+OK\r\n");
    ops.roundtrip(&[b"SET", b"k", b"v"], b"+OK\r\n");
    ops.roundtrip(&[b"ACL", b"WHOAMI"], b"$3\r\nops\r\n");
    // With that slot taken too, the next connection is refused at once.
    let mut r = Resp::connect(node.resp);
    assert_eq!(r.line().as_bytes(), FULL);

    // The application connections were served throughout.
    for a in &mut apps {
        a.roundtrip(&[b"GET", b"k"], b"$1\r\nv\r\n");
    }
}
