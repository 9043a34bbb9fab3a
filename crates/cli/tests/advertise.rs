//! `--advertise`: nodes that bind every interface (`0.0.0.0`, as in a container) publish the
//! advertised host with their bound ports everywhere — membership entries, topologies,
//! status, redirects — and a cluster forms and serves through those addresses.
//!
//! The advertised hosts are 127.0.0.2, 127.0.0.3, 127.0.0.4: they reach this machine (all
//! of 127/8 is loopback) but are neither the 0.0.0.0 the nodes bind nor the 127.0.0.1 a
//! client would otherwise use, so a published address that ignored `--advertise` shows.

mod common;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use client::Client;
use common::{bin, eventually, Native, NodeProc};
use lattice::{Lww, Timestamp, Value};
use wire::pb::{self, request::Op, response::Result as R};

fn host(addr: &str) -> &str {
    addr.rsplit_once(':').map_or(addr, |(h, _)| h)
}

fn topology(addr: SocketAddr) -> pb::Topology {
    match Native::connect(addr)
        .call(Op::Topology(pb::GetTopology::default()))
        .result
    {
        Some(R::Topology(t)) => t,
        other => panic!("{other:?}"),
    }
}

fn server(id: &str, advertise: &str, seed: Option<SocketAddr>) -> NodeProc {
    let seed = seed.map(|s| s.to_string());
    let mut args = vec![
        "server",
        "--node-id",
        id,
        "--listen",
        "0.0.0.0:0",
        "--resp",
        "0.0.0.0:0",
        "--advertise",
        advertise,
        "--workers",
        "2",
        "--replication",
        "1",
        "--cluster-gossip-ms",
        "100",
        // Bound to every interface on purpose; authentication is tested in auth.rs.
        "--insecure-no-auth",
    ];
    if let Some(s) = &seed {
        args.extend(["--seeds", s.as_str()]);
    }
    NodeProc::spawn(&args, &[])
}

