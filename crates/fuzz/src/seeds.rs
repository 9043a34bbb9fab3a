//! Hand-made valid inputs for every target: the seed corpus (`corpus/<target>/`, written
//! by `cargo run -p fuzz-targets --example write_seeds`) that both the short runs and
//! libFuzzer start from.

use bytes::Bytes;
use node::codec::{encode_journal, op_to_pb, JournalEntry};
use node::fuzzing::START_MS;
use node::op::{Condition, Op};
use prost::Message;
use wire::pb::{self, request::Op as R};

/// A named seed of a target.
pub type Seed = (&'static str, Vec<u8>);

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

fn ts(time: u64) -> Option<pb::Timestamp> {
    Some(pb::Timestamp { time, writer: 7 })
}

fn lww(value: &str) -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Lww(pb::LwwValue {
            ts: ts(START_MS << 16),
            value: b(value),
        })),
    }
}

fn counter() -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Counter(pb::CounterValue {
            entries: vec![pb::counter_value::Entry {
                actor: 1,
                increments: 5,
                decrements: 2,
            }],
        })),
    }
}

fn set() -> pb::Value {
    pb::Value {
        kind: Some(pb::value::Kind::Set(pb::SetValue {
            members: vec![b("a"), b("b")],
        })),
    }
}

fn frame(out: &mut Vec<u8>, req: &pb::Request) {
    wire::frame::encode(req, out);
}

fn request(id: u64, op: R) -> pb::Request {
    pb::Request {
        id,
        op: Some(op),
        ..Default::default()
    }
}

