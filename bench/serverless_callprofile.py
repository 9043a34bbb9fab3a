#!/usr/bin/env python3
"""Where one cached 3-function CT call's time goes (issue 16, "life without the cache").

Starts one caching deployment of bench/serverless (`latticekv local --faas` plus a second
`latticekv faas host`, 3 executors each, the store on loopback: after the warm-up every
read is a cache hit), preloads 200 keys of `--kb` KB, and calls bench/serverless's line of
3 functions under CT from one client thread (Zipf 1.5, read-only, as the
`--nocache-only` cells). Prints the median latency; with `--trace`, also records the
executors' `recvfrom`/`sendto` with `perf trace` for 3 s and splits a call into: per
function, the executor's part (its task's body arriving, unpacking the arguments, the
function, pickling the result) and the host's dispatch from one function's result to the
next function's task at its executor; and, between calls, the sink's result back to the
client, the next call through the scheduler to a host, the host's snapshot of the read set
and the first task's dispatch. With `--cpu`, also the CPU time and the minor page faults per
call of each process (from /proc: the node with its scheduler, host and store; the second
host; each host's executors; this client), and the snapshots that hit or missed the node's
cache.

    bench/serverless_callprofile.py --binary target-rel/release/latticekv --python PY \
        --kb 512 --requests 150 --trace
"""
import argparse
import importlib.machinery
import os
import importlib.util
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path


def bench_module():
    """bench/serverless as a module (its functions pickled by value, as when it runs)."""
    path = str(Path(__file__).with_name("serverless"))
    spec = importlib.util.spec_from_loader("bench_serverless",
                                           importlib.machinery.SourceFileLoader(
                                               "bench_serverless", path))
    bs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bs)
    sys.modules["bench_serverless"] = bs
    import cloudpickle

    cloudpickle.register_pickle_by_value(bs)
    return bs


def executors_of(parent):
    r = subprocess.run(["pgrep", "-P", str(parent), "-f", "latticekv.faas.executor"],
                       capture_output=True, text=True, check=False)
    return [int(x) for x in r.stdout.split()]


def executors(dep):
    return [str(p) for parent in (dep.node.pid, dep.host.pid) for p in executors_of(parent)]


def proc_stat(pid):
    """(minor page faults, CPU seconds) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[7]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cache_counts(dep):
    """The node's cache snapshots so far: {"hits": n, "misses": n}."""
    import urllib.request

    text = urllib.request.urlopen(f"http://{dep.http}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        for what in ("hits", "misses"):
            if line.startswith(f"latticekv_faas_cache_{what}_total"):
                out[what] = out.get(what, 0) + float(line.rsplit(" ", 1)[1])
    return out


def process_groups(dep):
    """The processes of a call, by role."""
    return {"node (scheduler, host, store)": [dep.node.pid], "second host": [dep.host.pid],
            "node's executors": executors_of(dep.node.pid),
            "second host's executors": executors_of(dep.host.pid),
            "client": [os.getpid()]}


def split(trace):
    """Medians (ms) of the parts of a call from a `perf trace` of the executors."""
    ev = []
    for line in trace.splitlines():
        m = re.match(r"\s*([\d.]+) \(\s*([\d.]+) ms\): \S+ (recvfrom|sendto)\(.*= (\d+)", line)
        if m:
            ev.append((float(m[1]), float(m[2]), m[3], int(m[4])))
    tasks, body = [], None
    for t, d, kind, n in sorted(ev):
        if kind == "recvfrom" and n > 4:  # a task's body (the 4-byte header came first)
            body = t
        elif kind == "sendto" and body is not None:
            tasks.append((body, t))
            body = None
    if len(tasks) < 7:
        return None
    gaps = [tasks[i + 1][0] - tasks[i][1] for i in range(len(tasks) - 1)]
    # One call = 3 tasks in a row: the longest gap of the three is between calls.
    off = max(range(3), key=lambda o: statistics.median(gaps[o::3]))
    between = gaps[off::3]
    within = [g for i, g in enumerate(gaps) if (i - off) % 3]
    return {
        "tasks": len(tasks),
        "executor per function": statistics.median(e - b for b, e in tasks),
        "host dispatch between functions": statistics.median(within),
        "between calls": statistics.median(between),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--binary", required=True)
    p.add_argument("--python", required=True, help="an interpreter with latticekv")
    p.add_argument("--kb", type=int, default=512)
    p.add_argument("--requests", type=int, default=150)
    p.add_argument("--trace", action="store_true", help="perf trace the executors")
    p.add_argument("--cpu", action="store_true",
                   help="CPU time and page faults per call of each process")
    a = p.parse_args()
    bs = bench_module()
    dep = bs.Deployment(a.binary, a.python, "cache", 3, 200)
    try:
        bs.preload(dep, 200, a.kb)
        cloud = bs.connect(dep, [3])
        rng = random.Random(1)
        zipf = bs.Zipf(200, 1.5, rng, bs.big_prefix(a.kb))
        writer = bs.Writer("a")

        def call():
            return bs.request(cloud, bs.big_dag(bs.BIG1_DAG, a.kb), 3, zipf, writer, rng, "CT",
                              b"", 30)[0]

        for _ in range(20):
            call()
        tracer = None
        if a.trace:
            tracer = subprocess.Popen(
                ["perf", "trace", "-e", "recvfrom,sendto", "-p", ",".join(executors(dep)),
                 "--", "sleep", "3"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                text=True)
            time.sleep(0.5)
        groups = process_groups(dep) if a.cpu else {}
        before = {g: [proc_stat(x) for x in ps] for g, ps in groups.items()}
        counts = cache_counts(dep) if a.cpu else {}
        xs = sorted(call() * 1000 for _ in range(a.requests))
        after = {g: [proc_stat(x) for x in ps] for g, ps in groups.items()}
        print(f"{a.kb} KB values, CT, 1 client thread: p50 {statistics.median(xs):.2f} ms, "
              f"p10 {xs[len(xs) // 10]:.2f}, p90 {xs[9 * len(xs) // 10]:.2f} "
              f"({a.requests} calls)")
        if a.cpu:
            now = cache_counts(dep)
            print("the node's cache: " + ", ".join(
                f"{what} {now.get(what, 0) - counts.get(what, 0):.0f}"
                for what in ("hits", "misses")) + " snapshots (the second host's not counted)")
            total = [0.0, 0.0]
            for g in groups:
                faults = sum(x[0] - y[0] for x, y in zip(after[g], before[g])) / a.requests
                cpu = sum(x[1] - y[1] for x, y in zip(after[g], before[g])) / a.requests * 1e3
                total = [total[0] + cpu, total[1] + faults]
                print(f"  {g:<28} CPU {cpu:5.2f} ms per call, {faults:6.1f} page faults")
            print(f"  {'all':<28} CPU {total[0]:5.2f} ms per call, {total[1]:6.1f} page faults")
        if tracer:
            _, err = tracer.communicate()
            parts = split(err)
            if parts is None:
                print("perf trace: too few tasks seen (a longer --requests?)")
            else:
                print(", ".join(f"{k} {v:.3f} ms" if isinstance(v, float) else f"{k} {v}"
                                for k, v in parts.items()))
    finally:
        dep.stop()


if __name__ == "__main__":
    main()
