"""The serverless layer end to end: `latticekv local --faas` (a store, a scheduler, a
compute host with Python executors) on free ports, driven through `latticekv.faas`."""
import os
import pathlib
import signal
import sys
import time

import pytest

import latticekv
from latticekv import faas

from conftest import Node


@pytest.fixture(scope="module")
def node():
    # The executors run this interpreter (it has the package installed).
    n = Node("--workers", "2", "--disk-nodes", "0", "--faas", "--faas-python", sys.executable)
    assert n.faas, "latticekv local --faas printed no scheduler address"
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"


@pytest.fixture(scope="module")
def cloud(node):
    c = faas.connect(node.native)
    yield c
    c.close()


@pytest.fixture(scope="module")
def store(node):
    return latticekv.connect(node.native, timeout=5.0)


def test_the_issue_snippet(node):
    # As in the issue, with the store's address on a free port.
    cloud = faas.connect(node.native)
    cloud.register(lambda x: x + 1, "incr")               # or a named function
    assert cloud.call("incr", 1) == 2
    cloud.register(lambda x: x * x, "square")
    cloud.register_dag("pipe", ["incr", "square"], [("incr", "square")])
    assert cloud.call_dag("pipe", {"incr": [1]}) == 4
    fut = cloud.call_async("incr", 1)
    assert fut.result(timeout=30) == 2
    assert cloud.scheduler == node.faas


def test_named_functions_and_many_futures(cloud):
    def triple(x, y=0):
        return 3 * x + y

    assert cloud.register(triple) == "triple"
    futures = [cloud.call_async("triple", i) for i in range(30)]
    assert [f.result(timeout=60) for f in futures] == [3 * i for i in range(30)]


def test_functions_and_the_scheduler_live_in_the_store(node, cloud, store):
    cloud.register(lambda: "here", "stored")
    assert store.get("lkv.faas/fn/stored") is not None
    cloud.register_dag("stored-dag", ["stored"], [])
    assert store.get("lkv.faas/dag/stored-dag") is not None
    assert node.faas.encode() in store.smembers("lkv.faas/schedulers")
    # Another client connecting to the scheduler directly sees the same registry.
    direct = faas.connect(scheduler=node.faas)
    assert direct.call("stored") == "here"
    assert direct.call_dag("stored-dag") == "here"
    direct.close()


def test_a_key_reference_is_read_for_the_function(cloud, store):
    store.put("ref-key", b"hello")
    cloud.register(lambda v: v, "echo")
    assert cloud.call("echo", faas.Ref("ref-key")) == b"hello"
    assert cloud.call("echo", faas.Ref("ref-absent")) is None


def test_large_values_reach_the_function_intact(cloud, store):
    # The executor link decodes a task's frame in place: each value is a view of it until
    # it becomes the function's bytes. Several large values in one task, next to a small
    # pickled argument, must each arrive whole and unshifted.
    import hashlib

    a = os.urandom(2 * 1024 * 1024)
    b = bytes(range(256)) * 4096 + b"tail"
    store.put("big-a", a)
    store.put("big-b", b)

    def digests(x, y, z):
        import hashlib as h

        return [(len(v), h.sha256(v).hexdigest()) for v in (x, y, z)]

    cloud.register(digests, "digests")
    want = [(len(v), hashlib.sha256(v).hexdigest()) for v in (a, b, a[:1000])]
    for _ in range(3):  # the same executor again, and the others
        assert cloud.call("digests", faas.Ref("big-a"), faas.Ref("big-b"), a[:1000]) == want


