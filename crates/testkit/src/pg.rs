//! [`PgServer`]: a throwaway PostgreSQL server for tests of the backing store, from
//! Debian's `postgresql` package (`make deps` installs it).
//!
//! Each server is its own cluster (`initdb`) in a temporary directory, listening on
//! 127.0.0.1 on a free port, with its Unix socket inside that directory and `trust`
//! authentication; nothing of the system's own cluster is used. PostgreSQL refuses to run
//! as root, so when the tests run as root (as CI does) the server runs as the `postgres`
//! user the package creates, which then owns the directory.

use std::ffi::CString;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Where Debian installs the server binaries: `/usr/lib/postgresql/<major>/bin`.
const PG_LIB: &str = "/usr/lib/postgresql";
/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";

/// A running PostgreSQL server of its own, stopped (immediately) and removed when dropped.
///
/// ```no_run
/// let pg = testkit::PgServer::start();
/// pg.psql("CREATE TABLE t (x int)");
/// assert_eq!(pg.psql("SELECT count(*) FROM t"), "0");
/// pg.stop_immediate();
/// pg.start_again();
/// ```
pub struct PgServer {
    /// The TCP port (on 127.0.0.1), the same across [`start_again`](PgServer::start_again).
    pub port: u16,
    /// The directory of the server binaries (`initdb`, `pg_ctl`, `psql`).
    bin: PathBuf,
    /// The cluster's data directory.
    data: PathBuf,
    /// The user the server runs as: `Some((uid, gid))` of `postgres` when we are root.
    run_as: Option<(u32, u32)>,
    /// Holds the data, the socket and the log; removed on drop.
    dir: tempfile::TempDir,
}

impl PgServer {
    /// Creates a cluster in a fresh temporary directory and starts it on a free port;
    /// returns once it accepts connections.
    ///
    /// # Panics
    /// If PostgreSQL is not installed (the message says how to install it: the tests fail,
    /// they never skip), or if the server does not start.
    pub fn start() -> PgServer {
        let bin = bin_dir();
        let dir = tempfile::Builder::new()
            .prefix("latticekv-pg")
            .tempdir()
            .expect("temp dir");
        let run_as = server_user();
        if let Some((uid, gid)) = run_as {
            chown(dir.path(), uid, gid);
        }
        let data = dir.path().join("data");
        let mut server = PgServer {
            port: 0,
            bin,
            data,
            run_as,
            dir,
        };
        let out = server.as_server(&server.bin.join("initdb")).run(&[
            "-D",
            path_str(&server.data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--no-locale",
            "--no-sync",
        ]);
        assert!(out.status.success(), "initdb failed:\n{}", text(&out));
        // The port is picked by binding port 0; another process could take it before the
        // server binds it, so a failed start is tried again with a new port.
        for attempt in 1..=3 {
            server.port = free_port();
            match server.try_start() {
                Ok(()) => return server,
                Err(e) if attempt < 3 => eprintln!("PostgreSQL did not start, retrying: {e}"),
                Err(e) => panic!("PostgreSQL did not start: {e}"),
            }
        }
        unreachable!()
    }

    /// The URL to connect to it: `postgresql://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgresql://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Stops the server at once, as a crash would (`pg_ctl stop -m immediate`): no
    /// checkpoint, connections cut. Returns once the server is gone.
    pub fn stop_immediate(&self) {
        let out = self.pg_ctl(&["stop", "-m", "immediate"]);
        assert!(out.status.success(), "pg_ctl stop failed:\n{}", text(&out));
    }

    /// Starts the server again on the same port and data (after
    /// [`stop_immediate`](PgServer::stop_immediate): it recovers from its WAL); returns
    /// once it accepts connections.
    pub fn start_again(&self) {
        if let Err(e) = self.try_start() {
            panic!("PostgreSQL did not start again: {e}");
        }
    }

    /// Runs `sql` with `psql` as the `postgres` superuser and returns its output, unaligned
    /// and without headers (`SELECT 1, 'a'` gives `1|a`; rows are separated by newlines;
    /// NULL prints as an empty field), trimmed.
    ///
    /// # Panics
    /// If the statement fails.
    pub fn psql(&self, sql: &str) -> String {
        match self.try_psql(sql) {
            Ok(out) => out,
            Err(e) => panic!("psql failed on {sql:?}: {e}"),
        }
    }

    /// As [`psql`](PgServer::psql), returning the error text instead of panicking.
    pub fn try_psql(&self, sql: &str) -> Result<String, String> {
        let port = self.port.to_string();
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1"])
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &port,
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .output()
            .expect("run psql");
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        } else {
            Err(text(&out))
        }
    }

