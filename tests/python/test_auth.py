"""Authentication from Python: redis-py with `password=` / `username=` and the latticekv
package's `connect(user=..., password=...)` against a node started with `--password`."""
import pytest
import redis

import latticekv
from conftest import Node

PASSWORD = "py-s3cret"


@pytest.fixture
def secured():
    n = Node("--workers", "2", "--disk-nodes", "0", "--password", PASSWORD)
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"


def test_redis_py_with_password(secured):
    r = redis.Redis(host=secured.resp_host, port=secured.resp_port, password=PASSWORD)
    assert r.ping() is True
    assert r.set("k", "v") is True
    assert r.get("k") == b"v"
    assert r.mset({"a": "1", "b": "2"}) is True
    assert r.mget(["a", "b"]) == [b"1", b"2"]
    assert r.acl_whoami() == "default" or r.acl_whoami() == b"default"

    # RESP3 clients authenticate through HELLO 3 AUTH.
    r3 = redis.Redis(
        host=secured.resp_host,
        port=secured.resp_port,
        username="default",
        password=PASSWORD,
        protocol=3,
    )
    assert r3.get("k") == b"v"


def test_redis_py_without_or_with_a_wrong_password(secured):
    anon = redis.Redis(host=secured.resp_host, port=secured.resp_port)
    with pytest.raises(redis.AuthenticationError):
        anon.get("k")
    wrong = redis.Redis(host=secured.resp_host, port=secured.resp_port, password="nope")
    with pytest.raises(redis.AuthenticationError):
        wrong.ping()


def test_native_client_with_credentials(secured):
    c = latticekv.connect(secured.native, password=PASSWORD)
    for i in range(20):
        c.put(f"k{i}", f"v{i}")
    assert [c.get(f"k{i}") for i in range(20)] == [f"v{i}".encode() for i in range(20)]
    c2 = latticekv.connect(secured.native, user="default", password=PASSWORD)
    assert c2.get("k3") == b"v3"

    anon = latticekv.connect(secured.native)
    with pytest.raises(latticekv.AuthenticationError):
        anon.get("k1")
    with pytest.raises(latticekv.AuthenticationError):
        latticekv.connect(secured.native, password="nope")
    with pytest.raises(ValueError):
        latticekv.connect(secured.native, user="default")
