//! SIGTERM and SIGINT are handled from the process's first moments (`crates/cli/src/
//! signals.rs`): one that comes while `latticekv local` is still starting — before it prints
//! "press Ctrl-C to stop", even before its handlers are installed when the supervisor blocked
//! the signal across exec — stops it cleanly (exit 0, nothing on stderr but its own notes),
//! and a node started again on the same data directory serves what the first run stored.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{bin, NodeProc, Resp, SIGINT, SIGTERM};

/// Starts `latticekv local` on `data` (ephemeral ports, its disk node included), with
/// `blocked` signals blocked across exec as a supervisor may do.
fn spawn(data: &str, blocked: &[i32]) -> Child {
    let mut cmd = Command::new(bin());
    cmd.args(["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .args(["--workers", "1", "--data-dir", data])
        .env("LATTICEKV_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let blocked = blocked.to_vec();
    // SAFETY: only async-signal-safe calls (sigemptyset, sigaddset, sigprocmask) between fork
    // and exec, on a set local to the closure.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &s in &blocked {
                libc::sigaddset(&mut set, s);
            }
            if libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn().expect("spawn latticekv local")
}

/// Waits until `child` catches SIGTERM (its `SigCgt` mask in /proc), 10 s at most.
fn wait_handled(child: &Child) {
    let status = format!("/proc/{}/status", child.id());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = std::fs::read_to_string(&status).unwrap_or_default();
        let caught = text
            .lines()
            .find_map(|l| l.strip_prefix("SigCgt:"))
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .unwrap_or(0);
        if caught & (1 << (SIGTERM - 1)) != 0 {
            return;
        }
        assert!(Instant::now() < deadline, "SIGTERM never caught: {text}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn signal(child: &Child, signal: i32) {
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
}

/// Waits for `child` to exit (30 s at most, else kills it and fails); returns its status,
/// stdout and stderr.
fn finish(mut child: Child) -> (ExitStatus, String, String) {
    let mut out = child.stdout.take().expect("stdout");
    let mut err = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let mut stderr = String::new();
    let _ = err.read_to_string(&mut stderr);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the node did not stop within 30 s of the signal; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    (status, reader.join().unwrap_or_default(), stderr)
}

/// The node stopped by itself, with exit code 0, and said nothing alarming.
fn assert_clean(what: &str, (status, stdout, stderr): &(ExitStatus, String, String)) {
    assert_eq!(
        status.code(),
        Some(0),
        "{what}: {status:?} (signal {:?})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        status.signal()
    );
    for bad in ["panicked", "error", "ERROR", "WARN"] {
        assert!(
            !stderr.contains(bad),
            "{what}: stderr has {bad:?}:\n{stderr}"
        );
    }
}

/// Writes `k`=`v` through a node on `data`, then stops it.
fn store(data: &str, k: &str, v: &str) {
    let mut node = NodeProc::start(&["--workers", "1", "--data-dir", data]);
    let mut r = Resp::connect(node.resp);
    r.roundtrip(&[b"SET", k.as_bytes(), v.as_bytes()], b"+OK\r\n");
    drop(r);
    assert_eq!(node.stop_with(SIGTERM), Some(0));
}

/// A node on `data` starts and reads `k` as `v`.
fn assert_serves(data: &str, k: &str, v: &str) {
    let mut node = NodeProc::start(&["--workers", "1", "--data-dir", data]);
    let mut r = Resp::connect(node.resp);
    r.send(&[b"GET", k.as_bytes()]);
    r.expect(format!("${}\r\n{v}\r\n", v.len()).as_bytes());
    drop(r);
    assert_eq!(node.stop_with(SIGTERM), Some(0));
}

#[test]
fn a_signal_during_start_up_stops_the_node_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    store(data, "kept", "across-every-stop");

    // Before the handlers exist: SIGTERM blocked across exec stays pending until the process
    // has installed them and unblocks it; so it is handled, never the default action.
    let child = spawn(data, &[SIGTERM]);
    signal(&child, SIGTERM);
    assert_clean("SIGTERM pending from exec", &finish(child));

    // Right after spawn, unblocked: the signal may come before `main` has run at all (the
    // dynamic loader's few milliseconds), and then the default action ends a process that
    // has touched nothing: it printed nothing. Otherwise it must stop cleanly.
    let child = spawn(data, &[]);
    signal(&child, SIGTERM);
    let end = finish(child);
    if !(end.0.signal() == Some(SIGTERM) && end.1.is_empty() && end.2.is_empty()) {
        assert_clean("SIGTERM right after spawn", &end);
    }

    // At points through start-up (a debug build takes a few hundred ms to be ready), from
    // the moment the process catches SIGTERM (before it, the loader's window above).
    for (i, delay_ms) in [0u64, 1, 5, 20, 50, 100, 200].into_iter().enumerate() {
        let child = spawn(data, &[]);
        wait_handled(&child);
        std::thread::sleep(Duration::from_millis(delay_ms));
        let sig = if i % 2 == 0 { SIGTERM } else { SIGINT };
        signal(&child, sig);
        assert_clean(&format!("signal {sig} after {delay_ms} ms"), &finish(child));
    }

    // After each line the node prints before it is ready: it has started (some of) its
    // ports and nodes when the signal comes.
    for lines in 1..=4 {
        let mut child = spawn(data, &[]);
        let mut out = BufReader::new(child.stdout.take().expect("stdout"));
        let mut seen = Vec::new();
        while seen.len() < lines {
            let mut line = String::new();
            if out.read_line(&mut line).expect("read stdout") == 0 {
                break;
            }
            seen.push(line);
        }
        assert!(
            !seen.iter().any(|l| l.starts_with("press")),
            "ready before line {lines}: {seen:?}"
        );
        signal(&child, SIGTERM);
        child.stdout = Some(out.into_inner());
        assert_clean(&format!("SIGTERM after {seen:?}"), &finish(child));
    }

    // Nothing was lost or left half-done: the node starts on the directory and serves.
    assert_serves(data, "kept", "across-every-stop");
}
