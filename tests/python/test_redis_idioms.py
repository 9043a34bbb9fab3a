"""redis-py as applications use it, unchanged, against the default deployment (`latticekv
local`: a memory node with two workers and a disk node; every key has a memory and a
disk replica).

Transactional and plain pipelines, optimistic locking with `WATCH`, `Lock` (its release,
extend and reacquire run Lua scripts), `scan_iter` over thousands of keys, TTLs,
`info()`, `client_list()`, `flushdb()`, `keys()`, `dbsize()`.
"""
import threading
import time

import pytest
import redis

from conftest import Node


@pytest.fixture(scope="module")
def shared_node():
    n = Node("--workers", "2")
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"


@pytest.fixture
def r(shared_node):
    c = redis.Redis(host=shared_node.resp_host, port=shared_node.resp_port)
    c.flushdb()
    yield c
    c.close()


def test_transactional_pipeline_applies_everything_in_order(r):
    with r.pipeline() as p:  # MULTI … EXEC, redis-py's default
        p.set("tx:a", 1).incr("tx:a").incrby("tx:a", 10).get("tx:a").sadd("tx:s", "x", "y")
        assert p.execute() == [True, 2, 12, b"12", 2]
    assert r.get("tx:a") == b"12"
    # A command failing when it runs is its own element; the others apply (as Redis).
    with r.pipeline() as p:
        p.set("tx:b", "v").incr("tx:s").get("tx:b")
        out = p.execute(raise_on_error=False)
    assert out[0] is True and out[2] == b"v"
    assert isinstance(out[1], redis.exceptions.ResponseError)


def test_plain_pipeline(r):
    p = r.pipeline(transaction=False)
    for i in range(200):
        p.set(f"pl:{i}", i)
    for i in range(200):
        p.incr(f"pl:{i}")
    out = p.execute()
    assert out[:200] == [True] * 200
    assert out[200:] == [i + 1 for i in range(200)]


def test_set_ex_incr_expire_ttl(r):
    assert r.set("ttl:a", "v", ex=100) is True
    assert 99 <= r.ttl("ttl:a") <= 100
    assert r.incr("ttl:n") == 1
    assert r.expire("ttl:n", 50) is True
    assert 49 <= r.ttl("ttl:n") <= 50
    assert r.ttl("ttl:none") == -2
    assert r.set("ttl:b", "v", px=150) is True
    deadline = time.time() + 5
    while r.exists("ttl:b") and time.time() < deadline:
        time.sleep(0.05)
    assert r.get("ttl:b") is None


def test_watch_retry_loop_counts_every_increment(shared_node):
    # redis-py's optimistic-locking pattern on a string counter, two clients at once:
    # WATCH, read, MULTI, SET, EXEC, retry on WatchError. Every increment lands.
    setup = redis.Redis(host=shared_node.resp_host, port=shared_node.resp_port)
    setup.set("idiom:counter", "0")
    retries = []
    errors = []

    def worker():
        c = redis.Redis(host=shared_node.resp_host, port=shared_node.resp_port)
        mine = 0
        try:
            for _ in range(200):
                with c.pipeline() as p:
                    while True:
                        try:
                            p.watch("idiom:counter")
                            v = int(p.get("idiom:counter"))
                            p.multi()
                            p.set("idiom:counter", v + 1)
                            p.execute()
                            break
                        except redis.exceptions.WatchError:
                            mine += 1
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)
        finally:
            retries.append(mine)
            c.close()

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert setup.get("idiom:counter") == b"400"
    # A change between WATCH and EXEC makes EXEC fail with nothing applied.
    with setup.pipeline() as p:
        p.watch("idiom:counter")
        redis.Redis(host=shared_node.resp_host, port=shared_node.resp_port).set(
            "idiom:counter", "0")
        p.multi()
        p.set("idiom:counter", "lost")
        with pytest.raises(redis.exceptions.WatchError):
            p.execute()
    assert setup.get("idiom:counter") == b"0"
    setup.close()


