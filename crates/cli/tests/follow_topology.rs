//! The load generator following a cluster that changes under it (`latticekv bench
//! --follow-topology`), as `bench/elasticity --case slo` runs it while the monitor adds and
//! removes nodes: a node leaving (the path the monitor's manager takes, `Admin.leave`) or
//! joining costs the client no errors and keeps the asked rate.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use common::cluster::{alive_members, flags};
use common::{eventually, serial, Native, NodeProc};
use testkit::rt;
use wire::pb::{self, request::Op, response::Result as R};

/// Operations per second asked for, keys, and seconds of the measured run.
const RATE: f64 = 2_000.0;
const KEYS: u64 = 4_000;
const SECS: f64 = 6.0;

/// Requests `node`'s workers have served so far.
fn requests(node: SocketAddr) -> u64 {
    match Native::connect(node)
        .call(Op::Status(pb::GetStatus {}))
        .result
    {
        Some(R::Status(s)) => s.workers.iter().map(|w| w.requests).sum(),
        other => panic!("status of {node}: {other:?}"),
    }
}

fn bench_args(seed: SocketAddr) -> bench::BenchArgs {
    bench::BenchArgs {
        protocol: bench::Protocol::Native,
        addr: Some(seed.to_string()),
        keys: KEYS,
        workload: bench::Workload::Get,
        connections: 8,
        batch: 8,
        rate: Some(RATE),
        follow_topology: true,
        duration: SECS,
        warmup: 0.0,
        timeline: Some(0.5),
        quiet: true,
        ..bench::BenchArgs::default()
    }
}

/// Writes every key of the run through `seed` (the load phase of a bench run).
fn preload(seed: SocketAddr) {
    let args = bench::BenchArgs {
        workload: bench::Workload::Set,
        load: Some(bench::LoadKeys::All),
        ops: Some(1),
        rate: None,
        timeline: None,
        ..bench_args(seed)
    };
    rt().block_on(bench::run(args)).expect("preload");
}

/// Runs the paced load against `seed` in a thread; `during` runs once the load reached
/// `target` (a node whose served requests must grow first), then the report is returned.
fn under_load(seed: SocketAddr, target: SocketAddr, during: impl FnOnce()) -> bench::Report {
    let before = requests(target);
    let load = std::thread::spawn(move || rt().block_on(bench::run(bench_args(seed))));
    assert!(
        eventually(Duration::from_secs(20), || requests(target) > before + 200),
        "the load does not reach {target}"
    );
    during();
    load.join().unwrap().expect("bench run")
}

/// What a run that followed the change looks like: no error, and the load going on at
/// the asked rate after it. (How long the change itself holds requests up is the nodes'
/// doing and, in a debug build on a busy machine, up to a second or two: not asserted.)
fn assert_followed(r: &bench::Report, what: &str) {
    let points = &r.timeline.as_ref().expect("timeline").points;
    // The intervals of the run's last two seconds (the last one may be a sliver: skipped).
    let mut begin = 0.0;
    let mut last = Vec::new();
    for p in points {
        if p.end_secs - begin > 0.25 && p.end_secs > SECS - 2.0 {
            last.push(p.ops_per_sec);
        }
        begin = p.end_secs;
    }
    eprintln!(
        "{what}: {:.0} ops/s of {RATE}, {} errors, mean {:.0} µs, max {:.0} µs; ops/s over \
         the last two seconds: {last:?}",
        r.ops_per_sec, r.errors, r.latency_us.mean, r.latency_us.max
    );
    assert_eq!(r.errors, 0, "{what}: errors");
    assert!(
        r.ops_per_sec > 0.75 * RATE,
        "{what}: {:.0} ops/s of {RATE} asked",
        r.ops_per_sec
    );
    assert!(
        !last.is_empty() && last.iter().all(|&x| x > 0.5 * RATE),
        "{what}: the load did not go on at its rate after the change: {last:?}"
    );
}

/// One of two nodes leaves while the load runs (as the monitor removes a node): the leaving
/// node's keys come back to the seed, requests it redirects or that lose their connection
/// are sent again, and the rate holds.
#[test]
fn a_node_leaving_under_a_paced_load_costs_no_errors_and_keeps_the_rate() {
    let _serial = serial();
    let f = flags("1", "3000");
    let seed = NodeProc::server("n1", None, &f);
    let mut leaving = NodeProc::server("n2", Some(seed.native), &f);
    assert!(eventually(Duration::from_secs(20), || alive_members(&seed)
        == 2
        && alive_members(&leaving) == 2));
    preload(seed.native);
    let target = leaving.native;
    let r = under_load(seed.native, target, || {
        let out = leaving.cli(&["leave", "--addr", &target.to_string()]);
        assert!(
            out.status.success(),
            "leave: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        common::cluster::wait_exit(&mut leaving, Duration::from_secs(20));
    });
    assert_followed(&r, "leave");
}

/// A node joins while the load runs (as the monitor adds one): the seed redirects the keys
/// the newcomer took, they are sent there, and the rate holds.
#[test]
fn a_node_joining_under_a_paced_load_costs_no_errors_and_keeps_the_rate() {
    let _serial = serial();
    let f = flags("1", "3000");
    let seed = NodeProc::server("n1", None, &f);
    preload(seed.native);
    let mut joined = None;
    let r = under_load(seed.native, seed.native, || {
        let n2 = NodeProc::server("n2", Some(seed.native), &f);
        assert!(eventually(Duration::from_secs(20), || alive_members(&n2) == 2));
        joined = Some(n2);
    });
    assert_followed(&r, "join");
    let n2 = joined.expect("joined");
    assert!(
        requests(n2.native) > 0,
        "the load never reached the new node"
    );
}
