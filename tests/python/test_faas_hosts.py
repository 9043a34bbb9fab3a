"""DAGs spread over two compute hosts with real Python executors: `latticekv local --faas`
(a store, a scheduler, one host) plus a second host process (`latticekv faas host`). With
two caching hosts the scheduler's default protocol is HB: each function of a DAG may run
on either host, passing its result (and the causal metadata) to the next."""
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import latticekv
from latticekv import faas

from conftest import Node, binary


@pytest.fixture(scope="module")
def node():
    n = Node("--workers", "2", "--disk-nodes", "0", "--faas", "--faas-python", sys.executable)
    assert n.faas, "latticekv local --faas printed no scheduler address"
    yield n
    assert n.stop() == 0, "node did not stop cleanly on SIGTERM"


@pytest.fixture(scope="module")
def second_host(node):
    proc = subprocess.Popen(
        [binary(), "faas", "host", "--scheduler", node.faas, "--store", node.native,
         "--executors", "2", "--python", sys.executable, "--id", "second",
         "--http", "127.0.0.1:0"],
        env={**os.environ, "LATTICEKV_LOG": "warn"},
        stdout=subprocess.PIPE,
        text=True,
    )
    proc.http = None
    for line in proc.stdout:
        parts = line.split()
        if parts[:1] == ["http"]:
            proc.http = parts[1]
        if parts[:1] == ["press"]:
            break
    # Keep draining its stdout.
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    assert proc.http, "faas host --http printed no address"
    yield proc
    proc.terminate()
    proc.wait(timeout=15)


def cache_snapshots(host) -> float:
    """The second host's cache snapshots so far (hits and misses), from its /metrics."""
    with urllib.request.urlopen(f"http://{host.http}/metrics", timeout=10) as r:
        assert r.status == 200
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("latticekv_faas_cache_hits_total{", "latticekv_faas_cache_misses_total{"))
        and 'host="second"' in line
    )


def test_a_dag_spreads_over_both_hosts_and_its_writes_are_applied(node, second_host):
    cloud = faas.connect(node.native)
    store = latticekv.connect(node.native, timeout=5.0)

    def hop(*upstream):
        # The compute hosts that ran this call's functions so far: each executor is a
        # child of its host process. (Local, so that cloudpickle ships it by value.)
        import os

        return [*(upstream[0] if upstream else []), os.getppid()]

    def sink(path):
        faas.put("spread-k", b"written")
        return hop(path)

    cloud.register(hop, "h1")
    cloud.register(hop, "h2")
    cloud.register(sink, "h3")
    cloud.register_dag("spread", ["h1", "h2", "h3"], [("h1", "h2"), ("h2", "h3")])
    hosts = {node.proc.pid, second_host.pid}
    spread = None
    # The second host joins while calls already run (they then run on the first one, as
    # CT): call until one call's functions ran on both hosts, each call a full DAG.
    deadline = time.time() + 60
    while spread is None and time.time() < deadline:
        futures = [cloud.call_dag_async("spread") for _ in range(6)]
        for f in futures:
            path = f.result(timeout=60)
            assert len(path) == 3 and set(path) <= hosts, path
            if set(path) == hosts:
                spread = path
    assert spread is not None, "no call ran functions on both hosts"
    # Committed by whichever host ran the sink (concurrent commits stay siblings).
    assert set(store.get_value("spread-k")) == {b"written"}
    cloud.close()


def test_call_stats_tell_how_a_call_ran(node, second_host):
    cloud = faas.connect(node.native)
    latticekv.connect(node.native, timeout=5.0).put("stats-k", b"v")
    cloud.register(lambda v: len(v), "st1")
    cloud.register(lambda x: x + 1, "st2")
    cloud.register_dag("stats", ["st1", "st2"], [("st1", "st2")])
    args = {"st1": [faas.Ref("stats-k")]}
    out, stats = cloud.call_dag("stats", args, protocol="CT", stats=True)
    assert out == 2
    assert stats == {"protocol": "CT", "attempts": 1, "aborts": 0, "early_aborts": 0,
                     "meta_bytes": 0}
    # Spread over the hosts: the key read by st1 travels to st2 as causal metadata through
    # the scheduler (or, after too many aborts, the call ended under CT).
    out, stats = cloud.call_dag("stats", args, protocol="OPT", stats=True)
    assert out == 2
    assert stats["protocol"] in ("OPT", "CT"), stats
    assert stats["attempts"] == stats["aborts"] + 1, stats
    assert stats["meta_bytes"] > 0, stats
    assert cloud.call_dag("stats", args) == 2  # without stats: the result alone
    cloud.close()


def test_a_standalone_host_serves_its_cache_metrics(node, second_host):
    """`faas host --http`: the host's cache counts its snapshots as functions that read
    keys run on it."""
    with urllib.request.urlopen(f"http://{second_host.http}/health", timeout=10) as r:
        assert r.read() == b"ok\n"
    cloud = faas.connect(node.native)
    latticekv.connect(node.native, timeout=5.0).put("metrics-k", b"vv")
    cloud.register(lambda v: len(v), "mt1")
    cloud.register(lambda x: x + 1, "mt2")
    cloud.register_dag("metrics", ["mt1", "mt2"], [("mt1", "mt2")])
    before = cache_snapshots(second_host)
    deadline = time.time() + 60
    while cache_snapshots(second_host) == before and time.time() < deadline:
        futures = [
            cloud.call_dag_async("metrics", {"mt1": [faas.Ref("metrics-k")]}) for _ in range(6)
        ]
        assert [f.result(timeout=60) for f in futures] == [3] * 6
    assert cache_snapshots(second_host) > before, "the second host's cache counted nothing"
    cloud.close()