/// Seeds of the native target: choices byte, then frames.
pub fn native() -> Vec<Seed> {
    let data = vec![
        request(1, R::Ping(pb::Ping {})),
        request(
            2,
            R::Put(pb::Put {
                key: b("k"),
                value: Some(lww("v")),
            }),
        ),
        request(3, R::Get(pb::Get { key: b("k") })),
        request(
            4,
            R::Put(pb::Put {
                key: b("c"),
                value: Some(counter()),
            }),
        ),
        request(
            5,
            R::Put(pb::Put {
                key: b("s"),
                value: Some(set()),
            }),
        ),
        request(
            6,
            R::Update(pb::Update {
                key: b("u"),
                op: Some(pb::update::Op::Assign(pb::update::Assign {
                    value: b("x"),
                    condition: 1,
                })),
            }),
        ),
        request(
            7,
            R::Update(pb::Update {
                key: b("n"),
                op: Some(pb::update::Op::CounterAdd(pb::update::CounterAdd {
                    delta: 3,
                })),
            }),
        ),
        request(
            8,
            R::GetMany(pb::GetMany {
                keys: vec![b("k"), b("c"), b("zz")],
                ..Default::default()
            }),
        ),
        request(
            9,
            R::PutMany(pb::PutMany {
                puts: vec![
                    pb::Put {
                        key: b("m1"),
                        value: Some(lww("1")),
                    },
                    pb::Put {
                        key: b("m2"),
                        value: Some(lww("2")),
                    },
                ],
            }),
        ),
        request(
            10,
            R::DeleteMany(pb::DeleteMany {
                keys: vec![b("m1"), b("m2")],
            }),
        ),
        request(11, R::Delete(pb::Delete { key: b("k") })),
        request(12, R::GetAll(pb::GetAll { key: b("c") })),
        request(
            13,
            R::PutAll(pb::PutAll {
                key: b("pa"),
                value: Some(lww("all")),
            }),
        ),
        request(
            14,
            R::GetDelta(pb::GetDelta {
                key: b("c"),
                version: 0,
            }),
        ),
        request(15, R::Locate(pb::Locate { keys: vec![b("k")] })),
        request(16, R::Holds(pb::Holds { keys: vec![b("k")] })),
        request(17, R::Topology(pb::GetTopology::default())),
        request(18, R::Status(pb::GetStatus {})),
        request(
            19,
            R::GetMany(pb::GetMany {
                keys: vec![b("k"), b("c"), b("pa")],
                metadata_only: true,
            }),
        ),
    ];
    let mut all = vec![0u8];
    for r in &data {
        frame(&mut all, r);
    }
    let mut durable = vec![0u8];
    let mut r = request(
        1,
        R::Put(pb::Put {
            key: b("d"),
            value: Some(lww("v")),
        }),
    );
    r.durable = true;
    r.ack_replicas = 2;
    frame(&mut durable, &r);
    let mut subscribe = vec![0u8];
    frame(
        &mut subscribe,
        &request(
            1,
            R::Subscribe(pb::Subscribe {
                keys: vec![b("k"), b("c")],
                period_ms: 10,
                // `k` as if already read at some version; `c` (no entry) at none.
                versions: vec![0x5eed],
            }),
        ),
    );
    frame(
        &mut subscribe,
        &request(
            2,
            R::Put(pb::Put {
                key: b("k"),
                value: Some(lww("v")),
            }),
        ),
    );
    frame(
        &mut subscribe,
        &request(3, R::Unsubscribe(pb::Unsubscribe { keys: vec![b("k")] })),
    );
    let mut auth = vec![1u8];
    frame(&mut auth, &request(1, R::Get(pb::Get { key: b("k") })));
    frame(
        &mut auth,
        &request(
            2,
            R::Auth(pb::Auth {
                user: "app".into(),
                password: "app-pass".into(),
            }),
        ),
    );
    frame(&mut auth, &request(3, R::Get(pb::Get { key: b("app:1") })));
    frame(
        &mut auth,
        &request(
            4,
            R::Put(pb::Put {
                key: b("app:1"),
                value: Some(lww("v")),
            }),
        ),
    );
    frame(
        &mut auth,
        &request(
            5,
            R::Auth(pb::Auth {
                user: "admin".into(),
                password: "admin-pass".into(),
            }),
        ),
    );
    frame(
        &mut auth,
        &request(
            6,
            R::Admin(pb::Admin {
                op: Some(pb::admin::Op::SetReplication(pb::SetReplication {
                    key: b("k"),
                    global: 1,
                    local: 2,
                    ..Default::default()
                })),
            }),
        ),
    );
    let mut refused = vec![2u8];
    frame(&mut refused, &request(1, R::Replicate(pb::Refused {})));
    frame(&mut refused, &request(2, R::Get(pb::Get { key: b("k") })));
    refused.extend_from_slice(&[0, 0, 0, 3, 0xff, 0xff, 0xff]);
    // Framed by the harness: a length before each body.
    let mut framed = vec![4u8 | (5 << 3)];
    for r in &data[..6] {
        let body = r.encode_to_vec();
        framed.extend_from_slice(&(body.len() as u16).to_le_bytes());
        framed.extend_from_slice(&body);
    }
    let mut too_large = vec![0u8];
    frame(&mut too_large, &request(1, R::Ping(pb::Ping {})));
    too_large.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 1, 2, 3]);
    let mut split = all.clone();
    split[0] = 7 << 3;
    vec![
        ("requests", all),
        ("split-reads", split),
        ("durable-acks", durable),
        ("subscribe", subscribe),
        ("auth-users", auth),
        ("refused-and-undecodable", refused),
        ("harness-framed", framed),
        ("too-large", too_large),
    ]
}