def test_lock_acquire_blocking_timeout_and_release(r):
    lock = r.lock("lock:job", timeout=10)
    assert lock.acquire(blocking=False) is True
    assert r.pttl("lock:job") > 9000
    other = r.lock("lock:job", timeout=10, blocking_timeout=0.3)
    start = time.monotonic()
    assert other.acquire() is False
    # redis-py retries every 0.1 s and gives up when the next try would be past the timeout.
    assert 0.15 <= time.monotonic() - start < 3
    # extend, reacquire and release run Lua scripts (EVALSHA, EVAL when not cached).
    assert lock.extend(5) is True
    assert 14000 < r.pttl("lock:job") <= 15000
    assert lock.extend(3, replace_ttl=True) is True
    assert 2000 < r.pttl("lock:job") <= 3000
    assert lock.reacquire() is True
    assert 9000 < r.pttl("lock:job") <= 10000
    assert lock.owned() is True
    # Another owner's token cannot release or extend it.
    assert other.owned() is False
    other.local.token = b"not-the-token"
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.extend(5)
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.reacquire()
    with pytest.raises(redis.exceptions.LockNotOwnedError):
        other.release()
    assert lock.owned() is True
    lock.release()
    assert r.exists("lock:job") == 0
    with pytest.raises(redis.exceptions.LockError):
        lock.release()
    assert other.acquire(blocking=False) is True
    other.release()
    # The context manager acquires and releases; a second one waits for the first.
    with r.lock("lock:ctx", timeout=5) as held:
        assert held.owned() is True
        assert r.lock("lock:ctx", blocking_timeout=0.2).acquire() is False
    assert r.exists("lock:ctx") == 0
    # The script cache survives SCRIPT FLUSH from the client's point of view: redis-py
    # sends the script again (EVAL) after NOSCRIPT.
    r.script_flush()
    with r.lock("lock:ctx", timeout=5):
        assert r.exists("lock:ctx") == 1
    assert r.exists("lock:ctx") == 0
    assert other.acquire(blocking=False) is True
    short = r.lock("lock:short", timeout=0.2)
    assert short.acquire(blocking=False) is True
    again = r.lock("lock:short", timeout=5, blocking_timeout=3)
    assert again.acquire() is True, "the lock's deadline should have freed it"


def test_scan_iter_returns_every_key_once_keys_and_dbsize_agree(r):
    n = 3000
    p = r.pipeline(transaction=False)
    for i in range(n):
        p.set(f"scan:{i}", i)
    p.sadd("other:set", "m")
    p.execute()
    listed = list(r.scan_iter(match="scan:*", count=100))
    assert len(listed) == n, "SCAN returned a key twice or missed one"
    assert set(listed) == {f"scan:{i}".encode() for i in range(n)}
    assert set(r.scan_iter(_type="set")) == {b"other:set"}
    assert len(r.keys("scan:*")) == n
    assert r.dbsize() == n + 1
    assert len(r.keys()) == n + 1
    assert r.randomkey() in set(r.keys())


def test_scan_sees_keys_present_throughout_despite_concurrent_writes(r):
    stable = {f"st:{i}".encode() for i in range(1000)}
    r.mset({k: 1 for k in stable})
    seen = set()
    cursor = 0
    i = 0
    while True:
        cursor, page = r.scan(cursor, count=50)
        seen.update(page)
        # Writes during the scan: new keys and deleted ones must not hide stable keys.
        r.set(f"churn:{i}", 1)
        r.delete(f"churn:{i - 3}")
        i += 1
        if cursor == 0:
            break
    assert stable <= seen


def test_info_client_list_flushdb(r):
    r.set("i:a", 1)
    r.set("i:b", 2, ex=100)
    info = r.info()
    assert info["redis_version"] and info["redis_mode"] == "standalone"
    assert info["arch_bits"] in (32, 64)
    assert info["role"] == "master"
    assert info["connected_clients"] >= 1
    assert isinstance(info["used_memory"], int) and "used_memory_human" in info
    assert info["db0"]["keys"] == 2
    assert info["db0"]["expires"] == 1
    assert set(r.info("keyspace")) == {"db0"}
    assert "redis_version" in r.info("server") and "db0" not in r.info("server")
    r.client_setname("idioms")
    clients = r.client_list()
    assert clients and clients[0]["name"] == "idioms"
    assert r.client_info()["name"] == "idioms"
    assert clients[0]["id"] == str(r.client_id())
    assert r.client_kill_filter(_id=r.client_id()) == 0  # SKIPME yes, by default
    assert r.client_kill_filter(_id=r.client_id(), skipme=False) == 1
    assert r.ping() is True  # redis-py reconnects
    assert r.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}
    assert int(r.config_get("maxmemory")["maxmemory"]) > 0
    assert r.flushdb() is True
    assert r.dbsize() == 0
    assert r.keys() == []
    assert r.info("keyspace") == {}
