"""Lists: the same command sequences against a real `redis-server` and a latticekv node,
replies compared (the harness of test_redis_diff.py), and the blocking pops with redis-py
against both.

The latticekv node has one worker, so LMOVE's keys share it, as on one Redis.
"""
import threading
import time

import pytest
import redis

from test_redis_diff import Raw, parse, same, servers  # noqa: F401  (the fixture)

CASES = {
    "push and pop": [
        "LPUSH {}l a b c", "RPUSH {}l d e", "LRANGE {}l 0 -1", "LLEN {}l", "LPOP {}l",
        "RPOP {}l", "LPOP {}l 2", "RPOP {}l 0", "LRANGE {}l 0 -1", "LPOP {}l 5", "LPOP {}l",
        "LPOP {}l 2", "RPOP {}l", "EXISTS {}l", "LLEN {}l", "TYPE {}l", "LPUSHX {}x a",
        "RPUSHX {}x a", "EXISTS {}x", "RPUSH {}x 1", "LPUSHX {}x 0", "RPUSHX {}x 2 3",
        "LRANGE {}x 0 -1", "TYPE {}x", "LPOP {}x -1", "LPOP {}x abc", "RPOP {}nope 3",
        "LPOP {}nope",
    ],
    "ranges and indexes": [
        "RPUSH {}l a b c d e f", "LRANGE {}l 1 3", "LRANGE {}l -3 -1", "LRANGE {}l -100 100",
        "LRANGE {}l 4 2", "LRANGE {}l 10 20", "LRANGE {}l 0 -7", "LRANGE {}l x 1",
        "LRANGE {}nope 0 -1", "LINDEX {}l 0", "LINDEX {}l -1", "LINDEX {}l 6", "LINDEX {}l -7",
        "LINDEX {}l x", "LINDEX {}nope 0", "LSET {}l 0 A", "LSET {}l -1 F", "LSET {}l 6 z",
        "LSET {}nope 0 z", "LSET {}l x z", "LRANGE {}l 0 -1",
    ],
    "rem trim insert": [
        "RPUSH {}l a b a c a d", "LREM {}l 2 a", "LRANGE {}l 0 -1", "RPUSH {}l a",
        "LREM {}l -1 a", "LRANGE {}l 0 -1", "LREM {}l 0 zz", "LREM {}l 0 b",
        "LRANGE {}l 0 -1", "LREM {}l x a", "LREM {}nope 0 a", "RPUSH {}t 1 2 3 4 5",
        "LTRIM {}t 1 -2", "LRANGE {}t 0 -1", "LTRIM {}t 5 10", "EXISTS {}t", "LTRIM {}nope 0 1",
        "LTRIM {}t x 1", "RPUSH {}i a c", "LINSERT {}i BEFORE c b", "LINSERT {}i AFTER c d",
        "LINSERT {}i after a a2", "LINSERT {}i BEFORE zz x", "LINSERT {}nope BEFORE a x",
        "LINSERT {}i MIDDLE a x", "LRANGE {}i 0 -1", "LINSERT {}i BEFORE a first",
        "LRANGE {}i 0 -1",
    ],
    "lpos": [
        "RPUSH {}l a b c 1 2 3 c c", "LPOS {}l c", "LPOS {}l c RANK 2", "LPOS {}l c RANK -1",
        "LPOS {}l c RANK -2", "LPOS {}l c COUNT 2", "LPOS {}l c COUNT 0", "LPOS {}l c RANK -1 COUNT 2",
        "LPOS {}l c COUNT 0 MAXLEN 4", "LPOS {}l c RANK -1 MAXLEN 2", "LPOS {}l zz",
        "LPOS {}l zz COUNT 3", "LPOS {}nope a", "LPOS {}nope a COUNT 1", "LPOS {}l c RANK 0",
        "LPOS {}l c COUNT -1", "LPOS {}l c MAXLEN -1", "LPOS {}l c RANK x", "LPOS {}l c FOO 1",
        "LPOS {}l c RANK", "LPOS {}l", "LPOS {}l c RANK 9", "SET {}s v", "LPOS {}s v",
    ],
    "move": [
        "RPUSH {}s 1 2 3", "LMOVE {}s {}d LEFT RIGHT", "LMOVE {}s {}d RIGHT LEFT",
        "LRANGE {}s 0 -1", "LRANGE {}d 0 -1", "RPOPLPUSH {}s {}d", "EXISTS {}s",
        "LRANGE {}d 0 -1", "LMOVE {}s {}d LEFT LEFT", "RPOPLPUSH {}nope {}d",
        "LMOVE {}d {}d LEFT RIGHT", "LRANGE {}d 0 -1", "LMOVE {}d {}d UP DOWN",
        "SET {}str v", "LMOVE {}d {}str LEFT LEFT", "LRANGE {}d 0 -1",
        "LMOVE {}nope {}str LEFT LEFT",
    ],
    "wrong types and arity": [
        "SET {}str v", "LPUSH {}str a", "RPUSH {}str a", "LPOP {}str", "LRANGE {}str 0 -1",
        "LLEN {}str", "LINDEX {}str 0", "LSET {}str 0 a", "LREM {}str 0 a",
        "LTRIM {}str 0 1", "LINSERT {}str BEFORE a b", "RPUSH {}l a", "GET {}l",
        "SADD {}l m", "INCR {}l", "LPUSH {}l", "LPOP", "LRANGE {}l 0", "LLEN",
        "LINDEX {}l", "LSET {}l 0", "LREM {}l 0", "LTRIM {}l 0", "LINSERT {}l BEFORE a",
        "LMOVE {}l {}d LEFT", "RPOPLPUSH {}l", "LPOP {}l 1 2",
        "BLPOP {}l", "BLPOP {}l x", "BLPOP {}l -1", "BLMOVE {}l {}d LEFT RIGHT",
        "BRPOPLPUSH {}l {}d", "BRPOPLPUSH {}l {}d x",
    ],
    "blocking with data": [
        "RPUSH {}a 1 2", "RPUSH {}b 3 4", "BLPOP {}empty {}a 1", "BRPOP {}empty {}b {}a 1",
        "BRPOP {}a 0", "BLMOVE {}b {}c LEFT LEFT 0.5", "BRPOPLPUSH {}c {}a 0",
        "LRANGE {}a 0 -1", "EXISTS {}b {}c", "SET {}s v", "BLPOP {}s 1",
        "BLPOP {}empty 0.05", "BRPOP {}empty 0.05", "BLMOVE {}empty {}a LEFT LEFT 0.05",
        "MULTI", "BLPOP {}a 0", "BLPOP {}empty 0", "EXEC",
    ],
    "expiry": [
        "RPUSH {}l a b", "PEXPIRE {}l 50", "SLEEP 150", "EXISTS {}l", "LLEN {}l",
        "RPUSH {}l c", "TTL {}l", "LRANGE {}l 0 -1",
    ],
}