/// Seeds of the RESP target: choices byte, then commands.
pub fn resp() -> Vec<Seed> {
    let mut out = Vec::new();
    let cmds: &[&[&str]] = &[
        &["PING"],
        &["SET", "k", "v"],
        &["GET", "k"],
        &["SET", "k", "w", "NX", "GET"],
        &["MSET", "a", "1", "b", "2"],
        &["MGET", "a", "b", "zz"],
        &["INCR", "n"],
        &["DECRBY", "n", "5"],
        &["SADD", "s", "x", "y"],
        &["SREM", "s", "x"],
        &["SMEMBERS", "s"],
        &["SISMEMBER", "s", "y"],
        &["SCARD", "s"],
        &["EXISTS", "a", "b"],
        &["TYPE", "s"],
        &["DEL", "a", "b"],
        &["DBSIZE"],
        &["ECHO", "hi"],
        &["HELLO", "3"],
        &["GET", "k"],
        &["CLIENT", "SETNAME", "x"],
        &["CLIENT", "ID"],
        &["COMMAND", "COUNT"],
        &["CONFIG", "GET", "maxmemory"],
        &["INFO"],
        &["SELECT", "0"],
        &["ACL", "WHOAMI"],
        &["NOSUCH", "a"],
    ];
    let mut multibulk = vec![0u8];
    for c in cmds {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        wire::resp::reply::command(&mut multibulk, &args);
    }
    out.push(("multibulk", multibulk.clone()));
    let mut split = multibulk;
    split[0] = 3 << 1;
    out.push(("split-reads", split));
    let mut inline = vec![0u8];
    inline.extend_from_slice(
        b"PING\r\nSET k \"a\\x41\\n\" \r\nGET 'k'\r\n\r\nMGET k z\nINCRBY n -3\r\nQUIT\r\nGET k\r\n",
    );
    out.push(("inline", inline));
    let mut auth = vec![1u8];
    auth.extend_from_slice(
        b"GET k\r\nAUTH app wrong\r\nAUTH app app-pass\r\nGET app:1\r\nSET app:1 v\r\nACL WHOAMI\r\nAUTH admin admin-pass\r\nACL LIST\r\nHELLO 3 AUTH app app-pass\r\n",
    );
    out.push(("auth-users", auth));
    let mut errors = vec![0u8];
    errors.extend_from_slice(b"*2\r\n$3\r\nGET\r\n$-5\r\n");
    out.push(("protocol-error", errors));
    let mut unbalanced = vec![0u8];
    unbalanced.extend_from_slice(b"SET k \"v\r\n");
    out.push(("unbalanced-quotes", unbalanced));
    let mut replies = vec![0u8];
    replies.extend_from_slice(b"+OK\r\n-ERR x\r\n:5\r\n$3\r\nabc\r\n*2\r\n$1\r\na\r\n$-1\r\n%1\r\n+k\r\n:1\r\n_\r\n#t\r\n,1.5\r\n");
    out.push(("replies", replies));
    // keys, server and sets
    let mut keys = vec![0u8];
    let key_cmds: &[&[&str]] = &[
        &["SADD", "a", "1", "2"],
        &["SADD", "b", "2", "x"],
        &["SINTER", "a", "b"],
        &["SUNIONSTORE", "c", "a", "b"],
        &["SINTERCARD", "2", "a", "b", "LIMIT", "1"],
        &["SMOVE", "a", "b", "1"],
        &["SPOP", "c", "2"],
        &["SRANDMEMBER", "c", "-3"],
        &["SMISMEMBER", "a", "1", "9"],
        &["SSCAN", "a", "0", "MATCH", "[^x]*"],
        &["SCAN", "0", "MATCH", "*[a-", "COUNT", "2", "TYPE", "set"],
        &["KEYS", "\\*?[]"],
        &["RANDOMKEY"],
        &["RENAME", "a", "d"],
        &["COPY", "d", "e", "REPLACE"],
        &["OBJECT", "ENCODING", "e"],
        &["EXPIRETIME", "e"],
        &["CLIENT", "KILL", "ID", "1", "SKIPME", "no"],
        &["INFO", "keyspace", "cpu"],
        &["CONFIG", "GET", "*max*"],
        &["FLUSHDB", "ASYNC"],
    ];
    for c in key_cmds {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        wire::resp::reply::command(&mut keys, &args);
    }
    out.push(("keys-and-sets", keys));
    // Keyspace notifications: on, every family written, off again.
    let mut notify = vec![0u8];
    let notify_cmds: &[&[&str]] = &[
        &["CONFIG", "SET", "notify-keyspace-events", "AKEmn"],
        &["CONFIG", "GET", "notify-keyspace-events"],
        &["SET", "a", "1", "EX", "100"],
        &["GET", "nope"],
        &["INCR", "n"],
        &["APPEND", "a", "x"],
        &["LPUSH", "l", "x", "y"],
        &["LMOVE", "l", "l2", "LEFT", "RIGHT"],
        &["LTRIM", "l", "5", "6"],
        &["HSET", "h", "f", "v"],
        &["HDEL", "h", "f"],
        &["ZADD", "z", "INCR", "1", "m"],
        &["ZPOPMIN", "z"],
        &["SADD", "s", "m"],
        &["SPOP", "s"],
        &["EXPIRE", "a", "-1"],
        &["PERSIST", "n"],
        &["MSETNX", "p", "1", "q", "2"],
        &["RENAME", "n", "m"],
        &["CONFIG", "SET", "notify-keyspace-events", "Kx?"],
        &["CONFIG", "SET", "notify-keyspace-events", ""],
    ];
    for c in notify_cmds {
        let args: Vec<&[u8]> = c.iter().map(|s| s.as_bytes()).collect();
        wire::resp::reply::command(&mut notify, &args);
    }
    out.push(("keyspace-notifications", notify));
    out
}

