//! The CLI against a real `latticekv local`: put/get of every CLI-writable type, delete,
//! wrong types, status, and clean shutdown on SIGINT/SIGTERM.

mod common;

use common::{NodeProc, SIGINT, SIGTERM};

#[test]
fn put_get_del_with_the_cli() {
    let node = NodeProc::start(&["--workers", "2"]);

    node.cli_ok(&["put", "greeting", "hello"]);
    assert_eq!(node.cli_ok(&["get", "greeting"]), "hello\n");

    assert_eq!(
        node.cli_ok(&["put", "visits", "5", "--type", "counter"]),
        "5\n"
    );
    assert_eq!(
        node.cli_ok(&["put", "visits", "-2", "-t", "counter"]),
        "3\n"
    );
    assert_eq!(node.cli_ok(&["get", "visits"]), "3\n");

    assert_eq!(
        node.cli_ok(&["put", "tags", "b", "a", "b", "--type", "orset"]),
        "2\n"
    );
    assert_eq!(node.cli_ok(&["get", "tags"]), "a\nb\n");

    node.cli_ok(&["put", "high", "7", "-t", "max"]);
    node.cli_ok(&["put", "high", "3", "-t", "max"]);
    assert_eq!(node.cli_ok(&["get", "high"]), "7\n");

    node.cli_ok(&["put", "low", "7", "-t", "min"]);
    node.cli_ok(&["put", "low", "3", "-t", "min"]);
    assert_eq!(node.cli_ok(&["get", "low"]), "3\n");

    node.cli_ok(&["put", "flag", "false", "-t", "bool"]);
    node.cli_ok(&["put", "flag", "true", "-t", "bool"]);
    node.cli_ok(&["put", "flag", "false", "-t", "bool"]);
    assert_eq!(node.cli_ok(&["get", "flag"]), "true\n");

    node.cli_ok(&["put", "grow", "x", "y", "-t", "set"]);
    node.cli_ok(&["put", "grow", "z", "-t", "set"]);
    assert_eq!(node.cli_ok(&["get", "grow"]), "x\ny\nz\n");

    node.cli_ok(&["put", "job", "later", "-t", "priority", "--priority", "5"]);
    node.cli_ok(&["put", "job", "first", "-t", "priority", "--priority", "1"]);
    assert_eq!(node.cli_ok(&["get", "job"]), "first\t(priority 1)\n");

    node.cli_ok(&["put", "doc", "v1", "-t", "causal"]);
    node.cli_ok(&["put", "doc", "v2", "-t", "causal"]);
    assert_eq!(
        node.cli_ok(&["get", "doc"]),
        "v2\n",
        "a read-modify-write overwrites"
    );

    // NX only writes absent keys.
    let out = node.cli(&["put", "greeting", "again", "--nx"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(node.cli_ok(&["get", "greeting"]), "hello\n");

    // A write of another type is a clear error, and the value is untouched.
    let out = node.cli(&["put", "greeting", "1", "--type", "counter"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("WrongType") && err.contains("lww"), "{err}");
    assert_eq!(node.cli_ok(&["get", "greeting"]), "hello\n");

    assert_eq!(node.cli_ok(&["del", "greeting", "nothing-here"]), "1\n");
    let out = node.cli(&["get", "greeting"]);
    assert_eq!(out.status.code(), Some(1), "a missing key exits with 1");

    let status = node.cli_ok(&["status"]);
    assert!(status.contains("node      local"), "{status}");
    // The workers table: one line per worker after its header, up to the blank line.
    let workers = status
        .lines()
        .skip_while(|l| !l.starts_with("worker  address"))
        .skip(1)
        .take_while(|l| !l.is_empty())
        .count();
    assert_eq!(workers, 2, "{status}");
}

#[test]
fn unknown_type_and_bad_numbers_are_clear_errors() {
    let node = NodeProc::start(&["--workers", "1"]);
    let out = node.cli(&["put", "k", "v", "--type", "nonsense"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown type"));
    let out = node.cli(&["put", "k", "12x", "--type", "counter"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a 64-bit integer"));
}

#[test]
fn client_commands_report_an_unreachable_node() {
    let out = std::process::Command::new(common::bin())
        .args(["get", "k", "--addr", "127.0.0.1:1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting to 127.0.0.1:1"));
}

#[test]
fn sigterm_and_sigint_stop_the_node_cleanly() {
    for signal in [SIGTERM, SIGINT] {
        let mut node = NodeProc::start(&["--workers", "2"]);
        node.cli_ok(&["put", "k", "v"]);
        // An idle client connection must not keep the node from stopping.
        let _idle = std::net::TcpStream::connect(node.resp).unwrap();
        assert_eq!(
            node.stop_with(signal),
            Some(0),
            "exit code after signal {signal}"
        );
    }
}

#[test]
fn config_file_environment_and_flags_layer() {
    let dir = std::env::temp_dir().join(format!("lkv-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("node.toml");
    std::fs::write(
        &file,
        "node_id = \"from-file\"\nworkers = 3\ngossip_period_ms = 20\n[limits]\nmax_key_size = 8\n",
    )
    .unwrap();
    // The file sets 3 workers; the flag overrides it with 2. The file's key limit applies.
    let node = NodeProc::start(&["--config", file.to_str().unwrap(), "--workers", "2"]);
    assert_eq!(node.workers.len(), 2);
    let status = node.cli_ok(&["status"]);
    assert!(status.contains("node      from-file"), "{status}");
    let out = node.cli(&["put", "a-long-key", "v"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("exceeds the 8-byte limit"));
    drop(node);

    // An unknown key in the file is an error, not silently ignored.
    std::fs::write(&file, "wrokers = 2\n").unwrap();
    let out = std::process::Command::new(common::bin())
        .args(["local", "--config", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `wrokers`"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_data_dir_serves_one_node_at_a_time() {
    let dir = std::env::temp_dir().join(format!("lkv-data-{}", std::process::id()));
    let node = NodeProc::start(&["--data-dir", dir.to_str().unwrap()]);
    let out = std::process::Command::new(common::bin())
        .args(["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
        .args(["--data-dir", dir.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another latticekv process"));
    drop(node);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_port_in_use_is_reported() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(common::bin())
        .args(["local", "--listen", &addr, "--resp", "127.0.0.1:0"])
        .args(["--disk-nodes", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
}

/// `watch` prints the current value, then each new version, and stops after `--count`.
#[test]
fn watch_prints_the_value_then_new_versions() {
    use std::io::{BufRead, BufReader};
    let node = NodeProc::start(&["--workers", "2"]);
    node.cli_ok(&["put", "watched", "v1"]);
    let mut child = std::process::Command::new(common::bin())
        .args([
            "watch",
            "watched",
            "never-written",
            "--period-ms",
            "20",
            "--count",
            "3",
        ])
        .env("LATTICEKV_ADDR", node.native.to_string())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // If a push never comes, end the watcher so the reads below fail instead of hanging.
    let pid = child.id() as i32;
    std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_secs(20));
        // SAFETY: kill(2) on a child of this test (a no-op error if it already exited).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut first: Vec<String> = (0..2).map(|_| lines.next().unwrap().unwrap()).collect();
    first.sort();
    assert_eq!(first, ["never-written = (absent)", "watched = v1"]);
    node.cli_ok(&["put", "watched", "v2"]);
    assert_eq!(lines.next().unwrap().unwrap(), "watched = v2");
    assert!(child.wait().unwrap().success());
}

/// `latticekv leave` on a node with no other member of its tier is refused with the reason
/// (a graceful leave could never finish: nobody can take its keys), and the node keeps
/// serving; `--force` stops it.
#[test]
fn leave_is_refused_when_no_other_node_can_take_the_keys() {
    let mut node = NodeProc::start(&["--workers", "1", "--disk-nodes", "0"]);
    node.cli_ok(&["put", "kept", "yes"]);
    let addr = node.native.to_string();
    let out = node.cli(&["leave", "--addr", &addr]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "leave of a lone node succeeded");
    assert!(
        stderr.contains("only memory node") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(node.cli_ok(&["get", "kept"]), "yes\n");
    let out = node.cli(&["leave", "--force", "--addr", &addr]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        common::eventually(std::time::Duration::from_secs(15), || matches!(
            node.child.try_wait(),
            Ok(Some(_))
        )),
        "the node did not stop after a forced leave"
    );
}

#[test]
fn contradictory_local_flags_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    for (flags, says) in [
        (
            &["--http", "127.0.0.1:0", "--no-http"][..],
            "--http 127.0.0.1:0 and --no-http contradict each other",
        ),
        (
            &["--nodes", "2", "--http", "127.0.0.1:0"][..],
            "--http 127.0.0.1:0 with --nodes 2: the local cluster opens no HTTP port",
        ),
        (
            &["--monitor", "false", "--monitor-config", "policy.toml"][..],
            "--monitor-config policy.toml with --monitor false",
        ),
        (
            &["--nodes", "0"][..],
            "--nodes 0: a local cluster has at least one node",
        ),
    ] {
        let mut child = std::process::Command::new(common::bin())
            .args(["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"])
            .args(["--data-dir", data])
            .args(flags)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // A refusal is immediate; a node that started instead is stopped, and fails below.
        if !common::eventually(std::time::Duration::from_secs(10), || {
            matches!(child.try_wait(), Ok(Some(_)))
        }) {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?}: {stderr}");
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{flags:?} started something");
    }
    // Nothing was created in the data directory.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
