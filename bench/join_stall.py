#!/usr/bin/env python3
"""A node joining under load: what one join costs the client (issue 14).

A seed (`latticekv server --workers 1`, the SLO case's node flags) is loaded with `--keys`
keys of `--value-size` bytes; a paced native load follows the topology (`latticekv bench
--follow-topology --timeline 0.1`, 16 connections x 8-key batches, `--threads 2`, as
`bench/elasticity --case slo` runs it); `--join-at` seconds in, a second node joins
through the seed. Per join it prints one JSON line: the worst 0.5 s window of the timeline
after the join (ops-weighted mean latency), the operations sent again (redirected, ...),
the largest latency, and — with `--cpu` — each thread's CPU time in the two seconds from
the join and the worker threads' CPU per 100 ms, from /proc/PID/task/*/stat (both nodes;
`--states`: their run states every 5 ms), `--points` the timeline around the join,
`--perf DIR` profiles. `--reps` joins are run one after the other, each on fresh
processes, and the median of the worst windows is printed last. On a shared machine, run
it when nothing else does: under SCHED_IDLE the nodes get what other work leaves, and a
contended run measures that (seconds) instead of the join.

    nice -n 19 chrt -i 0 python3 bench/join_stall.py --binary target/release/latticekv \\
        --keys 100000 --rate 44000 --reps 3 --cpu
    python3 bench/join_stall.py --binary target/debug/latticekv --smoke   # CI
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Server, log  # noqa: E402

NODE = ["--stats-period-ms", "200", "--stats-window-ms", "2000", "--cluster-gossip-ms", "100"]
TICK = os.sysconf("SC_CLK_TCK")


def preload(binary, addr, keys, value_size):
    out = subprocess.run([binary, "bench", "--json", "--quiet", "--protocol", "native",
                          "--workload", "set", "--keys", str(keys), "--value-size",
                          str(value_size), "--load", "--ops", "1", "--warmup", "0",
                          "--pipeline", "4", "--batch", "64", "--connections", "4",
                          "--addr", addr], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(out.stderr)


def threads(pid):
    """{tid: (name, utime+stime ticks)} of process `pid`."""
    out = {}
    base = f"/proc/{pid}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{base}/{tid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        name = s[s.index("(") + 1:s.rindex(")")]
        rest = s[s.rindex(")") + 2:].split()
        out[tid] = (name, int(rest[11]) + int(rest[12]), rest[0])
    return out


def cpu_sampler(pids, stop, samples):
    """Samples every 20 ms the threads of `pids` until `stop` is set."""
    while not stop.is_set():
        t = time.time()
        samples.append((t, {p: threads(p) for p in pids}))
        stop.wait(0.005)


def cpu_between(samples, pid, t0, t1):
    """Per thread name (summed): CPU ms of `pid` between the samples nearest t0 and t1."""
    before = min(samples, key=lambda s: abs(s[0] - t0))[1].get(pid, {})
    after = min(samples, key=lambda s: abs(s[0] - t1))[1].get(pid, {})
    out = {}
    for tid, (name, ticks, _) in after.items():
        d = ticks - before.get(tid, (name, 0, ""))[1]
        if d:
            out[name] = out.get(name, 0) + d * 1000 // TICK
    return out


def one_join(a, rep):
    seed = Server(a.binary, f"seed{rep}", flags=NODE + a.server_arg, cpu="0,1")
    joined = None
    try:
        preload(a.binary, seed.native, a.keys, a.value_size)
        cmd = [a.binary, "bench", "--json", "--quiet", "--protocol", "native", "--workload",
               "get", "--keys", str(a.keys), "--value-size", str(a.value_size),
               "--distribution", "zipf", "--zipf-theta", "0.5", "--connections", "16",
               "--batch", "8", "--rate", str(a.rate), "--follow-topology", "--threads", "2",
               "--duration", str(a.secs), "--warmup", "0", "--timeline", str(a.step),
               "--addr", seed.native]
        load = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        perfs = []

        def perf(name, pid, secs):
            os.makedirs(a.perf, exist_ok=True)
            perfs.append(subprocess.Popen(
                ["perf", "record", "-q", "-k", "mono", "-e", "cpu-clock", "-F", "2000", "--call-graph", "dwarf,16384", "-p",
                 str(pid), "-o", os.path.join(a.perf, f"{name}{rep}.data"), "--",
                 "sleep", str(secs)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

        if a.perf:
            # The seed from before the join (its view changes while the newcomer starts).
            time.sleep(max(0.0, a.join_at - 0.3))
            perf("seed", seed.proc.pid, 2.3)
            perf("client", load.pid, 2.3)
            time.sleep(0.3)
        else:
            time.sleep(a.join_at)
        t_join, t_join_mono = time.time(), time.monotonic()
        joined = Server(a.binary, f"new{rep}", seed=seed.native, flags=NODE + a.server_arg,
                        cpu="0,1")
        if a.perf:
            perf("new", joined.proc.pid, 2.0)
        samples, stop = [], threading.Event()
        sampler = None
        if a.cpu:
            sampler = threading.Thread(target=cpu_sampler,
                                       args=([seed.proc.pid, joined.proc.pid], stop, samples))
            sampler.start()
        out, err = load.communicate()
        for p in perfs:
            p.wait()
        stop.set()
        if sampler:
            sampler.join()
        if load.returncode != 0:
            raise RuntimeError(err)
        r = json.loads(out)
    finally:
        if joined:
            joined.stop()
        seed.stop()
    tl = r["timeline"]
    start = tl["start_unix_ms"] / 1000.0
    pts = tl["points"]
    # Windows of 0.5 s (whole intervals) beginning after the join started.
    w = max(1, round(0.5 / tl["interval_secs"]))
    best = None
    for i in range(len(pts) - w + 1):
        begin = start + (pts[i - 1]["end_secs"] if i else 0.0)
        if begin + tl["interval_secs"] < t_join:
            continue
        win = pts[i:i + w]
        ops = sum(p["ops"] for p in win)
        if not ops:
            continue
        mean = sum(p["latency_us"]["mean"] * p["ops"] for p in win) / ops
        if best is None or mean > best[0]:
            best = (mean, begin - t_join, sum(p["resent"] for p in win),
                    max(p["latency_us"]["max"] for p in win))
    res = {
        "keys": a.keys, "rate": a.rate, "ops_per_sec": round(r["ops_per_sec"]),
        "errors": r["errors"], "resends": r["resends"],
        "worst_window_mean_us": round(best[0]) if best else None,
        "worst_window_from_join_s": round(best[1], 2) if best else None,
        "worst_window_resent": best[2] if best else None,
        "worst_window_max_us": best[3] if best else None,
        "run_mean_us": round(r["latency_us"]["mean"]),
    }
    if a.cpu:
        res["cpu_ms_2s_from_join"] = {
            "seed": cpu_between(samples, seed.proc.pid, t_join, t_join + 2),
            "new": cpu_between(samples, joined.proc.pid, t_join, t_join + 2),
        }
    if a.perf:
        res["join_monotonic_s"] = round(t_join_mono, 3)
    if a.cpu:
        # Per 100 ms from the join: CPU ms of each node's threads named lkv-worker*.
        def worker_ms(pid, t0, t1):
            return sum(v for k, v in cpu_between(samples, pid, t0, t1).items()
                       if k.startswith("lkv-worker"))
        res["worker_cpu_ms_per_100ms"] = [
            (worker_ms(seed.proc.pid, t_join + i / 10, t_join + (i + 1) / 10),
             worker_ms(joined.proc.pid, t_join + i / 10, t_join + (i + 1) / 10))
            for i in range(15)]
    if a.states:
        # Per 10 ms from 0.1 s before the join: each node's worker threads' states
        # (R running or runnable, S sleeping) as sampled.
        def states(pid, t0, t1):
            out = ""
            for t, snap in samples:
                if t0 <= t < t1:
                    out += "".join(st for name, _, st in snap.get(pid, {}).values()
                                   if name.startswith("lkv-worker"))
            return out or "-"
        res["worker_states"] = [
            (round(i / 100, 2), states(seed.proc.pid, t_join + i / 100, t_join + (i + 1) / 100),
             states(joined.proc.pid, t_join + i / 100, t_join + (i + 1) / 100))
            for i in range(-10, 150)]
    if a.points:
        res["points"] = [(round(start + p["end_secs"] - t_join, 2), p["ops"],
                          round(p["latency_us"]["mean"]), p["resent"]) for p in pts
                         if -0.5 < start + p["end_secs"] - t_join < 3.0]
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", required=True)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--rate", type=int, default=44_000)
    ap.add_argument("--secs", type=float, default=8.0)
    ap.add_argument("--join-at", type=float, default=3.0)
    ap.add_argument("--step", type=float, default=0.1, help="timeline interval, s")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--cpu", action="store_true", help="per-thread CPU of both nodes")
    ap.add_argument("--points", action="store_true", help="the timeline around the join")
    ap.add_argument("--states", action="store_true",
                    help="both nodes' worker threads' states every 5 ms (with --cpu)")
    ap.add_argument("--perf", metavar="DIR",
                    help="perf record (cpu-clock, DWARF call graphs, CLOCK_MONOTONIC times; "
                    "the join's time is in the output) of both nodes and the load "
                    "generator around the join into DIR")
    ap.add_argument("--server-arg", action="append", default=[],
                    help="an extra flag for both servers (repeat)")
    ap.add_argument("--smoke", action="store_true",
                    help="one short join over 2,000 keys at 2,000 ops/s (CI: it runs, "
                         "nothing is asserted)")
    a = ap.parse_args()
    if a.smoke:
        a.keys, a.rate, a.secs, a.join_at, a.reps = 2_000, 2_000, 3.0, 1.0, 1
    worst = []
    for rep in range(a.reps):
        res = one_join(a, rep)
        print(json.dumps(res), flush=True)
        if res["worst_window_mean_us"] is not None:
            worst.append(res["worst_window_mean_us"])
    if worst:
        log(f"median worst 0.5 s window after the join: {statistics.median(worst):.0f} µs "
            f"(range {min(worst)}-{max(worst)}, {len(worst)} joins)")


if __name__ == "__main__":
    main()
