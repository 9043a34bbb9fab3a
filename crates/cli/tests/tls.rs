//! TLS against real nodes: every client port TLS-only (redis-cli --tls, the Rust client,
//! the CLI), plain text and untrusted certificates refused; peers authenticated by mutual
//! TLS (a node whose certificate the cluster's CA did not sign cannot join); certificates
//! reloaded on SIGHUP and when the files change, without a restart.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use client::{Client, ClientError, ClientOptions, ClientTls};
use common::cluster::{rt, stays};
use common::{eventually, NodeProc};
use testkit::pki::Leaf;
use testkit::Pki;
use wire::pb;

fn tls_flags(leaf: &Leaf, ca: &Path) -> Vec<String> {
    vec![
        "--tls-cert".into(),
        leaf.cert.display().to_string(),
        "--tls-key".into(),
        leaf.key.display().to_string(),
        "--tls-ca".into(),
        ca.display().to_string(),
    ]
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn options(ca: &Path) -> ClientOptions {
    ClientOptions {
        tls: Some(ClientTls::new(Some(ca)).unwrap()),
        timeout: Duration::from_secs(5),
        ..Default::default()
    }
}

/// Client options with TLS and the password of the cluster test's nodes.
fn with_password(ca: &Path) -> ClientOptions {
    ClientOptions {
        credentials: Some(client::Credentials::new("default", "pw")),
        ..options(ca)
    }
}

fn redis_cli(resp: SocketAddr, ca: &Path, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["--tls", "--cacert"])
        .arg(ca)
        .args(["-h", "127.0.0.1", "-p", &resp.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli (make deps installs it)");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Storage members the node at `front` lists as alive, asked over TLS.
fn alive(front: SocketAddr, ca: &Path) -> Vec<String> {
    rt().block_on(async {
        let c = Client::connect_with(&front.to_string(), with_password(ca))
            .await
            .unwrap();
        let t = c.refresh_topology().await.unwrap();
        t.members
            .into_iter()
            .filter(|m| m.role == "memory" && m.status == pb::NodeStatus::Alive as i32)
            .map(|m| m.node_id)
            .collect()
    })
}

/// The DER of the certificate presented on `addr` to a client trusting `ca`.
fn presented(addr: SocketAddr, ca: &Path) -> Vec<u8> {
    rt().block_on(async {
        let config = tls::client_config(tls::roots(Some(ca)).unwrap(), None).unwrap();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let name = tls::server_name(&addr.to_string()).unwrap();
        match tls::Stream::connect(&tls::TlsConnector::from(config), name, tcp).await {
            Ok(tls::Stream::Client(s)) => s.get_ref().1.peer_certificates().unwrap()[0].to_vec(),
            other => panic!("no TLS session: {other:?}"),
        }
    })
}

#[test]
fn every_client_port_is_tls_only_and_clients_verify_the_node() {
    let pki = Pki::new("latticekv test CA");
    let leaf = pki.leaf("node", &["127.0.0.1", "localhost"]);
    // The default local node: a memory node and a disk node, which talk over the peer
    // plane (mutual TLS here).
    let flags = tls_flags(&leaf, &pki.ca);
    let node = NodeProc::start(&strs(&flags));

    // redis-cli over TLS, trusting the CA.
    assert_eq!(
        redis_cli(node.resp, &pki.ca, &["SET", "greeting", "hello"]),
        "OK"
    );
    assert_eq!(redis_cli(node.resp, &pki.ca, &["GET", "greeting"]), "hello");

    // The Rust client: the front port, then each worker's own port (all TLS).
    rt().block_on(async {
        let c = Client::connect_with(&node.native.to_string(), options(&pki.ca))
            .await
            .unwrap();
        assert_eq!(
            c.get_lww("greeting").await.unwrap().as_deref(),
            Some(&b"hello"[..])
        );
        for i in 0..50 {
            c.assign(format!("k{i}"), format!("v{i}")).await.unwrap();
        }
        for i in 0..50 {
            let v = c.get_lww(format!("k{i}")).await.unwrap();
            assert_eq!(v.as_deref(), Some(format!("v{i}").as_bytes()));
        }
    });

    // The CLI.
    let ca = pki.ca.to_str().unwrap();
    node.cli_ok(&["put", "--tls-ca", ca, "cli-key", "cli-value"]);
    assert_eq!(
        node.cli_ok(&["get", "--tls-ca", ca, "cli-key"]).trim(),
        "cli-value"
    );
    // Without TLS, the CLI gets an error, not a hang.
    let out = node.cli(&["get", "cli-key"]);
    assert!(!out.status.success());

    // The memory node and the disk node formed one cluster over mutual TLS.
    assert!(
        eventually(Duration::from_secs(10), || node
            .cli_ok(&["status", "--tls-ca", ca])
            .contains("disk")),
        "the disk node is a member"
    );

    // Plain text on the RESP port: no answer, the connection is closed.
    let mut plain = TcpStream::connect(node.resp).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    plain.write_all(b"PING\r\n").unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("PONG"), "{got:?}");

    // A client trusting another CA refuses the node's certificate.
    let other = Pki::new("another CA");
    let err = rt().block_on(async {
        Client::connect_with(&node.native.to_string(), options(&other.ca))
            .await
            .err()
            .expect("refused")
    });
    assert!(matches!(err, ClientError::Tls { .. }), "{err}");
    // So does one that expects another name.
    let err = rt().block_on(async {
        let tls = ClientTls::new(Some(&pki.ca))
            .unwrap()
            .with_server_name("db.example");
        let o = ClientOptions {
            tls: Some(tls),
            ..options(&pki.ca)
        };
        Client::connect_with(&node.native.to_string(), o)
            .await
            .err()
            .expect("refused")
    });
    assert!(err.to_string().contains("certificate"), "{err}");

    // The node kept serving through all of it.
    assert_eq!(redis_cli(node.resp, &pki.ca, &["GET", "greeting"]), "hello");
}

#[test]
fn a_node_without_a_certificate_from_the_cluster_ca_cannot_join() {
    let pki = Pki::new("cluster CA");
    let rogue_pki = Pki::new("rogue CA");
    let a_leaf = pki.leaf("a", &["127.0.0.1"]);
    let b_leaf = pki.leaf("b", &["127.0.0.1"]);
    // The rogue trusts the cluster's CA (it can verify the cluster) but its own
    // certificate is signed by another.
    let rogue_leaf = rogue_pki.leaf("rogue", &["127.0.0.1"]);
    // With a password: a joining node asks its seed for the members before it could
    // authenticate, which only its node certificate allows.
    let fast = [
        "--cluster-gossip-ms",
        "100",
        "--workers",
        "1",
        "--password",
        "pw",
    ];

    let a_flags = [tls_flags(&a_leaf, &pki.ca), fast.map(String::from).to_vec()].concat();
    let a = NodeProc::server("a", None, &strs(&a_flags));
    let b_flags = [tls_flags(&b_leaf, &pki.ca), fast.map(String::from).to_vec()].concat();
    let _b = NodeProc::server("b", Some(a.native), &strs(&b_flags));
    assert!(
        eventually(Duration::from_secs(20), || alive(a.native, &pki.ca).len()
            == 2),
        "a member with a certificate of the cluster CA joins"
    );

    let rogue_flags = [
        tls_flags(&rogue_leaf, &pki.ca),
        fast.map(String::from).to_vec(),
    ]
    .concat();
    let rogue = NodeProc::server("rogue", Some(a.native), &strs(&rogue_flags));
    assert!(
        stays(Duration::from_secs(3), || {
            let members = alive(a.native, &pki.ca);
            members.len() == 2 && !members.contains(&"rogue".to_string())
        }),
        "the rogue node never becomes a member"
    );
    // Nor did it learn anything: it knows only itself.
    let members = alive(rogue.native, &rogue_pki.ca);
    assert_eq!(members, vec!["rogue".to_string()]);
}

#[test]
fn certificates_are_reloaded_on_sighup_and_when_their_files_change() {
    let pki = Pki::new("test CA");
    let leaf = pki.leaf("node", &["127.0.0.1"]);

    // Reloaded on SIGHUP (file checks off).
    let config = pki.dir().join("sighup.toml");
    std::fs::write(&config, "[tls]\nreload_secs = 0\n").unwrap();
    let mut flags = tls_flags(&leaf, &pki.ca);
    flags.extend(["--config".into(), config.display().to_string()]);
    flags.extend(["--disk-nodes".into(), "0".into()]);
    let node = NodeProc::start(&strs(&flags));
    let first = presented(node.resp, &pki.ca);
    pki.leaf("node", &["127.0.0.1"]);
    assert!(
        stays(Duration::from_millis(500), || presented(node.resp, &pki.ca)
            == first),
        "no reload without a signal when checks are off"
    );
    // SAFETY: kill(2) on our own child's pid.
    unsafe { libc::kill(node.child.id() as i32, libc::SIGHUP) };
    assert!(
        eventually(Duration::from_secs(10), || presented(node.resp, &pki.ca)
            != first),
        "SIGHUP reloads the certificate"
    );
    // The node still serves on every port, with the new certificate.
    assert_eq!(redis_cli(node.resp, &pki.ca, &["PING"]), "PONG");
    let now = presented(node.native, &pki.ca);
    assert_ne!(now, first);

    // Reloaded when the files change (checked every second here).
    let leaf2 = pki.leaf("node2", &["127.0.0.1"]);
    let config = pki.dir().join("watch.toml");
    std::fs::write(&config, "[tls]\nreload_secs = 1\n").unwrap();
    let mut flags = tls_flags(&leaf2, &pki.ca);
    flags.extend(["--config".into(), config.display().to_string()]);
    flags.extend(["--disk-nodes".into(), "0".into()]);
    let watched = NodeProc::start(&strs(&flags));
    let before = presented(watched.resp, &pki.ca);
    pki.leaf("node2", &["127.0.0.1"]);
    assert!(
        eventually(Duration::from_secs(15), || presented(watched.resp, &pki.ca)
            != before),
        "a changed certificate file is picked up"
    );
    // A broken file: the node keeps the certificate it has and keeps serving.
    let current = presented(watched.resp, &pki.ca);
    std::fs::write(&leaf2.cert, "-----BEGIN CERTIFICATE-----\nbroken\n").unwrap();
    assert!(
        stays(Duration::from_secs(2), || presented(watched.resp, &pki.ca)
            == current),
        "a broken file changes nothing"
    );
}

#[test]
fn tls_settings_that_cannot_work_are_refused_at_start() {
    let pki = Pki::new("test CA");
    let leaf = pki.leaf("node", &["127.0.0.1"]);
    let run = |args: &[&str]| {
        Command::new(common::bin())
            .args(["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
            .args(["--disk-nodes", "0"])
            .args(args)
            .output()
            .unwrap()
    };
    let cert = leaf.cert.to_str().unwrap();
    let key = leaf.key.to_str().unwrap();
    let out = run(&["--tls-cert", cert]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-key"),
        "{out:?}"
    );
    let out = run(&["--tls-cert", cert, "--tls-key", cert]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("private key"),
        "{out:?}"
    );
    let other = pki.leaf("other", &["127.0.0.1"]);
    let out = run(&["--tls-cert", cert, "--tls-key", other.key.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not match"),
        "{out:?}"
    );
    let out = run(&["--tls-ca", pki.ca.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--tls-cert"),
        "{out:?}"
    );
    let _ = key;
}
