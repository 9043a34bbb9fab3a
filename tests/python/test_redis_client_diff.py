"""Differential tests of CLIENT LIST / INFO / KILL (docs/protocol.md, "Keys and server"):
the same steps against a real `redis-server` and a latticekv node with two workers (so
connections are spread over workers and the registry must span them), outcomes compared.
Ids and addresses differ between servers, so each step is run on each server and what it
shows — who is listed, with which fields and values, who is killed — is compared."""

import socket

import pytest
import redis

from conftest import Node, redis_server
from test_redis_diff import Raw, normalise


@pytest.fixture(scope="module")
def servers():
    with redis_server() as port:
        node = Node("--workers", "2", "--disk-nodes", "0", "--monitor", "false")
        yield ("127.0.0.1", port), (node.resp_host, node.resp_port)
        assert node.stop() == 0


class Conn(Raw):
    """A raw connection that knows its own address."""

    def __init__(self, addr):
        self.conn = redis.Connection(host=addr[0], port=addr[1], socket_timeout=10, protocol=2)
        self.conn.connect()

    @property
    def addr(self):
        host, port = self.conn._sock.getsockname()[:2]
        return f"{host}:{port}"

    def closed_by_server(self):
        """True if the server closed the connection (without answering anything more)."""
        try:
            self.conn.read_response()
        except (redis.exceptions.ConnectionError, socket.error):
            return True
        return False


def parse(text):
    """CLIENT LIST / INFO text → one dict per line."""
    if isinstance(text, bytes):
        text = text.decode()
    out = []
    for line in text.strip().split("\n"):
        if line:
            out.append(dict(kv.split("=", 1) for kv in line.split(" ")))
    return out


ERROR_CASES = [
    ["CLIENT", "KILL", "1.2.3.4:5"],
    ["CLIENT", "KILL", "ID", "999999"],
    ["CLIENT", "KILL", "ID", "0"],
    ["CLIENT", "KILL", "ID", "x"],
    ["CLIENT", "KILL", "FOO", "bar"],
    ["CLIENT", "KILL", "ID", "1", "SKIPME", "maybe"],
    ["CLIENT", "KILL", "ID", "1", "SKIPME"],
    ["CLIENT", "KILL", "TYPE", "nosuchtype"],
    ["CLIENT", "KILL", "USER", "nosuchuser"],
    ["CLIENT", "KILL", "ADDR", "1.2.3.4:5", "SKIPME", "no"],
    ["CLIENT", "KILL", "LADDR", "1.2.3.4:5"],
    ["CLIENT", "LIST", "TYPE", "nosuchtype"],
    ["CLIENT", "LIST", "TYPE", "master"],
    ["CLIENT", "LIST", "ID", "x"],
    ["CLIENT", "LIST", "ID", "999999"],
    ["CLIENT", "LIST", "FOO"],
    ["CLIENT", "SETNAME", "has space"],
    ["CLIENT", "SETNAME", "ok-name"],
    ["CLIENT", "GETNAME"],
    ["CLIENT", "SETNAME", ""],
    ["CLIENT", "GETNAME"],
]

# CLIENT SETINFO is Redis 7.2's (the test's Redis may be 7.0, without it): its errors, as
# 7.2 words them.
SETINFO_ERRORS = {
    ("LIB-NAME", "has space"): "lib-name cannot contain spaces, newlines or special characters.",
    ("LIB-VER", "1\n2"): "lib-ver cannot contain spaces, newlines or special characters.",
    ("FOO", "x"): "Unrecognized option 'FOO'",
}


def test_client_errors_and_simple_replies_as_redis(servers):
    ref, lkv = Conn(servers[0]), Conn(servers[1])
    mismatches = []
    for args in ERROR_CASES:
        expected, got = ref(*args), lkv(*args)
        if expected != got:
            mismatches.append(f"{args}: redis {expected!r}, latticekv {got!r}")
    assert not mismatches, "\n".join(mismatches)
    r = redis.Redis(host=servers[1][0], port=servers[1][1], protocol=2)
    for (attr, value), message in SETINFO_ERRORS.items():
        with pytest.raises(redis.exceptions.ResponseError, match=message):
            r.execute_command("CLIENT", "SETINFO", attr, value)
    assert r.execute_command("CLIENT", "SETINFO", "lib-name", "ok") == b"OK"


