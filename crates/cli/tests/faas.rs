//! The serverless layer's scheduler against a real store, through the Rust client, with
//! hosts played by the test (the Python executors are tested in tests/python/test_faas.py):
//! registration and its validation, discovery through the store, errors by code, a call
//! run again when its host drops, a registry shared by two schedulers, and a scheduler's
//! metrics over `--http`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use faas::client::{Arg, CallOptions, FaasClient};
use faas::{conn, pb, FaasError};
use testkit::rt;
use testkit::NodeProc;
use tokio::net::TcpStream;

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_latticekv")
}

fn store() -> NodeProc {
    NodeProc::start_bin(
        bin(),
        &["--workers", "1", "--disk-nodes", "0", "--monitor", "false"],
    )
}

/// A `latticekv faas scheduler` process, killed on drop.
struct SchedulerProc {
    child: Child,
    addr: String,
    /// Its HTTP address, with `--http`.
    http: Option<std::net::SocketAddr>,
}

impl Drop for SchedulerProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scheduler(store: &NodeProc) -> SchedulerProc {
    scheduler_with(store, &[])
}

fn scheduler_with(store: &NodeProc, extra: &[&str]) -> SchedulerProc {
    let mut child = Command::new(bin())
        .args(["faas", "scheduler", "--listen", "127.0.0.1:0", "--store"])
        .arg(store.native.to_string())
        .args(extra)
        .env("LATTICEKV_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn the scheduler");
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let (mut addr, mut http) = (None, None);
    for line in lines.by_ref() {
        let line = line.unwrap();
        let parts: Vec<&str> = line.split_whitespace().collect();
        match parts.as_slice() {
            ["faas", a] => addr = Some(a.to_string()),
            ["http", a, ..] => http = a.parse().ok(),
            ["press", ..] => break,
            _ => {}
        }
    }
    std::thread::spawn(move || for _ in lines {});
    SchedulerProc {
        child,
        addr: addr.expect("the scheduler printed its address"),
        http,
    }
}

fn code(e: &FaasError) -> Option<pb::ErrorCode> {
    match e {
        FaasError::Remote { code, .. } => Some(*code),
        _ => None,
    }
}

