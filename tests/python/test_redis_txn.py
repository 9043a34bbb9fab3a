"""Transactions through redis-py, unchanged: MULTI / EXEC / DISCARD / WATCH."""
import socket
import threading

import pytest
import redis

from conftest import Node, free_port


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def client(node, **kw) -> redis.Redis:
    return redis.Redis(host=node.resp_host, port=node.resp_port, **kw)


def raw(node):
    """One connection, replies undecorated by redis-py's callbacks: a function sending a
    command and returning its reply (an error reply is returned, not raised)."""
    conn = redis.Connection(host=node.resp_host, port=node.resp_port)

    def send(*args):
        conn.send_command(*args)
        try:
            return conn.read_response()
        except redis.exceptions.ResponseError as e:
            return e

    return send


@pytest.fixture
def single():
    """A node whose keys have one replica each (no disk tier, no monitor adding
    replicas), where WATCH can be honoured."""
    n = Node("--workers", "2", "--disk-nodes", "0", "--monitor", "false")
    yield n
    assert n.stop() == 0


def test_transactional_pipeline_applies_all_and_answers_each(node):
    r = client(node)
    p = r.pipeline()  # transaction=True: MULTI … EXEC
    p.set("t:a", "1")
    p.incr("t:n")
    p.incr("t:n")
    p.get("t:a")
    p.sadd("t:s", "x", "y")
    assert p.execute() == [True, 1, 2, b"1", 2]
    assert r.get("t:a") == b"1" and r.get("t:n") == b"2"


def test_a_runtime_error_is_its_element_and_the_rest_applies(node):
    r = client(node)
    r.sadd("t:set", "m")
    p = r.pipeline()
    p.set("t:b", "1")
    p.incr("t:set")
    p.set("t:c", "2")
    with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
        p.execute()
    assert r.get("t:b") == b"1" and r.get("t:c") == b"2"
    p = r.pipeline()
    p.set("t:b", "3").incr("t:set").set("t:c", "4")
    res = p.execute(raise_on_error=False)
    assert res[0] is True and res[2] is True
    assert isinstance(res[1], redis.exceptions.ResponseError)


def test_queue_time_error_discards_everything(node):
    r = client(node)
    p = r.pipeline()
    p.set("t:q", "1")
    p.execute_command("NOSUCHCOMMAND", "x")
    p.set("t:q2", "1")
    with pytest.raises(redis.exceptions.ResponseError):
        p.execute()
    assert r.get("t:q") is None and r.get("t:q2") is None
    # Raw: the errors as Redis answers them.
    c = raw(node)
    assert c("MULTI") == b"OK"
    assert c("SET", "t:q", "1") == b"QUEUED"
    assert "wrong number of arguments" in str(c("GET"))
    assert isinstance(c("EXEC"), redis.exceptions.ExecAbortError)
    assert r.get("t:q") is None


def test_discard_nesting_and_exec_without_multi(node):
    r = client(node)
    c = raw(node)
    assert "EXEC without MULTI" in str(c("EXEC"))
    assert "DISCARD without MULTI" in str(c("DISCARD"))
    assert c("MULTI") == b"OK"
    assert "can not be nested" in str(c("MULTI"))
    assert "WATCH inside MULTI" in str(c("WATCH", "x"))
    assert c("SET", "t:d", "1") == b"QUEUED"
    assert c("DISCARD") == b"OK"
    assert r.get("t:d") is None
    # Nesting and WATCH inside MULTI do not abort (as Redis).
    c("MULTI")
    c("MULTI")
    c("SET", "t:d", "2")
    assert c("EXEC") == [b"OK"]
    assert r.get("t:d") == b"2"


