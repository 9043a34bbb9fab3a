//! [`NodeProc`]: the real `latticekv` binary, started on free ports, stopped again on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Signals for [`NodeProc::stop_with`].
pub use libc::{SIGINT, SIGTERM};

/// How long a starting node may take to print its addresses.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`NodeProc::stop_with`] waits for the process to exit before killing it.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// A running `latticekv` process (`local` or `server`), killed on drop if still running.
///
/// Every starter takes the path of the binary (in the `cli` crate's tests,
/// `env!("CARGO_BIN_EXE_latticekv")`) and waits until the process has printed its
/// addresses: `native ADDR`, `resp ADDR`, `workers ADDR…`, then a line starting with
/// `press`. Its stdout is drained afterwards so it never blocks on a full pipe; its stderr is
/// the test's. `LATTICEKV_LOG` is `warn`.
pub struct NodeProc {
    /// The process.
    pub child: Child,
    /// The native-protocol front address it printed.
    pub native: SocketAddr,
    /// The RESP address it printed.
    pub resp: SocketAddr,
    /// The worker addresses it printed (empty if it printed none).
    pub workers: Vec<SocketAddr>,
    /// The peer-plane address it printed (`None` if it printed none: a routing node).
    pub peer: Option<SocketAddr>,
    /// The HTTP (metrics) address it printed, if it has one.
    pub http: Option<SocketAddr>,
    /// The data directory [`start_bin`](NodeProc::start_bin) made for the node (its disk
    /// tier), removed on drop.
    pub data: Option<tempfile::TempDir>,
    /// The binary, for [`cli`](NodeProc::cli).
    bin: PathBuf,
}

impl NodeProc {
    /// Starts `bin local` (a memory node and, by default, a disk node) with `extra` flags on
    /// ephemeral ports, in a fresh data directory unless `extra` names one, and waits until
    /// it listens.
    pub fn start_bin(bin: impl Into<PathBuf>, extra: &[&str]) -> NodeProc {
        let own_dir = !extra.contains(&"--data-dir");
        let data = own_dir.then(|| tempfile::tempdir().expect("temp dir"));
        let dir = data
            .as_ref()
            .map(|d| d.path().to_str().expect("utf-8 temp path").to_string());
        let mut base = vec!["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"];
        if let Some(d) = &dir {
            base.extend(["--data-dir", d.as_str()]);
        }
        let mut node = Self::spawn_bin(bin, &base, extra);
        node.data = data;
        node
    }

    /// Starts `bin server` (a cluster node) named `id` on ephemeral ports, joining through
    /// `seed`.
    pub fn server_bin(
        bin: impl Into<PathBuf>,
        id: &str,
        seed: Option<SocketAddr>,
        extra: &[&str],
    ) -> NodeProc {
        Self::server_bin_env(bin, id, seed, extra, &[])
    }

