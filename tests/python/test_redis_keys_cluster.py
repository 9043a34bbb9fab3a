"""Listing the key space across a cluster (docs/protocol.md, "Keys and server"): three
memory nodes, two workers each, replication 2 — so every node holds about two thirds of
the keys and every key is on two nodes. A client connected to any node lists every key of
the cluster, each once, with redis-py's idioms (`scan_iter`, `keys`, `dbsize`,
`randomkey`, `flushdb`); a SCAN cursor is the same on every node."""
import pytest

from test_redis_strings import Server, client, eventually

N_STRINGS, N_HASHES, N_LISTS = 400, 60, 40


@pytest.fixture(scope="module")
def cluster():
    flags = ["--workers", "2", "--replication", "2", "--cluster-gossip-ms", "100",
             "--no-leave"]
    a = Server("n1", None, *flags)
    b = Server("n2", a.native, *flags)
    c = Server("n3", a.native, *flags)
    clients = [client(s) for s in (a, b, c)]
    yield clients
    for s in (c, b, a):
        s.stop()


def local_keys(r):
    """This node's own keys (INFO's keyspace line does not ask the others)."""
    return r.info("keyspace").get("db0", {}).get("keys", 0)


def fill(cluster):
    ra, rb, rc = cluster
    # Every node knows the three members (a write through any node reaches the others).
    assert eventually(lambda: ra.set("probe", 1) and all(r.get("probe") == b"1" for r in cluster))
    ra.delete("probe")
    ra.mset({f"s:{i}": i for i in range(N_STRINGS)})
    for i in range(N_HASHES):
        rb.hset(f"h:{i}", "f", i)
    for i in range(N_LISTS):
        rc.rpush(f"l:{i}", i)
    expected = ({f"s:{i}".encode() for i in range(N_STRINGS)}
                | {f"h:{i}".encode() for i in range(N_HASHES)}
                | {f"l:{i}".encode() for i in range(N_LISTS)})
    total = len(expected)
    # Replicas converge (gossip): each key on two of the three nodes.
    assert eventually(lambda: sum(local_keys(r) for r in cluster) == 2 * total, timeout=30)
    return expected


def test_every_node_lists_every_key_of_the_cluster_once(cluster):
    expected = fill(cluster)
    total = len(expected)
    for r in cluster:
        # Keys are partitioned: no node holds them all, so a node-local listing would not do.
        assert 0 < local_keys(r) < total
        seen = list(r.scan_iter(count=25))
        assert len(seen) == len(set(seen)) == total, "each key once"
        assert set(seen) == expected
        assert sorted(r.keys("*")) == sorted(expected)
        assert r.dbsize() == total
        hashes = list(r.scan_iter(_type="hash", count=10))
        assert sorted(hashes) == sorted(k for k in expected if k.startswith(b"h:"))
        lists = list(r.scan_iter(match="l:*", count=7))
        assert sorted(lists) == sorted(k for k in expected if k.startswith(b"l:"))
        assert set(r.keys("s:1?")) == {f"s:{i}".encode() for i in range(10, 20)}
        assert r.randomkey() in expected


def test_a_scan_cursor_can_be_continued_on_another_node(cluster):
    expected = fill(cluster)
    seen, cursor, i = [], 0, 0
    while True:
        # Each page from the next node: the cursor means the same everywhere.
        cursor, page = cluster[i % 3].scan(cursor, count=20)
        seen.extend(page)
        i += 1
        assert i < 10_000
        if cursor == 0:
            break
    assert i > 3, "several pages"
    assert len(seen) == len(set(seen)) == len(expected)
    assert set(seen) == expected


def test_flushdb_on_one_node_empties_the_cluster(cluster):
    fill(cluster)
    ra, rb, rc = cluster
    assert rc.flushdb() is True
    # The deletes replicate by gossip: every replica drops its copies.
    assert eventually(lambda: all(r.dbsize() == 0 for r in cluster))
    assert eventually(lambda: all(local_keys(r) == 0 for r in cluster))
    assert all(r.keys() == [] for r in cluster)
    assert ra.randomkey() is None


def test_keys_is_bounded_by_the_reply_limit_and_scan_is_not(tmp_path):
    """KEYS past `limits.max_reply_bytes` is a clear error naming SCAN; the node keeps
    serving, and SCAN pages through the same keys."""
    from conftest import Node

    config = tmp_path / "small-replies.toml"
    config.write_text("[limits]\nmax_reply_bytes = 4096\n")
    node = Node("--config", str(config), "--workers", "2", "--disk-nodes", "0",
                "--monitor", "false")
    try:
        r = client(node)
        names = [f"bounded:{i:04}:" + "x" * 20 for i in range(300)]  # ~13 KiB of keys
        r.mset({k: 1 for k in names})
        with pytest.raises(Exception, match="4096-byte reply limit: use SCAN"):
            r.keys("bounded:*")
        assert r.ping() is True
        assert sorted(r.keys("bounded:000?:*")) == sorted(k.encode() for k in names[:10])
        seen = list(r.scan_iter(match="bounded:*", count=50))
        assert sorted(seen) == sorted(k.encode() for k in names)
        assert r.dbsize() == 300
    finally:
        node.stop()


def test_a_member_that_does_not_answer_fails_the_listing_until_it_is_dead():
    """A stopped member fails KEYS with an error naming it (a partial listing would miss
    keys silently); once the failure detector declares it dead it is no longer asked, and
    the keys are listed from their other replicas."""
    flags = ["--workers", "1", "--replication", "2", "--cluster-gossip-ms", "100",
             "--failure-timeout-ms", "2000", "--no-leave"]
    a = Server("f1", None, *flags)
    b = Server("f2", a.native, *flags)
    c = Server("f3", a.native, *flags)
    try:
        ra, rb, rc = client(a), client(b), client(c)
        names = {f"f:{i}".encode() for i in range(100)}
        assert eventually(lambda: ra.set("probe", 1) and rc.get("probe") == b"1")
        ra.delete("probe")
        ra.mset({k: 1 for k in names})
        assert eventually(lambda: sum(local_keys(r) for r in (ra, rb, rc)) == 200, timeout=30)
        assert set(ra.keys()) == names
        c.stop()
        with pytest.raises(Exception, match="did not answer the key listing"):
            ra.keys()
        assert ra.ping() is True
        # Declared dead: listed from the replicas on the two others.
        assert eventually(lambda: _keys_or_none(ra) == names, timeout=30)
        assert sorted(rb.scan_iter(count=10)) == sorted(names)
    finally:
        for s in (c, b, a):
            s.stop()


def _keys_or_none(r):
    try:
        return set(r.keys())
    except Exception:
        return None
