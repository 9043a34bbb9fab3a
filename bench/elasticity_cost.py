"""Cost against latency (spec §6.7, Fig. 7) of `bench/elasticity --case cost`: per point a
fresh memory node and disk node, `latticekv monitor --manager local` in budget or latency
mode adding memory nodes, a paced load until the node count holds, then one measured run
per Zipf exponent. Helpers (the monitor, the load) are elasticity_slo.py's."""
import os
import time

from common import ROOT, Server, log
from elasticity_slo import (NODE, PRICE_DISK, PRICE_FIXED, PRICE_MEMORY, WORKER, Monitor,
                            closed_loop, finish, load, preload)

COST_BEGIN, COST_END = "<!-- elasticity-cost:begin -->", "<!-- elasticity-cost:end -->"


def cost_policy(budget=None, objective_us=None, grace_s=5, unsaturated_us=None):
    """Two tiers (k = 0: the default vector keeps a memory and a disk copy), budget or
    latency mode; budget mode aims at `unsaturated_us` (the policy's default if None)."""
    goal = (f"budget_per_hour = {budget}" if budget is not None
            else f"latency_objective_us = {int(objective_us)}")
    if budget is not None and unsaturated_us:
        goal += f"\nunsaturated_latency_us = {int(unsaturated_us)}"
    return f"""fault_tolerance = 0
period_ms = 500
grace_ms = {int(grace_s * 1000)}
key_cooldown_ms = 2000
pending_timeout_ms = 60000
{goal}
node_addition_batch = 2
"""


def two_tier(binary, a, tmp):
    """A memory node (the seed, `--memory-budget`) and a disk node, loaded."""
    flags = NODE + ["--anti-entropy-ms", "1000"]
    mem = Server(binary, "seed", flags=flags + ["--memory-budget", str(a.mem_budget),
                                                "--data-dir", os.path.join(tmp, "seed")],
                 cpu="0,1")
    disk = None
    try:
        disk = Server(binary, "disk0", seed=mem.native, cpu="0,1",
                      flags=flags + ["--tier", "disk", "--data-dir", os.path.join(tmp, "disk0")])
        time.sleep(1)
        preload(binary, mem.native, a.cost_keys, a.cost_value_size)
    except Exception:
        if disk:
            disk.stop()
        mem.stop()
        raise
    return mem, disk


def cost_point(binary, a, policy, label):
    """One point: a fresh two-tier cluster, the monitor with `policy`, a steady Zipf load
    until the node count stays put for `a.settle` s (at most `a.settle_max`), then one
    measured run per Zipf exponent. Returns the point's dict."""
    tmp = os.path.join(a.tmp, "cost-" + label.replace("$", "usd"))
    os.makedirs(tmp, exist_ok=True)
    mem, disk = two_tier(binary, a, tmp)
    mon = None
    try:
        args = WORKER + NODE + ["--anti-entropy-ms", "1000", f"--memory-budget={a.mem_budget}"]
        mon = Monitor(binary, mem.native, tmp, policy, args,
                      extra=["--disk-capacity", str(a.disk_capacity)])
        start = time.time()
        last, since = None, time.time()
        while time.time() - start < a.settle_max:
            r = finish(load(binary, mem.native, a.cost_args(), a.cost_ops, 0.8, a.settle_step,
                            timeline=False))
            n = mon.nodes()
            if n != last:
                last, since = n, time.time()
            elif time.time() - since >= a.settle:
                break
            log(f"cost {label}: settling, {n} memory node(s), mean "
                f"{r['latency_us']['mean']:.0f} µs")
        settled = time.time() - start
        runs = {}
        for theta in a.cost_thetas:
            r = finish(load(binary, mem.native, a.cost_args(), a.cost_ops, theta,
                            a.cost_measure, timeline=False, warmup=a.cost_warmup))
            runs[theta] = r
        n_m = mon.nodes() or 0
        n_e = mon.nodes("disk") or 0
        cost = PRICE_FIXED + n_m * PRICE_MEMORY + n_e * PRICE_DISK
        log(f"cost {label}: {n_m} memory + {n_e} disk node(s), {cost:.3f} $/h, "
            + ", ".join(f"θ={t:g} {r['latency_us']['mean']:.0f} µs" for t, r in runs.items()))
        for t, x in mon.actions:
            if x["action"] in ("add_nodes", "remove_node"):
                log(f"cost {label}: {t - start:.0f} s {x['action']} {x.get('tier')}: "
                    f"{x.get('reason')}")
        return {"label": label, "memory": n_m, "disk": n_e, "cost": cost, "runs": runs,
                "settled_s": settled,
                "adds": sum(1 for _, x in mon.actions if x["action"] == "add_nodes"),
                "removes": sum(1 for _, x in mon.actions if x["action"] == "remove_node")}
    finally:
        if mon:
            mon.stop()
        disk.stop()
        mem.stop()


