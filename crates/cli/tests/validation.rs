//! Hostile input crossing the network, against a real `latticekv server` (free ports): a
//! forged membership entry sent on the peer plane, and a far-future client timestamp. Each
//! is refused, and the node keeps serving clients and its real peers.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::cluster::*;
use common::{eventually, serial, Native, NodeProc, Resp};
use lattice::{Lww, Timestamp, Value};
use prost::Message;
use wire::convert::value_to_pb;
use wire::pb::{self, request::Op, response::Result as R};

/// A connection to a node's peer port as a cluster agent would open it.
struct PeerConn(TcpStream);

impl PeerConn {
    fn connect(peer: SocketAddr, me: &str) -> PeerConn {
        let s = TcpStream::connect(peer).expect("peer port");
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let hello = pb::PeerHello {
            version: 1,
            node_id: me.into(),
            from_worker: None,
            to_worker: None,
            ..Default::default()
        };
        let mut c = PeerConn(s);
        c.send(&hello);
        let _welcome: pb::PeerWelcome = c.read();
        c
    }

    fn send<M: Message>(&mut self, m: &M) {
        let mut frame = Vec::new();
        wire::frame::encode(m, &mut frame);
        self.0.write_all(&frame).unwrap();
    }

    fn read<M: Message + Default>(&mut self) -> M {
        let mut header = [0u8; 4];
        self.0.read_exact(&mut header).expect("frame header");
        let mut body = vec![0u8; u32::from_be_bytes(header) as usize];
        self.0.read_exact(&mut body).expect("frame body");
        M::decode(&body[..]).expect("decodable frame")
    }
}

fn forged(id: &str, f: impl FnOnce(&mut pb::Member)) -> pb::Member {
    let mut m = pb::Member {
        node_id: id.into(),
        incarnation: 1,
        status: pb::NodeStatus::Alive as i32,
        heartbeat: 1,
        role: "memory".into(),
        front: "127.0.0.1:1".into(),
        resp: "127.0.0.1:2".into(),
        workers: vec!["127.0.0.1:3".into()],
        vnodes: 64,
        peer: "127.0.0.1:4".into(),
        placement: placement::PLACEMENT_HASH_TAGS,
    };
    f(&mut m);
    m
}

/// Forged membership entries on the peer plane — a ring of `u32::MAX` vnodes (once a
/// 64 GiB allocation), the node itself marked left at incarnation `u64::MAX` (once a
/// wrapped refutation that evicted it for good), a million workers — are refused: the node
/// stays alive and in its own view, keeps its real peer, and keeps serving clients.
#[test]
fn forged_membership_entries_are_refused_and_the_node_keeps_serving() {
    let _serial = serial();
    let a = NodeProc::server("a", None, &flags("2", "3000"));
    let b = NodeProc::server("b", Some(a.native), &flags("2", "3000"));
    assert!(eventually(Duration::from_secs(20), || alive_members(&a)
        == 2
        && alive_members(&b) == 2));
    let mut peer = PeerConn::connect(a.peer.expect("a printed its peer address"), "b");
    let members = vec![
        forged("huge-ring", |m| m.vnodes = u32::MAX),
        forged("a", |m| {
            m.incarnation = u64::MAX;
            m.status = pb::NodeStatus::Left as i32;
        }),
        forged("many-workers", |m| {
            m.workers = vec!["127.0.0.1:5".into(); 1_000_000]
        }),
        forged("far-heartbeat", |m| m.heartbeat = u64::MAX),
    ];
    peer.send(&pb::PeerRequest {
        id: 1,
        msg: Some(pb::peer_request::Msg::SyncCluster(pb::SyncCluster {
            state: Some(pb::ClusterState {
                members,
                ..Default::default()
            }),
        })),
    });
    let answer: pb::PeerResponse = peer.read();
    assert_eq!(answer.id, 1);
    // Whatever the answer, nothing forged got in, and the node is still itself.
    let t = topology(a.native);
    for id in ["huge-ring", "many-workers", "far-heartbeat"] {
        assert!(
            t.members.iter().all(|m| m.node_id != id),
            "{id} was merged: {t:?}"
        );
    }
    let me = t.members.iter().find(|m| m.node_id == "a").expect("a");
    assert_eq!(me.status, pb::NodeStatus::Alive as i32, "{me:?}");
    assert!(me.incarnation < u64::MAX / 2, "{me:?}");
    // Its real peer still sees it alive, and clients are served.
    assert!(stays(Duration::from_secs(2), || alive_members(&b) == 2
        && alive_members(&a) == 2));
    let mut c = Native::connect(a.native);
    let resp = c.call(Op::Get(pb::Get {
        key: "anything".into(),
    }));
    assert!(matches!(resp.result, Some(R::Get(_))), "{resp:?}");
}

