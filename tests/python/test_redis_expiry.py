"""TTLs through redis-py: SET … EX/PX, EXPIRE family, TTL, PERSIST, GETEX, background
reclamation, redis-py's Lock, and two replicas agreeing on deadlines."""
import time

import pytest
import redis

from test_redis_strings import client, eventually, two_replicas  # noqa: F401 (fixture)


def test_ttl_commands(node):
    r = client(node)
    assert r.set("e:k", "v", ex=100) is True
    assert 99 <= r.ttl("e:k") <= 100
    assert r.set("e:k", "w", keepttl=True) is True
    assert 99 <= r.ttl("e:k") <= 100
    assert r.set("e:k", "x") is True
    assert r.ttl("e:k") == -1  # SET clears the deadline
    assert r.ttl("e:missing") == -2
    assert r.expire("e:k", 100) is True
    assert r.expire("e:k", 200, nx=True) is False
    assert r.expire("e:k", 50, gt=True) is False
    assert r.expire("e:k", 30, lt=True) is True
    assert r.persist("e:k") is True
    assert r.ttl("e:k") == -1
    assert r.pexpire("e:k", 100_000) is True
    assert 99_000 < r.pttl("e:k") <= 100_000
    assert r.execute_command("SETEX", "e:s", 100, "v") is True
    assert r.psetex("e:p", 100_000, "v") is True
    assert r.getex("e:s", persist=True) == b"v"
    assert r.ttl("e:s") == -1
    assert r.getex("e:s", ex=50) == b"v"
    assert 49 <= r.ttl("e:s") <= 50
    # Every type expires.
    r.sadd("e:set", "a")
    r.incr("e:ctr")
    assert r.pexpire("e:set", 200) and r.pexpire("e:ctr", 200)
    with pytest.raises(redis.exceptions.ResponseError, match="invalid expire time"):
        r.set("e:k", "v", ex=0)
    time.sleep(0.3)
    assert r.smembers("e:set") == set() and r.get("e:ctr") is None
    assert r.expireat("e:k", 1) is True  # a past deadline deletes at once
    assert r.exists("e:k") == 0


def test_expired_keys_are_reclaimed_without_a_request(node):
    r = client(node)
    for i in range(50):
        r.set(f"gone:{i}", "v", px=300)
    r.set("stays", "v")
    assert r.dbsize() == 51
    # DBSIZE counts live records, which a read does not change: only the background
    # reclamation can bring it down, and no key is read meanwhile.
    assert eventually(lambda: r.dbsize() == 1, timeout=10), r.dbsize()
    assert r.get("stays") == b"v"


def test_redis_py_lock(node):
    r = client(node)
    # The acquiring half of redis-py's Lock is SET NX PX: it works, and the lock goes
    # away at its deadline.
    lock = r.lock("e:lock", timeout=0.5)
    assert lock.acquire(blocking=False) is True
    assert r.lock("e:lock", timeout=0.5).acquire(blocking=False) is False
    assert 0 < r.pttl("e:lock") <= 500
    # Releasing (and extend/reacquire) runs a Lua script that checks the token.
    lock.release()
    assert r.exists("e:lock") == 0
    # A lock that expired and was taken by another owner cannot be released by the first.
    first = r.lock("e:lock", timeout=0.2)
    assert first.acquire(blocking=False) is True
    assert eventually(lambda: r.lock("e:lock", timeout=5).acquire(blocking=False), 5)
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        first.release()
    assert r.exists("e:lock") == 1
    # The idiom that works: SET NX PX to take it, DEL (or the expiry) to give it back.
    assert r.set("e:lock2", "token", nx=True, px=10_000) is True
    assert r.set("e:lock2", "other", nx=True, px=10_000) is None
    assert r.delete("e:lock2") == 1
    assert r.set("e:lock2", "other", nx=True, px=10_000) is True


def test_two_replicas_agree_on_deadlines(two_replicas):  # noqa: F811
    a, b = two_replicas
    assert eventually(lambda: a.set("probe", "1") and b.get("probe") == b"1")
    a.set("k", "v")
    assert eventually(lambda: b.get("k") == b"v")
    # Concurrent EXPIREs on the two replicas (within a gossip period): the one with the
    # later HLC timestamp wins on both. Within one millisecond the order is the clocks'
    # logical counters and writer ids, so the second comes a few ms after the first.
    a.expire("k", 100)
    time.sleep(0.02)
    b.expire("k", 200)
    assert eventually(lambda: abs(a.ttl("k") - b.ttl("k")) <= 1 and a.ttl("k") > 150)
    # A deadline set on one replica expires the key on both, and both reclaim it.
    a.set("short", "v", px=500)
    assert eventually(lambda: b.get("short") == b"v" or b.exists("short") == 0)
    time.sleep(0.6)
    assert a.get("short") is None and b.get("short") is None
    assert a.exists("short") == 0 and b.exists("short") == 0


def test_deadlines_survive_a_restart(tmp_path):
    # The write-ahead log carries the deadline register: after a restart the TTL is the
    # same absolute deadline, and a key that expired meanwhile is gone and reclaimed.
    from conftest import Node

    def start():
        node = Node("--disk-nodes", "0", "--monitor", "false", "--workers", "1",
                    data_dir=tmp_path)
        return node, redis.Redis(host=node.resp_host, port=node.resp_port)

    def stop(node):
        assert node.stop() == 0

    proc, r = start()
    r.set("long", "v", ex=100)
    r.set("short", "v", px=300)
    r.set("plain", "v")
    stop(proc)
    time.sleep(0.4)
    proc, r = start()
    try:
        assert 95 <= r.ttl("long") <= 100
        assert r.ttl("plain") == -1
        assert r.get("short") is None
        assert eventually(lambda: r.dbsize() == 2)
    finally:
        stop(proc)
