//! The HTTP port of `latticekv local` (on by default): `/metrics` in the Prometheus text
//! format moves under load — counters grow, the latency histogram fills — and `/health`
//! answers; anything else is refused without harming the node.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{NodeProc, Resp};

/// One HTTP/1.1 request; the status code and the body.
fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, body.to_string())
}

/// The sum of every sample of metric `name` (all label sets).
fn total(body: &str, name: &str) -> f64 {
    body.lines()
        .filter(|l| {
            l.starts_with(name) && l[name.len()..].starts_with('{')
                || l.starts_with(&format!("{name} "))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn metrics_move_under_load_and_health_answers() {
    let node = NodeProc::start(&["--workers", "2"]);
    let addr = node.http.expect("local prints its HTTP address");
    assert!(addr.ip().is_loopback(), "{addr}");

    let (status, body) = http(addr, "GET", "/health");
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let (status, before) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200);
    assert!(before.contains("# TYPE latticekv_request_duration_seconds histogram"));
    let ops_before = total(&before, "latticekv_operations_total");
    let count_before = total(&before, "latticekv_request_duration_seconds_count");

    let mut r = Resp::connect(node.resp);
    for i in 0..500 {
        let key = format!("k{i}");
        r.roundtrip(&[b"SET", key.as_bytes(), b"v"], b"+OK\r\n");
    }
    let (_, after) = http(addr, "GET", "/metrics");
    let ops = total(&after, "latticekv_operations_total") - ops_before;
    assert!(ops >= 500.0, "operations_total grew by {ops}");
    let count = total(&after, "latticekv_request_duration_seconds_count") - count_before;
    assert!(
        count >= 500.0,
        "the histogram counted {count} more requests"
    );
    let inf = after
        .lines()
        .find(|l| l.starts_with("latticekv_request_duration_seconds_bucket") && l.contains("+Inf"))
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .unwrap();
    let finite: Vec<f64> = after
        .lines()
        .filter(|l| {
            l.starts_with("latticekv_request_duration_seconds_bucket") && !l.contains("+Inf")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect();
    assert!(finite.windows(2).all(|w| w[0] <= w[1]), "{finite:?}");
    assert!(
        finite.last().copied().unwrap_or(0.0) > 0.0,
        "no request in any bucket"
    );
    assert!(inf >= *finite.last().unwrap());
    assert!(total(&after, "latticekv_keys") >= 500.0);
    assert_eq!(
        total(&after, "latticekv_cluster_members"),
        2.0,
        "memory + disk node"
    );

    // Refused, and the node keeps serving.
    assert_eq!(http(addr, "GET", "/nope").0, 404);
    assert_eq!(http(addr, "POST", "/metrics").0, 405);
    let mut junk = TcpStream::connect(addr).unwrap();
    junk.write_all(b"\x00\x01garbage\r\n\r\n").unwrap();
    let mut sink = Vec::new();
    let _ = junk.read_to_end(&mut sink);
    assert_eq!(http(addr, "GET", "/health").0, 200);
    r.roundtrip(&[b"GET", b"k1"], b"$1\r\nv\r\n");
}