def test_large_tasks_and_results_cross_each_executors_own_shared_region(cloud):
    # Each executor maps one sealed memfd its host made for it (faas::shm); a task or an
    # outcome of 64 KiB or more crosses it instead of the socket, and must arrive whole
    # both ways. A process a function starts does not inherit the region's descriptor.
    blob = os.urandom(3 * 1024 * 1024 + 7)

    def regions(data):
        import os as _os
        import subprocess as _sp
        import sys as _sys

        count = """
import os
n = 0
for fd in os.listdir("/proc/self/fd"):
    try:
        n += os.readlink("/proc/self/fd/" + fd).startswith("/memfd:latticekv-executor")
    except OSError:
        pass
print(n)
"""
        # close_fds=False: the child gets every descriptor not marked close-on-exec.
        mine = _sp.run([_sys.executable, "-c", count], capture_output=True, text=True,
                       check=True, close_fds=False).stdout.strip()
        maps = open(f"/proc/{_os.getpid()}/maps").read()
        mapped = len({line.split()[-3] for line in maps.splitlines()
                      if "/memfd:latticekv-executor" in line})
        return mapped, mine, data[::-1]

    cloud.register(regions, "regions")
    for _ in range(4):  # every executor, some twice
        mapped, child, back = cloud.call("regions", blob)
        assert mapped == 1, "the executor has no shared region of its own"
        assert child == "0", "a function's subprocess inherited the region"
        assert back == blob[::-1]


def test_writes_are_applied_after_the_sink(cloud, store):
    def writer(k, v):
        faas.put(k, v)
        return "wrote"

    def then_fail(_):
        raise RuntimeError("the sink fails")

    cloud.register(writer)
    cloud.register(then_fail)
    assert cloud.call("writer", "w-key", b"w-value") == "wrote"
    # The host's causal cache commits a multi-key causal version: the store client reads
    # its sibling values as a list (`get` expects LWW).
    assert store.get_value("w-key") == [b"w-value"]
    # Read-your-writes on the host: the next call sees the write at once.
    cloud.register(lambda v: v, "echo_w")
    assert cloud.call("echo_w", faas.Ref("w-key")) == b"w-value"
    # A DAG whose sink raises applies none of its functions' writes.
    cloud.register_dag("write-then-fail", ["writer", "then_fail"], [("writer", "then_fail")])
    with pytest.raises(RuntimeError, match="the sink fails"):
        cloud.call_dag("write-then-fail", {"writer": ["w-lost", b"x"]})
    assert store.get("w-lost") is None


def test_a_function_that_raises(cloud):
    def boom(x):
        raise ValueError(f"boom {x}")

    cloud.register(boom)
    # Raised again in the caller, as concurrent.futures' process pool does.
    with pytest.raises(ValueError, match="boom 7") as e:
        cloud.call("boom", 7)
    assert isinstance(e.value.__cause__, faas.RemoteTraceback)
    assert "ValueError: boom 7" in e.value.__cause__.traceback
    assert "ValueError: boom 7" in e.value.remote_traceback
    assert e.value.function == "boom"
    # The same through a future.
    with pytest.raises(ValueError, match="boom 8"):
        cloud.call_async("boom", 8).result(timeout=30)

    def unpicklable():
        import threading

        e = KeyError("locked")
        e.lock = threading.Lock()
        raise e

    cloud.register(unpicklable)
    with pytest.raises(faas.FunctionError) as e:
        cloud.call("unpicklable")
    assert e.value.function == "unpicklable"
    assert "KeyError: 'locked'" in e.value.traceback
    assert "Remote traceback" in str(e.value)
    assert isinstance(e.value, latticekv.Error)


def test_a_v_shaped_dag_runs_its_branches_in_parallel(cloud):
    def left(x):
        start = time.time()
        time.sleep(1.0)
        return ("left", x, start, time.time())

    def right(x):
        start = time.time()
        time.sleep(1.0)
        return ("right", x, start, time.time())

    def join(a, b):
        return [a, b]

    for f in (left, right, join):
        cloud.register(f)
    cloud.register_dag("vee", ["left", "right", "join"], [("left", "join"), ("right", "join")])
    a, b = cloud.call_dag("vee", {"left": [1], "right": [2]})
    # Upstream results in the order of the DAG's edges.
    assert (a[0], a[1], b[0], b[1]) == ("left", 1, "right", 2)
    # The branches overlapped in time: they ran on two executors at once.
    assert max(a[2], b[2]) < min(a[3], b[3])


