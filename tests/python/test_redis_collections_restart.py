"""Collections rebuilt from the write-ahead log: each write logs a small delta (the element
or member it added or removed), and replaying the log merges them back into the whole
list or set (docs/lattices.md, "Deltas")."""
import redis

from conftest import Node


def start(tmp_path):
    node = Node("--disk-nodes", "0", "--monitor", "false", "--workers", "1", data_dir=tmp_path)
    return node, redis.Redis(host=node.resp_host, port=node.resp_port)


def test_lists_and_sets_are_rebuilt_from_their_deltas(tmp_path):
    node, r = start(tmp_path)
    try:
        p = r.pipeline(transaction=False)
        for i in range(3000):
            p.lpush("rl:list", f"l{i}") if i % 2 else p.rpush("rl:list", f"r{i}")
            p.sadd("rl:set", f"m{i % 1200}")
        p.execute()
        # Removals at both ends, in the middle, and an overwrite.
        r.lpop("rl:list", 100)
        r.rpop("rl:list", 100)
        assert r.lrem("rl:list", 0, "r1500") == 1
        r.lset("rl:list", 7, "replaced")
        r.linsert("rl:list", "BEFORE", "replaced", "inserted")
        r.srem("rl:set", *[f"m{i}" for i in range(0, 1200, 7)])
        r.sadd("rl:set", "m7", "m14", "late")
        r.spop("rl:set", 5)
        expected_list = r.lrange("rl:list", 0, -1)
        expected_set = r.smembers("rl:set")
    finally:
        assert node.stop() == 0
    assert len(expected_list) == 3000 - 200 - 1 + 1
    node, r = start(tmp_path)
    try:
        assert r.lrange("rl:list", 0, -1) == expected_list
        assert r.smembers("rl:set") == expected_set
        # The rebuilt states keep working: a pop takes the head, a removed member stays out.
        assert r.lpop("rl:list") == expected_list[0]
        assert r.sismember("rl:set", "m0") == 0
    finally:
        assert node.stop() == 0
