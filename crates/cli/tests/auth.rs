//! Authentication and permissions against real nodes: RESP AUTH / HELLO AUTH / ACL with
//! NOAUTH, WRONGPASS and NOPERM; the native Auth request; users with read-only and
//! key-prefix permissions (every key of MGET/MSET checked); `latticekv leave` without the
//! admin permission; the Rust client and the CLI with credentials; and the refusal to serve
//! a non-loopback address without a password.

mod common;

use std::process::{Command, Stdio};

use client::{Client, ClientOptions, Credentials};
use common::{Native, NodeProc, Resp};
use node::auth::sha256_hex;
use testkit::rt;
use wire::pb::{self, request::Op, response::Result as R, ErrorCode};

const NOAUTH: &[u8] = b"-NOAUTH Authentication required.\r\n";
const WRONGPASS: &[u8] = b"-WRONGPASS invalid username-password pair or user is disabled.\r\n";

/// The error code of a native response (panics on success).
fn code(resp: &pb::Response) -> ErrorCode {
    match &resp.result {
        Some(R::Error(e)) => ErrorCode::try_from(e.code).unwrap(),
        other => panic!("expected an error, got {other:?}"),
    }
}

fn auth(user: &str, password: &str) -> Op {
    Op::Auth(pb::Auth {
        user: user.into(),
        password: password.into(),
    })
}

/// A node with three users: `admin` (everything), `reader` (read, every key) and `app`
/// (read and write on `app:*` only).
fn node_with_users(extra: &[&str]) -> (NodeProc, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("users.toml");
    let toml = format!(
        "[[users]]\nname = \"admin\"\npassword_sha256 = \"{}\"\n\
         permissions = [\"read\", \"write\", \"admin\"]\n\n\
         [[users]]\nname = \"reader\"\npassword_sha256 = \"{}\"\npermissions = [\"read\"]\n\n\
         [[users]]\nname = \"app\"\npassword_sha256 = \"{}\"\n\
         permissions = [\"read\", \"write\"]\nkeys = [\"app:*\"]\n",
        sha256_hex(b"admin-pw"),
        sha256_hex(b"reader-pw"),
        sha256_hex(b"app-pw"),
    );
    std::fs::write(&path, toml).unwrap();
    let mut args = vec!["--config", path.to_str().unwrap(), "--disk-nodes", "0"];
    args.extend_from_slice(extra);
    (NodeProc::start(&args), dir)
}

#[test]
fn resp_requires_auth_and_a_wrong_password_keeps_the_connection_usable() {
    let node = NodeProc::start(&["--password", "s3cret", "--disk-nodes", "0"]);
    let mut c = Resp::connect(node.resp);
    // Everything but AUTH, HELLO … AUTH and QUIT is refused, PING included (as Redis).
    c.roundtrip(&[b"PING"], NOAUTH);
    c.roundtrip(&[b"GET", b"k"], NOAUTH);
    c.roundtrip(&[b"SET", b"k", b"v"], NOAUTH);
    c.roundtrip(&[b"ACL", b"WHOAMI"], NOAUTH);
    c.send(&[b"HELLO", b"3"]);
    assert!(c.line().starts_with("-NOAUTH HELLO must be called"));
    // Wrong passwords: an error, not a hang and not a disconnect.
    c.roundtrip(&[b"AUTH", b"nope"], WRONGPASS);
    c.roundtrip(&[b"AUTH", b"default", b"nope"], WRONGPASS);
    c.roundtrip(&[b"AUTH", b"someone", b"s3cret"], WRONGPASS);
    c.roundtrip(&[b"HELLO", b"3", b"AUTH", b"default", b"nope"], WRONGPASS);
    c.roundtrip(&[b"GET", b"k"], NOAUTH);
    // The right one, on the same connection.
    c.roundtrip(&[b"AUTH", b"s3cret"], b"+OK\r\n");
    c.roundtrip(&[b"SET", b"k", b"v"], b"+OK\r\n");
    c.roundtrip(&[b"GET", b"k"], b"$1\r\nv\r\n");
    c.roundtrip(&[b"PING"], b"+PONG\r\n");
    c.roundtrip(&[b"ACL", b"WHOAMI"], b"$7\r\ndefault\r\n");
    c.roundtrip(&[b"AUTH", b"default", b"s3cret"], b"+OK\r\n");

    // HELLO 3 AUTH on a fresh connection authenticates and switches to RESP3 at once.
    let mut h = Resp::connect(node.resp);
    h.send(&[b"HELLO", b"3", b"AUTH", b"default", b"s3cret"]);
    assert_eq!(h.line(), "%7\r\n");
    let mut h2 = Resp::connect(node.resp);
    h2.send(&[
        b"HELLO", b"2", b"AUTH", b"default", b"s3cret", b"SETNAME", b"x",
    ]);
    assert_eq!(h2.line(), "*14\r\n");
    // A rejected HELLO changes nothing: still RESP2, still the same user.
    c.roundtrip(&[b"HELLO", b"3", b"AUTH", b"default", b"bad"], WRONGPASS);
    c.roundtrip(&[b"GET", b"missing"], b"$-1\r\n");

    // QUIT needs no authentication.
    let mut q = Resp::connect(node.resp);
    q.roundtrip(&[b"QUIT"], b"+OK\r\n");
}

