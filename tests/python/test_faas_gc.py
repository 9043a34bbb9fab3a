"""Dependency GC on `latticekv local --faas`, on by default: many calls over a small hot
key set, each reading three hot keys and writing one of them, on a causal cache of 1 MiB
that cannot hold the whole set (80 keys of 15 KB). Without GC every key comes to depend,
transitively, on the whole set, so a read needs more than the cache holds and calls fail
with the capacity error; with GC (the default) the dependency lists stay short and every
call completes. The lists are watched through `latticekv_faas_cache_deps` on /metrics.
"""
import random
import sys
import urllib.request

from latticekv import faas

from conftest import Node

KEYS, PAD, CALLS = 80, 15_000, 600


def metrics(node):
    text = urllib.request.urlopen(f"http://{node.http}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("latticekv_faas_cache_deps{"):
            out["deps" + line.split('quantile="', 1)[1].split('"', 1)[0]] = int(
                line.rsplit(" ", 1)[1])
        elif line.startswith("latticekv_faas_gc_rounds_total "):
            out["rounds"] = int(line.rsplit(" ", 1)[1])
    return out


def hot_calls(*gc_flags):
    """Runs CALLS calls on a fresh node; returns (errors, largest deps max seen, metrics
    at the end)."""
    node = Node("--workers", "1", "--disk-nodes", "0", "--faas", "--faas-python",
                sys.executable, "--faas-cache-mb", "1", *gc_flags)
    def bump(key, pad, *reads):  # defined here: pickled by value, not by module
        from latticekv import faas as f

        f.put(key, pad)
        return len(reads)

    try:
        cloud = faas.connect(node.native)
        cloud.register(bump, "bump")
        rng = random.Random(1)
        pad = b"x" * PAD
        errors, peak = [], 0
        for i in range(CALLS):
            keys = [f"hot{k}" for k in rng.sample(range(KEYS), 3)]
            try:
                cloud.call("bump", keys[0], pad, *[faas.Ref(k) for k in keys], timeout=60)
            except faas.UnavailableError as e:
                errors.append(str(e))
            if i % 20 == 0:
                peak = max(peak, metrics(node).get("deps1", 0))
        cloud.close()
        return errors, peak, metrics(node)
    finally:
        assert node.stop() == 0


def test_hot_calls_complete_with_the_default_gc_and_fail_without():
    errors, peak, end = hot_calls()
    print(f"GC on (default): {len(errors)} failed, dependency lists at most {peak}, {end}")
    assert errors == [], f"{len(errors)} of {CALLS} calls failed, e.g. {errors[0]}"
    assert end["rounds"] > 0, end
    assert peak <= 12, f"dependency lists reached {peak} keys with GC on"

    off_errors, off_peak, off_end = hot_calls("--faas-dep-gc-ms", "0")
    print(f"GC off: {len(off_errors)} failed, dependency lists at most {off_peak}, {off_end}")
    assert off_end["rounds"] == 0, off_end
    assert off_peak > peak and off_peak >= 15, (
        f"lists reached {off_peak} without GC, {peak} with")
    assert any("staged versions need" in e for e in off_errors), off_errors[:3]
