//! The load generator against real servers: the `latticekv` binary (both protocols) and
//! `redis-server` (RESP).
//!
//! The `latticekv` binary is built by the `cli` crate (`cargo build -p latticekv`); it is found at
//! `$LATTICEKV_BIN`, else next to this test's target directory (`target/<profile>/latticekv`),
//! else under `$CARGO_TARGET_DIR` or the workspace's `target/debug`. A missing binary or a
//! missing `redis-server` fails the tests: they are never skipped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bench::{BenchArgs, LoadKeys, Protocol, Report, Workload, WriteType};
use testkit::NodeProc;

fn latticekv_bin() -> PathBuf {
    let mut tried = Vec::new();
    if let Some(p) = std::env::var_os("LATTICEKV_BIN") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "LATTICEKV_BIN={} does not exist (build it with `cargo build -p latticekv`)",
            p.display()
        );
        return p;
    }
    // target/<profile>/deps/<this test> → target/<profile>/latticekv
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent().and_then(|deps| deps.parent()) {
            tried.push(dir.join("latticekv"));
        }
    }
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        tried.push(PathBuf::from(dir).join("debug").join("latticekv"));
    }
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    tried.push(workspace.join("target").join("debug").join("latticekv"));
    for p in &tried {
        if p.is_file() {
            return p.clone();
        }
    }
    panic!(
        "the latticekv binary was not found (tried {tried:?}); build it first with \
         `cargo build -p latticekv` (same CARGO_TARGET_DIR and profile) or set LATTICEKV_BIN"
    );
}

/// Starts `latticekv local` on ephemeral ports with `workers` workers, the memory tier
/// alone (compared with a Redis without persistence).
fn start_node(workers: usize) -> NodeProc {
    let workers = workers.to_string();
    NodeProc::spawn_bin(
        latticekv_bin(),
        &["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"],
        &["--workers", &workers, "--disk-nodes", "0"],
    )
}

/// A throw-away `redis-server` without persistence.
struct Redis {
    child: Child,
    addr: SocketAddr,
}

impl Redis {
    fn start() -> Redis {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start redis-server ({e}); install it (apt-get install redis-server)")
            });
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let redis = Redis { child, addr };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(addr).is_err() {
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends one RESP command and returns the raw reply (one read is enough for short ones).
fn resp_call(addr: SocketAddr, args: &[&[u8]]) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut out = Vec::new();
    wire::resp::reply::command(&mut out, args);
    s.write_all(&out).unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0, "connection closed");
        buf.extend_from_slice(&chunk[..n]);
        if let Ok(Some(len)) = wire::resp::skip_reply(&buf, &Default::default()) {
            buf.truncate(len);
            return buf;
        }
    }
}

fn args(protocol: Protocol, addr: SocketAddr) -> BenchArgs {
    BenchArgs {
        protocol,
        addr: Some(addr.to_string()),
        keys: 2000,
        connections: 4,
        pipeline: 4,
        duration: 1.0,
        warmup: 0.2,
        load: Some(LoadKeys::All),
        quiet: true,
        ..BenchArgs::default()
    }
}

fn run(args: BenchArgs) -> Report {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let what = format!("{args:?}");
    let report = rt
        .block_on(bench::run(args))
        .unwrap_or_else(|e| panic!("bench failed: {e}\n{what}"));
    assert!(report.ops > 0, "no operations: {report:?}");
    assert_eq!(report.errors, 0, "error replies: {report:?}");
    assert!(report.ops_per_sec > 0.0 && report.duration_secs > 0.0);
    assert!(report.latency_us.p50 > 0.0 && report.latency_us.max >= report.latency_us.p99);
    report
}