fn s(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

#[test]
fn registrations_are_validated_and_errors_have_codes() {
    let store = store();
    let sched = scheduler(&store);
    rt().block_on(async {
        // The SDK's path: find the scheduler through the store.
        let cloud = FaasClient::discover(&store.native.to_string())
            .await
            .unwrap();
        assert_eq!(cloud.addr(), sched.addr);
        cloud
            .register_function("f", b"code-f".to_vec())
            .await
            .unwrap();
        cloud
            .register_function("g", b"code-g".to_vec())
            .await
            .unwrap();
        let bad = |r: Result<(), FaasError>| code(&r.unwrap_err());
        assert_eq!(
            bad(cloud.register_function("", b"x".to_vec()).await),
            Some(pb::ErrorCode::BadRequest)
        );
        assert_eq!(
            bad(cloud.register_function("empty", Vec::new()).await),
            Some(pb::ErrorCode::BadRequest)
        );
        // A cycle, then an unregistered function.
        assert_eq!(
            bad(cloud
                .register_dag(
                    "d",
                    &s(&["f", "g"]),
                    &[("f".into(), "g".into()), ("g".into(), "f".into())]
                )
                .await),
            Some(pb::ErrorCode::BadRequest)
        );
        assert_eq!(
            bad(cloud
                .register_dag("d", &s(&["f", "h"]), &[("f".into(), "h".into())])
                .await),
            Some(pb::ErrorCode::NotFound)
        );
        cloud
            .register_dag("d", &s(&["f", "g"]), &[("f".into(), "g".into())])
            .await
            .unwrap();
        // Stored in the KVS under the documented keys.
        let kv = client::Client::connect(&store.native.to_string())
            .await
            .unwrap();
        let stored = kv.get_lww("lkv.faas/fn/f").await.unwrap().unwrap();
        assert_eq!(
            &faas::registry::decode_function(&stored).unwrap().code[..],
            b"code-f"
        );
        let dag = kv.get_lww("lkv.faas/dag/d").await.unwrap().unwrap();
        assert_eq!(
            faas::registry::decode_dag(&dag).unwrap().functions,
            s(&["f", "g"])
        );

        // Every protocol is accepted: an HB call waits for hosts like any other.
        let hb = CallOptions {
            protocol: pb::Protocol::Hb,
            timeout: Some(Duration::from_millis(300)),
        };
        let e = cloud.call("f", vec![], hb).await.unwrap_err();
        assert_eq!(code(&e), Some(pb::ErrorCode::NoExecutors), "{e}");
        let e = cloud
            .call("nope", vec![], CallOptions::default())
            .await
            .unwrap_err();
        assert_eq!(code(&e), Some(pb::ErrorCode::NotFound));
        let e = cloud
            .call_dag(
                "d",
                [("x".to_string(), vec![])].into(),
                CallOptions::default(),
            )
            .await
            .unwrap_err();
        assert_eq!(code(&e), Some(pb::ErrorCode::BadRequest));
        // No host connected: the call waits for one, then fails NO_EXECUTORS.
        let quick = CallOptions {
            protocol: pb::Protocol::Ct,
            timeout: Some(Duration::from_millis(300)),
        };
        let e = cloud.call("f", vec![], quick).await.unwrap_err();
        assert_eq!(code(&e), Some(pb::ErrorCode::NoExecutors), "{e}");
    });
}

/// A host played by the test: hello sent, the connection returned.
async fn fake_host(addr: &str, id: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let hello = pb::ToScheduler {
        msg: Some(pb::to_scheduler::Msg::HostHello(pb::HostHello {
            host_id: id.into(),
            executors: 3,
            ..Default::default() // no causal cache: the default protocol stays CT
        })),
    };
    conn::write(&mut stream, &hello).await.unwrap();
    stream
}

async fn next_run(stream: &mut TcpStream) -> pb::RunDag {
    loop {
        let msg: pb::FromScheduler = conn::read(stream).await.unwrap().expect("a message");
        if let Some(pb::from_scheduler::Msg::RunDag(r)) = msg.msg {
            return r;
        }
    }
}

#[test]
fn a_call_runs_again_when_its_host_drops_and_schedulers_share_the_registry() {
    let store = store();
    let first = scheduler(&store);
    let second = scheduler(&store);
    rt().block_on(async {
        // Registered through one scheduler, called through the other.
        let one = FaasClient::connect(&first.addr).await.unwrap();
        one.register_function("f", b"code-f".to_vec())
            .await
            .unwrap();
        let two = FaasClient::connect(&second.addr).await.unwrap();

        let mut a = fake_host(&second.addr, "a").await;
        let mut b = fake_host(&second.addr, "b").await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        let call = tokio::spawn(async move {
            two.call(
                "f",
                vec![Arg::Value(b"arg".to_vec()), Arg::Ref(b"k".to_vec())],
                CallOptions::default(),
            )
            .await
        });
        // Equal loads: the smaller id, "a", gets it; it dies holding it.
        let run = next_run(&mut a).await;
        assert_eq!(run.code.get("f").map(|c| &c[..]), Some(&b"code-f"[..]));
        assert_eq!(run.args["f"].args.len(), 2);
        drop(a);
        // Placed again on "b", which answers.
        let again = next_run(&mut b).await;
        assert_eq!(again.run_id, run.run_id);
        let done = pb::ToScheduler {
            msg: Some(pb::to_scheduler::Msg::DagDone(pb::DagDone {
                run_id: again.run_id,
                result: Some(pb::dag_done::Result::Value(b"result".as_slice().into())),
            })),
        };
        conn::write(&mut b, &done).await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(20), call)
            .await
            .expect("the call finished")
            .unwrap()
            .unwrap();
        assert_eq!(&got[..], b"result");
    });
}

