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

    # FLUSHDB on one replica, and a write on the other issued after it (a later
    # timestamp): the write survives, everything else is gone on both.
    assert a.flushdb() is True
    b.set("k0", "after")
    assert eventually(lambda: a.get("k0") == b.get("k0") == b"after")
    assert eventually(lambda: set(a.keys()) == set(b.keys()) == {b"k0"}), (a.keys(), b.keys())
    assert a.dbsize() == b.dbsize() == 1
