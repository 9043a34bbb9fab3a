//! What an operator sees from the real binary: errors that state their cause once and say
//! what to do, refusals of settings that cannot work, sizes for people in `status`, and
//! JSON log lines.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::NodeProc;

/// Waits at most `within` for `child` to exit; kills it if it does not. Its output, and
/// whether it exited by itself.
fn finish(mut child: Child, within: Duration) -> (Output, bool) {
    let deadline = Instant::now() + within;
    let mut exited = false;
    while Instant::now() < deadline {
        if child.try_wait().unwrap().is_some() {
            exited = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !exited {
        let _ = child.kill();
    }
    (child.wait_with_output().unwrap(), exited)
}

#[test]
fn a_refused_connection_is_reported_once_with_a_hint() {
    let out = Command::new(common::bin())
        .args(["get", "k", "--addr", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].starts_with("error: connecting to 127.0.0.1:1"),
        "{err}"
    );
    // "Connection refused (os error 111)", as the OS says it.
    let refused = std::io::Error::from_raw_os_error(libc::ECONNREFUSED).to_string();
    assert_eq!(
        lines[0].matches(&refused).count(),
        1,
        "cause repeated: {err}"
    );
    assert!(
        lines[1].starts_with("hint: is a node running at 127.0.0.1:1?")
            && lines[1].contains("latticekv local"),
        "{err}"
    );
}

#[test]
fn ack_durable_without_a_data_directory_refuses_to_start() {
    let child = Command::new(common::bin())
        .args([
            "server",
            "--node-id",
            "d1",
            "--listen",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
            "--ack",
            "durable",
        ])
        .env_remove("LATTICEKV_DATA_DIR")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (out, exited) = finish(child, Duration::from_secs(30));
    assert!(exited, "the node started: {out:?}");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("durable") && err.contains("--data-dir"),
        "{err}"
    );
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("running"),
        "it must refuse before serving"
    );
}

/// `n UNIT` with a binary unit, as `status` prints sizes.
fn is_size(number: &str, unit: &str) -> bool {
    number.parse::<f64>().is_ok() && ["B", "KiB", "MiB", "GiB", "TiB"].contains(&unit)
}

#[test]
fn status_prints_sizes_for_people() {
    let node = NodeProc::start(&["--workers", "1", "--disk-nodes", "0"]);
    node.cli_ok(&["put", "k", &"v".repeat(4096)]);
    let status = node.cli_ok(&["status"]);
    let memory = status
        .lines()
        .find_map(|l| l.strip_prefix("memory    "))
        .unwrap_or_else(|| panic!("no memory line: {status}"));
    // "<used> of <budget> budget", e.g. "4.6 KiB of 7.8 GiB budget".
    let words: Vec<&str> = memory.split_whitespace().collect();
    assert_eq!(words.len(), 6, "{memory}");
    assert!(is_size(words[0], words[1]), "{memory}");
    assert_eq!(words[2], "of", "{memory}");
    assert!(is_size(words[3], words[4]), "{memory}");
    assert_eq!(words[5], "budget", "{memory}");
    assert!(
        words[1] != "B",
        "4 KiB stored is not shown in bytes: {memory}"
    );
    let worker = status
        .lines()
        .skip_while(|l| !l.starts_with("worker  address"))
        .nth(1)
        .unwrap_or_else(|| panic!("no workers table: {status}"));
    // worker, address, keys, then the memory column as number and unit.
    let cols: Vec<&str> = worker.split_whitespace().collect();
    assert_eq!(cols[2], "1", "{worker}");
    assert!(is_size(cols[3], cols[4]), "{worker}");
}

/// Runs `latticekv server` with `args` and `env` until it prints its RESP address, stops
/// it with SIGTERM, and returns its stderr.
fn server_stderr(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(common::bin())
        .args([
            "server",
            "--node-id",
            "j1",
            "--no-leave",
            "--listen",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
            "--workers",
            "1",
        ])
        .args(args)
        .env("LATTICEKV_LOG", "info")
        .env_remove("LATTICEKV_LOG_FORMAT")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        stderr.read_to_string(&mut s).unwrap();
        s
    });
    let mut stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut native = None;
    for line in stdout.by_ref() {
        let line = line.unwrap();
        if let Some(a) = line.strip_prefix("native  ") {
            native = Some(a.trim().to_string());
        }
        if line.starts_with("resp ") {
            break;
        }
    }
    let native = native.expect("the node printed its native address");
    // Keep reading stdout so the node never writes into a closed pipe.
    std::thread::spawn(move || stdout.for_each(drop));
    // The node prints its addresses just before it installs its signal handlers: one
    // request answered means it is in its foreground wait, where SIGTERM stops it cleanly.
    let status = Command::new(common::bin())
        .args(["status", "--addr", &native])
        .output()
        .unwrap();
    assert!(status.status.success(), "{status:?}");
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let (out, exited) = finish(child, Duration::from_secs(30));
    assert!(exited, "the node did not stop on SIGTERM");
    assert_eq!(out.status.code(), Some(0), "a clean stop");
    reader.join().unwrap()
}

#[test]
fn log_format_json_writes_one_object_per_line() {
    for (args, env) in [
        (&["--log-format", "json"][..], &[][..]),
        (&[][..], &[("LATTICEKV_LOG_FORMAT", "json")][..]),
    ] {
        let stderr = server_stderr(args, env);
        let lines: Vec<&str> = stderr.lines().filter(|l| !l.trim().is_empty()).collect();
        for event in ["node started", "stopping…", "stopped"] {
            assert!(
                lines.iter().any(|l| l.contains(&format!("\"{event}\""))),
                "no {event:?} event: {stderr}"
            );
        }
        for line in &lines {
            let v: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {line}\n{stderr}"));
            assert!(v["level"].is_string(), "{line}");
            assert!(v["fields"].is_object(), "{line}");
            assert!(v["timestamp"].is_string(), "{line}");
        }
    }
    // The default stays text.
    let text = server_stderr(&[], &[]);
    let first = text.lines().find(|l| !l.trim().is_empty()).expect("a line");
    assert!(
        serde_json::from_str::<serde_json::Value>(first).is_err(),
        "{first}"
    );
    assert!(first.contains("INFO"), "{first}");
    assert!(text.lines().any(|l| l == "stopped"), "{text}");
}

/// `bench` draws a progress bar only on a terminal: with its output captured (a script, a
/// CI log) it prints the report and nothing else — no carriage returns, no escape codes.
#[test]
fn bench_draws_no_progress_bar_when_not_on_a_terminal() {
    let node = NodeProc::start(&["--workers", "1", "--disk-nodes", "0"]);
    let resp = node.resp.to_string();
    let out = node.cli(&[
        "bench",
        "--addr",
        &resp,
        "--keys",
        "2000",
        "--load",
        "--duration",
        "1",
        "--warmup",
        "0",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("throughput"), "{report}");
    for text in [&*report, &*err] {
        assert!(
            !text.contains('\r') && !text.contains('\u{1b}'),
            "progress output in a captured run: {text:?}"
        );
    }
}
