"""Servers and the independent client that the redis-benchmark-driven benchmarks share:
redis-server and `latticekv local`, each pinned to CPU 0 on a fresh data directory and on
ports the OS picks, and redis-benchmark pinned to CPU 1."""
import csv
import io
import os
import subprocess
import sys
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
    plus `extra` flags, on ports the OS picks (read from what it prints)."""

    def __init__(self, binary, data, extra=()):
        self.proc = subprocess.Popen(
            pin(0) + [binary, "local", "--workers", "1", "--listen", "127.0.0.1:0",
                      "--resp", "127.0.0.1:0", "--data-dir", data, *extra],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "LATTICEKV_LOG": "warn"})
        self.port, seen = None, []
        deadline = time.time() + 60
        for line in self.proc.stdout:
            seen.append(line)
            parts = line.split()
            if parts[:1] == ["resp"]:
                self.port = int(parts[1].rsplit(":", 1)[1])
                break
            if time.time() > deadline:
                break
        if self.port is None:
            self.stop()
            sys.exit("latticekv local did not start:\n" + "".join(seen))
        # Keep draining its output so it never blocks on a full pipe.
        threading.Thread(target=lambda: self.proc.stdout.read(), daemon=True).start()
        wait_port(self.port)

    def stop(self):
        self.proc.kill()
        self.proc.wait()


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
