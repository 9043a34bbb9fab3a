"""Hash tags (Redis Cluster's `{tag}` rule): keys sharing a tag share a worker, so multi-key
scripts, WATCH + MULTI/EXEC, MSETNX and LMOVE over them work on a node with several
workers, as job-queue libraries (BullMQ's `bull:{queue}:…`) use them on Redis Cluster.

`--hash-tags false` places every key by its whole hash, bit for bit as versions before hash
tags did: it shows the CROSSSLOT refusals the rule removes, and writes a data directory as
an older version would (the write-ahead log's format did not change), which a restart with
hash tags must read back whole. See docs/protocol.md, "Hash tags".
"""
import pytest
import redis

from conftest import Node

TAGS = [f"q{i}" for i in range(24)]

# Writes and reads both keys in one script.
BOTH = ("redis.call('SET', KEYS[1], ARGV[1]) redis.call('SET', KEYS[2], ARGV[1]) "
        "return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}")


def client(node):
    return redis.Redis(host=node.resp_host, port=node.resp_port)


def script(r, tag):
    """EVAL over `{tag}:a` and `{tag}:b`: their values, or the error's text."""
    try:
        return r.eval(BOTH, 2, f"{{{tag}}}:a", f"{{{tag}}}:b", tag)
    except redis.exceptions.ResponseError as e:
        return str(e)


def watched(r, tag):
    """WATCH `{tag}:a`, then MULTI/EXEC writing `{tag}:a` and `{tag}:b`: the replies, or
    the error's text."""
    with r.pipeline() as p:
        p.watch(f"{{{tag}}}:a")
        p.multi()
        p.incr(f"{{{tag}}}:n")
        p.set(f"{{{tag}}}:b", "w")
        try:
            return p.execute()
        except redis.exceptions.ResponseError as e:
            return str(e)


def test_keys_of_a_tag_share_a_worker_and_the_old_rule_refused_them():
    old = Node("--workers", "4", "--hash-tags", "false")
    try:
        r = client(old)
        refused = [t for t in TAGS if "CROSSSLOT" in str(script(r, t))]
        # With 4 workers, 3 of 4 tags put their two keys apart.
        assert len(refused) >= 6, refused
        assert all("CROSSSLOT" in str(watched(r, t)) for t in refused[:3])
        for t in refused:
            assert r.get(f"{{{t}}}:a") is None, "a refused script wrote nothing"
    finally:
        assert old.stop() == 0

    n = Node("--workers", "4")
    try:
        r = client(n)
        for t in TAGS:
            assert script(r, t) == [t.encode(), t.encode()]
            assert watched(r, t) == [1, True]
            assert r.msetnx({f"{{{t}}}:x": "1", f"{{{t}}}:y": "2"})
            r.rpush(f"{{{t}}}:wait", "job")
            assert r.lmove(f"{{{t}}}:wait", f"{{{t}}}:active", "LEFT", "RIGHT") == b"job"
            assert r.lrange(f"{{{t}}}:active", 0, -1) == [b"job"]
        # Redis's rule exactly: an empty first tag hashes the whole key, so these are
        # placed apart somewhere, as under the old rule.
        assert any("CROSSSLOT" in str(script_keys(r, f"x{i}{{}}{{t}}", f"y{i}{{}}{{t}}"))
                   for i in range(24))
    finally:
        assert n.stop() == 0


def script_keys(r, a, b):
    try:
        return r.eval(BOTH, 2, a, b, "v")
    except redis.exceptions.ResponseError as e:
        return str(e)


def write_everything(r):
    """Keys of every type under each tag, and untagged ones; returns what each should
    read back as."""
    expected = {}
    for t in TAGS:
        r.set(f"{{{t}}}:s", f"s-{t}")
        r.hset(f"{{{t}}}:h", mapping={"f": t, "g": "2"})
        r.rpush(f"{{{t}}}:l", "a", t)
        r.sadd(f"{{{t}}}:set", "m", t)
        r.incrby(f"{{{t}}}:c", 7)
        r.zadd(f"{{{t}}}:z", {t: 1.5})
        expected[f"{{{t}}}:s"] = ("string", f"s-{t}".encode())
        expected[f"{{{t}}}:h"] = ("hash", {b"f": t.encode(), b"g": b"2"})
        expected[f"{{{t}}}:l"] = ("list", [b"a", t.encode()])
        expected[f"{{{t}}}:set"] = ("set", {b"m", t.encode()})
        expected[f"{{{t}}}:c"] = ("string", b"7")
        expected[f"{{{t}}}:z"] = ("zset", [(t.encode(), 1.5)])
    for i in range(20):
        r.set(f"plain:{i}", str(i))
        expected[f"plain:{i}"] = ("string", str(i).encode())
    return expected


def read_back(r, expected):
    """Every key, read at once (no waiting): its value, and DBSIZE counts each once."""
    for key, (kind, value) in expected.items():
        got = {
            "string": lambda: r.get(key),
            "hash": lambda: r.hgetall(key),
            "list": lambda: r.lrange(key, 0, -1),
            "set": lambda: r.smembers(key),
            "zset": lambda: r.zrange(key, 0, -1, withscores=True),
        }[kind]()
        assert got == value, (key, got, value)
    assert r.dbsize() == len(expected)


# Without a disk node the memory node's view never changes after its start, so only the
# start's own check moves the keys; with one (the default deployment) its joining changes
# every key's replicas, and the keys move by that view change as well.
@pytest.mark.parametrize("deployment", [["--disk-nodes", "0"], []], ids=["memory-only", "default"])
def test_a_data_directory_written_without_hash_tags_reads_back_whole(tmp_path, deployment):
    data = tmp_path / "data"
    old = Node("--workers", "4", "--hash-tags", "false", *deployment, data_dir=data)
    try:
        r = client(old)
        expected = write_everything(r)
        # Written by whole keys: some tag's keys are on different workers.
        assert any("CROSSSLOT" in str(script_keys(r, f"{{{t}}}:s", f"{{{t}}}:h"))
                   for t in TAGS)
        read_back(r, expected)
    finally:
        assert old.stop() == 0

    # Restarted with hash tags: every key reads back at once, and the keys of each tag
    # now share a worker.
    for restart in range(2):
        n = Node("--workers", "4", *deployment, data_dir=data)
        try:
            r = client(n)
            read_back(r, expected)
            for t in TAGS:
                got = r.eval("return {redis.call('GET', KEYS[1]), redis.call('HGET', KEYS[2], 'f'),"
                             " redis.call('LLEN', KEYS[3]), redis.call('INCR', KEYS[4])}",
                             4, f"{{{t}}}:s", f"{{{t}}}:h", f"{{{t}}}:l", f"{{{t}}}:c")
                assert got == [f"s-{t}".encode(), t.encode(), 2, 8 + restart], (t, got)
                expected[f"{{{t}}}:c"] = ("string", str(8 + restart).encode())
        finally:
            assert n.stop() == 0

    # And back to whole keys (an operator turning the rule off): nothing is lost either.
    old = Node("--workers", "4", "--hash-tags", "false", *deployment, data_dir=data)
    try:
        read_back(client(old), expected)
    finally:
        assert old.stop() == 0
