"""SCRIPT KILL: a client on another connection stops a script that loops forever.

A script runs on the worker holding its keys and blocks that worker's thread (and the
connections it serves) until it ends, so SCRIPT KILL must come from a connection served by
another worker. The node has two workers; the test opens connections before the script
starts (new ones are accepted by one worker, which may be the busy one) and asks on them
until one answers (a connection on the busy worker cannot: its SCRIPT KILL times out, and
it is dropped).
"""

import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from conftest import Node

# Under the 5 s a worker waits for another to answer a forwarded request: the script's
# client may be served by the other worker, and must see the script's own outcome.
LIMIT_MS = 4000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    config = tmp_path_factory.mktemp("kill") / "node.toml"
    config.write_text(f"[limits]\nscript_time_limit_ms = {LIMIT_MS}\n")
    node = Node("--workers", "2", "--disk-nodes", "0", "--monitor", "false",
                "--config", str(config))
    yield node.resp_host, node.resp_port
    assert node.stop() == 0


def start(addr, body, key):
    """Runs `body` on its own connection in a thread; returns the thread and where its
    outcome lands (`reply` or `error`)."""
    outcome = {}

    def run():
        conn = redis.Redis(host=addr[0], port=addr[1], socket_timeout=None)
        try:
            outcome["reply"] = conn.eval(body, 1, key)
        except redis.exceptions.ResponseError as e:
            outcome["error"] = str(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def connections(addr, n=4):
    """`n` open connections: accepted round-robin, some are served by each worker. (A new
    connection could not be accepted while the accepting worker runs the script.)"""
    pool = []
    for _ in range(n):
        # No retries: a connection on the busy worker is given up at once.
        conn = redis.Redis(host=addr[0], port=addr[1], socket_timeout=0.5,
                           retry=Retry(NoBackoff(), 0))
        assert conn.ping() is True
        pool.append(conn)
    return pool


def kill_from_another_worker(pool, deadline):
    """SCRIPT KILL from a connection of `pool` that answers: the reply (OK or the error's
    text), once a script is running."""
    while pool and time.time() < deadline:
        for conn in list(pool):
            try:
                return conn.execute_command("SCRIPT", "KILL")
            except redis.exceptions.TimeoutError:
                # Served by the busy worker: its answer would come after the script.
                pool.remove(conn)
                conn.close()
            except redis.exceptions.ResponseError as e:
                if not str(e).startswith("NOTBUSY"):
                    return str(e)
                # The script has not started yet: ask again.
    raise AssertionError("no SCRIPT KILL answered before the deadline")


def wait_until_busy(pool, deadline):
    """Returns once a connection of `pool` stops answering (its worker runs the script),
    dropping it: by then the script has run for the connection's timeout."""
    while time.time() < deadline:
        for conn in list(pool):
            try:
                conn.ping()
            except redis.exceptions.TimeoutError:
                pool.remove(conn)
                conn.close()
                return
    raise AssertionError("no worker became busy before the deadline")


def test_script_kill_with_nothing_running_is_notbusy(node):
    r = redis.Redis(host=node[0], port=node[1])
    with pytest.raises(redis.exceptions.ResponseError, match="^NOTBUSY"):
        r.execute_command("SCRIPT", "KILL")


@pytest.mark.parametrize("body", [
    "while true do end",
    # Catching the kill does not help.
    "while true do pcall(function() while true do end end) end",
    # Reads are fine.
    "while true do redis.call('GET', KEYS[1]) end",
])
def test_an_endless_script_is_killed_from_another_connection(node, body):
    pool = connections(node)
    started = time.time()
    thread, outcome = start(node, body, "kill:endless")
    assert kill_from_another_worker(pool, started + LIMIT_MS / 1000 - 1) in (b"OK", "OK")
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert "Script killed by user with SCRIPT KILL" in outcome.get("error", ""), outcome
    assert time.time() - started < LIMIT_MS / 1000, "stopped by the time limit, not the kill"
    # The worker serves again.
    r = redis.Redis(host=node[0], port=node[1])
    assert r.set("kill:endless", "after") is True
    assert r.get("kill:endless") == b"after"


def test_a_script_that_wrote_is_unkillable_and_keeps_running(node):
    r = redis.Redis(host=node[0], port=node[1])
    r.delete("kill:wrote")
    pool = connections(node)
    started = time.time()
    thread, outcome = start(
        node, "redis.call('SET', KEYS[1], 'written') while true do end", "kill:wrote")
    # Past its first command: a kill between the run's start and its write would (rightly)
    # stop it before the write.
    wait_until_busy(pool, started + LIMIT_MS / 1000 - 1)
    reply = kill_from_another_worker(pool, started + LIMIT_MS / 1000 - 1)
    assert reply.startswith("UNKILLABLE"), reply
    # It ends at the time limit, its write kept (as documented).
    thread.join(timeout=LIMIT_MS / 1000 + 10)
    assert not thread.is_alive()
    assert "script time limit" in outcome.get("error", ""), outcome
    assert r.get("kill:wrote") == b"written"
    with pytest.raises(redis.exceptions.ResponseError, match="^NOTBUSY"):
        r.execute_command("SCRIPT", "KILL")