    /// As [`server_bin`](NodeProc::server_bin), with extra environment variables for the
    /// process (e.g. `LATTICEKV_FAULT`, which has no flag).
    pub fn server_bin_env(
        bin: impl Into<PathBuf>,
        id: &str,
        seed: Option<SocketAddr>,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> NodeProc {
        let seed = seed.map(|s| s.to_string());
        let mut args = vec![
            "server",
            "--node-id",
            id,
            "--listen",
            "127.0.0.1:0",
            "--resp",
            "127.0.0.1:0",
        ];
        if let Some(s) = &seed {
            args.extend(["--seeds", s.as_str()]);
        }
        Self::spawn_bin_env(bin, &args, extra, env)
    }

    /// Starts `bin` with `base` and `extra` arguments and waits until it prints its
    /// addresses. The arguments should ask for ephemeral ports (`127.0.0.1:0`).
    ///
    /// # Panics
    /// If the binary cannot be started, or it does not print its native and RESP addresses
    /// within 30 s.
    pub fn spawn_bin(bin: impl Into<PathBuf>, base: &[&str], extra: &[&str]) -> NodeProc {
        Self::spawn_bin_env(bin, base, extra, &[])
    }

    /// As [`spawn_bin`](NodeProc::spawn_bin), with extra environment variables for the
    /// process.
    pub fn spawn_bin_env(
        bin: impl Into<PathBuf>,
        base: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> NodeProc {
        let bin = bin.into();
        let mut child = Command::new(&bin)
            .args(base)
            .args(extra)
            .env("LATTICEKV_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()));
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut native, mut resp, mut workers, mut peer) = (None, None, Vec::new(), None);
        let mut http = None;
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("native") => native = parts.next().map(|a| a.parse().unwrap()),
                Some("resp") => resp = parts.next().map(|a| a.parse().unwrap()),
                Some("workers") => workers = parts.map(|a| a.parse().unwrap()).collect(),
                Some("peer") => peer = parts.next().and_then(|a| a.parse().ok()),
                Some("http") => http = parts.next().and_then(|a| a.parse().ok()),
                Some("press") => break,
                _ => {}
            }
        }
        // Keep draining stdout so the node never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        if native.is_none() || resp.is_none() {
            // Do not leave a half-started process behind.
            let _ = child.kill();
            let _ = child.wait();
        }
        NodeProc {
            child,
            native: native.expect("node printed its native address"),
            resp: resp.expect("node printed its RESP address"),
            workers,
            peer,
            http,
            data: None,
            bin,
        }
    }

    /// The binary this node runs.
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// Runs a CLI client command of the same binary against this node (`LATTICEKV_ADDR` is
    /// its native address).
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .env("LATTICEKV_ADDR", self.native.to_string())
            .output()
            .expect("run latticekv client command")
    }

    /// Runs a CLI command and returns its stdout, asserting success.
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        assert!(
            out.status.success(),
            "latticekv {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    /// Sends `signal` ([`SIGTERM`], [`SIGINT`], …) and waits for exit; returns the exit
    /// status code (`None` if it died of a signal, or did not exit within 15 s and was
    /// killed).
    pub fn stop_with(&mut self, signal: i32) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        None
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for the binary: as a node (`local`, `server`) it records its arguments,
    /// prints addresses like latticekv and waits; as a client it prints its address and
    /// arguments.
    const FAKE: &str = r#"#!/bin/sh
case "$1" in
local|server)
    echo "$*" > "$(dirname "$0")/args"
    echo "starting"
    echo "native 127.0.0.1:7001"
    echo "resp 127.0.0.1:7002"
    echo "workers 127.0.0.1:7003 127.0.0.1:7004"
    echo "press Ctrl-C to stop"
    exec sleep 60
    ;;
*)
    echo "$LATTICEKV_ADDR $*"
    ;;
esac
"#;

    fn fake(dir: &Path) -> PathBuf {
        let bin = dir.join("latticekv");
        std::fs::write(&bin, FAKE).unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    fn args(dir: &Path) -> String {
        std::fs::read_to_string(dir.join("args")).unwrap()
    }

    #[test]
    fn starters_pass_ephemeral_ports_and_read_the_printed_addresses() {
        let dir = tempfile::tempdir().unwrap();
        let bin = fake(dir.path());

        let mut node = NodeProc::start_bin(&bin, &["--workers", "2"]);
        assert_eq!(node.native, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(node.resp, "127.0.0.1:7002".parse().unwrap());
        assert_eq!(
            node.workers,
            [
                "127.0.0.1:7003".parse().unwrap(),
                "127.0.0.1:7004".parse().unwrap()
            ]
        );
        let data = node.data.as_ref().expect("own data dir").path().to_owned();
        assert_eq!(
            args(dir.path()).trim(),
            format!(
                "local --listen 127.0.0.1:0 --resp 127.0.0.1:0 --data-dir {} --workers 2",
                data.display()
            )
        );
        assert_eq!(node.bin(), bin);
        assert_eq!(node.cli_ok(&["get", "k"]), "127.0.0.1:7001 get k\n");
        // `sleep` dies of the signal: no exit code.
        assert_eq!(node.stop_with(SIGTERM), None);
        drop(node);
        assert!(!data.exists(), "data dir removed on drop");

        let node = NodeProc::start_bin(&bin, &["--data-dir", "/somewhere"]);
        assert!(node.data.is_none());
        drop(node);

        let seed = "127.0.0.1:7001".parse().unwrap();
        let node = NodeProc::server_bin(&bin, "n2", Some(seed), &["--workers", "1"]);
        assert_eq!(
            args(dir.path()).trim(),
            "server --node-id n2 --listen 127.0.0.1:0 --resp 127.0.0.1:0 \
             --seeds 127.0.0.1:7001 --workers 1"
        );
        drop(node);
    }

    #[test]
    #[should_panic(expected = "node printed its native address")]
    fn a_binary_that_prints_no_addresses_fails_the_test() {
        NodeProc::spawn_bin("true", &[], &[]);
    }
}