#[test]
fn read_only_and_prefix_limited_users_are_held_to_their_permissions() {
    let (node, _dir) = node_with_users(&["--workers", "2"]);
    let mut admin = Resp::connect(node.resp);
    admin.roundtrip(&[b"AUTH", b"admin", b"admin-pw"], b"+OK\r\n");
    admin.roundtrip(&[b"SET", b"app:1", b"one"], b"+OK\r\n");
    admin.roundtrip(&[b"SET", b"other", b"two"], b"+OK\r\n");

    // reader: reads anything, writes nothing.
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"AUTH", b"reader", b"reader-pw"], b"+OK\r\n");
    r.roundtrip(&[b"GET", b"other"], b"$3\r\ntwo\r\n");
    r.roundtrip(
        &[b"MGET", b"app:1", b"other"],
        b"*2\r\n$3\r\none\r\n$3\r\ntwo\r\n",
    );
    let noperm_set = b"-NOPERM User reader has no permissions to run the 'set' command\r\n";
    r.roundtrip(&[b"SET", b"other", b"x"], noperm_set);
    r.send(&[b"INCR", b"n"]);
    assert!(r.line().starts_with("-NOPERM User reader"));
    r.send(&[b"SET", b"other", b"x", b"GET"]);
    assert!(r.line().starts_with("-NOPERM User reader"));
    r.send(&[b"DEL", b"other"]);
    assert!(r.line().starts_with("-NOPERM User reader"));
    r.send(&[b"ACL", b"LIST"]);
    assert!(r.line().starts_with("-NOPERM"));
    r.roundtrip(&[b"GET", b"other"], b"$3\r\ntwo\r\n");

    // app: reads and writes app:* only, every key of a command checked.
    let key = b"-NOPERM No permissions to access a key\r\n";
    let mut a = Resp::connect(node.resp);
    a.roundtrip(&[b"AUTH", b"app", b"app-pw"], b"+OK\r\n");
    a.roundtrip(&[b"SET", b"app:2", b"x"], b"+OK\r\n");
    a.roundtrip(&[b"GET", b"app:1"], b"$3\r\none\r\n");
    a.roundtrip(&[b"GET", b"other"], key);
    a.roundtrip(&[b"SET", b"other", b"y"], key);
    a.roundtrip(&[b"MGET", b"app:1", b"other"], key);
    a.roundtrip(&[b"MSET", b"app:1", b"new", b"other", b"y"], key);
    a.roundtrip(&[b"DEL", b"app:1", b"other"], key);
    a.roundtrip(&[b"SADD", b"other", b"m"], key);
    a.roundtrip(&[b"EXISTS", b"app:1", b"other"], key);
    // Refused as a whole: nothing of the MSET was written.
    a.roundtrip(&[b"GET", b"app:1"], b"$3\r\none\r\n");
    admin.roundtrip(&[b"GET", b"other"], b"$3\r\ntwo\r\n");
    a.roundtrip(&[b"ACL", b"WHOAMI"], b"$3\r\napp\r\n");

    // ACL LIST (admin only) shows rules, never password hashes.
    admin.send(&[b"ACL", b"LIST"]);
    assert_eq!(admin.line(), "*3\r\n");
    let mut rules = Vec::new();
    for _ in 0..3 {
        let _len = admin.line();
        rules.push(admin.line().trim_end().to_string());
    }
    assert_eq!(
        rules,
        [
            "user admin on sanitized-hash ~* +@read +@write +@admin",
            "user reader on sanitized-hash ~* +@read",
            "user app on sanitized-hash ~app:* +@read +@write",
        ]
    );
    assert!(!rules.iter().any(|r| r.contains(&sha256_hex(b"app-pw"))));

    // The native protocol applies the same rules.
    let mut n = Native::connect(node.native);
    let get = |k: &'static str| Op::Get(pb::Get { key: k.into() });
    assert_eq!(code(&n.call(get("other"))), ErrorCode::Unauthenticated);
    assert_eq!(
        code(&n.call(auth("app", "wrong"))),
        ErrorCode::Unauthenticated
    );
    assert!(matches!(
        n.call(auth("app", "app-pw")).result,
        Some(R::Ack(_))
    ));
    assert!(matches!(n.call(get("app:1")).result, Some(R::Get(_))));
    assert_eq!(code(&n.call(get("other"))), ErrorCode::PermissionDenied);
    let many = Op::GetMany(pb::GetMany {
        keys: vec!["app:1".into(), "other".into()],
        ..Default::default()
    });
    assert_eq!(code(&n.call(many)), ErrorCode::PermissionDenied);
    let leave = Op::Admin(pb::Admin {
        op: Some(pb::admin::Op::Leave(pb::Leave { force: true })),
    });
    assert_eq!(code(&n.call(leave)), ErrorCode::PermissionDenied);
    assert!(matches!(
        n.call(auth("reader", "reader-pw")).result,
        Some(R::Ack(_))
    ));
    let put = Op::Update(pb::Update {
        key: "x".into(),
        op: Some(pb::update::Op::CounterAdd(pb::update::CounterAdd {
            delta: 1,
        })),
    });
    assert_eq!(code(&n.call(put)), ErrorCode::PermissionDenied);
}

