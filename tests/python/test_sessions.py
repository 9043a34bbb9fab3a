"""Sessions, transactions and map writes of the `latticekv` package against a real node."""
import asyncio
import threading

import pytest

import latticekv

LEVELS = [
    "eventual",
    "read-your-writes",
    "monotonic-reads",
    "monotonic-writes",
    "writes-follow-reads",
    "pram",
    "causal",
    "multi-key-causal",
    "read-uncommitted",
    "read-committed",
    "item-cut",
]
TRANSACTIONAL = ["read-uncommitted", "read-committed", "item-cut"]


@pytest.fixture
def client(node):
    return latticekv.connect(node.native, timeout=5.0)


def test_every_level_name_creates_a_session(client):
    for level in LEVELS:
        s = client.session(level)
        assert isinstance(s, latticekv.Session)
        assert s.level == level
        assert repr(s) == f"latticekv.Session(level='{level}')"
    # Aliases and spellings Level::from_name accepts map to the canonical name.
    assert client.session("RYW").level == "read-your-writes"
    assert client.session("multi_key_causal").level == "multi-key-causal"
    assert client.session("rc").level == "read-committed"
    assert client.session().level == "eventual"


def test_bad_level_is_a_value_error_listing_the_levels(client):
    with pytest.raises(ValueError) as e:
        client.session("linearizable")
    for level in LEVELS:
        assert level in str(e.value)
    with pytest.raises(ValueError):
        client.session("causal", max_keys=0)


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_reads_its_own_write(client, level):
    s = client.session(level)
    key = f"own-{level}"
    assert s.read(key) == []
    assert s.get(key) is None
    s.write(key, b"v1")
    assert s.read(key) == [b"v1"]
    s.put(key, "v2")
    assert s.read(key) == [b"v2"]
    expected = [b"v2"] if level in ("causal", "multi-key-causal") else b"v2"
    assert s.get(key) == expected


def test_read_your_writes_sees_own_write(client):
    s = client.session("read-your-writes")
    s.write("ryw", b"mine")
    assert s.read("ryw") == [b"mine"]
    assert s.get("ryw") == b"mine"
    assert s.tracked_keys >= 1
    # Another client reads it from the store as a plain LWW register.
    assert client.get("ryw") == b"mine"


def test_causal_write_overwrites_what_it_read(client):
    a = client.session("causal")
    b = client.session("causal")
    a.write("ck", b"from-a")
    # b's write reads the key first (Anna's read-modify-write), so it overwrites a's write
    # instead of becoming a sibling of it; both sessions and a plain read see only b's.
    b.write("ck", b"from-b")
    assert a.read("ck") == [b"from-b"]
    assert client.get_value("ck") == [b"from-b"]
    a.write("ck", b"merged")
    assert a.read("ck") == [b"merged"]
    assert b.read("ck") == [b"merged"]
    assert a.actor != b.actor


def test_multi_key_causal_write_read(client):
    s = client.session("multi-key-causal")
    s.write("x", b"1")
    s.write("y", b"2")
    other = client.session("multi-key-causal")
    assert other.read("y") == [b"2"]
    assert other.read("x") == [b"1"]
    with pytest.raises(latticekv.WrongTypeError):
        client.get("x")  # a causal register, not LWW


def test_non_transactional_level_has_no_transactions(client):
    with pytest.raises(latticekv.InvalidUseError) as e:
        client.session("causal").begin()
    assert isinstance(e.value, latticekv.Error)


def test_read_committed_commit_makes_writes_visible(client):
    s = client.session("read-committed")
    t = s.begin()
    assert isinstance(t, latticekv.Transaction)
    assert t.level == "read-committed"
    t.write("ta", b"1")
    t.put("tb", "2")
    assert t.buffered == 2
    assert t.read("ta") == [b"1"]  # own buffered write
    assert client.get("ta") is None  # not visible before commit
    t.commit()
    assert t.finished
    assert client.get("ta") == b"1"
    assert client.get("tb") == b"2"


def test_read_committed_abort_discards_writes(client):
    t = client.session("read-committed").begin()
    t.write("gone", b"x")
    t.abort()
    assert t.finished
    assert client.get("gone") is None


def test_item_cut_repeated_read_is_stable(client):
    client.put("ic", b"before")
    t = client.session("item-cut").begin()
    assert t.read("ic") == [b"before"]
    client.put("ic", b"after")  # another client's write in between
    assert client.get("ic") == b"after"
    assert t.read("ic") == [b"before"]
    assert t.get("ic") == b"before"
    t.commit()


def test_read_committed_rereads_see_new_commits(client):
    client.put("rc", b"before")
    t = client.session("read-committed").begin()
    assert t.read("rc") == [b"before"]
    client.put("rc", b"after")
    assert t.read("rc") == [b"after"]
    t.abort()


def test_read_uncommitted_write_is_visible_before_commit(client):
    t = client.session("read-uncommitted").begin()
    t.write("ru", b"dirty")
    assert client.get("ru") == b"dirty"
    t.write("ru", b"dirty2")  # a later write in the transaction wins
    assert client.get("ru") == b"dirty2"
    t.commit()
    assert client.get("ru") == b"dirty2"