def calibrate(binary, a):
    """The load's rate, ops/s: `--cost-rate` if given, else `--cost-load` × what one memory
    node (over its disk node, no monitor) serves closed-loop under the load's shape (Zipf
    0.8, 16 connections × 8-key batches): a fixed fraction of this host's capacity, so a
    fast host's node is loaded as much as a slow host's. Sets `a.cost_ops` and
    `a.cost_capacity` (None when given)."""
    a.cost_capacity = None
    if a.cost_rate:
        a.cost_ops = a.cost_rate
        return
    mem, disk = two_tier(binary, a, os.path.join(a.tmp, "cost-calibration"))
    try:
        r = closed_loop(binary, mem.native, a.cost_args(), a.cost_calibrate, theta=0.8)
    finally:
        disk.stop()
        mem.stop()
    a.cost_capacity = r["ops_per_sec"]
    a.cost_ops = max(1, round(a.cost_load * a.cost_capacity / 1000) * 1000)
    log(f"cost: one memory node, closed loop {a.cost_capacity:,.0f} ops/s; load "
        f"{a.cost_load:g} × that = {a.cost_ops:,} ops/s")


def cost(binary, a):
    calibrate(binary, a)
    res = {"budget": [], "latency": []}
    for b in a.budgets:
        policy = cost_policy(budget=b, grace_s=a.grace, unsaturated_us=a.cost_unsaturated_us)
        res["budget"].append(cost_point(binary, a, policy, f"{b:g}$"))
        res["budget"][-1]["budget"] = b
    for o in a.objectives:
        res["latency"].append(cost_point(binary, a, cost_policy(objective_us=o,
                                                                grace_s=a.grace), f"{o}us"))
        res["latency"][-1]["objective"] = o
    return res


def rate_source(a):
    """How the load's rate was chosen, for the report."""
    if a.cost_capacity is None:
        return " (`--cost-rate`)"
    return (f" ({a.cost_load:g} × {a.cost_capacity:,.0f} ops/s, what one memory node served "
            f"closed-loop in a {a.cost_calibrate:g} s calibration)")


def cost_report(res, a, cmdline):
    data = a.cost_keys * a.cost_value_size
    lines = [
        f"**Cost against latency** (spec §6.7, Fig. 7). `{cmdline}`. Each point: a fresh "
        f"cluster of a memory node (`--memory-budget {a.mem_budget}`) and a disk node "
        f"holding {a.cost_keys:,} × {a.cost_value_size} bytes ({data / 2**20:.0f} MiB: the memory "
        "node caches a fraction, the rest is on the disk tier only), `latticekv monitor "
        f"--manager local --disk-capacity {a.disk_capacity}` (k = 0, every rule on, grace "
        f"{a.grace:g} s) adding memory nodes of the same budget; a paced Zipf 0.8 load of "
        f"{a.cost_ops:,} ops/s{rate_source(a)} until the memory node count stayed put for "
        f"{a.settle:g} s "
        f"(at most {a.settle_max:g} s), then {a.cost_measure:g} s per Zipf exponent at the "
        f"same rate. Prices: memory node {PRICE_MEMORY}, disk node {PRICE_DISK}, fixed "
        f"{PRICE_FIXED} $/h.",
        "",
        "(a) budget mode (`budget_per_hour`"
        + (f", aiming at `unsaturated_latency_us = {a.cost_unsaturated_us}`"
           if a.cost_unsaturated_us else "")
        + "):",
        "",
        "| budget $/h | memory + disk nodes | cost $/h | " +
        " | ".join(f"θ={t:g} mean / p99 µs" for t in a.cost_thetas) + " |",
        "|---:|---|---:|" + "---:|" * len(a.cost_thetas),
    ]
    for p in res["budget"]:
        lines.append(f"| {p['budget']:g} | {p['memory']} + {p['disk']} | {p['cost']:.3f} | " +
                     " | ".join(f"{p['runs'][t]['latency_us']['mean']:,.0f} / "
                                f"{p['runs'][t]['latency_us']['p99']:,.0f}"
                                for t in a.cost_thetas) + " |")
    lines += ["", "(b) latency mode (`latency_objective_us`):", "",
              "| objective µs | memory + disk nodes | cost $/h | settled after s | "
              "θ=0.8 mean µs |", "|---:|---|---:|---:|---:|"]
    for p in res["latency"]:
        r = p["runs"].get(0.8) or next(iter(p["runs"].values()))
        lines.append(f"| {p['objective']:,} | {p['memory']} + {p['disk']} | {p['cost']:.3f} | "
                     f"{p['settled_s']:.0f} | {r['latency_us']['mean']:,.0f} |")
    lines += ["", "![cost and latency](elasticity-cost.png)"]
    return lines


def cost_plot(res, a, plt):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for t in a.cost_thetas:
        pts = sorted((p["cost"], p["runs"][t]["latency_us"]["mean"]) for p in res["budget"])
        ax1.plot([c for c, _ in pts], [x for _, x in pts], marker="o", label=f"Zipf {t:g}")
    ax1.set_xlabel("cost $/h (budget mode, settled)")
    ax1.set_ylabel("mean client latency µs")
    ax1.set_title("(a) latency for a budget")
    ax1.legend(fontsize=8)
    pts = sorted((p["objective"], p["cost"]) for p in res["latency"])
    ax2.plot([o for o, _ in pts], [c for _, c in pts], marker="o")
    ax2.set_xscale("log")
    ax2.set_xlabel("latency_objective_us (servers' L_obs)")
    ax2.set_ylabel("cost $/h settled")
    ax2.set_ylim(0, max([c for _, c in pts] + [1.0]) * 1.2)
    ax2.set_title("(b) cost for a latency objective")
    fig.tight_layout()
    fig.savefig(ROOT / "docs" / "elasticity-cost.png", dpi=110)
    plt.close(fig)