/// A client LWW write stamped far in the future is refused with a clear error (it would
/// win against every later write and drag the worker's clock along); later writes work.
#[test]
fn a_far_future_client_timestamp_is_refused() {
    let _serial = serial();
    let node = NodeProc::server("solo", None, &flags("1", "3000"));
    let mut c = Native::connect(node.native);
    let put = |c: &mut Native, ts: Timestamp| {
        c.call(Op::Put(pb::Put {
            key: "k".into(),
            value: Some(value_to_pb(&Value::Lww(Lww::new(ts, b"v".to_vec().into())))),
        }))
    };
    let resp = put(&mut c, Timestamp::new(u64::MAX, 1));
    match &resp.result {
        Some(R::Error(e)) => {
            assert_eq!(e.code, pb::ErrorCode::InvalidArgument as i32, "{e:?}");
            assert!(e.message.contains("ahead of this node's clock"), "{e:?}");
        }
        other => panic!("accepted: {other:?}"),
    }
    // A SET afterwards takes effect (the clock was not moved to the end of time).
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"SET", b"k", b"now"], b"+OK\r\n");
    r.roundtrip(&[b"GET", b"k"], b"$3\r\nnow\r\n");
}

/// With a cluster secret, nodes that hold it form a cluster, and a node without it (or
/// with another) cannot join: its hellos are refused, so it is never a member and gets no
/// data; the cluster keeps serving.
#[test]
fn a_node_without_the_cluster_secret_cannot_join() {
    let _serial = serial();
    let with = |secret: &'static str| {
        let mut f = flags("2", "3000");
        f.extend(["--cluster-secret", secret]);
        f
    };
    let a = NodeProc::server("a", None, &with("s3cret"));
    let b = NodeProc::server("b", Some(a.native), &with("s3cret"));
    assert!(eventually(Duration::from_secs(20), || alive_members(&a)
        == 2
        && alive_members(&b) == 2));
    let outsider = NodeProc::server("outsider", Some(a.native), &with("guess"));
    let open = NodeProc::server("open", Some(a.native), &flags("2", "3000"));
    // Given time to gossip many rounds, neither gets in.
    assert!(stays(Duration::from_secs(3), || {
        let t = topology(a.native);
        t.members
            .iter()
            .all(|m| m.node_id != "outsider" && m.node_id != "open")
    }));
    assert_eq!(alive_members(&b), 2);
    // And a raw hello without the proof is refused on the peer port.
    let s = TcpStream::connect(a.peer.expect("peer address")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut c = PeerConn(s);
    c.send(&pb::PeerHello {
        version: 1,
        node_id: "intruder".into(),
        ..Default::default()
    });
    let welcome: pb::PeerWelcome = c.read();
    let e = welcome.error.expect("refused");
    assert!(e.message.contains("cluster secret"), "{e:?}");
    // The cluster serves: a write on a is readable through b.
    let value = Value::Lww(Lww::new(Timestamp::new(1 << 20, 3), b"v".to_vec().into()));
    let mut ca = Native::connect(a.native);
    let resp = ca.call(Op::Put(pb::Put {
        key: "k".into(),
        value: Some(value_to_pb(&value)),
    }));
    assert!(matches!(resp.result, Some(R::Ack(_))), "{resp:?}");
    drop((outsider, open));
}