def test_an_executor_killed_mid_call(cloud, tmp_path):
    marks = tmp_path / "pids"

    def slow(path):
        with open(path, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(2.0)
        return "survived"

    cloud.register(slow)
    fut = cloud.call_async("slow", str(marks))
    deadline = time.time() + 30
    while not (marks.exists() and marks.read_text().strip()):
        assert time.time() < deadline, "the function never started"
        time.sleep(0.05)
    first = int(marks.read_text().split()[0])
    os.kill(first, signal.SIGKILL)
    assert fut.result(timeout=60) == "survived"
    pids = [int(p) for p in marks.read_text().split()]
    assert len(pids) >= 2 and pids[0] == first and pids[-1] != first


def test_errors_have_their_classes(cloud):
    with pytest.raises(faas.NotFoundError):
        cloud.call("no-such-function")
    with pytest.raises(faas.NotFoundError):
        cloud.call_dag("no-such-dag")
    cloud.register(lambda x: x, "ident")
    assert cloud.call("ident", 5, protocol="CT") == 5
    # One host: the DAG is not spread, but every protocol runs.
    assert cloud.call("ident", 6, protocol="OPT") == 6
    assert cloud.call("ident", 7, protocol="CON") == 7
    assert cloud.call("ident", 8, protocol="HB") == 8
    with pytest.raises(faas.BadRequestError):  # two sinks
        cloud.register_dag("bad", ["ident", "incr", "square"], [("ident", "incr"), ("ident", "square")])
    with pytest.raises(faas.NotFoundError):  # an unregistered function
        cloud.register_dag("bad", ["ident", "nope"], [("ident", "nope")])
    with pytest.raises(faas.BadRequestError):
        cloud.register(lambda: 0)


def test_a_call_timeout(cloud):
    cloud.register(lambda: time.sleep(5), "sleepy")
    with pytest.raises(faas.TimeoutError):
        cloud.call("sleepy", timeout=0.5)


def _metric(text, name, *labels):
    """The sum of the samples of `name` whose labels include every one of `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all(label in line for label in labels):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_calls_show_in_the_nodes_metrics(node, cloud, store):
    # `local --faas` appends the scheduler's and the host's metrics to the node's /metrics.
    import urllib.request

    assert node.http, "latticekv local printed no HTTP address"

    def scrape():
        with urllib.request.urlopen(f"http://{node.http}/metrics", timeout=10) as r:
            return r.read().decode()

    ok = ("latticekv_faas_calls_total", 'protocol="ct"', 'outcome="ok"')
    raised = ("latticekv_faas_calls_total", 'outcome="function_raised"')
    hits, misses = "latticekv_faas_cache_hits_total", "latticekv_faas_cache_misses_total"
    before = scrape()
    cloud.register(lambda x: x + 1, "metered")

    def fails(_):
        raise ValueError("counted")

    cloud.register(fails, "metered_fails")
    cloud.register(lambda v: v, "metered_echo")
    store.put("metered-key", b"m")
    for i in range(5):
        assert cloud.call("metered", i, protocol="CT") == i + 1
    with pytest.raises(ValueError, match="counted"):  # raised again in the caller
        cloud.call("metered_fails", 0, protocol="CT")
    # A key the cache does not hold yet (a miss, then a snapshot), then again (a hit).
    for _ in range(2):
        assert cloud.call("metered_echo", faas.Ref("metered-key"), protocol="CT") == b"m"
    after = scrape()
    assert _metric(after, *ok) - _metric(before, *ok) == 7
    assert _metric(after, *raised) - _metric(before, *raised) == 1
    count = "latticekv_faas_call_duration_seconds_count"
    assert _metric(after, count) - _metric(before, count) == 8
    assert _metric(after, "latticekv_faas_call_duration_seconds_sum") > 0
    assert _metric(after, "latticekv_faas_hosts") == 1
    assert _metric(after, "latticekv_faas_runs") == 0
    # The host's causal cache took a snapshot for each call reading the key.
    assert _metric(after, misses) - _metric(before, misses) >= 1
    assert _metric(after, hits) - _metric(before, hits) >= 2
    assert "# TYPE latticekv_faas_cache_pinned_runs gauge" in after