def test_context_manager_commits_on_normal_exit(client):
    s = client.session("read-committed")
    with s.begin() as t:
        t.write("cm1", b"a")
        t.write("cm2", b"b")
        assert client.get("cm1") is None
    assert t.finished
    assert client.get("cm1") == b"a"
    assert client.get("cm2") == b"b"


def test_context_manager_aborts_on_exception(client):
    s = client.session("item-cut")

    class Boom(Exception):
        pass

    with pytest.raises(Boom):
        with s.begin() as t:
            t.write("cm-abort", b"a")
            raise Boom()
    assert t.finished
    assert client.get("cm-abort") is None


def test_context_manager_after_explicit_commit(client):
    with client.session("rc").begin() as t:
        t.write("cm-explicit", b"x")
        t.commit()
    assert client.get("cm-explicit") == b"x"


@pytest.mark.parametrize("finish", ["commit", "abort"])
def test_finished_transaction_raises(client, finish):
    t = client.session("read-committed").begin()
    t.write("fin", b"x")
    getattr(t, finish)()
    for call in [
        lambda: t.get("fin"),
        lambda: t.read("fin"),
        lambda: t.write("fin", b"y"),
        lambda: t.put("fin", b"y"),
        lambda: t.merge("fin-m", "max", 1),
        t.commit,
        t.abort,
    ]:
        with pytest.raises(latticekv.InvalidUseError):
            call()
    assert t.buffered == 0


def test_autocommit_outside_a_transaction(client):
    s = client.session("read-committed")
    s.write("auto", b"v")
    assert client.get("auto") == b"v"
    assert s.read("auto") == [b"v"]


def test_session_shared_between_threads(client):
    s = client.session("pram")
    errors = []

    def work(i):
        try:
            for j in range(20):
                s.write(f"th{i}", str(j))
                assert s.read(f"th{i}") == [str(j).encode()]
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert client.get("th3") == b"19"


def test_map_write_and_read_round_trip(client):
    client.merge("m", "map", {
        "name": "ada",
        b"age": 36,
        "admin": True,
        "tags": {"x", "y"},
        "nested": {"inner": b"v"},
        "low": ("min", 5),
        "prio": ("priority", (2.0, "p")),
        "ord": ("ordered-set", ["b", "a"]),
    })
    assert client.get_value("m") == {
        b"name": b"ada",
        b"age": 36,
        b"admin": True,
        b"tags": {b"x", b"y"},
        b"nested": {b"inner": b"v"},
        b"low": 5,
        b"prio": (2.0, b"p"),
        b"ord": [b"a", b"b"],
    }
    # Field-wise merge: max keeps the larger, sets grow, a later LWW write wins.
    client.merge("m", "map", {"age": 30, "tags": {"z"}, "name": "grace", "low": ("min", 1)})
    v = client.get_value("m")
    assert v[b"age"] == 36
    assert v[b"tags"] == {b"x", b"y", b"z"}
    assert v[b"name"] == b"grace"
    assert v[b"low"] == 1


def test_map_through_a_session_and_a_transaction(client):
    s = client.session("read-your-writes")
    s.merge("sm", "map", {"a": "1"})
    assert s.get("sm") == {b"a": b"1"}
    with client.session("read-committed").begin() as t:
        t.merge("tm", "map", {"a": 1})
        t.merge("tm", "map", {"b": 2})  # buffered writes of one key merge
        assert t.get("tm") == {b"a": 1, b"b": 2}
    assert client.get_value("tm") == {b"a": 1, b"b": 2}


def test_map_and_lww_merge_errors(client):
    with pytest.raises(TypeError):
        client.merge("bad", "map", [("a", "b")])
    with pytest.raises(TypeError):
        client.merge("bad", "map", {"a": 1.5})
    with pytest.raises(ValueError):
        client.merge("bad", "map", {"a": ("nonsense", 1)})
    client.merge("l", "lww", "text")
    assert client.get("l") == b"text"
    client.merge("l", "lww", b"later")
    assert client.get("l") == b"later"


def test_async_session_round_trip(node):
    async def main():
        c = await latticekv.connect_async(node.native, timeout=5.0)
        s = c.session("causal")
        assert isinstance(s, latticekv.AsyncSession)
        assert s.level == "causal"
        await s.write("as", "v")
        assert await s.read("as") == [b"v"]
        assert await s.get("as") == [b"v"]
        await s.merge("am", "map", {"k": 1})
        assert await s.get("am") == {b"k": 1}
        results = await asyncio.gather(*(s.write(f"as{i}", str(i)) for i in range(5)))
        assert results == [None] * 5

        rc = c.session("read-committed")
        async with rc.begin() as t:
            assert isinstance(t, latticekv.AsyncTransaction)
            await t.write("at", "1")
            await t.put("at2", "2")
            assert await t.read("at") == [b"1"]
            assert t.buffered == 2
            assert await c.get("at") is None
        assert t.finished
        assert await c.get("at") == b"1"

        with pytest.raises(RuntimeError):
            async with rc.begin() as t:
                await t.write("at-abort", "x")
                raise RuntimeError("boom")
        assert await c.get("at-abort") is None

        t = rc.begin()
        await t.abort()
        with pytest.raises(latticekv.InvalidUseError):
            await t.commit()
        with pytest.raises(latticekv.InvalidUseError):
            c.session("eventual").begin()

    asyncio.run(main())
