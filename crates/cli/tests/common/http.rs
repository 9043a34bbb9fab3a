//! Scraping a node's HTTP port in tests: one request at a time, and sums of metric samples.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One HTTP/1.1 request; the status code and the body.
pub fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
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

/// The body of `GET /metrics` (which must answer 200).
pub fn scrape(addr: SocketAddr) -> String {
    let (status, body) = http(addr, "GET", "/metrics");
    assert_eq!(status, 200, "{body}");
    body
}

/// The sum of every sample of metric `name` whose labels contain every one of `labels`
/// (`key="value"` strings; none: all label sets).
pub fn total_where(body: &str, name: &str, labels: &[&str]) -> f64 {
    body.lines()
        .filter(|l| {
            l.starts_with(name) && l[name.len()..].starts_with('{')
                || l.starts_with(&format!("{name} "))
        })
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// The sum of every sample of metric `name` (all label sets).
pub fn total(body: &str, name: &str) -> f64 {
    total_where(body, name, &[])
}