    /// `pg_ctl start -w`: waits until the server accepts connections (pg_ctl polls it).
    fn try_start(&self) -> Result<(), String> {
        let log = self.dir.path().join("server.log");
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off \
             -c shared_buffers=16MB -c max_connections=40",
            self.port,
            path_str(self.dir.path())
        );
        let out = self.pg_ctl(&["start", "-l", path_str(&log), "-o", &options]);
        if out.status.success() {
            Ok(())
        } else {
            let server_log = std::fs::read_to_string(&log).unwrap_or_default();
            Err(format!("{}\nserver log:\n{server_log}", text(&out)))
        }
    }

    fn pg_ctl(&self, args: &[&str]) -> Output {
        let mut all = vec!["-D", path_str(&self.data), "-w", "-t", PG_CTL_WAIT_SECS];
        all.extend_from_slice(args);
        self.as_server(&self.bin.join("pg_ctl")).run(&all)
    }

    /// A command for a server binary, run as the server's user, in the temp directory (the
    /// server's user may not be able to enter the test's working directory).
    fn as_server(&self, program: &Path) -> Command {
        let mut cmd = Command::new(program);
        cmd.current_dir(self.dir.path());
        if let Some((uid, gid)) = self.run_as {
            cmd.uid(uid).gid(gid);
        }
        cmd
    }
}

impl Drop for PgServer {
    fn drop(&mut self) {
        if self.port != 0 {
            let _ = self.pg_ctl(&["stop", "-m", "immediate"]);
        }
    }
}

/// Runs a command to completion with its output captured.
trait Run {
    fn run(&mut self, args: &[&str]) -> Output;
}

impl Run for Command {
    fn run(&mut self, args: &[&str]) -> Output {
        self.args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", self.get_program()))
    }
}

/// The newest `/usr/lib/postgresql/<major>/bin` that has `initdb`.
fn bin_dir() -> PathBuf {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(PG_LIB)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let major = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((major, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL is not installed: no {PG_LIB}/<version>/bin/initdb. The backing-store \
             tests need a real server: run `make deps` (or `apt-get install postgresql`)"
        ),
    }
}

/// `Some((uid, gid))` of the `postgres` user if we are root (PostgreSQL refuses to run as
/// root), `None` otherwise (run as ourselves).
fn server_user() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam takes a NUL-terminated string and returns NULL or a pointer to a
    // static record, read at once before any other call could overwrite it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root, and there is no `postgres` user to run PostgreSQL as (Debian's \
         postgresql package creates it: run `make deps`)"
    );
    // SAFETY: pw is non-null and points to a valid passwd record.
    let (uid, gid) = unsafe { ((*pw).pw_uid, (*pw).pw_gid) };
    Some((uid, gid))
}

fn chown(path: &Path, uid: u32, gid: u32) {
    let c = CString::new(path_str(path)).expect("no NUL in the temp path");
    // SAFETY: c is a valid NUL-terminated path.
    let rc = unsafe { libc::chown(c.as_ptr(), uid, gid) };
    assert_eq!(
        rc,
        0,
        "chown {}: {}",
        path.display(),
        std::io::Error::last_os_error()
    );
}

/// A free TCP port on 127.0.0.1 (bound, then released for the server to take).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("utf-8 temp path")
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_stops_restarts_and_cleans_up() {
        let pg = PgServer::start();
        assert_eq!(pg.psql("SELECT 1, 'a'"), "1|a");
        pg.psql("CREATE TABLE t (x int); INSERT INTO t VALUES (7)");
        pg.stop_immediate();
        assert!(pg.try_psql("SELECT 1").is_err(), "answers while stopped");
        pg.start_again();
        // Committed before the crash, recovered from the WAL.
        assert_eq!(pg.psql("SELECT x FROM t"), "7");
        assert!(pg.url().ends_with(&format!(":{}/postgres", pg.port)));
        let dir = pg.dir.path().to_path_buf();
        drop(pg);
        assert!(!dir.exists(), "temp dir left behind");
    }
}
