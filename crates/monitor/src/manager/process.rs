//! One `latticekv server` child process: started, its printed addresses read, then owned by
//! a task that drains its stdout and reports its exit on a watch channel.

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::sync::{mpsc, watch};

/// Longest line read from a child's stdout; longer ones end the start-up (not latticekv).
const MAX_LINE: usize = 64 * 1024;
/// Lines a child may print before `press…`.
const MAX_START_LINES: usize = 64;

/// What a started node printed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Printed {
    /// Its native front address.
    pub native: String,
    /// Its RESP address.
    pub resp: String,
    /// Its peer-plane address.
    pub peer: String,
}

/// How to start a child.
pub(crate) struct Spawn<'a> {
    pub binary: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    pub start_timeout: Duration,
}

/// A running child: its exit is reported on `exited`; dropping the handle (or
/// [`Proc::kill`]) kills it.
#[derive(Debug)]
pub(crate) struct Proc {
    pid: u32,
    exited: watch::Receiver<Option<ExitStatus>>,
    kill: mpsc::Sender<()>,
}

impl Proc {
    /// Starts the child and waits until it has printed its addresses (`press…`), at most
    /// `start_timeout`.
    pub(crate) async fn start(spawn: Spawn<'_>) -> Result<(Proc, Printed), String> {
        let mut command = Command::new(spawn.binary);
        command
            .args(spawn.args)
            .envs(spawn.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        // A monitor killed outright (SIGKILL runs no destructor) must not leave its nodes
        // running unmanaged: the kernel sends them SIGTERM (a node then stops; the manager
        // starts them with --no-leave) when the thread that started them ends — the
        // monitor's runtime thread, which lives as long as the monitor.
        #[cfg(target_os = "linux")]
        // SAFETY: the closure runs in the child between fork and exec and only calls
        // prctl, which is async-signal-safe, and reads errno.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("spawning {}: {e}", spawn.binary.display()))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut reader = BufReader::new(stdout);
        let printed = tokio::time::timeout(spawn.start_timeout, read_banner(&mut reader))
            .await
            .map_err(|_| format!("not listening after {:?}", spawn.start_timeout))
            .and_then(|r| r);
        let printed = match printed {
            Ok(p) => p,
            Err(e) => {
                let _ = child.start_kill();
                let status = child.wait().await.ok();
                return Err(match status {
                    Some(s) => format!("{e} ({s})"),
                    None => e,
                });
            }
        };
        let pid = child.id().unwrap_or(0);
        let (exit_tx, exited) = watch::channel(None);
        let (kill, kill_rx) = mpsc::channel(1);
        tokio::spawn(own(child, reader, kill_rx, exit_tx));
        Ok((Proc { pid, exited, kill }, printed))
    }

    /// The process id.
    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    /// How it ended, once it has.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        *self.exited.borrow()
    }

    /// A receiver that sees the exit.
    pub(crate) fn exited(&self) -> watch::Receiver<Option<ExitStatus>> {
        self.exited.clone()
    }

    /// Kills it (SIGKILL) if it still runs.
    pub(crate) fn kill(&self) {
        let _ = self.kill.try_send(());
    }

    /// Sends SIGTERM if it still runs (not yet reaped: its pid is still ours).
    pub(crate) fn terminate(&self) {
        if self.exit_status().is_none() && self.pid != 0 {
            // SAFETY: kill(2) on our own child, which the owning task has not reaped yet
            // (its exit would be in `exited`); no memory is involved.
            unsafe { libc::kill(self.pid as libc::pid_t, libc::SIGTERM) };
        }
    }
}

/// Waits for `exited` to report the exit, at most `timeout`; true if it did.
pub(crate) async fn wait_exit(
    mut exited: watch::Receiver<Option<ExitStatus>>,
    timeout: Duration,
) -> bool {
    tokio::time::timeout(timeout, exited.wait_for(|s| s.is_some()))
        .await
        .is_ok_and(|r| r.is_ok())
}

/// Reads the start-up lines up to `press…`: `native ADDR`, `resp ADDR`, `peer ADDR`.
async fn read_banner(reader: &mut BufReader<ChildStdout>) -> Result<Printed, String> {
    let mut printed = Printed::default();
    let mut line = Vec::new();
    for _ in 0..MAX_START_LINES {
        line.clear();
        let n = read_line(reader, &mut line).await?;
        if n == 0 {
            return Err("exited during start-up".into());
        }
        let text = String::from_utf8_lossy(&line);
        let mut parts = text.split_whitespace();
        let (key, value) = (parts.next(), parts.next().map(str::to_string));
        match (key, value) {
            (Some("native"), Some(v)) => printed.native = v,
            (Some("resp"), Some(v)) => printed.resp = v,
            (Some("peer"), Some(v)) => printed.peer = v,
            (Some("press"), _) => {
                if printed.native.is_empty() {
                    return Err("printed no native address".into());
                }
                return Ok(printed);
            }
            _ => {}
        }
    }
    Err(format!("no `press` line within {MAX_START_LINES} lines"))
}

/// One line into `line`, at most [`MAX_LINE`] bytes; 0 at end of file.
async fn read_line(
    reader: &mut BufReader<ChildStdout>,
    line: &mut Vec<u8>,
) -> Result<usize, String> {
    let n = reader
        .take(MAX_LINE as u64)
        .read_until(b'\n', line)
        .await
        .map_err(|e| format!("reading its output: {e}"))?;
    if n == MAX_LINE && line.last() != Some(&b'\n') {
        return Err(format!("an output line over {MAX_LINE} bytes"));
    }
    Ok(n)
}

/// Owns the child: drains its stdout, kills it when asked (or when every handle is gone),
/// and publishes its exit status.
async fn own(
    mut child: Child,
    mut reader: BufReader<ChildStdout>,
    mut kill: mpsc::Receiver<()>,
    exited: watch::Sender<Option<ExitStatus>>,
) {
    let mut sink = Vec::new();
    let mut draining = true;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = kill.recv() => {
                // Asked to, or every handle dropped (the sender closed).
                let _ = child.start_kill();
                break child.wait().await;
            }
            n = async {
                sink.clear();
                (&mut reader).take(MAX_LINE as u64).read_until(b'\n', &mut sink).await
            }, if draining => {
                // At end of file (or an error) stop reading; the exit comes by `wait`.
                draining = matches!(n, Ok(len) if len > 0);
            }
        }
    };
    match status {
        Ok(s) => {
            let _ = exited.send(Some(s));
        }
        Err(e) => {
            tracing::warn!(error = %e, "waiting for a node process failed");
            // Report something so no one waits for good: a generic failure status.
            let _ = exited.send(Some(std::os::unix::process::ExitStatusExt::from_raw(
                1 << 8,
            )));
        }
    }
}