#[test]
fn nodes_bound_to_all_interfaces_publish_the_advertised_host() {
    let a = server("a", "127.0.0.2", None);
    assert_eq!(a.native.ip().to_string(), "127.0.0.2", "printed address");
    assert!(a.workers.iter().all(|w| w.ip().to_string() == "127.0.0.2"));
    let b = server("b", "127.0.0.3", Some(a.native));

    // A routing node, advertised too.
    let mut routing = Command::new(bin())
        .args([
            "routing",
            "--listen",
            "0.0.0.0:0",
            "--advertise",
            "127.0.0.4",
            "--insecure-no-auth",
        ])
        .args([
            "--cluster-gossip-ms",
            "100",
            "--seeds",
            &a.native.to_string(),
        ])
        .env("LATTICEKV_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the routing node");
    let mut out = BufReader::new(routing.stdout.take().expect("stdout"));
    let mut line = String::new();
    out.read_line(&mut line).expect("routing output");
    // Keep draining its stdout so it never writes to a closed pipe.
    std::thread::spawn(move || for _ in out.lines() {});
    let routing_addr = line
        .strip_prefix("routing ")
        .map(str::trim)
        .expect("routing prints its address")
        .to_string();
    assert_eq!(host(&routing_addr), "127.0.0.4");

    let expected = |id: &str| match id {
        "a" => "127.0.0.2",
        "b" => "127.0.0.3",
        id if id.starts_with("routing") => "127.0.0.4",
        other => panic!("unexpected member {other}"),
    };
    for node in [&a, &b] {
        assert!(
            eventually(Duration::from_secs(20), || {
                let t = topology(node.native);
                t.members.len() == 3
                    && t.members
                        .iter()
                        .all(|m| m.status == pb::NodeStatus::Alive as i32)
            }),
            "{} did not see 3 alive members",
            node.native
        );
        let t = topology(node.native);
        for m in &t.members {
            let want = expected(&m.node_id);
            assert_eq!(host(&m.front), want, "{} front {}", m.node_id, m.front);
            if m.role == "memory" {
                assert_eq!(host(&m.resp), want, "{} resp {}", m.node_id, m.resp);
                assert_eq!(m.workers.len(), 2);
                for w in &m.workers {
                    assert_eq!(host(w), want, "{} worker {w}", m.node_id);
                }
            }
        }
        let me = expected(&t.node_id);
        assert!(t.workers.iter().all(|w| host(w) == me), "{:?}", t.workers);
        let status = match Native::connect(node.native)
            .call(Op::Status(pb::GetStatus {}))
            .result
        {
            Some(R::Status(s)) => s,
            other => panic!("{other:?}"),
        };
        assert_eq!(host(&status.front_address), me);
        assert_eq!(host(&status.resp_address), me);
        assert!(status.workers.iter().all(|w| host(&w.address) == me));
    }

    // A worker's redirect for a key it does not hold names advertised addresses.
    let mut w = Native::connect(a.workers[0]);
    let redirect = (0..200)
        .find_map(|i| {
            match w
                .call(Op::Get(pb::Get {
                    key: format!("probe:{i}").into(),
                }))
                .result
            {
                Some(R::Error(e)) if !e.redirect.is_empty() => Some(e.redirect),
                _ => None,
            }
        })
        .expect("a redirect among 200 keys");
    assert!(
        redirect
            .iter()
            .all(|r| ["127.0.0.2", "127.0.0.3"].contains(&host(r))),
        "{redirect:?}"
    );

    // Data flows through the advertised addresses: a placement-aware client writes to the
    // workers the topology names, and each node's front forwards to the other's workers.
    let keys: Vec<String> = (0..300).map(|i| format!("key:{i}")).collect();
    let value = |i: usize| {
        Value::Lww(Lww::new(
            Timestamp::new((i as u64 + 1) << 16, 7),
            format!("v{i}").into_bytes().into(),
        ))
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let c = Client::connect(&a.native.to_string()).await.unwrap();
        for (i, k) in keys.iter().enumerate() {
            c.put(k, value(i)).await.unwrap();
        }
        for front in [a.native, b.native] {
            let mut n = Native::connect(front);
            for (i, k) in keys.iter().enumerate() {
                let got = match n
                    .call(Op::Get(pb::Get {
                        key: k.clone().into(),
                    }))
                    .result
                {
                    Some(R::Get(g)) => g.value.map(|v| wire::convert::value_from_pb(&v).unwrap()),
                    other => panic!("{k} via {front}: {other:?}"),
                };
                assert_eq!(got, Some(value(i)), "{k} via {front}");
            }
        }
    });
    let _ = routing.kill();
    let _ = routing.wait();
}

/// Waits for a process that should exit at once; its status and stderr.
fn run_to_exit(args: &[&str]) -> (Option<i32>, String) {
    let mut child = Command::new(bin())
        .args(args)
        .env("LATTICEKV_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn latticekv");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Ok(Some(s)) = child.try_wait() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("latticekv {args:?} kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    (status.code(), err)
}

#[test]
fn an_advertised_host_must_be_a_host() {
    for bad in ["127.0.0.2:7700", "0.0.0.0", "not a host"] {
        let (code, err) = run_to_exit(&[
            "server",
            "--listen",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
            "--advertise",
            bad,
        ]);
        assert_ne!(code, Some(0), "--advertise {bad:?} accepted");
        assert!(err.contains("advertise"), "--advertise {bad:?}: {err}");
    }
}

#[test]
fn advertise_can_come_from_the_config_file() {
    let dir = std::env::temp_dir().join(format!("lkv-advertise-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("node.toml");
    std::fs::write(&path, "advertise = \"127.0.0.5\"\nworkers = 1\n").unwrap();
    // Its own data directory: the default (./latticekv-data) would land in the source tree.
    let data = tempfile::tempdir().unwrap();
    let node = NodeProc::spawn(
        &["local", "--listen", "0.0.0.0:0", "--resp", "0.0.0.0:0"],
        &[
            "--config",
            path.to_str().unwrap(),
            "--data-dir",
            data.path().to_str().unwrap(),
            "--insecure-no-auth",
        ],
    );
    assert_eq!(node.native.ip().to_string(), "127.0.0.5");
    let t = topology(node.native);
    assert!(t.workers.iter().all(|w| host(w) == "127.0.0.5"), "{t:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