def test_watch_is_honoured_on_the_default_and_sees_writes_through_the_disk_node():
    # The default deployment keeps every key on a memory and a disk replica; the disk
    # node forwards clients' requests for such keys to the memory worker, the only one
    # taking their writes, so WATCH is honoured there and a write sent to the disk node's
    # own RESP port is seen by it.
    port = None
    for _ in range(50):
        p = free_port()
        if p + 100 < 65536 and port_is_free(p + 100):
            port = p
            break
    assert port is not None
    n = Node("--workers", "2", resp=f"127.0.0.1:{port}")
    try:
        r = client(n)
        via_disk = redis.Redis(host="127.0.0.1", port=port + 100)
        r.set("t:w", "1")
        assert via_disk.get("t:w") == b"1", "the disk node reads the memory tier's value"
        with r.pipeline() as p:
            p.watch("t:w")
            v = int(p.get("t:w"))
            via_disk.set("t:w", "100")  # a concurrent writer, through the disk node
            p.multi()
            p.set("t:w", v + 1)
            with pytest.raises(redis.exceptions.WatchError):
                p.execute()
        assert r.get("t:w") == b"100"
        # WATCH through the disk node's port runs at the memory worker too.
        with via_disk.pipeline() as p:
            p.watch("t:w")
            r.set("t:w", "7")
            p.multi()
            p.set("t:w", "8")
            with pytest.raises(redis.exceptions.WatchError):
                p.execute()
        assert r.transaction(lambda p: p.multi() or p.set("t:w", "9"), "t:w") == [True]
        assert via_disk.get("t:w") == b"9"
        via_disk.close()
    finally:
        assert n.stop() == 0


def test_watch_is_refused_for_keys_with_two_memory_replicas():
    # Two workers of the memory node hold each key (local replication 2): a write at the
    # other one could go unseen, so WATCH says so instead of risking a lost update.
    n = Node("--workers", "2", "--default-local-replication", "2", "--monitor", "false")
    try:
        r = client(n)
        with r.pipeline() as p:
            with pytest.raises(redis.exceptions.ResponseError, match="2 replicas"):
                p.watch("t:w")
        with pytest.raises(redis.exceptions.ResponseError, match="replicas"):
            r.transaction(lambda p: None, "t:w")
    finally:
        assert n.stop() == 0


def test_watch_idiom_detects_a_concurrent_write(single):
    r = client(single)
    other = client(single)
    r.set("w:k", "1")
    with r.pipeline() as p:
        p.watch("w:k")
        v = int(p.get("w:k"))
        other.set("w:k", "100")  # a concurrent writer
        p.multi()
        p.set("w:k", v + 1)
        with pytest.raises(redis.exceptions.WatchError):
            p.execute()
    assert r.get("w:k") == b"100"
    # Without interference it applies; a rewrite of the same value still counts.
    with r.pipeline() as p:
        p.watch("w:k")
        p.multi()
        p.set("w:k", "101")
        assert p.execute() == [True]
    with r.pipeline() as p:
        p.watch("w:k")
        other.set("w:k", "101")
        p.multi()
        p.set("w:k", "102")
        with pytest.raises(redis.exceptions.WatchError):
            p.execute()
    # A missing key that gets created, and a key deleted, are changes too.
    with r.pipeline() as p:
        p.watch("w:new")
        other.set("w:new", "x")
        p.multi()
        p.set("w:new", "y")
        with pytest.raises(redis.exceptions.WatchError):
            p.execute()
    with r.pipeline() as p:
        p.watch("w:new")
        other.delete("w:new")
        p.multi()
        p.set("w:new", "z")
        with pytest.raises(redis.exceptions.WatchError):
            p.execute()
    # UNWATCH forgets.
    with r.pipeline() as p:
        p.watch("w:k")
        other.set("w:k", "5")
        p.unwatch()
        p.multi()
        p.set("w:k", "6")
        assert p.execute() == [True]


def test_transaction_helper_counts_without_lost_updates(single):
    # redis-py's optimistic-locking helper from several threads: every increment lands.
    def bump(pipe):
        v = int(pipe.get("w:count") or 0)
        pipe.multi()
        pipe.set("w:count", v + 1)

    def worker():
        c = client(single)
        for _ in range(25):
            c.transaction(bump, "w:count")

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert client(single).get("w:count") == b"100"


def test_watched_transaction_across_workers_is_refused_whole(single):
    r = client(single)
    # Find two keys on different workers: a watched transaction writing both is refused
    # with nothing applied (it cannot run as one unit).
    refused = None
    for i in range(64):
        with r.pipeline() as p:
            p.watch("x:0")
            p.multi()
            p.set("x:0", "a")
            p.set(f"y:{i}", "b")
            try:
                p.execute()
            except redis.exceptions.ResponseError as e:
                refused = (i, str(e))
                break
    assert refused is not None, "two workers hold some of 64 keys"
    i, msg = refused
    assert "CROSSSLOT" in msg
    assert r.get(f"y:{i}") is None