/// A peer script under construction (see `peer`).
struct Script(Vec<u8>);

impl Script {
    fn chunk(&mut self, bytes: &[u8]) {
        self.0
            .extend_from_slice(&(bytes.len() as u16).to_le_bytes());
        self.0.extend_from_slice(bytes);
    }
    fn request(&mut self, req: &pb::PeerRequest, core: u8) {
        self.0.push(1);
        self.chunk(&req.encode_to_vec());
        self.0.push(core);
        self.0.push(0); // from `other`, worker 0
    }
    fn response(&mut self, resp: &pb::PeerResponse) {
        self.0.push(2);
        self.chunk(&resp.encode_to_vec());
        self.0.push(0);
    }
    fn client_write(&mut self, core: u8, key: &str) {
        self.0.extend_from_slice(&[5, core, 0]);
        self.chunk(key.as_bytes());
        self.chunk(b"value");
    }
    fn tick(&mut self, ms: u16) {
        self.0.push(4);
        self.0.extend_from_slice(&ms.to_le_bytes());
    }
}

fn peer_request(id: u64, msg: pb::peer_request::Msg) -> pb::PeerRequest {
    pb::PeerRequest { id, msg: Some(msg) }
}

fn gossip_entry(key: &str, value: pb::Value) -> pb::gossip::Entry {
    pb::gossip::Entry {
        key: b(key),
        record: Some(pb::Record {
            epoch: ts(1),
            value: Some(value),
            expiry: None,
        }),
    }
}

