"""Subscriptions of the `latticekv` package against a real node (conftest's `node`)."""
import asyncio
import signal
import subprocess
import sys
import threading
import time

import pytest

import latticekv

# Generous: a push comes within a period (0.05 s here) of a change; the CI machine is slow.
WAIT = 10.0


@pytest.fixture
def client(node):
    return latticekv.connect(node.native, timeout=5.0)


def take(sub, n, timeout=WAIT):
    """The next n notifications as a dict key -> value (later ones of a key win)."""
    got = {}
    deadline = time.monotonic() + timeout
    for _ in range(n):
        item = sub.next(timeout=max(0.0, deadline - time.monotonic()))
        assert item is not None, f"only {got} within {timeout} s"
        key, value = item
        got[key] = value
    return got


def wait_for(sub, key, value, timeout=WAIT):
    """Reads notifications until `key` has `value`."""
    deadline = time.monotonic() + timeout
    while True:
        item = sub.next(timeout=max(0.0, deadline - time.monotonic()))
        assert item is not None, f"{key!r} did not become {value!r} within {timeout} s"
        if item == (key, value):
            return


def test_initial_values_arrive_first(client):
    client.put("sa", b"1")
    client.incr("sb", 5)
    client.sadd("sc", "x", "y")
    with client.subscribe(["sa", b"sb", bytearray(b"sc"), "sabsent"], period=0.05) as sub:
        assert isinstance(sub, latticekv.Subscription)
        assert sub.keys == {b"sa", b"sb", b"sc", b"sabsent"}
        # Values as get_value converts them; an absent key is None.
        assert take(sub, 4) == {b"sa": b"1", b"sb": 5, b"sc": {b"x", b"y"}, b"sabsent": None}


def test_a_single_key_may_be_given_alone(client):
    client.put("single", "v")
    with client.subscribe("single", period=0.05) as sub:
        assert sub.keys == {b"single"}
        assert sub.next(timeout=WAIT) == (b"single", b"v")


def test_a_write_by_another_client_is_pushed(node, client):
    other = latticekv.connect(node.native, timeout=5.0)
    with client.subscribe(["watched"], period=0.05) as sub:
        assert sub.next(timeout=WAIT) == (b"watched", None)
        other.put("watched", b"new")
        wait_for(sub, b"watched", b"new")
        other.delete("watched")
        wait_for(sub, b"watched", None)


def test_iteration_yields_key_value_pairs(node, client):
    other = latticekv.connect(node.native, timeout=5.0)
    seen = []
    with client.subscribe(["it"], period=0.05) as sub:
        writer = threading.Timer(0.2, other.put, ("it", b"done"))
        writer.start()
        try:
            for key, value in sub:
                seen.append((key, value))
                if value == b"done":
                    break
        finally:
            writer.join()
    assert seen[0] == (b"it", None)
    assert seen[-1] == (b"it", b"done")


def test_next_times_out_with_none_when_nothing_changes(client):
    client.put("quiet", b"q")
    with client.subscribe(["quiet"], period=0.05) as sub:
        assert sub.next(timeout=WAIT) == (b"quiet", b"q")
        start = time.monotonic()
        assert sub.next(timeout=0.3) is None
        elapsed = time.monotonic() - start
        assert 0.25 <= elapsed < 3.0
        assert sub.next(timeout=0) is None


def test_unsubscribe_stops_pushes_for_that_key(node, client):
    other = latticekv.connect(node.native, timeout=5.0)
    with client.subscribe(["ua", "ub"], period=0.05) as sub:
        assert take(sub, 2) == {b"ua": None, b"ub": None}
        sub.unsubscribe("ua")
        assert sub.keys == {b"ub"}
        sub.unsubscribe(["not-subscribed"])  # ignored
        other.put("ua", b"1")
        other.put("ub", b"2")
        wait_for(sub, b"ub", b"2")
        other.put("ua", b"3")
        # ua's writes never show up; ub is quiet.
        assert sub.next(timeout=0.5) is None
        # With no key left, the stream ends: next returns None at once, iteration stops.
        sub.unsubscribe(["ub"])
        assert sub.keys == set()
        assert sub.next() is None
        assert list(sub) == []