def listing(addr):
    """Four named connections; what CLIENT LIST / INFO show of them."""
    conns = [Conn(addr) for _ in range(4)]
    for i, c in enumerate(conns):
        assert c("CLIENT", "SETNAME", f"diff-{i}") == b"OK"
    out = {}
    mine = {e["name"]: e for e in parse(conns[0]("CLIENT", "LIST")) if e["name"].startswith("diff-")}
    out["names"] = sorted(mine)
    out["ids unique"] = len({e["id"] for e in mine.values()}) == len(mine)
    out["addrs"] = all(mine[f"diff-{i}"]["addr"] == c.addr for i, c in enumerate(conns))
    out["laddr"] = {e["laddr"] for e in mine.values()} == {f"{addr[0]}:{addr[1]}"}
    out["own cmd"] = mine["diff-0"]["cmd"]
    out["other cmd"] = mine["diff-1"]["cmd"]
    out["flags"] = mine["diff-1"]["flags"]
    out["multi"] = mine["diff-1"]["multi"]
    out["fields"] = sorted(mine["diff-1"])
    # CLIENT LIST ID: just that one, by id.
    id2 = int(mine["diff-2"]["id"])
    assert conns[2]("CLIENT", "ID") == id2
    only = parse(conns[0]("CLIENT", "LIST", "ID", str(id2), "999999"))
    out["by id"] = [e["name"] for e in only]
    # CLIENT INFO: the calling connection.
    info = parse(conns[3]("CLIENT", "INFO"))
    out["info"] = (info[0]["name"], info[0]["cmd"], info[0]["id"] == mine["diff-3"]["id"])
    # A connection inside MULTI, and a subscriber, as another connection sees them.
    assert conns[1]("MULTI") == b"OK"
    assert conns[1]("PING") == b"QUEUED"
    seen = {e["name"]: e for e in parse(conns[0]("CLIENT", "LIST"))}
    out["in multi"] = (seen["diff-1"]["flags"], seen["diff-1"]["multi"])
    conns[2].conn.send_command("SUBSCRIBE", "diff-channel")
    assert conns[2].conn.read_response()[0] == b"subscribe"
    # Patterns and shard channels are counted apart (psub, ssub).
    conns[2].conn.send_command("PSUBSCRIBE", "diff-*", "diff-?")
    for _ in range(2):
        assert conns[2].conn.read_response()[0] == b"psubscribe"
    conns[2].conn.send_command("SSUBSCRIBE", "diff-shard")
    assert conns[2].conn.read_response()[0] == b"ssubscribe"
    pubsub = parse(conns[0]("CLIENT", "LIST", "TYPE", "pubsub"))
    out["pubsub"] = [(e["name"], e["flags"], e["sub"], e["psub"], e["ssub"])
                     for e in pubsub if e["name"].startswith("diff-")]
    normal = parse(conns[0]("CLIENT", "LIST", "TYPE", "normal"))
    out["normal"] = sorted(e["name"] for e in normal if e["name"].startswith("diff-"))
    # SETINFO shows in the list (Redis 7.2; the test's Redis may be 7.0, without it).
    conns[3]("CLIENT", "SETINFO", "LIB-NAME", "difflib")
    conns[3]("CLIENT", "SETINFO", "LIB-VER", "1.2")
    lib = {e["name"]: e for e in parse(conns[0]("CLIENT", "LIST"))}["diff-3"]
    out["lib"] = (lib.get("lib-name"), lib.get("lib-ver"))
    for c in conns:
        c.conn.disconnect()
    return out


def test_client_list_and_info_show_every_connection_as_redis(servers):
    expected, got = listing(servers[0]), listing(servers[1])
    # Fields: latticekv's are Redis 7.2's; the test's Redis may be 7.0 (no ssub/lib-*).
    missing = set(expected.pop("fields")) - set(got.pop("fields"))
    assert not missing, f"fields Redis lists and latticekv does not: {missing}"
    redis_lib, lkv_lib = expected.pop("lib"), got.pop("lib")
    assert lkv_lib == ("difflib", "1.2")
    assert redis_lib in (lkv_lib, (None, None))
    assert got == expected
    assert got["names"] == [f"diff-{i}" for i in range(4)]


def kills(addr):
    """Kills by each filter; who is gone afterwards."""
    out = {}
    a, b, c, d, e = (Conn(addr) for _ in range(5))
    for i, x in enumerate((a, b, c, d, e)):
        x("CLIENT", "SETNAME", f"kill-{i}")
    # By ID: b closes; a stays.
    out["id"] = a("CLIENT", "KILL", "ID", str(b("CLIENT", "ID")))
    out["id closed"] = b.closed_by_server()
    # The old form, by address.
    out["addr"] = a("CLIENT", "KILL", c.addr)
    out["addr closed"] = c.closed_by_server()
    # ADDR and LADDR together (AND): d only.
    out["addr+laddr"] = a("CLIENT", "KILL", "ADDR", d.addr, "LADDR", f"{addr[0]}:{addr[1]}")
    out["addr+laddr closed"] = d.closed_by_server()
    out["wrong laddr"] = a("CLIENT", "KILL", "ADDR", e.addr, "LADDR", "10.9.9.9:1")
    # Oneself, with SKIPME no: answered, then closed.
    out["self"] = e("CLIENT", "KILL", "ID", str(e("CLIENT", "ID")), "SKIPME", "no")
    out["self closed"] = e.closed_by_server()
    out["still alive"] = a("PING")
    # USER default SKIPME yes: every other connection of the server.
    others = [Conn(addr) for _ in range(3)]
    before = len(parse(a("CLIENT", "LIST")))
    killed = a("CLIENT", "KILL", "USER", "default")
    # Connections earlier tests closed may still be listed in `before` for a moment.
    out["user"] = 3 <= killed <= before - 1
    out["user closed"] = all(o.closed_by_server() for o in others)
    out["left"] = [x["name"] for x in parse(a("CLIENT", "LIST"))]
    a.conn.disconnect()
    return out


def test_client_kill_as_redis(servers):
    expected, got = kills(servers[0]), kills(servers[1])
    assert got == expected
    assert got["id"] == 1 and got["id closed"] and got["user closed"]
    assert got["left"] == ["kill-0"]


def test_kill_reaches_a_waiting_subscriber(servers):
    for addr in servers:
        sub, admin = Conn(addr), Conn(addr)
        assert sub("CLIENT", "SETNAME", "k-sub") == b"OK"
        sub.conn.send_command("SUBSCRIBE", "k-channel")
        assert sub.conn.read_response()[0] == b"subscribe"
        subs = parse(admin("CLIENT", "LIST", "TYPE", "pubsub"))
        (line,) = [e for e in subs if e["name"] == "k-sub"]
        assert normalise(admin("CLIENT", "KILL", "ID", line["id"])) == 1
        assert sub.closed_by_server()
