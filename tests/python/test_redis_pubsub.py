"""Pub/sub on the RESP port: the same sequences against a real `redis-server` and a
latticekv node (replies compared exactly where Redis's are deterministic), redis-py's
`PubSub` idioms, RESP3 pushes, a slow subscriber over its output limit, and two
`latticekv server` processes joined as a cluster (subscriber on one, publisher on the
other). See docs/protocol.md, "Pub/sub".
"""
import socket
import threading
import time

import pytest
import redis

from conftest import Node, redis_server
from test_redis_strings import Server


@pytest.fixture(scope="module")
def servers():
    with redis_server() as port:
        # Two workers: subscribers and publishers land on either (one registry per node).
        node = Node("--workers", "2", "--disk-nodes", "0", "--monitor", "false")
        yield {"redis": ("127.0.0.1", port), "latticekv": (node.resp_host, node.resp_port)}
        assert node.stop() == 0


class Wire:
    """A raw RESP connection: sends commands, reads whole replies as raw bytes."""

    def __init__(self, addr):
        self.sock = socket.create_connection(addr, timeout=5)
        self.buf = b""

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.sock.sendall(out)

    def _line(self):
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def read(self):
        """One reply, as the raw bytes of its frame."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        raw = line + b"\r\n"
        if kind in (b"$", b"=", b"!") and int(rest) >= 0:
            raw += self._exact(int(rest) + 2)
        elif kind in (b"*", b">", b"~") and int(rest) > 0:
            for _ in range(int(rest)):
                raw += self.read()
        elif kind == b"%":
            for _ in range(2 * int(rest)):
                raw += self.read()
        return raw

    def call(self, *args):
        self.send(*args)
        return self.read()

    def close(self):
        self.sock.close()


def deterministic_sequence(addr):
    """A transcript of pub/sub commands whose replies Redis makes deterministic."""
    sub, pub = Wire(addr), Wire(addr)
    t = []
    t.append(sub.call("SUBSCRIBE", "a"))
    sub.send("SUBSCRIBE", "b", "a")
    t += [sub.read(), sub.read()]
    t.append(sub.call("PSUBSCRIBE", "n*"))
    # RESP2 subscribed mode: only the subscribe family, PING, QUIT, RESET.
    t.append(sub.call("GET", "x"))
    t.append(sub.call("SET", "x", "1"))
    t.append(sub.call("NOSUCHCOMMAND"))
    t.append(sub.call("EVAL", "return 1", "0"))
    t.append(sub.call("GET"))
    t.append(sub.call("PUBLISH", "a", "x"))
    t.append(sub.call("PING"))
    t.append(sub.call("PING", "hi"))
    # Messages: a channel subscriber, then a pattern; each subscription counts.
    t.append(pub.call("PUBLISH", "a", "hello"))
    t.append(sub.read())
    t.append(pub.call("PUBLISH", "news", "x"))
    t.append(sub.read())
    t.append(pub.call("PUBLISH", "zzz", "x"))
    t.append(pub.call("PUBSUB", "NUMSUB", "a", "b", "zz"))
    t.append(pub.call("PUBSUB", "NUMSUB"))
    t.append(pub.call("PUBSUB", "NUMPAT"))
    t.append(pub.call("PUBSUB", "CHANNELS", "[a]*"))
    t.append(pub.call("PUBSUB", "CHANNELS", "zz*"))
    t.append(pub.call("PUBSUB", "FOO"))
    t.append(pub.call("PUBSUB", "NUMPAT", "x"))
    t.append(pub.call("PUBSUB", "CHANNELS", "a", "b"))
    t.append(pub.call("PUBSUB"))
    t.append(pub.call("PUBLISH", "a"))
    t.append(pub.call("SUBSCRIBE"))
    # A binary channel and payload.
    t.append(sub.call("SUBSCRIBE", b"\x00bin\xff"))
    t.append(pub.call("PUBLISH", b"\x00bin\xff", b"\r\n\x00"))
    t.append(sub.read())
    # Unsubscribing.
    t.append(sub.call("UNSUBSCRIBE", "a"))
    t.append(sub.call("UNSUBSCRIBE", "never"))
    t.append(sub.call("PUNSUBSCRIBE"))
    t.append(sub.call("UNSUBSCRIBE", "b"))
    t.append(sub.call("UNSUBSCRIBE", b"\x00bin\xff"))
    t.append(sub.call("UNSUBSCRIBE"))
    t.append(sub.call("PUNSUBSCRIBE"))
    # Out of subscribed mode: commands run again.
    t.append(sub.call("PING"))
    t.append(sub.call("GET", "pubsub:none"))
    # Shard channels (SPUBLISH's namespace).
    t.append(sub.call("SSUBSCRIBE", "s"))
    t.append(pub.call("SPUBLISH", "s", "m"))
    t.append(sub.read())
    t.append(pub.call("PUBLISH", "s", "not shard"))
    t.append(pub.call("PUBSUB", "SHARDCHANNELS"))
    t.append(pub.call("PUBSUB", "SHARDNUMSUB", "s"))
    t.append(sub.call("SUNSUBSCRIBE"))
    # RESET ends the subscriptions and subscribed mode.
    t.append(sub.call("SUBSCRIBE", "r"))
    t.append(sub.call("RESET"))
    t.append(pub.call("PUBSUB", "NUMSUB", "r"))
    t.append(sub.call("GET", "pubsub:none"))
    sub.close()
    pub.close()
    return t


def test_same_transcript_as_redis(servers):
    expected = deterministic_sequence(servers["redis"])
    got = deterministic_sequence(servers["latticekv"])
    for i, (e, g) in enumerate(zip(expected, got)):
        assert g == e, f"step {i}: redis {e!r}, latticekv {g!r}"
    assert len(got) == len(expected)


def test_pubsub_inside_multi_aborts_the_transaction(servers):
    """A difference from Redis 7.0 (which queues them): the pub/sub commands are refused
    inside MULTI, and EXEC then applies nothing."""
    c = Wire(servers["latticekv"])
    assert c.call("MULTI") == b"+OK\r\n"
    assert c.call("SET", "pubsub:multi", "1") == b"+QUEUED\r\n"
    for cmd in (("SUBSCRIBE", "m"), ("PUBLISH", "m", "x"), ("PUBSUB", "NUMPAT")):
        assert c.call(*cmd) == b"-ERR Command not allowed inside a transaction\r\n"
    assert c.call("EXEC").startswith(b"-EXECABORT")
    assert c.call("GET", "pubsub:multi") == b"$-1\r\n"
    # RESET inside MULTI runs at once and ends it.
    assert c.call("MULTI") == b"+OK\r\n"
    assert c.call("RESET") == b"+RESET\r\n"
    assert c.call("EXEC") == b"-ERR EXEC without MULTI\r\n"
    c.close()


def resp3_sequence(addr):
    sub, pub = Wire(addr), Wire(addr)
    sub.call("HELLO", "3")  # its map names the server: not compared
    t = [sub.call("SUBSCRIBE", "c3"), sub.call("PSUBSCRIBE", "c*")]
    # RESP3: every command still runs while subscribed.
    t.append(sub.call("GET", "pubsub:none"))
    t.append(sub.call("PING"))
    t.append(pub.call("PUBLISH", "c3", "v"))
    t += [sub.read(), sub.read()]
    # Publishing to itself: the pushes come before PUBLISH's reply.
    t.append(sub.call("PUBLISH", "c3", "self"))
    t += [sub.read(), sub.read()]
    t.append(sub.call("UNSUBSCRIBE", "c3"))
    t.append(sub.call("PUNSUBSCRIBE", "c*"))
    t.append(sub.call("UNSUBSCRIBE"))
    sub.close()
    pub.close()
    return t


def test_resp3_pushes_as_redis(servers):
    expected = resp3_sequence(servers["redis"])
    assert expected[0].startswith(b">3\r\n"), expected[0]
    assert resp3_sequence(servers["latticekv"]) == expected


def test_resp3_push_interleaved_with_replies(servers):
    """A message published while a RESP3 subscriber runs commands arrives as a `>` push
    between its replies; each reply is still in order."""
    sub, pub = Wire(servers["latticekv"]), Wire(servers["latticekv"])
    sub.call("HELLO", "3")
    assert sub.call("SUBSCRIBE", "i3") == b">3\r\n$9\r\nsubscribe\r\n$2\r\ni3\r\n:1\r\n"
    assert pub.call("PUBLISH", "i3", "one") == b":1\r\n"
    sub.send("SET", "pubsub:i3", "v")
    sub.send("GET", "pubsub:i3")
    frames = [sub.read() for _ in range(3)]
    push = b">3\r\n$7\r\nmessage\r\n$2\r\ni3\r\n$3\r\none\r\n"
    assert push in frames
    frames.remove(push)
    assert frames == [b"+OK\r\n", b"$1\r\nv\r\n"]
    sub.close()
    pub.close()


@pytest.mark.parametrize("server", ["redis", "latticekv"])
def test_redis_py_pubsub_idioms(servers, server):
    host, port = servers[server]
    r = redis.Redis(host=host, port=port)
    p = r.pubsub()
    p.subscribe("idiom")
    assert p.get_message(timeout=5) == {
        "type": "subscribe", "pattern": None, "channel": b"idiom", "data": 1}
    p.psubscribe("idi*")
    assert p.get_message(timeout=5)["type"] == "psubscribe"
    assert r.publish("idiom", "first") == 2
    m1, m2 = p.get_message(timeout=5), p.get_message(timeout=5)
    assert m1 == {"type": "message", "pattern": None, "channel": b"idiom", "data": b"first"}
    assert m2 == {"type": "pmessage", "pattern": b"idi*", "channel": b"idiom",
                  "data": b"first"}
    assert p.get_message(timeout=0.1) is None
    p.punsubscribe()
    p.get_message(timeout=5)
    # listen(): in order.
    for i in range(20):
        r.publish("idiom", str(i))
    got = []
    for m in p.listen():
        if m["type"] == "message":
            got.append(m["data"])
            if len(got) == 20:
                break
    assert got == [str(i).encode() for i in range(20)]
    p.close()
    # run_in_thread with a handler.
    received = []
    done = threading.Event()

    def handler(m):
        received.append(m["data"])
        if len(received) == 3:
            done.set()

    p = r.pubsub(ignore_subscribe_messages=True)
    p.subscribe(**{"worker": handler})
    thread = p.run_in_thread(sleep_time=0.01)
    try:
        # Wait for the subscription to exist before publishing (at-most-once).
        deadline = time.time() + 5
        while r.pubsub_numsub("worker") != [(b"worker", 1)]:
            assert time.time() < deadline
            time.sleep(0.01)
        for x in (b"a", b"b", b"c"):
            assert r.publish("worker", x) == 1
        assert done.wait(5)
        assert received == [b"a", b"b", b"c"]
    finally:
        thread.stop()
        thread.join(5)
        p.close()


def test_slow_subscriber_is_disconnected_and_the_node_keeps_serving(servers):
    addr = servers["latticekv"]
    sub = Wire(addr)
    assert sub.call("SUBSCRIBE", "slow").startswith(b"*3")
    r = redis.Redis(host=addr[0], port=addr[1])
    big = b"x" * (1 << 20)
    # The subscriber reads nothing: its queue (32 MiB) fills behind its socket.
    published = 0
    while r.publish("slow", big) == 1:
        published += 1
        assert published < 200, "never disconnected"
    assert published >= 31
    assert r.pubsub_numsub("slow") == [(b"slow", 0)]
    # Its connection is closed: what was written can be read, then the end.
    sub.sock.settimeout(10)
    with pytest.raises((ConnectionError, OSError)):
        while True:
            sub.read()
    # Everyone else is served.
    assert r.ping()
    r.set("pubsub:after", "ok")
    assert r.get("pubsub:after") == b"ok"
    p = r.pubsub()
    p.subscribe("slow")
    p.get_message(timeout=5)
    assert r.publish("slow", "small") == 1
    assert p.get_message(timeout=5)["data"] == b"small"
    p.close()


@pytest.fixture(params=["open", "secret"])
def two_nodes(request):
    """Two nodes joined as a cluster; with a cluster secret, relays prove it like every
    peer connection."""
    flags = ["--workers", "2", "--cluster-gossip-ms", "100", "--failure-timeout-ms", "5000",
             "--no-leave"]
    if request.param == "secret":
        flags += ["--cluster-secret", "pubsub-test-secret"]
    a = Server("ps1", None, *flags)
    b = Server("ps2", a.native, *flags)
    yield a, b
    b.stop()
    a.stop()


def test_a_subscriber_on_one_node_gets_messages_published_on_another(two_nodes):
    a, b = two_nodes
    ra = redis.Redis(host=a.resp_host, port=a.resp_port)
    rb = redis.Redis(host=b.resp_host, port=b.resp_port)
    p = rb.pubsub(ignore_subscribe_messages=True)
    p.subscribe("x-node")
    p.psubscribe("x-*")
    # PUBLISH counts the receivers on the publishing node: none on a.
    # Messages published before a knows b alive are not relayed (at most once): publish
    # probes until one arrives.
    deadline = time.time() + 20
    arrived = None
    while arrived is None:
        assert time.time() < deadline, "no message crossed the nodes"
        assert ra.publish("x-node", "probe") == 0
        arrived = p.get_message(timeout=0.2)
    while p.get_message(timeout=0.2) is not None:
        pass
    # From then on, every message arrives, in order, once per matching subscription.
    for i in range(50):
        ra.publish("x-node", str(i))
    got = []
    deadline = time.time() + 10
    while len(got) < 100 and time.time() < deadline:
        m = p.get_message(timeout=1)
        if m:
            got.append((m["type"], m["data"]))
    assert [d for t, d in got if t == "message"] == [str(i).encode() for i in range(50)]
    assert [d for t, d in got if t == "pmessage"] == [str(i).encode() for i in range(50)]
    assert p.get_message(timeout=0.3) is None, "each message once"
    # And the other way round; the subscriber's own node counts it.
    pa = ra.pubsub(ignore_subscribe_messages=True)
    pa.subscribe("back")
    pa.get_message(timeout=1)
    deadline = time.time() + 10
    while True:
        assert rb.publish("back", "hi") == 0
        m = pa.get_message(timeout=0.5)
        if m:
            assert m["data"] == b"hi"
            break
        assert time.time() < deadline
    # PUBSUB answers for the node asked.
    assert rb.pubsub_numsub("x-node") == [(b"x-node", 1)]
    assert ra.pubsub_numsub("x-node") == [(b"x-node", 0)]
    # SPUBLISH crosses too (the relay connection is open by now: in order, no loss).
    s = Wire((b.resp_host, b.resp_port))
    assert s.call("SSUBSCRIBE", "shard-x") == (
        b"*3\r\n$10\r\nssubscribe\r\n$7\r\nshard-x\r\n:1\r\n")
    assert ra.execute_command("SPUBLISH", "shard-x", "sm") == 0
    assert s.read() == b"*3\r\n$8\r\nsmessage\r\n$7\r\nshard-x\r\n$2\r\nsm\r\n"
    s.close()
    p.close()
    pa.close()
    # A member gone: PUBLISH never waits for it.
    b.stop()
    for _ in range(20):
        started = time.time()
        assert ra.publish("x-node", "to nobody") == 0
        assert time.time() - started < 0.5


def test_permissions_read_to_subscribe_write_to_publish(tmp_path):
    import hashlib
    sha = lambda p: hashlib.sha256(p.encode()).hexdigest()  # noqa: E731
    config = tmp_path / "users.toml"
    config.write_text(
        f'[[users]]\nname = "reader"\npassword_sha256 = "{sha("r-pw")}"\n'
        'permissions = ["read"]\n\n'
        f'[[users]]\nname = "writer"\npassword_sha256 = "{sha("w-pw")}"\n'
        'permissions = ["write"]\n')
    node = Node("--config", str(config), "--disk-nodes", "0", "--monitor", "false")
    try:
        addr = (node.resp_host, node.resp_port)
        anon = Wire(addr)
        assert anon.call("SUBSCRIBE", "p").startswith(b"-NOAUTH")
        # As Redis: RESET needs no authentication (and leaves the connection logged out).
        assert anon.call("RESET") == b"+RESET\r\n"
        assert anon.call("PING").startswith(b"-NOAUTH")
        reader, writer = Wire(addr), Wire(addr)
        assert reader.call("AUTH", "reader", "r-pw") == b"+OK\r\n"
        assert writer.call("AUTH", "writer", "w-pw") == b"+OK\r\n"
        assert reader.call("PUBLISH", "p", "x") == (
            b"-NOPERM User reader has no permissions to run the 'publish' command\r\n")
        assert writer.call("SUBSCRIBE", "p").startswith(b"-NOPERM User writer")
        assert writer.call("PUBSUB", "NUMSUB", "p").startswith(b"-NOPERM User writer")
        assert reader.call("SUBSCRIBE", "p").startswith(b"*3\r\n$9\r\nsubscribe")
        assert writer.call("PUBLISH", "p", "x") == b":1\r\n"
        assert reader.read() == b"*3\r\n$7\r\nmessage\r\n$1\r\np\r\n$1\r\nx\r\n"
        # RESET logs out: on a node with users, nothing runs until AUTH again.
        assert reader.call("RESET") == b"+RESET\r\n"
        assert reader.call("PING").startswith(b"-NOAUTH")
        for c in (anon, reader, writer):
            c.close()
    finally:
        assert node.stop() == 0


@pytest.fixture
def two_replicas():
    """Two nodes, two workers each, every key on both (writes reach the other by gossip)."""
    flags = ["--workers", "2", "--replication", "2", "--gossip-period-ms", "100",
             "--cluster-gossip-ms", "100", "--failure-timeout-ms", "5000", "--no-leave"]
    a = Server("kn1", None, *flags)
    b = Server("kn2", a.native, *flags)
    yield a, b
    b.stop()
    a.stop()


def test_keyspace_notifications_cross_workers_and_nodes_once(two_replicas):
    """Writes served on node a (keys on either worker) notify a subscriber on node b, each
    event once: the replica that receives a write by gossip sends nothing. A key reclaimed
    at its deadline (on both replicas) sends `expired` once."""
    a, b = two_replicas
    ra = redis.Redis(host=a.resp_host, port=a.resp_port)
    rb = redis.Redis(host=b.resp_host, port=b.resp_port)
    for r in (ra, rb):
        assert r.config_set("notify-keyspace-events", "KEA")
        assert r.config_get("notify-keyspace-events") == {"notify-keyspace-events": "AKE"}
    p = rb.pubsub(ignore_subscribe_messages=True)
    p.psubscribe("__keyevent@0__:*")
    # Relays start once a knows b alive: probe until one arrives, then drain.
    deadline = time.time() + 20
    while p.get_message(timeout=0.2) is None:
        assert time.time() < deadline, "no keyspace event crossed the nodes"
        ra.set("kn:probe", "x")
    time.sleep(0.5)
    while p.get_message(timeout=0.2) is not None:
        pass
    keys = [f"kn:{i}" for i in range(16)]  # spread over both workers of each node
    expected = []
    for k in keys:
        ra.set(k, "v")
        ra.lpush(k + ":l", "x")
        ra.hset(k + ":h", "f", "v")
        ra.delete(k)
        expected += [(b"__keyevent@0__:set", k.encode()),
                     (b"__keyevent@0__:lpush", (k + ":l").encode()),
                     (b"__keyevent@0__:hset", (k + ":h").encode()),
                     (b"__keyevent@0__:del", k.encode())]
    ra.set("kn:ttl", "v", px=300)
    expected += [(b"__keyevent@0__:set", b"kn:ttl"), (b"__keyevent@0__:expire", b"kn:ttl"),
                 (b"__keyevent@0__:expired", b"kn:ttl")]
    got = []
    deadline = time.time() + 15
    while len(got) < len(expected) and time.time() < deadline:
        m = p.get_message(timeout=1)
        if m:
            got.append((m["channel"], m["data"]))
    # Gossip (every 100 ms) has carried every write to b by now: nothing more comes.
    time.sleep(1)
    while (m := p.get_message(timeout=0.3)) is not None:
        got.append((m["channel"], m["data"]))
    assert sorted(got) == sorted(expected)
    # Writes served on one node, one connection: in order per key.
    for k in keys:
        mine = [e for e, key in got if key == k.encode()]
        assert mine == [b"__keyevent@0__:set", b"__keyevent@0__:del"]
    p.close()