def test_context_manager_closes(client):
    with client.subscribe(["cm"], period=0.05) as sub:
        assert not sub.closed
        assert repr(sub) == "latticekv.Subscription(keys=1)"
    assert sub.closed
    assert sub.keys == set()
    assert sub.next() is None
    assert list(sub) == []
    assert repr(sub) == "latticekv.Subscription(closed)"
    sub.close()  # twice: nothing happens
    sub.unsubscribe(["cm"])  # nothing to end


def test_context_manager_closes_on_exception(client):
    with pytest.raises(RuntimeError):
        with client.subscribe(["cmx"]) as sub:
            raise RuntimeError("boom")
    assert sub.closed


def test_close_from_another_thread_ends_a_blocked_iteration(client):
    sub = client.subscribe(["blocked"], period=0.05)
    assert sub.next(timeout=WAIT) == (b"blocked", None)
    closer = threading.Timer(0.2, sub.close)
    closer.start()
    start = time.monotonic()
    assert list(sub) == []  # blocks until closed
    closer.join()
    assert time.monotonic() - start < 5.0


def test_waiting_releases_the_gil(client):
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(1)
            time.sleep(0.01)

    with client.subscribe(["gil"], period=0.05) as sub:
        sub.next(timeout=WAIT)
        t = threading.Thread(target=ticker)
        t.start()
        try:
            assert sub.next(timeout=0.5) is None
        finally:
            stop.set()
            t.join()
    assert len(ticks) >= 10


def test_ctrl_c_interrupts_a_blocked_iteration(node):
    # The child handles SIGINT as an interactive Python does. Set explicitly: a process
    # started in the background without job control (as CI runs `make test`) inherits
    # SIGINT ignored, and Python then never installs its handler — the cause of this
    # test's hangs in CI. If the child hangs anyway, faulthandler prints where its
    # threads are (to the test's captured stderr) before the timeout below kills it.
    code = (
        "import faulthandler, signal, latticekv\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
        "faulthandler.dump_traceback_later(8)\n"
        "c = latticekv.connect(%r)\n"
        "try:\n"
        "    with c.subscribe(['sigint']) as sub:\n"
        "        print('ready', flush=True)\n"
        "        for _ in sub:\n"
        "            pass\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', sub.closed, flush=True)\n" % node.native
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.3)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert out.strip() == "interrupted True"
    assert proc.returncode == 0


def test_bad_input_is_a_value_error(client):
    with pytest.raises(ValueError):
        client.subscribe([])
    with pytest.raises(ValueError):
        client.subscribe(["k"], period=0)
    with pytest.raises(ValueError):
        client.subscribe(["k"], period=-1.0)
    with pytest.raises(ValueError):
        client.subscribe(["k"], period=float("nan"))
    with pytest.raises(TypeError):
        client.subscribe([1, 2])
    with pytest.raises(TypeError):
        client.subscribe(42)
    with client.subscribe(["k"]) as sub:
        with pytest.raises(ValueError):
            sub.next(timeout=-1)


def test_async_subscription_round_trip(node):
    async def main():
        c = await latticekv.connect_async(node.native, timeout=5.0)
        other = await latticekv.connect_async(node.native, timeout=5.0)
        await c.put("as", b"0")
        async with await c.subscribe(["as", "bs"], period=0.05) as sub:
            assert isinstance(sub, latticekv.AsyncSubscription)
            assert sub.keys == {b"as", b"bs"}
            first = {}
            for _ in range(2):
                key, value = await sub.next(timeout=WAIT)
                first[key] = value
            assert first == {b"as": b"0", b"bs": None}
            assert await sub.next(timeout=0.3) is None

            # A cancelled next() loses nothing: the write lands in the next call.
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(sub.next(), 0.05)
            await other.put("as", b"1")
            assert await sub.next(timeout=WAIT) == (b"as", b"1")

            await sub.unsubscribe(["as"])
            assert sub.keys == {b"bs"}
            await other.put("as", b"2")
            await other.incr("bs", 3)
            async for key, value in sub:
                assert key == b"bs"
                if value == 3:
                    break
        assert sub.closed
        assert await sub.next() is None
        assert [item async for item in sub] == []

        with pytest.raises(ValueError):
            await c.subscribe([])
        with pytest.raises(ValueError):
            await c.subscribe("k", period=0)

    asyncio.run(main())