#[test]
fn leave_without_admin_permission_is_refused_and_the_node_keeps_serving() {
    let (node, _dir) = node_with_users(&[]);
    let run = |user: &str, password: &str, args: &[&str]| {
        Command::new(node.bin())
            .args(args)
            .env("LATTICEKV_ADDR", node.native.to_string())
            .env("LATTICEKV_USER", user)
            .env("LATTICEKV_PASSWORD", password)
            .output()
            .unwrap()
    };
    for (user, password) in [("reader", "reader-pw"), ("app", "app-pw")] {
        let out = run(user, password, &["leave", "--force"]);
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no admin permission"), "{err}");
    }
    let out = run("admin", "wrong", &["leave"]);
    assert!(!out.status.success());
    // Still serving, to every user with its permissions.
    let out = run("app", "app-pw", &["put", "app:k", "v"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run("reader", "reader-pw", &["get", "app:k"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "v\n");
    let mut c = Resp::connect(node.resp);
    c.roundtrip(&[b"AUTH", b"reader", b"reader-pw"], b"+OK\r\n");
    c.roundtrip(&[b"GET", b"app:k"], b"$1\r\nv\r\n");
}

#[test]
fn rust_client_and_cli_with_a_password() {
    let node = NodeProc::start(&["--password", "pw", "--workers", "2", "--disk-nodes", "0"]);
    let addr = node.native.to_string();
    rt().block_on(async {
        let options = ClientOptions {
            credentials: Some(Credentials::new("", "pw")),
            ..Default::default()
        };
        let c = Client::connect_with(&addr, options).await.unwrap();
        // Keys on both workers: the client authenticates its connection to each.
        for i in 0..20 {
            c.assign(format!("k{i}"), format!("v{i}")).await.unwrap();
        }
        for i in 0..20 {
            let got = c.get_lww(format!("k{i}")).await.unwrap();
            assert_eq!(got.as_deref(), Some(format!("v{i}").as_bytes()));
        }
        let mut sub = c
            .subscribe(&["k1"], std::time::Duration::from_millis(10))
            .await
            .unwrap();
        assert!(sub.next().await.is_some());

        // Without credentials, or with wrong ones: UNAUTHENTICATED, never data.
        let anon = Client::connect(&addr).await.unwrap();
        assert_eq!(
            anon.get_lww("k1").await.unwrap_err().code(),
            Some(ErrorCode::Unauthenticated)
        );
        let wrong = ClientOptions {
            credentials: Some(Credentials::new("default", "nope")),
            ..Default::default()
        };
        let e = match Client::connect_with(&addr, wrong).await {
            Ok(_) => panic!("a wrong password was accepted"),
            Err(e) => e,
        };
        assert_eq!(e.code(), Some(ErrorCode::Unauthenticated));
    });

    let cli = |args: &[&str], password: Option<&str>| {
        let mut cmd = Command::new(node.bin());
        cmd.args(args).env("LATTICEKV_ADDR", &addr);
        if let Some(p) = password {
            cmd.env("LATTICEKV_PASSWORD", p);
        }
        cmd.env_remove("LATTICEKV_USER").output().unwrap()
    };
    let out = cli(&["put", "c", "from-cli"], Some("pw"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = cli(&["get", "--password", "pw", "c"], None);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-cli\n");
    let out = cli(&["get", "c"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("authentication required"));
    let out = cli(&["status"], Some("pw"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What `latticekv local --disk-nodes 0 ARGS` says when it refuses to start (none of the
/// environment variables that would let it start are passed on).
fn start_error(args: &[&str]) -> String {
    let out = Command::new(common::bin())
        .args(["local", "--disk-nodes", "0"])
        .args(args)
        .env_remove("LATTICEKV_PASSWORD")
        .env_remove("LATTICEKV_CLUSTER_SECRET")
        .env_remove("LATTICEKV_INSECURE_NO_AUTH")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(!out.status.success(), "it started: {args:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_non_loopback_port_without_a_password_is_refused_unless_insecure_is_explicit() {
    let err = start_error(&["--listen", "127.0.0.1:0", "--resp", "0.0.0.0:0"]);
    assert!(
        err.contains("--password") && err.contains("--insecure-no-auth"),
        "{err}"
    );

    // With a password, or the explicit flag, it starts.
    let with_password = NodeProc::spawn(
        &["local", "--disk-nodes", "0", "--listen", "127.0.0.1:0"],
        &["--resp", "0.0.0.0:0", "--password", "pw"],
    );
    let mut c = Resp::connect(with_password.resp);
    c.roundtrip(&[b"GET", b"k"], NOAUTH);
    let insecure = NodeProc::spawn(
        &["local", "--disk-nodes", "0", "--listen", "127.0.0.1:0"],
        &["--resp", "0.0.0.0:0", "--insecure-no-auth"],
    );
    let mut c = Resp::connect(insecure.resp);
    c.roundtrip(&[b"PING"], b"+PONG\r\n");
}

#[test]
fn a_non_loopback_peer_port_without_peer_authentication_is_refused() {
    // Clients are authenticated, peers are not: anyone could join and read everything.
    let err = start_error(&[
        "--listen",
        "0.0.0.0:0",
        "--resp",
        "127.0.0.1:0",
        "--password",
        "pw",
    ]);
    assert!(
        err.contains("peer port") && err.contains("--cluster-secret"),
        "{err}"
    );
    // With a cluster secret it starts, and serves.
    let node = NodeProc::spawn(
        &["local", "--disk-nodes", "0", "--listen", "0.0.0.0:0"],
        &[
            "--resp",
            "127.0.0.1:0",
            "--password",
            "pw",
            "--cluster-secret",
            "s",
        ],
    );
    let mut c = Resp::connect(node.resp);
    c.roundtrip(&[b"AUTH", b"pw"], b"+OK\r\n");
    c.roundtrip(&[b"PING"], b"+PONG\r\n");
}

#[test]
fn nodes_with_a_password_form_a_cluster_and_clients_follow_it() {
    let a = NodeProc::server("a", None, &["--password", "pw", "--workers", "1"]);
    let b = NodeProc::server("b", Some(a.native), &["--password", "pw", "--workers", "1"]);
    let options = || ClientOptions {
        credentials: Some(Credentials::new("default", "pw")),
        ..Default::default()
    };
    rt().block_on(async {
        let c = Client::connect_with(&a.native.to_string(), options())
            .await
            .unwrap();
        // b joined through a's front port although a requires authentication.
        let mut members = 0;
        for _ in 0..500 {
            members = c.status().await.unwrap().members.len();
            if members == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(members, 2, "b did not join a");
        // Keys on both nodes: the client authenticates to each node it is sent to.
        c.refresh_topology().await.unwrap();
        for i in 0..40 {
            c.assign(format!("k{i}"), "v").await.unwrap();
        }
        let from_b = Client::connect_with(&b.native.to_string(), options())
            .await
            .unwrap();
        for i in 0..40 {
            let got = from_b.get_lww(format!("k{i}")).await.unwrap();
            assert_eq!(got.as_deref(), Some(&b"v"[..]), "k{i}");
        }
    });
}

#[test]
fn with_a_cluster_secret_the_membership_is_shown_only_to_nodes_and_users() {
    let flags = [
        "--password",
        "pw",
        "--cluster-secret",
        "s3",
        "--workers",
        "1",
    ];
    let a = NodeProc::server("a", None, &flags);
    // b joins through a's front port: its topology request proves the secret.
    let b = NodeProc::server("b", Some(a.native), &flags);
    let options = ClientOptions {
        credentials: Some(Credentials::new("default", "pw")),
        ..Default::default()
    };
    let joined = rt().block_on(async {
        let c = Client::connect_with(&a.native.to_string(), options)
            .await
            .unwrap();
        for _ in 0..500 {
            if c.status().await.unwrap().members.len() == 2 {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    });
    assert!(joined, "b did not join a");

    // Anyone else must authenticate first: no proof, or a proof of another secret.
    let topology = |secret: Option<&str>| {
        let mut t = pb::GetTopology::default();
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        node::peer::secret::sign_topology(&mut t, secret, now);
        Op::Topology(t)
    };
    let mut c = Native::connect(b.native);
    assert_eq!(code(&c.call(topology(None))), ErrorCode::Unauthenticated);
    assert_eq!(
        code(&c.call(topology(Some("guess")))),
        ErrorCode::Unauthenticated
    );
    match c.call(topology(Some("s3"))).result {
        Some(R::Topology(t)) => assert_eq!(t.members.len(), 2),
        other => panic!("{other:?}"),
    }
    // And once authenticated, any client sees it.
    let mut c = Native::connect(b.native);
    assert!(matches!(
        c.call(auth("default", "pw")).result,
        Some(R::Ack(_))
    ));
    assert!(matches!(
        c.call(Op::Topology(pb::GetTopology::default())).result,
        Some(R::Topology(_))
    ));
}

#[test]
fn listing_needs_every_key_and_flushing_needs_admin() {
    let (node, _dir) = node_with_users(&["--workers", "2"]);
    let mut admin = Resp::connect(node.resp);
    admin.roundtrip(&[b"AUTH", b"admin", b"admin-pw"], b"+OK\r\n");
    admin.roundtrip(&[b"SET", b"app:1", b"one"], b"+OK\r\n");
    admin.roundtrip(&[b"SET", b"other", b"two"], b"+OK\r\n");

    // reader: lists every key, flushes nothing, renames nothing.
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"AUTH", b"reader", b"reader-pw"], b"+OK\r\n");
    r.roundtrip(&[b"DBSIZE"], b":2\r\n");
    r.roundtrip(&[b"KEYS", b"oth*"], b"*1\r\n$5\r\nother\r\n");
    r.roundtrip(
        &[b"FLUSHDB"],
        b"-NOPERM User reader has no permissions to run the 'flushdb' command\r\n",
    );
    r.send(&[b"RENAME", b"other", b"x"]);
    assert!(r.line().starts_with("-NOPERM User reader"));

    // app: its patterns do not cover every key, so listing would leak keys: refused.
    let key = b"-NOPERM No permissions to access a key\r\n";
    let mut a = Resp::connect(node.resp);
    a.roundtrip(&[b"AUTH", b"app", b"app-pw"], b"+OK\r\n");
    a.roundtrip(&[b"KEYS", b"*"], key);
    a.roundtrip(&[b"SCAN", b"0"], key);
    a.roundtrip(&[b"RANDOMKEY"], key);
    a.roundtrip(&[b"RENAME", b"app:1", b"other"], key);
    a.roundtrip(&[b"SUNIONSTORE", b"app:s", b"other"], key);
    a.roundtrip(&[b"RENAME", b"app:1", b"app:2"], b"+OK\r\n");
    a.roundtrip(&[b"GET", b"app:2"], b"$3\r\none\r\n");

    admin.roundtrip(&[b"FLUSHALL"], b"+OK\r\n");
    admin.roundtrip(&[b"DBSIZE"], b":0\r\n");
    r.roundtrip(&[b"KEYS", b"*"], b"*0\r\n");
}
