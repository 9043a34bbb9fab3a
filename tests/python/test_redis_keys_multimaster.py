"""Keys and sets under multi-master replication: two nodes with replication 2 (each holds
every key and serves its own replica), written concurrently, converge to what
docs/protocol.md ("Keys and server", "Sets") says."""
import pytest

from test_redis_strings import Server, client, eventually


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


def converged(a, b, f):
    return eventually(lambda: f(a) == f(b))


def test_keys_spop_and_flush_on_two_replicas(two_replicas):
    a, b = two_replicas
    assert eventually(lambda: a.set("probe", "1") and b.get("probe") == b"1")
    # Each node holds every key: both list them all.
    a.mset({f"k{i}": i for i in range(20)})
    assert eventually(lambda: set(b.keys("k*")) == {f"k{i}".encode() for i in range(20)})
    assert set(a.keys("k*")) == set(b.keys("k*"))
    assert a.dbsize() == b.dbsize() == 21

    # SPOP on both replicas concurrently: each removes from its own state; the sets
    # converge to the members neither popped (a member may be popped twice).
    a.sadd("s", *"abcdef")
    assert eventually(lambda: b.scard("s") == 6)
    pa = set(a.spop("s", 2))
    pb = set(b.spop("s", 2))
    assert len(pa) == len(pb) == 2
    expected = {m.encode() for m in "abcdef"} - pa - pb
    assert eventually(lambda: a.smembers("s") == b.smembers("s") == expected), (
        a.smembers("s"), b.smembers("s"), expected)

    # A pop concurrent with an add of the same member on the other replica: add wins.
    a.delete("s2")
    a.sadd("s2", "x")
    assert eventually(lambda: b.smembers("s2") == {b"x"})
    assert a.spop("s2") == b"x"
    b.sadd("s2", "x")
    assert eventually(lambda: a.smembers("s2") == b.smembers("s2") == {b"x"})

    # SMOVE of one member on both replicas concurrently: both remove it from the source and
    # add it to the destination; it ends in the destination once, on both.
    a.sadd("src", "m", "keep")
    assert eventually(lambda: b.scard("src") == 2)
    assert a.smove("src", "dst", "m") is True
    assert b.smove("src", "dst", "m") is True
    assert eventually(lambda: a.smembers("dst") == b.smembers("dst") == {b"m"})
    assert eventually(lambda: a.smembers("src") == b.smembers("src") == {b"keep"})

    # SUNIONSTORE into one new destination on both replicas concurrently: both results
    # join the same incarnation of the set, so replicas converge to their union.
    a.sadd("u1", "p", "q")
    a.sadd("u2", "r")
    assert eventually(lambda: b.scard("u1") == 2 and b.scard("u2") == 1)
    assert a.sunionstore("dest", ["u1"]) == 2
    assert b.sunionstore("dest", ["u2"]) == 1
    assert eventually(lambda: a.smembers("dest") == b.smembers("dest") == {b"p", b"q", b"r"})
    # Into an existing destination: each store deletes it first (a tombstone) and writes a
    # new incarnation; the later incarnation wins whole.
    assert a.sunionstore("dest", ["u1"]) == 2
    assert b.sunionstore("dest", ["u2"]) == 1
    assert eventually(lambda: a.smembers("dest") == b.smembers("dest"))
    assert a.smembers("dest") in ({b"p", b"q"}, {b"r"}), a.smembers("dest")

    # FLUSHDB on one replica with a write of a flushed key on the other at the same time:
    # ordered by timestamp against the tombstone, so either outcome, the same on both.
    assert a.flushdb() is True
    b.set("k1", "racing")
    assert eventually(lambda: a.get("k1") == b.get("k1"))
    assert a.get("k1") in (None, b"racing")
    # Once the other replica has merged the tombstones, its writes are later: they stay.
    assert eventually(lambda: b.get("k2") is None)
    b.set("k0", "after")
    assert eventually(lambda: a.get("k0") == b.get("k0") == b"after")
    left = {b"k0"} | ({b"k1"} if a.get("k1") else set())
    assert eventually(lambda: set(a.keys()) == set(b.keys()) == left), (a.keys(), b.keys())
    assert a.dbsize() == b.dbsize() == len(left)
