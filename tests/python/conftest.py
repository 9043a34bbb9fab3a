"""Starts a real `latticekv local` for the Python suites.

The binary comes from $LATTICEKV_BIN (set by `make python-test`), else target/debug.
"""
import contextlib
import os
import pathlib
import signal
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def binary() -> str:
    path = os.environ.get("LATTICEKV_BIN") or str(ROOT / "target" / "debug" / "latticekv")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist: build it first (cargo build)")
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def redis_server():
    """A real `redis-server` without persistence on a free port (the test is skipped if
    it is not installed); yields the port."""
    import redis

    if not shutil.which("redis-server"):
        pytest.skip("redis-server is not installed (make deps)")
    port = free_port()
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.time() + 10
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.exceptions.ConnectionError:
                if time.time() > deadline:
                    raise
                time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)


class Node:
    """A running node: its process and addresses. With `data_dir` it uses (and keeps)
    that directory, so a test can restart a node on its data; by default a fresh one,
    removed on stop."""

    def __init__(self, *extra: str, data_dir=None, resp="127.0.0.1:0"):
        # The default deployment: a memory node and a disk node, in a fresh data directory.
        # `resp`: the memory node's RESP address (a disk node's is 100 ports above it).
        self.keep_data = data_dir is not None
        self.data = str(data_dir) if data_dir is not None else tempfile.mkdtemp(
            prefix="lkv-pytest-")
        self.proc = subprocess.Popen(
            [binary(), "local", "--listen", "127.0.0.1:0", "--resp", resp,
             "--data-dir", self.data, *extra],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "LATTICEKV_LOG": "warn"},
        )
        self.native = self.resp = self.faas = self.http = None
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            parts = line.split()
            if parts[:1] == ["native"]:
                self.native = parts[1]
            elif parts[:1] == ["resp"]:
                self.resp = parts[1]
            elif parts[:1] == ["faas"]:
                self.faas = parts[1]
            elif parts[:1] == ["http"]:
                self.http = parts[1]
            elif parts[:1] == ["press"]:
                break
        if not (self.native and self.resp):
            self.stop()
            raise RuntimeError("latticekv did not print its addresses")
        host, port = self.resp.rsplit(":", 1)
        self.resp_host, self.resp_port = host, int(port)

    def stop(self) -> int:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    return self.proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    return self.proc.wait()
            return self.proc.returncode
        finally:
            if not self.keep_data:
                shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture
def node():
    n = Node("--workers", "2")
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"
