"""The `latticekv` Python package against a real `latticekv local` (conftest's `node`)."""
import asyncio
import subprocess
import sys
import threading

import pytest

import latticekv


@pytest.fixture
def client(node):
    return latticekv.connect(node.native, timeout=5.0)


def test_one_liner_from_the_readme(node):
    code = (
        "import latticekv; c = latticekv.connect('%s'); c.put('k', b'v'); print(c.get('k'))"
        % node.native
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "b'v'"


def test_lww_get_put_delete(client):
    assert client.get("missing") is None
    client.put("k", b"v1")
    assert client.get("k") == b"v1"
    client.put("k", "v2 é")
    assert client.get("k") == "v2 é".encode()
    assert client.delete("k") is True
    assert client.get("k") is None
    assert client.delete("k") is False


def test_str_bytes_and_bytearray_keys_are_the_same_key(client):
    client.put(b"same", b"x")
    assert client.get("same") == b"x"
    assert client.get(bytearray(b"same")) == b"x"
    client.put("binary\x00key", b"\x00\xff")
    assert client.get(b"binary\x00key") == b"\x00\xff"


def test_bad_key_type_is_a_type_error(client):
    with pytest.raises(TypeError):
        client.get(42)
    with pytest.raises(TypeError):
        client.put("k", 3.5)


def test_counter(client):
    assert client.counter("c") == 0
    assert client.incr("c") == 1
    assert client.incr("c", 10) == 11
    assert client.incr(b"c", -20) == -9
    assert client.counter("c") == -9
    assert client.get_value("c") == -9


def test_sets(client):
    assert client.smembers("s") == set()
    assert client.sadd("s", "a", b"b", "c") == 3
    assert client.sadd("s", "a") == 0
    assert client.smembers("s") == {b"a", b"b", b"c"}
    assert client.srem("s", "b", "zz") == 1
    assert client.smembers(b"s") == {b"a", b"c"}
    assert client.get_value("s") == {b"a", b"c"}
    with pytest.raises(ValueError):
        client.sadd("s")


def test_get_value_of_lww_and_missing(client):
    assert client.get_value("nothing") is None
    client.put("l", "text")
    assert client.get_value("l") == b"text"


def test_wrong_type_errors(client):
    client.put("lww", b"v")
    with pytest.raises(latticekv.WrongTypeError):
        client.incr("lww")
    with pytest.raises(latticekv.WrongTypeError):
        client.sadd("lww", "m")
    with pytest.raises(latticekv.WrongTypeError):
        client.counter("lww")
    client.incr("ctr")
    with pytest.raises(latticekv.WrongTypeError) as e:
        client.get("ctr")
    assert isinstance(e.value, latticekv.Error)


def test_exception_hierarchy():
    for name in ["ConnectionError", "TimeoutError", "ProtocolError", "WrongTypeError",
                 "UnavailableError", "StorageError", "MemoryLimitError",
                 "InvalidArgumentError", "ServerError"]:
        cls = getattr(latticekv, name)
        assert issubclass(cls, latticekv.Error), name
        assert cls.__module__ == "latticekv"
    assert issubclass(latticekv.Error, Exception)


def test_connection_refused_is_a_connection_error():
    with pytest.raises(latticekv.ConnectionError):
        latticekv.connect("127.0.0.1:1", timeout=2.0)


def test_bad_timeout():
    with pytest.raises(ValueError):
        latticekv.connect("127.0.0.1:1", timeout=0)


def test_status_and_ping(client, node):
    client.ping()
    s = client.status()
    assert s["front_address"] == node.native
    assert s["version"]
    assert len(s["workers"]) >= 1
    assert {"worker", "address", "keys", "requests"} <= set(s["workers"][0])
    assert client.address == node.native
    assert node.native in repr(client)


def test_threads_share_one_client(client):
    errors = []

    def work(i):
        try:
            for j in range(50):
                client.incr("shared")
                client.put(f"t{i}-{j}", str(j))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert client.counter("shared") == 200
    assert client.get("t3-49") == b"49"


def test_async_client(node):
    async def main():
        c = await latticekv.connect_async(node.native)
        assert isinstance(c, latticekv.AsyncClient)
        await c.put("ak", "av")
        assert await c.get("ak") == b"av"
        assert await c.get_value("ak") == b"av"
        results = await asyncio.gather(*(c.incr("actr") for _ in range(20)))
        assert sorted(results) == list(range(1, 21))
        assert await c.counter("actr") == 20
        assert await c.sadd("aset", "x", "y") == 2
        assert await c.srem("aset", "x") == 1
        assert await c.smembers("aset") == {b"y"}
        assert await c.delete("ak") is True
        await c.ping()
        assert (await c.status())["front_address"] == node.native
        with pytest.raises(latticekv.WrongTypeError):
            await c.incr("aset")
        assert c.address == node.native

    asyncio.run(main())


def test_merge_and_read_every_other_lattice_type(client):
    client.merge("mx", "max", 5)
    client.merge("mx", "max", 3)
    assert client.get_value("mx") == 5
    client.merge("mn", "min", 5)
    client.merge("mn", "min", -2)
    assert client.get_value("mn") == -2
    client.merge("b", "bool", False)
    assert client.get_value("b") is False
    client.merge("b", "bool", True)
    assert client.get_value("b") is True
    client.merge("g", "set", [b"x", "y"])
    client.merge("g", "set", {"z"})
    assert client.get_value("g") == {b"x", b"y", b"z"}
    assert client.smembers("g") == {b"x", b"y", b"z"}
    client.merge("o", "ordered-set", ["c", "a", "b"])
    assert client.get_value("o") == [b"a", b"b", b"c"]
    client.merge("p", "priority", (2.0, "two"))
    client.merge("p", "priority", (1.0, b"one"))
    client.merge("p", "priority", (3.0, "three"))
    assert client.get_value("p") == (1.0, b"one")
    for key in ["mx", "mn", "b", "g", "o", "p"]:
        assert client.delete(key) is True
        assert client.get_value(key) is None


def test_merge_errors(client):
    client.put("lww", "v")
    with pytest.raises(latticekv.WrongTypeError):
        client.merge("lww", "max", 1)
    with pytest.raises(ValueError):
        client.merge("k", "nonsense", 1)
    with pytest.raises(TypeError):
        client.merge("k", "set", b"not-an-iterable-of-members")
    with pytest.raises(TypeError):
        client.merge("k", "max", "seven")


def test_durable_and_acknowledged_writes(node):
    c = latticekv.connect(node.native, durable=True, ack_replicas=1)
    c.put("d", "v")
    assert c.get("d") == b"v"
    assert c.incr("dc", 2) == 2


def test_async_merge(node):
    async def main():
        c = await latticekv.connect_async(node.native, timeout=5.0, durable=True)
        await c.merge("am", "max", 9)
        assert await c.get_value("am") == 9

    asyncio.run(main())
