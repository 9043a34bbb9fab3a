//! The write-ahead log's replay progress bar (`crates/cli/src/replay_bar.rs`) stays out of
//! output that is not a terminal: a node restarted on a log of more than the bar's 8 MiB
//! threshold, with stderr piped, prints no bar, and serves what it replayed.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use common::{bin, NodeProc, Resp};

#[test]
fn a_replay_with_stderr_piped_draws_no_bar() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let base = ["--disk-nodes", "0", "--workers", "1", "--data-dir", data];
    let mut node = NodeProc::start(&base);
    let mut r = Resp::connect(node.resp);
    let value = vec![b'v'; 16 << 10];
    for i in 0..640 {
        let key = format!("k{i}");
        r.roundtrip(&[b"SET", key.as_bytes(), &value], b"+OK\r\n");
    }
    drop(r);
    assert_eq!(node.stop_with(common::SIGTERM), Some(0));
    // Above the bar's threshold: the restart would draw it on a terminal.
    let logged: u64 = std::fs::read_dir(dir.path().join("wal").join("worker-0"))
        .unwrap()
        .filter_map(|e| e.ok()?.metadata().ok())
        .map(|m| m.len())
        .sum();
    assert!(logged > 8 << 20, "{logged} bytes of log");

    let mut child = Command::new(bin())
        .args(["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .args(base)
        .env("LATTICEKV_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut resp = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        let mut parts = line.split_whitespace();
        match parts.next() {
            Some("resp") => resp = parts.next().map(|a| a.parse().unwrap()),
            Some("press") => break,
            _ => {}
        }
    }
    let mut r = Resp::connect(resp.expect("the restarted node printed its RESP address"));
    r.send(&[b"STRLEN", b"k639"]);
    r.expect(format!(":{}\r\n", 16 << 10).as_bytes());
    stop(&mut child);
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("replaying"), "{stderr}");
}

/// Stops `child` (SIGTERM) and waits for it.
fn stop(child: &mut std::process::Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
}
