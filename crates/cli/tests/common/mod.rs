//! Starts the real `latticekv local` binary on free ports and stops it again.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_latticekv")
}

/// A running `latticekv local` process.
pub struct NodeProc {
    pub child: Child,
    pub native: SocketAddr,
    pub resp: SocketAddr,
    pub workers: Vec<SocketAddr>,
    /// The data directory `start` made for the node (its disk tier), removed on drop.
    pub data: Option<tempfile::TempDir>,
}

impl NodeProc {
    /// Starts `latticekv local` (a memory node and, by default, a disk node) with `extra`
    /// flags on ephemeral ports, in a fresh data directory unless `extra` names one, and
    /// waits until it listens.
    pub fn start(extra: &[&str]) -> NodeProc {
        let own_dir = !extra.contains(&"--data-dir");
        let data = own_dir.then(|| tempfile::tempdir().expect("temp dir"));
        let dir = data
            .as_ref()
            .map(|d| d.path().to_str().expect("utf-8 temp path").to_string());
        let mut base = vec!["local", "--listen", "127.0.0.1:0", "--resp", "127.0.0.1:0"];
        if let Some(d) = &dir {
            base.extend(["--data-dir", d.as_str()]);
        }
        let mut node = Self::spawn(&base, extra);
        node.data = data;
        node
    }

    /// Starts `latticekv server` (a cluster node) named `id`, joining through `seed`.
    pub fn server(id: &str, seed: Option<SocketAddr>, extra: &[&str]) -> NodeProc {
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
        Self::spawn(&args, extra)
    }

    /// Starts the binary with `base` and `extra` arguments and waits until it prints its
    /// addresses.
    pub fn spawn(base: &[&str], extra: &[&str]) -> NodeProc {
        let mut child = Command::new(bin())
            .args(base)
            .args(extra)
            .env("LATTICEKV_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn latticekv");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let (mut native, mut resp, mut workers) = (None, None, Vec::new());
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let Some(Ok(line)) = lines.next() else { break };
            let mut parts = line.split_whitespace();
            match parts.next() {
                Some("native") => native = parts.next().map(|a| a.parse().unwrap()),
                Some("resp") => resp = parts.next().map(|a| a.parse().unwrap()),
                Some("workers") => workers = parts.map(|a| a.parse().unwrap()).collect(),
                Some("press") => break,
                _ => {}
            }
        }
        // Keep draining stdout so the node never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        NodeProc {
            child,
            native: native.expect("node printed its native address"),
            resp: resp.expect("node printed its RESP address"),
            workers,
            data: None,
        }
    }

    /// Runs a CLI client command against this node.
    pub fn cli(&self, args: &[&str]) -> Output {
        Command::new(bin())
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

    /// Sends SIGTERM (or `signal`) and waits for exit; returns the exit status code.
    pub fn stop_with(&mut self, signal: i32) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let deadline = Instant::now() + Duration::from_secs(15);
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

#[allow(unused_imports)]
pub use libc::{SIGINT, SIGTERM};

/// A blocking RESP connection speaking raw bytes.
pub struct Resp {
    pub stream: TcpStream,
}

impl Resp {
    pub fn connect(addr: SocketAddr) -> Resp {
        let stream = TcpStream::connect(addr).expect("connect RESP");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Resp { stream }
    }

    /// Sends a command as a multibulk array.
    pub fn send(&mut self, args: &[&[u8]]) {
        let mut out = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            out.extend_from_slice(a);
            out.extend_from_slice(b"\r\n");
        }
        self.stream.write_all(&out).unwrap();
    }

    /// Reads exactly `expected.len()` bytes and compares them.
    pub fn expect(&mut self, expected: &[u8]) {
        let mut got = vec![0u8; expected.len()];
        self.stream
            .read_exact(&mut got)
            .unwrap_or_else(|e| panic!("reading {:?}: {e}", String::from_utf8_lossy(expected)));
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected)
        );
    }

    /// Sends a command and checks the exact reply bytes.
    pub fn roundtrip(&mut self, args: &[&[u8]], expected: &[u8]) {
        self.send(args);
        self.expect(expected);
    }

    /// Reads one line (up to and including \r\n).
    pub fn line(&mut self) -> String {
        let mut out = Vec::new();
        let mut byte = [0u8; 1];
        while !out.ends_with(b"\r\n") {
            self.stream.read_exact(&mut byte).unwrap();
            out.push(byte[0]);
        }
        String::from_utf8_lossy(&out).into_owned()
    }
}

/// True if the peer closed `stream` (read returns 0 or an error other than a timeout).
pub fn closed_by_peer(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// Polls `f` until it returns true or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// A blocking native-protocol connection sending raw protobuf requests.
pub struct Native {
    pub stream: TcpStream,
    pub next_id: u64,
}

impl Native {
    pub fn connect(addr: SocketAddr) -> Native {
        let stream = TcpStream::connect(addr).expect("connect native");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        Native { stream, next_id: 1 }
    }

    /// Sends one request and reads its response.
    pub fn call(&mut self, op: wire::pb::request::Op) -> wire::pb::Response {
        let id = self.next_id;
        self.next_id += 1;
        let mut out = Vec::new();
        wire::frame::encode(
            &wire::pb::Request {
                id,
                op: Some(op),
                ..Default::default()
            },
            &mut out,
        );
        self.stream.write_all(&out).unwrap();
        let resp = self.read();
        assert_eq!(resp.id, id, "response id");
        resp
    }

    /// Sends a request as given (any id, possibly no op) and reads one response.
    pub fn call_raw(&mut self, req: wire::pb::Request) -> wire::pb::Response {
        let mut out = Vec::new();
        wire::frame::encode(&req, &mut out);
        self.stream.write_all(&out).unwrap();
        self.read()
    }

    /// Reads one response frame.
    pub fn read(&mut self) -> wire::pb::Response {
        use prost::Message;
        let mut header = [0u8; 4];
        self.stream
            .read_exact(&mut header)
            .expect("response header");
        let len = u32::from_be_bytes(header) as usize;
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).expect("response body");
        wire::pb::Response::decode(&body[..]).expect("decodable response")
    }
}

/// A tmpfs of `size` mounted on a fresh directory for a full-disk test, unmounted when
/// dropped. Mounting needs root, as on the CI machine: the test fails (it does not skip)
/// without it.
pub struct Tmpfs {
    /// The mount point.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=` takes it: `16m`).
    pub fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().expect("temp dir");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .expect("run mount");
        assert!(
            out.status.success(),
            "cannot mount a tmpfs for the full-disk test (run the tests as root): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Tmpfs {
            path: dir.path().to_path_buf(),
            _dir: dir,
        }
    }

    /// Remounts it with `mode` (`ro`, `rw`).
    pub fn remount(&self, mode: &str) {
        let status = std::process::Command::new("mount")
            .args(["-o", &format!("remount,{mode}")])
            .arg(&self.path)
            .status()
            .expect("run mount");
        assert!(status.success(), "remount {mode}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}