/// Seeds of the peer target: scripts.
pub fn peer() -> Vec<Seed> {
    use pb::peer_request::Msg as M;
    let mut s = Script(Vec::new());
    s.client_write(0, "k1");
    s.client_write(1, "k2");
    s.request(
        &peer_request(
            1,
            M::Replicate(pb::Replicate {
                entries: vec![gossip_entry("r1", lww("x")), gossip_entry("r2", counter())],
                durable: true,
                ..Default::default()
            }),
        ),
        0,
    );
    let fwd = |op: Op<Bytes>| op_to_pb(&op);
    s.request(
        &peer_request(
            2,
            M::Forward(pb::Forward {
                ops: vec![
                    fwd(Op::Assign {
                        key: b("f1"),
                        value: b("v"),
                        condition: Condition::Always,
                    }),
                    fwd(Op::Get { key: b("f1") }),
                    fwd(Op::GetMeta { key: b("f1") }),
                    fwd(Op::CounterAdd {
                        key: b("f2"),
                        delta: -4,
                    }),
                ],
                ack_replicas: 2,
                durable: false,
                // The parts of a composite command: no keyspace events.
                quiet: true,
            }),
        ),
        1,
    );
    s.request(
        &peer_request(
            3,
            M::Digest(pb::AntiEntropyDigest {
                first: 0,
                buckets: vec![1, 2, 3, 4],
                ..Default::default()
            }),
        ),
        0,
    );
    s.request(
        &peer_request(
            4,
            M::RepairMore(pb::RepairMore {
                buckets: vec![0, 1, 2],
                cursor: Some(pb::RepairCursor { bucket: 0, skip: 0 }),
            }),
        ),
        0,
    );
    s.request(
        &peer_request(
            5,
            M::Fetch(pb::Fetch {
                keys: vec![b("k1"), b("r1")],
            }),
        ),
        1,
    );
    let tomb = |k: &str| pb::TombstoneEntry {
        key: b(k),
        epoch: ts(1),
    };
    s.request(
        &peer_request(
            6,
            M::CheckTombstones(pb::TombstoneCheck {
                entries: vec![tomb("k1")],
            }),
        ),
        0,
    );
    s.request(
        &peer_request(
            7,
            M::Reclaim(pb::TombstoneReclaim {
                entries: vec![tomb("k1")],
                released: vec![tomb("k2")],
            }),
        ),
        0,
    );
    s.tick(200);
    s.response(&pb::PeerResponse {
        id: 1,
        result: Some(pb::peer_response::Result::Ack(pb::Ack { count: 1 })),
    });
    s.tick(6000);
    let data = s.0;

    let member = |id: &str, status: pb::NodeStatus| pb::Member {
        node_id: id.into(),
        incarnation: START_MS,
        status: status as i32,
        heartbeat: 3,
        role: "memory".into(),
        front: format!("{id}:7700"),
        resp: format!("{id}:6380"),
        workers: vec![format!("{id}:7701")],
        vnodes: 8,
        peer: format!("{id}:17700"),
        placement: placement::PLACEMENT_HASH_TAGS,
    };
    let mut c = Script(Vec::new());
    c.client_write(0, "a");
    c.client_write(1, "b");
    c.request(
        &peer_request(
            1,
            M::SyncCluster(pb::SyncCluster {
                state: Some(pb::ClusterState {
                    members: vec![
                        member("third", pb::NodeStatus::Alive),
                        member("other", pb::NodeStatus::Dead),
                        member("fuzz", pb::NodeStatus::Suspect),
                    ],
                    replication: vec![pb::ReplicationEntry {
                        key: b("a"),
                        ts: ts(5),
                        memory_global: 2,
                        memory_local: 2,
                        disk_global: 0,
                        disk_local: 0,
                        removed: false,
                        by_policy: true,
                    }],
                    has_replication: true,
                    replication_digest: 9,
                    replication_buckets: Vec::new(),
                }),
            }),
        ),
        0,
    );
    c.tick(100);
    c.0.extend_from_slice(&[6, 0x40, 0x0d, 0x03, 0x00]); // an agent round 200 s later
    c.tick(1000);
    c.response(&pb::PeerResponse {
        id: 0,
        result: Some(pb::peer_response::Result::Records(pb::Records {
            entries: vec![gossip_entry("a", lww("remote"))],
        })),
    });
    let cluster = c.0;

    let mut h = Script(Vec::new());
    let hello = pb::PeerHello {
        version: 1,
        node_id: "other".into(),
        from_worker: Some(0),
        to_worker: Some(1),
        sent_ms: START_MS,
        proof: Bytes::from_static(&[0; 32]),
    };
    h.0.push(0);
    h.chunk(&hello.encode_to_vec());
    h.0.extend_from_slice(&[3, 0x55]);
    let hellos = h.0;
    // More replication vectors than the agent keeps (`max_replication_entries`), as a peer
    // could gossip them: before the limit applied to gossip, the table grew with each.
    let mut flood = Script(Vec::new());
    let entries = (0..40u32)
        .map(|k| pb::ReplicationEntry {
            key: Bytes::copy_from_slice(&k.to_be_bytes()),
            ts: ts(5),
            memory_global: 1,
            memory_local: 1,
            disk_global: 0,
            disk_local: 0,
            removed: false,
            by_policy: false,
        })
        .collect();
    flood.request(
        &peer_request(
            1,
            M::SyncCluster(pb::SyncCluster {
                state: Some(pb::ClusterState {
                    replication: entries,
                    has_replication: true,
                    ..Default::default()
                }),
            }),
        ),
        0,
    );
    vec![
        ("worker-requests", data),
        ("cluster-sync", cluster),
        ("hello", hellos),
        ("replication-flood", flood.0),
    ]
}