#[test]
fn a_scheduler_listens_on_loopback_only() {
    // No authentication yet: a reachable scheduler would run anyone's code.
    let out = Command::new(bin())
        .args([
            "faas",
            "scheduler",
            "--listen",
            "0.0.0.0:0",
            "--store",
            "127.0.0.1:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
    let out = Command::new(bin())
        .args([
            "local",
            "--faas",
            "--faas-listen",
            "0.0.0.0:0",
            "--listen",
            "127.0.0.1:0",
        ])
        .args(["--resp", "127.0.0.1:0", "--disk-nodes", "0", "--data-dir"])
        .arg(tempfile::tempdir().unwrap().path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a loopback address"), "{err}");
}

/// `faas scheduler --http`: its `/metrics` move as hosts connect and calls are answered, and
/// `/health` answers; bad requests are refused and it keeps serving.
#[test]
fn a_standalone_scheduler_serves_its_metrics_over_http() {
    let store = store();
    let sched = scheduler_with(&store, &["--http", "127.0.0.1:0"]);
    let http = sched.http.expect("the scheduler printed its HTTP address");
    let metrics = || {
        let (status, body) = common::http::http(http, "GET", "/metrics");
        assert_eq!(status, 200, "{body}");
        body
    };
    let value = |body: &str, name: &str, labels: &str| -> f64 {
        body.lines()
            .filter(|l| l.starts_with(name) && l.contains(labels))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    let before = metrics();
    assert_eq!(value(&before, "latticekv_faas_hosts", ""), 0.0, "{before}");
    assert_eq!(
        common::http::http(http, "GET", "/health"),
        (200, "ok\n".to_string())
    );
    rt().block_on(async {
        let mut host = fake_host(&sched.addr, "a").await;
        let mut hosts = 0.0;
        assert!(
            testkit::eventually(Duration::from_secs(20), || {
                hosts = value(&metrics(), "latticekv_faas_hosts", "");
                hosts == 1.0
            }),
            "hosts {hosts}"
        );
        // Two calls run by the host, answered.
        let client = FaasClient::connect(&sched.addr).await.unwrap();
        client
            .register_function("f", b"code-f".to_vec())
            .await
            .unwrap();
        for _ in 0..2 {
            let c = client.clone();
            let call = tokio::spawn(async move {
                c.call("f", vec![Arg::Value(b"x".to_vec())], CallOptions::default())
                    .await
            });
            let run = next_run(&mut host).await;
            let done = pb::ToScheduler {
                msg: Some(pb::to_scheduler::Msg::DagDone(pb::DagDone {
                    run_id: run.run_id,
                    result: Some(pb::dag_done::Result::Value(b"r".as_slice().into())),
                })),
            };
            conn::write(&mut host, &done).await.unwrap();
            let got = tokio::time::timeout(Duration::from_secs(20), call)
                .await
                .expect("the call finished")
                .unwrap()
                .unwrap();
            assert_eq!(&got[..], b"r");
        }
    });
    let after = metrics();
    let ok = "outcome=\"ok\"";
    let grew =
        |name: &str, labels: &str| value(&after, name, labels) - value(&before, name, labels);
    assert_eq!(grew("latticekv_faas_calls_total", ok), 2.0, "{after}");
    assert_eq!(
        grew("latticekv_faas_call_duration_seconds_count", ""),
        2.0,
        "{after}"
    );
    assert_eq!(common::http::http(http, "POST", "/metrics").0, 405);
    assert_eq!(common::http::http(http, "GET", "/nope").0, 404);
    let mut junk = std::net::TcpStream::connect(http).unwrap();
    std::io::Write::write_all(&mut junk, b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut junk, &mut sink);
    assert!(String::from_utf8_lossy(&sink).starts_with("HTTP/1.1 400"));
    assert_eq!(common::http::http(http, "GET", "/health").0, 200);
}
