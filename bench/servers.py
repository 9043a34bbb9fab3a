"""Servers and the independent clients the benchmarks share: redis-server, `latticekv
local` and PostgreSQL, each pinned to CPU 0 on a fresh data directory and on ports the OS
picks, and redis-benchmark pinned to CPU 1."""
import csv
import glob
import io
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from common import free_port, pin, wait_port


class Redis:
    """redis-server with AOF everysec (its recommended persistence), plus `extra` flags.
    With `tls` (a dict of PEM paths: cert, key, ca) it serves TLS only, on its `port`."""

    def __init__(self, data, extra=(), tls=None):
        for _ in range(5):  # a free port can be taken between choosing and binding it
            self.port = free_port()
            ports = ["--port", str(self.port)]
            if tls:
                ports = ["--port", "0", "--tls-port", str(self.port),
                         "--tls-cert-file", tls["cert"], "--tls-key-file", tls["key"],
                         "--tls-ca-cert-file", tls["ca"], "--tls-auth-clients", "no"]
            self.proc = subprocess.Popen(
                pin(0) + ["redis-server", *ports, "--bind", "127.0.0.1", "--dir", data,
                          "--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
                          *extra],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                wait_port(self.port, timeout=10)
            except RuntimeError:
                pass
            if self.proc.poll() is None:
                return
            self.proc.wait()
        sys.exit("redis-server did not start")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


class Latticekv:
    """`latticekv local --workers 1` (memory node + disk node) on a fresh data directory,
    plus `extra` flags, on ports the OS picks (read from what it prints): `port` (RESP),
    `resp` and `native` (addresses). `workers=None` leaves the flag out (one worker per core
    the process may run on: one, pinned to CPU 0). With `log`, a file path, the node's log
    (at `log_level`) goes there instead of being discarded. `data=None` runs it without a
    data directory: nothing on disk, no write-ahead log."""

    def __init__(self, binary, data, extra=(), workers=1, log=None, log_level="warn"):
        flags = ["--workers", str(workers)] if workers is not None else []
        self.log = open(log, "a") if log else None
        self.proc = subprocess.Popen(
            pin(0) + [binary, "local", *flags, "--listen", "127.0.0.1:0",
                      "--resp", "127.0.0.1:0", *(["--data-dir", data] if data else []),
                      *extra],
            stdout=subprocess.PIPE, stderr=self.log or subprocess.STDOUT, text=True,
            env={**os.environ, "LATTICEKV_LOG": log_level})
        self.port, self.native, seen = None, None, []
        deadline = time.time() + 60
        for line in self.proc.stdout:
            seen.append(line)
            parts = line.split()
            if parts[:1] == ["native"]:
                self.native = parts[1]
            if parts[:1] == ["resp"]:
                self.port = int(parts[1].rsplit(":", 1)[1])
                break
            if time.time() > deadline:
                break
        if self.port is None:
            self.stop()
            sys.exit("latticekv local did not start:\n" + "".join(seen))
        self.resp = f"127.0.0.1:{self.port}"
        # Keep draining its output so it never blocks on a full pipe.
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()
        wait_port(self.port)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.log:
            self.log.close()


def redis_benchmark(port, test, pipeline, requests, extra=()):
    """One redis-benchmark run (50 connections, 100-byte values, 100,000 random keys):
    (requests/s, p99 ms). `extra`: e.g. `--tls --cacert CA` or `-a PASSWORD`."""
    out = subprocess.run(
        pin(1) + ["redis-benchmark", "-p", str(port), "-c", "50", "-d", "100", "-r", "100000",
                  "-P", str(pipeline), "-n", str(requests), "-t", test, "--csv", "-q",
                  *extra],
        check=True, capture_output=True, text=True).stdout
    rows = list(csv.DictReader(io.StringIO(out)))
    return float(rows[0]["rps"]), float(rows[0]["p99_latency_ms"])


def pg_bin():
    """The newest /usr/lib/postgresql/<major>/bin that has initdb (Debian's layout), or
    exits saying how to install it."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                   key=lambda p: int(p.split("/")[-3]) if p.split("/")[-3].isdigit() else -1)
    if not found:
        sys.exit("PostgreSQL is not installed: no /usr/lib/postgresql/<version>/bin/initdb "
                 "(make deps, or apt-get install postgresql)")
    return os.path.dirname(found[-1])


class Postgres:
    """A throwaway PostgreSQL cluster of its own (initdb in a fresh directory under `parent`,
    on the local disk), as crates/testkit/src/pg.rs starts it for the tests: 127.0.0.1 on a
    free port, its Unix socket in that directory, `trust` authentication, user `postgres`;
    nothing of the system's own cluster is used. Unlike the tests' server it keeps
    PostgreSQL's defaults — fsync on, full_page_writes on, shared_buffers 128 MB — plus
    `extra` settings (`-c name=value` pairs). PostgreSQL refuses to run as root, so as root
    the server runs as the `postgres` user Debian's package creates, which then owns the
    directory. The server is pinned to CPU `cpu` (default 0). `stop_immediate` and
    `start_again` are a crash and a restart on the same port and data (WAL recovery)."""

    def __init__(self, parent=None, extra=(), cpu=0):
        self.bin = pg_bin()
        self.dir = tempfile.mkdtemp(prefix="lkv-pg-", dir=parent)
        self.data = os.path.join(self.dir, "data")
        self.log = os.path.join(self.dir, "server.log")
        self.cpu, self.extra = cpu, list(extra)
        self.run_as = None
        if os.geteuid() == 0:
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                sys.exit("running as root and there is no `postgres` user to run PostgreSQL "
                         "as (Debian's postgresql package creates it: make deps)")
            self.run_as = (pw.pw_uid, pw.pw_gid)
            os.chown(self.dir, *self.run_as)
        out = self._run(["initdb", "-D", self.data, "-U", "postgres", "-A", "trust", "-E",
                         "UTF8", "--no-locale"])
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed:\n{out.stdout}{out.stderr}")
        self.port, self.running = None, False
        for attempt in range(3):  # a free port can be taken between choosing and binding it
            self.port = free_port()
            try:
                self.start_again()
                return
            except RuntimeError as e:
                if attempt == 2:
                    self.remove()
                    raise
                print(f"PostgreSQL did not start, retrying: {e}", file=sys.stderr)

    def _run(self, args, prefix=(), timeout=120):
        """Runs the server binary `args[0]` (after `prefix`, e.g. taskset) as the server's
        user, in the server's directory (that user may not be able to enter ours)."""
        def demote():
            if self.run_as:
                os.setgid(self.run_as[1])
                os.setuid(self.run_as[0])
        return subprocess.run([*prefix, os.path.join(self.bin, args[0]), *args[1:]],
                              cwd=self.dir, preexec_fn=demote, capture_output=True, text=True,
                              timeout=timeout)

    def url(self):
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def start_again(self):
        """`pg_ctl start -w` on the same port and data (after `stop_immediate`, it recovers
        from its WAL); returns once it accepts connections. pg_ctl runs pinned, and the
        postmaster and its backends inherit the pinning."""
        opts = " ".join([f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"]
                        + [f"-c {x}" for x in self.extra])
        out = self._run(["pg_ctl", "-D", self.data, "-w", "-t", "60", "-l", self.log,
                         "-o", opts, "start"], prefix=pin(self.cpu))
        if out.returncode != 0:
            log = open(self.log, errors="replace").read() if os.path.exists(self.log) else ""
            raise RuntimeError(f"pg_ctl start failed:\n{out.stdout}{out.stderr}\n{log[-2000:]}")
        self.running = True

    def stop_immediate(self):
        """`pg_ctl stop -m immediate`: as a crash (no checkpoint, connections cut)."""
        out = self._run(["pg_ctl", "-D", self.data, "-w", "-t", "60", "stop", "-m",
                         "immediate"])
        if out.returncode != 0:
            raise RuntimeError(f"pg_ctl stop failed:\n{out.stdout}{out.stderr}")
        self.running = False

    def psql(self, sql, timeout=300):
        """Runs `sql` (psql as `postgres`, ON_ERROR_STOP); returns its output unaligned,
        without headers, trimmed. Raises on an error."""
        out = subprocess.run(
            [os.path.join(self.bin, "psql"), "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1",
             "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
             "-c", sql], capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"psql failed on {sql[:200]!r}:\n{out.stderr}")
        return out.stdout.strip()

    def remove(self):
        """Stops the server (immediately) and removes its directory."""
        if self.running:
            try:
                self.stop_immediate()
            except Exception as e:  # removing anyway
                print(f"stopping PostgreSQL: {e}", file=sys.stderr)
        shutil.rmtree(self.dir, ignore_errors=True)