@pytest.mark.parametrize("case", list(CASES))
def test_same_replies_as_redis(servers, case):  # noqa: F811
    redis_addr, lkv_addr = servers
    prefix = "list_" + case.replace(" ", "_") + ":"
    ref = [Raw(redis_addr), Raw(redis_addr)]
    lkv = [Raw(lkv_addr), Raw(lkv_addr)]
    mismatches = []
    for line in CASES[case]:
        conn, args, ttl = parse(line, prefix)
        if args[0] == "SLEEP":
            time.sleep(int(args[1]) / 1000)
            continue
        expected, got = ref[conn](*args), lkv[conn](*args)
        if not same(expected, got, args, ttl):
            mismatches.append(f"{line}: redis {expected!r}, latticekv {got!r}")
    assert not mismatches, "\n".join(mismatches)


def clients(servers):  # noqa: F811
    redis_addr, lkv_addr = servers
    return {
        "redis": lambda: redis.Redis(host=redis_addr[0], port=redis_addr[1]),
        "latticekv": lambda: redis.Redis(host=lkv_addr[0], port=lkv_addr[1]),
    }


def pushed_later(make, key, value, delay=0.2):
    """Pushes `value` onto `key` from another connection after `delay` seconds."""
    def push():
        time.sleep(delay)
        make().rpush(key, value)
    t = threading.Thread(target=push)
    t.start()
    return t


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_blpop_is_woken_by_a_push_from_another_connection(servers, server):  # noqa: F811
    make = clients(servers)[server]
    r = make()
    key = f"blk:{server}:wake"
    r.delete(key)
    t = pushed_later(make, key, "job")
    start = time.time()
    assert r.blpop([key], timeout=5) == (key.encode(), b"job")
    assert time.time() - start < 4
    t.join()
    assert r.exists(key) == 0


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_timeouts_answer_nil(servers, server):  # noqa: F811
    r = clients(servers)[server]()
    start = time.time()
    assert r.blpop([f"blk:{server}:none"], timeout=0.2) is None
    assert r.brpop([f"blk:{server}:none", f"blk:{server}:none2"], timeout=0.2) is None
    assert r.blmove(f"blk:{server}:none", f"blk:{server}:d", 0.2, "LEFT", "RIGHT") is None
    assert time.time() - start >= 0.6


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_brpop_on_several_keys_takes_the_first_non_empty(servers, server):  # noqa: F811
    make = clients(servers)[server]
    r = make()
    a, b, c = (f"blk:{server}:{n}" for n in "abc")
    r.delete(a, b, c)
    r.rpush(b, "b1", "b2")
    r.rpush(c, "c1")
    assert r.brpop([a, b, c], timeout=1) == (b.encode(), b"b2")
    # Blocked on several empty keys: a push to any of them wakes it.
    r.delete(b, c)
    t = pushed_later(make, c, "late")
    assert r.brpop([a, b, c], timeout=5) == (c.encode(), b"late")
    t.join()


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_blmove_waits_then_moves(servers, server):  # noqa: F811
    make = clients(servers)[server]
    r = make()
    src, dst = f"blk:{server}:src", f"blk:{server}:dst"
    r.delete(src, dst)
    r.rpush(dst, "old")
    t = pushed_later(make, src, "x")
    assert r.blmove(src, dst, 5, "LEFT", "LEFT") == b"x"
    t.join()
    assert r.lrange(dst, 0, -1) == [b"x", b"old"]
    assert r.exists(src) == 0


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_a_closed_blocked_connection_pops_nothing(servers, server):  # noqa: F811
    make = clients(servers)[server]
    key = f"blk:{server}:closed"
    make().delete(key)
    waiter = make()
    waiter.execute_command("CLIENT", "SETNAME", "waiter")
    conn = waiter.connection_pool.get_connection()
    conn.send_command("BLPOP", key, 0)
    time.sleep(0.2)  # the command reaches the server and blocks
    conn.disconnect()
    time.sleep(0.3)  # the server notices the close
    r = make()
    r.rpush(key, "kept")
    time.sleep(0.3)  # a leftover waiter would have taken it by now
    assert r.lrange(key, 0, -1) == [b"kept"]


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_blocked_clients_are_served_in_order_of_arrival(servers, server):  # noqa: F811
    make = clients(servers)[server]
    key = f"blk:{server}:fifo"
    make().delete(key)
    got = {}

    def wait(name):
        got[name] = make().blpop([key], timeout=5)

    first = threading.Thread(target=wait, args=("first",))
    first.start()
    time.sleep(0.3)  # no event says "blocked": give the first client time to block
    second = threading.Thread(target=wait, args=("second",))
    second.start()
    time.sleep(0.3)
    r = make()
    r.rpush(key, "one")
    first.join(timeout=5)
    assert got.get("first") == (key.encode(), b"one")
    assert "second" not in got
    r.rpush(key, "two")
    second.join(timeout=5)
    assert got.get("second") == (key.encode(), b"two")


