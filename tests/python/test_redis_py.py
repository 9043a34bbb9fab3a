"""The `redis` Python package, unchanged, against latticekv's RESP port."""
import pytest
import redis


def client(node, **kw) -> redis.Redis:
    return redis.Redis(host=node.resp_host, port=node.resp_port, **kw)


def test_strings_counters_sets(node):
    r = client(node)
    assert r.ping() is True
    assert r.get("missing") is None
    assert r.set("a", "1") is True
    assert r.get("a") == b"1"
    assert r.set("a", "2", nx=True) is None
    assert r.set("b", "2", xx=True) is None
    assert r.set("a", "3", xx=True) is True
    assert r.incr("c") == 1
    assert r.incrby("c", 41) == 42
    assert r.decr("c") == 41
    assert r.get("c") == b"41"
    assert r.sadd("s", "x", "y", "x") == 2
    assert r.smembers("s") == {b"x", b"y"}
    assert r.sismember("s", "x") in (True, 1)
    assert r.scard("s") == 2
    assert r.srem("s", "x") == 1
    assert r.smembers("s") == {b"y"}
    assert r.mset({"k1": "v1", "k2": "v2"}) is True
    assert r.mget(["k1", "nope", "k2"]) == [b"v1", None, b"v2"]
    assert r.exists("k1", "k2", "nope") == 2
    assert r.delete("k1", "nope") == 1
    assert r.dbsize() == 4
    assert r.type("s") == b"set"
    info = r.info()
    assert info["db0"]["keys"] == 4


def test_errors_are_exceptions_and_the_connection_survives(node):
    r = client(node)
    r.set("str", "v")
    with pytest.raises(redis.exceptions.ResponseError, match="not an integer"):
        r.incr("str")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        r.sadd("str", "m")
    with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
        r.execute_command("NOSUCHCOMMAND", "x")
    with pytest.raises(redis.exceptions.ResponseError, match="not an integer"):
        r.incrby("n", "abc")
    assert r.get("str") == b"v"


def test_streams_are_refused_naming_the_alternatives(node):
    r = client(node)
    for call in (lambda: r.xadd("s", {"f": "v"}), lambda: r.xread({"s": 0}),
                 lambda: r.xlen("s"), lambda: r.xgroup_create("s", "g")):
        with pytest.raises(redis.exceptions.ResponseError,
                           match="streams are not supported.*BLMOVE.*PUBLISH"):
            call()
    # In a transaction the refusal comes at queue time, as an unknown command's does, and
    # the transaction is aborted with nothing applied.
    p = r.pipeline(transaction=True)
    p.set("after", "1")
    p.xadd("s", {"f": "v"})
    with pytest.raises(redis.exceptions.ResponseError, match="streams are not supported"):
        p.execute()
    assert r.get("after") is None
    assert r.ping()


def test_pipeline_and_binary_values(node):
    r = client(node)
    blob = bytes(range(256)) * 4
    p = r.pipeline(transaction=False)
    for i in range(500):
        p.set(f"key:{i}", blob)
    p.get("key:0")
    p.get("key:499")
    results = p.execute()
    assert results[:500] == [True] * 500
    assert results[500] == blob and results[501] == blob


def test_resp3(node):
    r = client(node, protocol=3)
    r.set("k", "v")
    assert r.get("k") == b"v"
    assert r.get("missing") is None
    r.sadd("s3", "a", "b")
    assert r.smembers("s3") == {b"a", b"b"}


def test_many_clients(node):
    clients = [client(node) for _ in range(50)]
    for i, c in enumerate(clients):
        assert c.set(f"c{i}", str(i))
    for i, c in enumerate(clients):
        assert c.get(f"c{i}") == str(i).encode()


def test_large_values_and_the_value_limit(node):
    import os

    r = client(node)
    big = os.urandom(5 * 1024 * 1024)
    assert r.set("big", big) is True
    assert r.get("big") == big
    with pytest.raises(redis.exceptions.ResponseError, match="exceeds the 16777216-byte limit"):
        r.set("huge", b"x" * (17 * 1024 * 1024))
    assert r.get("huge") is None
    assert r.get("big") == big