#[test]
fn resp_against_latticekv() {
    let node = start_node(1);
    let report = run(args(Protocol::Resp, node.resp));
    let load = report.load.expect("load phase");
    assert_eq!(load.keys, 2000);
    assert!(load.ops_per_sec > 0.0);
    // The load phase really wrote the keys, with 100-byte values.
    let reply = resp_call(node.resp, &[b"GET", b"key:000000001999"]);
    assert!(reply.starts_with(b"$100\r\n"), "{reply:?}");

    // The other types, mixes and the zipf distribution, on fresh key names per type.
    for (t, workload, key_size) in [
        (WriteType::Counter, Workload::Rmw, 12),
        (WriteType::Orset, Workload::B, 13),
    ] {
        let mut a = args(Protocol::Resp, node.resp);
        a.write_type = t;
        a.workload = workload;
        a.key_size = key_size;
        a.duration = 0.5;
        a.distribution = bench::Distribution::Zipf;
        run(a);
    }
    let reply = resp_call(node.resp, &[b"GET", b"key:00000042"]);
    assert!(reply.starts_with(b"$"), "counter key: {reply:?}");
    let reply = resp_call(node.resp, &[b"SCARD", b"key:000000042"]);
    assert!(reply.starts_with(b":"), "set key: {reply:?}");
}

#[test]
fn native_against_latticekv() {
    let node = start_node(1);
    let report = run(args(Protocol::Native, node.native));
    assert!(report.load.is_some());
    let reply = resp_call(node.resp, &[b"GET", b"key:000000000000"]);
    assert!(reply.starts_with(b"$100\r\n"), "{reply:?}");

    // Batched GetMany/PutMany with client-built lattice values, each type, and an --ops run.
    for (t, key_size) in [
        (WriteType::Lww, 16),
        (WriteType::Counter, 13),
        (WriteType::Orset, 14),
    ] {
        let mut a = args(Protocol::Native, node.native);
        a.batch = 8;
        a.write_type = t;
        a.key_size = key_size;
        a.workload = Workload::Rmw;
        a.duration = 0.5;
        run(a);
    }
    let mut a = args(Protocol::Native, node.native);
    a.ops = Some(3000);
    a.load = None;
    a.workload = Workload::C;
    let r = run(a);
    assert!(r.ops >= 3000, "{r:?}");
}

/// An open-loop run (`--rate`) sends what it was asked to: its rounds are due on a fixed
/// schedule and timed by a timerfd (Linux), so a timer that fired early or never would show
/// here as too many or too few operations.
#[test]
fn native_paced_run_keeps_its_rate() {
    let node = start_node(1);
    let mut a = args(Protocol::Native, node.native);
    a.workload = Workload::C;
    a.batch = 8;
    a.connections = 16;
    a.rate = Some(8_000.0);
    a.duration = 1.5;
    a.warmup = 0.2;
    let r = run(a);
    assert_eq!(r.errors, 0, "{r:?}");
    let off = (r.ops_per_sec - 8_000.0).abs() / 8_000.0;
    assert!(off < 0.1, "{} ops/s for 8,000 asked", r.ops_per_sec);
}

#[test]
fn native_routes_to_every_worker() {
    let node = start_node(3);
    let mut a = args(Protocol::Native, node.native);
    a.threads = 2;
    a.workload = Workload::Update;
    a.distribution = bench::Distribution::Zipf;
    a.zipf_theta = 4.0;
    let report = run(a);
    assert_eq!(report.zipf_theta, 4.0);
    // Every key was written through its own worker (no REDIRECT errors) and reads back.
    for key in [
        &b"key:000000000000"[..],
        b"key:000000000777",
        b"key:000000001999",
    ] {
        let reply = resp_call(node.resp, &[b"GET", key]);
        assert!(reply.starts_with(b"$100\r\n"), "{reply:?}");
    }
}

#[test]
fn resp_against_redis() {
    let redis = Redis::start();
    let report = run(args(Protocol::Resp, redis.addr));
    assert!(report.load.is_some());
    let reply = resp_call(redis.addr, &[b"GET", b"key:000000001999"]);
    assert!(reply.starts_with(b"$100\r\n"), "{reply:?}");
    for (t, workload, key_size) in [
        (WriteType::Counter, Workload::Rmw, 12),
        (WriteType::Orset, Workload::A, 13),
        (WriteType::Lww, Workload::Get, 16),
    ] {
        let mut a = args(Protocol::Resp, redis.addr);
        a.write_type = t;
        a.workload = workload;
        a.key_size = key_size;
        a.duration = 0.5;
        a.pipeline = 16;
        run(a);
    }
}