/// Seeds of the WAL target (see `wal`): options, records, snapshot, damage.
pub fn wal() -> Vec<Seed> {
    let journal = encode_journal(&[
        JournalEntry::Drop(b("gone")),
        JournalEntry::Merge(
            b("t"),
            lattice::Record::tombstone(lattice::Timestamp { time: 9, writer: 1 }),
        ),
    ]);
    let records = |n: u8, snapshot_after: u8| {
        let mut v = vec![4, 0, n, snapshot_after];
        for i in 0..n {
            if i % 2 == 0 {
                v.push(0);
                v.extend_from_slice(&(journal.len() as u16).to_le_bytes());
                v.extend_from_slice(&journal);
            } else {
                v.extend_from_slice(&[1, 2, 1, 0, b'k', 1]);
                v.extend_from_slice(&[i; 16]);
                v.extend_from_slice(&[1, 0, b'd', 0]);
            }
        }
        v
    };
    let clean = records(6, 0);
    let mut flipped = records(8, 0);
    flipped.extend_from_slice(&[0, 0, 40, 0, 0x10]);
    let mut cut = records(8, 0);
    cut.extend_from_slice(&[1, 1, 30, 0]);
    let mut snap = records(8, 4);
    snap.extend_from_slice(&[2, 0, 0, 0]); // snapshot records: none more
    let mut overwritten = records(5, 0);
    overwritten.extend_from_slice(&[0, 2, 48, 0, 4, 0, 0xde, 0xad, 0xbe, 0xef]);
    let mut deleted = records(12, 0);
    deleted.extend_from_slice(&[1, 4]);
    vec![
        ("clean", clean),
        ("flipped-byte", flipped),
        ("cut", cut),
        ("snapshot", snap),
        ("overwritten", overwritten),
        ("deleted-segment", deleted),
    ]
}

/// Seeds of the config target: configuration files.
pub fn config() -> Vec<Seed> {
    let hash = node::auth::sha256_hex(b"pass");
    vec![
        ("empty", Vec::new()),
        (
            "full",
            format!(
                r#"node_id = "n1"
workers = 2
listen = "127.0.0.1:7700"
resp = "127.0.0.1:6380"
peer_listen = "127.0.0.1:17700"
advertise = "node1.example"
cluster_secret = "s"
gossip_period_ms = 50
default_local_replication = 2
vnodes = 64
tombstone_grace_secs = 30
ack = "durable"
ack_replicas = 2
data_dir = "/tmp/lkv"
snapshot_after_bytes = 1048576
insecure_no_auth = false

[limits]
max_key_size = 1024
max_value_size = 65536
max_frame_size = 1048576
max_request_bytes = 2097152
max_reply_bytes = 4194304
idle_timeout_secs = 60
partial_request_timeout_secs = 10
max_request_items = 1000
max_connections = 100
memory_budget = 1073741824

[cluster]
seeds = ["10.0.0.1:7700", "10.0.0.2:7700"]
failure_timeout_ms = 5000
anti_entropy_ms = 1000
gossip_interval_ms = 200
default_global_replication = 3

[wal]
fsync = "periodic:250ms"
segment_bytes = 1048576
preallocate = false

[[users]]
name = "ops"
password_sha256 = "{hash}"
permissions = ["read", "write", "admin"]

[[users]]
name = "app"
password_sha256 = "{hash}"
permissions = ["read"]
keys = ["app:*", "exact"]
"#
            )
            .into_bytes(),
        ),
        (
            "disk-tier",
            b"tier = \"disk\"\ndata_dir = \"/var/lib/lkv\"\n[disk]\ncache_bytes = 1000\n".to_vec(),
        ),
        (
            "bad-user",
            b"[[users]]\nname = \"\"\npassword_sha256 = \"00\"\npermissions = [\"read\"]\n"
                .to_vec(),
        ),
        (
            "exposed",
            b"listen = \"0.0.0.0:7700\"\nresp = \"0.0.0.0:6380\"\n".to_vec(),
        ),
    ]
}

/// Every target's seeds, by target name.
pub fn all() -> Vec<(&'static str, Vec<Seed>)> {
    vec![
        ("native", native()),
        ("resp", resp()),
        ("peer", peer()),
        ("wal", wal()),
        ("config", config()),
    ]
}
