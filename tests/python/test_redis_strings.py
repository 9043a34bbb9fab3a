"""String commands through redis-py, and what two replicas converge to when they take
read-modify-writes of one string concurrently (docs/protocol.md)."""
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest
import redis

from conftest import binary


def client(node, **kw) -> redis.Redis:
    return redis.Redis(host=node.resp_host, port=node.resp_port, **kw)


def test_string_commands(node):
    r = client(node)
    r.set("s:x", "10")
    assert r.incr("s:x") == 11  # a string holding an integer counts, as in Redis
    assert r.incrby("s:x", -20) == -9
    assert r.get("s:x") == b"-9"
    assert r.type("s:x") == b"string"
    r.set("s:word", "abc")
    with pytest.raises(redis.exceptions.ResponseError, match="not an integer"):
        r.incr("s:word")
    assert r.setnx("s:nx", "1") is True
    assert r.setnx("s:nx", "2") is False
    assert r.getset("s:nx", "3") == b"1"
    assert r.getdel("s:nx") == b"3"
    assert r.getdel("s:nx") is None
    assert r.append("s:ap", "hello") == 5
    assert r.append("s:ap", " world") == 11
    assert r.strlen("s:ap") == 11
    assert r.getrange("s:ap", 0, 4) == b"hello"
    assert r.getrange("s:ap", -5, -1) == b"world"
    assert r.getrange("s:ap", 50, 60) == b""
    assert r.setrange("s:sr", 3, "xy") == 5
    assert r.get("s:sr") == b"\x00\x00\x00xy"
    assert r.incrbyfloat("s:f", 10.5) == 10.5
    assert r.incrbyfloat("s:f", 0.1) == pytest.approx(10.6)
    assert r.get("s:f") == b"10.6"
    # A missing key INCRed is a counter (concurrent increments all count).
    assert r.incr("s:c") == 1
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        r.append("s:c", "x")
    # Keys of one MSETNX on one worker (a one-key MSETNX always is).
    assert r.msetnx({"s:m": "1"}) is True
    assert r.msetnx({"s:m": "2"}) is False
    assert r.get("s:m") == b"1"


class Server:
    """A `latticekv server` cluster node."""

    def __init__(self, node_id, seed=None, *extra):
        self.data = tempfile.mkdtemp(prefix="lkv-pytest-")
        args = [binary(), "server", "--node-id", node_id, "--listen", "127.0.0.1:0",
                "--resp", "127.0.0.1:0", "--data-dir", self.data, *extra]
        if seed:
            args += ["--seeds", seed]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "LATTICEKV_LOG": "warn"})
        self.native = self.resp = None
        deadline = time.time() + 30
        while time.time() < deadline and not (self.native and self.resp):
            parts = self.proc.stdout.readline().split()
            if parts[:1] == ["native"]:
                self.native = parts[1]
            elif parts[:1] == ["resp"]:
                self.resp = parts[1]
        assert self.native and self.resp, "node did not print its addresses"
        host, port = self.resp.rsplit(":", 1)
        self.resp_host, self.resp_port = host, int(port)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.data, ignore_errors=True)


@pytest.fixture
def two_replicas():
    flags = ["--workers", "1", "--replication", "2", "--gossip-period-ms", "1000",
             "--cluster-gossip-ms", "100", "--failure-timeout-ms", "5000",
             "--anti-entropy-ms", "2000", "--no-leave"]
    a = Server("n1", None, *flags)
    b = Server("n2", a.native, *flags)
    yield client(a), client(b)
    b.stop()
    a.stop()


def eventually(f, timeout=15.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if f():
            return True
        time.sleep(0.1)
    return False


def test_concurrent_read_modify_writes_on_two_replicas_converge(two_replicas):
    a, b = two_replicas
    # Both nodes hold every key (replication 2) and each serves its own replica.
    assert eventually(lambda: a.set("probe", "1") and b.get("probe") == b"1")
    a.set("ap", "base")
    a.set("num", "10")
    assert eventually(lambda: b.get("ap") == b"base" and b.get("num") == b"10")
    # Concurrent: each replica computes from its own state, within one gossip period. A
    # gossip round may still fall between two calls (on a loaded machine): the replies
    # say what each replica computed from, and so which outcome is the right one.
    len_a = a.append("ap", "-a")
    len_b = b.append("ap", "-b")
    num_a = a.incr("num")
    num_b = b.incr("num")
    # A counter created by INCR: increments on both replicas all count.
    a.incr("ctr")
    b.incr("ctr")
    assert eventually(lambda: a.get("ap") == b.get("ap") and a.get("num") == b.get("num"))
    assert len_a == len("base-a")
    if len_b == len("base-b"):
        # LWW: one of the two results wins whole (the later timestamp); the other is lost.
        assert a.get("ap") in (b"base-a", b"base-b")
    else:
        # b had received a's append first: a sequential history.
        assert (len_b, a.get("ap")) == (len("base-a-b"), b"base-a-b")
    assert num_a == 11
    assert a.get("num") == (b"11" if num_b == 11 else b"12")
    assert num_b in (11, 12)
    assert eventually(lambda: a.get("ctr") == b.get("ctr") == b"2")