def test_blpop_waits_on_keys_of_every_worker(node):
    """A node with two workers (conftest's `node`): keys spread over both; a blocked pop
    on all of them is woken by a push to any, and list commands on keys of the other
    worker are forwarded."""
    make = lambda: redis.Redis(host=node.resp_host, port=node.resp_port)  # noqa: E731
    r = make()
    keys = [f"spread:{i}" for i in range(16)]
    for k in keys:
        r.rpush(k, "x", "y")
        assert r.lrange(k, 0, -1) == [b"x", b"y"]
        assert r.type(k) == b"list"
    r.delete(*keys)
    for target in (keys[3], keys[12]):
        t = pushed_later(make, target, "job")
        assert r.blpop(keys, timeout=5) == (target.encode(), b"job")
        t.join()
    # LMOVE moves between keys of one worker and refuses keys of two, moving nothing.
    outcomes = set()
    for k in keys[1:]:
        r.rpush(keys[0], "m")
        try:
            assert r.lmove(keys[0], k, "LEFT", "RIGHT") == b"m"
            assert r.lrange(k, 0, -1) == [b"m"]
            outcomes.add("moved")
        except redis.exceptions.ResponseError as e:
            assert "CROSSSLOT" in str(e)
            assert r.lrange(keys[0], 0, -1) == [b"m"]
            r.delete(keys[0])
            outcomes.add("refused")
    assert outcomes == {"moved", "refused"}
