"""Lists on two replicas written concurrently (multi-master, two nodes with replication 2):
what they converge to (docs/protocol.md, Lists)."""
from test_redis_strings import eventually, two_replicas  # noqa: F401  (the fixture)


def test_concurrent_pushes_and_pops_on_two_replicas_converge(two_replicas):  # noqa: F811
    a, b = two_replicas
    assert eventually(lambda: a.set("probe", "1") and b.get("probe") == b"1")
    a.rpush("q", "base")
    assert eventually(lambda: b.lrange("q", 0, -1) == [b"base"])
    # Concurrent pushes at both ends, on both replicas, within one gossip period.
    a.lpush("q", "a1", "a2")
    b.lpush("q", "b1")
    a.rpush("q", "a-tail")
    b.rpush("q", "b-tail")
    assert eventually(lambda: a.lrange("q", 0, -1) == b.lrange("q", 0, -1)
                      and a.llen("q") == 6)
    items = a.lrange("q", 0, -1)
    at = items.index
    # Every push survives; each replica's own pushes keep their order.
    assert sorted(items) == sorted([b"a1", b"a2", b"b1", b"base", b"a-tail", b"b-tail"])
    assert at(b"a2") < at(b"a1") < at(b"base") < at(b"a-tail")
    assert at(b"b1") < at(b"base") < at(b"b-tail")
    assert a.type("q") == b"list"

    # Pops on both replicas before they exchange deltas: at-least-once delivery.
    a.rpush("jobs", "j1", "j2")
    assert eventually(lambda: b.llen("jobs") == 2)
    got_a = a.lpop("jobs")
    got_b = b.lpop("jobs")
    assert got_a == b"j1"
    assert eventually(lambda: a.lrange("jobs", 0, -1) == b.lrange("jobs", 0, -1))
    if got_b == b"j1":
        # Both returned the head; it is removed once.
        assert a.lrange("jobs", 0, -1) == [b"j2"]
    else:
        # (Gossip brought a's pop to b first: b popped the next element.)
        assert got_b == b"j2" and a.exists("jobs") == 0
