"""The benchmark scripts' charts and tables (bench/common.py's `Table`, `bar_chart`,
`with_image`): a chart is drawn as a real PNG, every table in docs/benchmarks.md parses
back into rows that render to the same text (what `--replot` relies on), and the report
functions' tables, built from fake results, parse back into the values they were built
from. Needs no server: matplotlib is installed with pip if missing, as the scripts do."""
import importlib.machinery
import importlib.util
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402


def script(name):
    """bench/<name> (a Python file without .py) as a module."""
    loader = importlib.machinery.SourceFileLoader("bench_" + name.replace("-", "_"),
                                                  str(BENCH / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_bar_chart_writes_a_png(tmp_path):
    path = tmp_path / "chart.png"
    common.bar_chart(
        path, "fake benchmark", ["SET P=1", "GET P=1", "SET P=16"],
        [common.Panel({"Redis": [100_000, 120_000, 700_000],
                       "latticekv": [110_000, None, 900_000]}, "operations per second",
                      labels={"latticekv": ["1.10×", None, "1.29×"]}),
         common.Panel({"Redis p99": [600, 650, 1500], "latticekv p99": [450, 500, 1400]},
                      "p99 µs (log)", log=True)],
        note="fake numbers")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert 10_000 < len(data) < 300_000


TABLE = common.Table([("case", "l", "{case}"), ("ops/s", "r", "{ops:,.0f}"),
                      ("took", "r", ["{a:,.0f}, {b:.1f}", "–"])])


def test_table_renders_and_parses_alternatives():
    rows = [{"case": "x y", "ops": 1234567.4, "a": 5, "b": 0.25},
            {"case": "z", "ops": 3.0, "a": None, "b": None}]
    text = TABLE.render(rows)
    assert text.split("\n") == ["| case | ops/s | took |", "|---|---:|---:|",
                                "| x y | 1,234,567 | 5, 0.2 |", "| z | 3 | – |"]
    assert TABLE.parse("before\n\n" + text + "\n\nafter") == [
        {"case": "x y", "ops": 1234567.0, "a": 5.0, "b": 0.2},
        {"case": "z", "ops": 3.0, "a": None, "b": None}]
    with pytest.raises(ValueError):
        TABLE.parse(text.replace("1,234,567", "many"))
    with pytest.raises(ValueError):
        TABLE.parse("| case | ops/s |\n|---|---:|\n| x | 1 |")


def test_with_image_moves_the_image_after_the_table_once():
    table = TABLE.render([{"case": "x", "ops": 1, "a": 1, "b": 1}])
    text = f"\nintro\n\n{table}\n\nmore\n\n![old](p.png)\n"
    once = common.with_image(text, table, "p.png", "new")
    assert once == f"\nintro\n\n{table}\n\n![new](p.png)\n\nmore\n"
    assert common.with_image(once, table, "p.png", "new") == once


def snapshot_tables(m, text):
    bench, probe = m.snapshot_parse(text)
    return [m.SNAP_BENCH.render(bench), m.SNAP_PROBE.render(probe)], bench + probe


def join_tables(m, text):
    bench, probe = m.join_parse(text)
    return [m.JOIN_BENCH.render(bench), m.JOIN_PROBE.render(probe)], bench + probe


def systems_tables(m, text):
    labels, rows = m.parse(text)
    return [common.systems_table("case", labels).render(rows)], rows


def redis_benchmark_tables(m, text):
    """Both comparisons of bench/redis-benchmark (with and without persistence)."""
    data = m.parse(text)
    assert [key for key, _, _ in data] == [m.PERSISTENT[0], m.VOLATILE[0]]
    return ([m.table(key, labels).render(rows) for key, labels, rows in data],
            [row for _, _, rows in data for row in rows])


def one(table):
    def tables(m, text):
        rows = getattr(m, table).parse(text)
        return [getattr(m, table).render(rows)], rows
    return tables


# (script, section marker name, its tables re-rendered from the parsed rows, and the rows)
SECTIONS = [
    ("compare-redis", "compare-redis", one("RESP")),
    ("durability", "durability", one("ACK")),
    ("durability", "durability-snapshot", snapshot_tables),
    ("cluster", "cluster", one("SCALE")),
    ("cluster", "cluster-join", join_tables),
    ("consistency", "consistency", one("TABLE")),
    ("redis-benchmark", "redis-benchmark", redis_benchmark_tables),
    ("security", "security", one("TABLE")),
    ("redis-families", "redis-families", systems_tables),
]


@pytest.mark.parametrize("name,section,tables", SECTIONS, ids=[s[1] for s in SECTIONS])
def test_each_section_round_trips(name, section, tables):
    text = common.read_section(f"<!-- {section}:begin -->", f"<!-- {section}:end -->")
    assert text is not None, f"docs/benchmarks.md has no {section} section"
    rendered, rows = tables(script(name), text)
    assert len(rows) >= 3
    for table in rendered:
        assert table in text
    png = f"benchmarks-{'redis' if section == 'compare-redis' else section}.png"
    assert f"]({png})" in text
    assert (ROOT / "docs" / png).stat().st_size > 10_000


def fake(ops, p50=100.0, p99=900.0):
    return {"ops_per_sec": ops, "errors": 0,
            "latency_us": {"p50": p50, "p99": p99, "p999": 2 * p99, "max": 10 * p99}}


def close(parsed, built):
    for k, v in parsed.items():
        if isinstance(v, float):
            assert v == pytest.approx(built[k], rel=0.01, abs=0.01), k
        else:
            assert v == built[k], k


def test_reports_from_fake_results_parse_back():
    m = script("durability")
    results = {name: [fake(10_000.0 * (i + 1), p99=100.0 * (i + 1))] * 3
               for i, (name, _) in enumerate(m.CASES)}
    text, rows = m.ack_report(results, 3, 8, 50, ["--fake"])
    for p, b in zip(m.ACK.parse(text), rows, strict=True):
        close(p, b)

    m = script("consistency")
    results = {level: [fake(1000.0 + i), fake(2000.0 + i)] for i, level in enumerate(m.LEVELS)}
    text, rows = m.report(results, 2, 6, 10_000, 16, [])
    for p, b in zip(m.TABLE.parse(text), rows, strict=True):
        close(p, b)

    m = script("redis-families")
    labels = ["Redis (AOF everysec)", "latticekv"]
    results = {(label, name): [(40_000.0 / (k + 1), 2.5 + k)] for k, label in enumerate(labels)
               for name, _, _ in m.CASES}
    results |= {(label, f"fanout {n}"): [(10_000.0 * (k + 1), 1.0)]
                for k, label in enumerate(labels) for n in m.FANOUT}
    text, (got_labels, rows) = m.report(1, 50_000, 2_000, labels, results)
    assert "| 10 | 10,000, 100% delivered | 20,000 (2.00×), 100% delivered |" in text
    assert m.parse(text)[0] == got_labels == labels
    for p, b in zip(m.parse(text)[1], rows, strict=True):
        close(p, b)
    assert rows[0]["ratio1"] == pytest.approx(0.5)


def test_more_reports_from_fake_results_parse_back():
    from types import SimpleNamespace

    m = script("redis-benchmark")
    groups = [(m.PERSISTENT, ["Redis (AOF everysec)", "latticekv", "latticekv previous"]),
              (m.VOLATILE, ["Redis (no persistence)", "latticekv --disk-nodes 0"])]
    # (requests/s, p99 ms, CPU µs per request, server busy, redis-benchmark busy)
    results = {(label, case): [(90_000.0 - 1000 * k, 0.8 + k, 5.0 + k, 0.5, 0.6),
                               (91_000.0, 0.9, 6.0, 0.9, 1.0)]
               for _, labels in groups for k, label in enumerate(labels) for case in m.CASES}
    args = SimpleNamespace(baseline_binary="y", rounds=2)
    text, data = m.report(args, groups, results)
    # Under each table, how busy each side was (medians) and the rounds' requests/s range.
    assert ("| SET P=1 | 70 % / 80 %, 90,000–91,000 | 70 % / 80 %, 89,000–91,000 | "
            "70 % / 80 %, 88,000–91,000 |") in text
    parsed = m.parse(text)
    assert [(k, labels) for k, labels, _ in parsed] == [(k, labels) for k, labels, _ in data]
    assert [labels for _, labels in groups] == [labels for _, labels, _ in data]
    for (_, _, p_rows), (_, _, b_rows) in zip(parsed, data, strict=True):
        for p, b in zip(p_rows, b_rows, strict=True):
            close(p, b)
    # The CPU ratio is against the same table's Redis (medians: 5.5, 6.0 and 6.5 µs).
    assert parsed[0][2][0]["cpuratio1"] == pytest.approx(6.0 / 5.5, abs=0.01)
    assert parsed[0][2][0]["cpuratio2"] == pytest.approx(6.5 / 5.5, abs=0.01)
    assert parsed[1][2][0]["cpuratio1"] == pytest.approx(6.0 / 5.5, abs=0.01)

    m = script("security")
    results = {(system, mode, case): [(50_000.0 + 1000 * j + i, 3.0 + j)]
               for i, system in enumerate(("Redis", "latticekv"))
               for j, mode in enumerate(m.MODES) for case in m.CASES}
    text, rows = m.report(SimpleNamespace(rounds=1), results)
    parsed = m.TABLE.parse(text)
    assert parsed[0]["r_ratio"] is None and parsed[1]["r_ratio"] == pytest.approx(1.02)
    for p, b in zip(parsed, rows, strict=True):
        close(p, b)

    m = script("cluster")
    results = {(name, setup): [fake(400_000.0 / n)] for name, _ in m.cases(1000)
               for setup, n in (("1 node", 1), ("3 nodes", 3))}
    text, rows = m.report(results, 1, 10, 1000, [9.1, 8.0], 1_000_000, [])
    for p, b in zip(m.SCALE.parse(text), rows, strict=True):
        close(p, b)
    probe = {"p50": 200.0, "p99": 4000.0, "max": 9000.0, "stalled_s": 0.5, "errors": 0,
             "first_error": None}
    results = {(label, mode): [{"bench": fake(11_000.0), "probe": probe,
                                "handoff": {"done": 7.0, "moved": 500_000, "first": 1.2}}]
               for label in ("current", "previous") for mode in ("steady", "join")}
    sides = [("current", "a"), ("previous", "b")]
    text, (bench, probes) = m.join_report(results, [2.0], sides, 1, 1000, 2, 1, 40, [])
    parsed_bench, parsed_probe = m.join_parse(text)
    assert parsed_probe[0]["handoff"] is None and parsed_probe[1]["handoff"] == 7.0
    for p, b in zip(parsed_bench + parsed_probe, bench + probes, strict=True):
        close(p, b)

    m = script("durability")
    results = {(label, mode): [{"bench": fake(11_000.0), "probe": probe,
                                "took": [500, 600] if mode == "snapshots" else []}]
               for label, _ in sides for mode, _ in m.SNAP_MODES}
    text, (bench, probes) = m.snapshot_report(results, [2.0], sides, 1, 1000, 1, 15, 1, [])
    parsed_bench, parsed_probe = m.snapshot_parse(text)
    assert parsed_probe[0]["took_max"] == 600 and parsed_probe[1]["took_max"] is None
    for p, b in zip(parsed_bench + parsed_probe, bench + probes, strict=True):
        close(p, b)

    m = script("compare-redis")
    m.machine = lambda: "fake machine"
    cases = m.cases(1000, 100)
    results = {(name, system): [fake(100_000.0 * (k + 1))] for name, _, systems in cases
               for k, system in enumerate(systems)}
    commands = {name: "latticekv bench" for name, _, _ in cases}
    text, rows = m.render(cases, results, commands, None, 1, 5, 1000, 100, "bench/compare-redis")
    assert len(rows) == 8
    for p, b in zip(m.RESP.parse(text), rows, strict=True):
        close(p, b)


def test_serverless_report_from_fake_results_parses_back():
    from types import SimpleNamespace

    m = script("serverless")
    args = SimpleNamespace(thetas=[1.0, 1.5], lengths=[3, 6], executors=3, clients=4,
                           keys=1000, value_size=1024, rounds=2, requests=10,
                           length_requests=5, warmup=2, dep_gc_ms=200, big_keys=200,
                           payload_kb=[512, 2048], store_delay_ms=0.25,
                           store_rate_gbit=10.0)
    results = {}
    for i, (plane, dag, length, theta, p) in enumerate(m.cells(args)):
        stats = {"protocol": p, "attempts": 1 + i % 2, "aborts": i % 2,
                 "early_aborts": 0, "meta_bytes": 100 * i}
        results[(plane, dag, length, theta, p)] = (
            [(0.001 * (i + k), stats, k == 0) for k in range(10)], [])
    # Gauges after two cells: dependency lists (p50, p99, max), GC rounds, then the
    # causal metadata per key (p50, p99, max bytes).
    deps = [(2, 5, 7, 3, 100, 800, 900), (3, 6, 9, 11, 120, 700, 1000)]
    text, grid, lengths = m.report(results, args, [1.5, 2.5], 600.0, deps)
    systems = len(m.SYSTEM_CELLS)
    assert len(grid) == 2 * 2 * systems and len(lengths) == 2 * systems
    assert "2 / 5 / 7 after the first cell, 3 / 6 / 9 after the last, largest seen 9" in text
    assert "the p99 over the cells 700–800 B, median 800 B" in text
    assert "0.25 ms each way, 10 Gbit/s" in text
    # Life without the cache: per payload size, the paper's large-value pairs at the run's
    # client threads and at one; and one per Zipf θ.
    nocache = m.NOCACHE.parse(text)
    sizes = len(args.payload_kb)
    assert len(nocache) == sizes * 2 * len(m.NOCACHE_PAIRS) + len(args.thetas)
    assert sorted(r["clients"] for r in nocache) == [1] * sizes * len(m.NOCACHE_PAIRS) + [
        4] * (sizes * len(m.NOCACHE_PAIRS) + len(args.thetas))
    assert "Zipf 1.5 over 200 keys of 512 KB, read-only" in text
    assert "Zipf 1.5 over 200 keys of 2,048 KB, read-only" in text
    for p, b in zip(m.GRID.parse(text), grid, strict=True):
        close(p, b)
    for p, b in zip(m.LENGTH.parse(text), lengths, strict=True):
        close(p, b)
    lww = [r for r in m.GRID.parse(text) if r["system"] == "LWW"]
    assert lww and all(r["ratio"] is None for r in lww)


def test_serverless_nocache_only_report_has_each_pair_at_both_client_counts():
    from types import SimpleNamespace

    m = script("serverless")
    args = SimpleNamespace(clients=4, rounds=2, requests=10, big_keys=200,
                           payload_kb=[512, 1024, 2048])
    results = {}
    for i, cell in enumerate(m.nocache_cells(args)):
        stats = {"protocol": cell[4], "attempts": 1, "aborts": 0, "early_aborts": 0,
                 "meta_bytes": 0}
        results[cell] = ([(0.001 * (i + 1 + k), stats, False) for k in range(10)], [])
    text = m.nocache_report(results, args, [1.0, 2.0], 60.0)
    rows = m.NOCACHE.parse(text)
    # One row per payload size, pair and client count, in the sweep's order.
    assert [(r["case"], r["clients"], r["pair"]) for r in rows] == [
        (f"Zipf 1.5 over 200 keys of {kb:,} KB, read-only", clients, pair)
        for kb in args.payload_kb for clients in (4, 1)
        for pair in ("CT vs bare CT", "HB vs bare OPT")]
    # The bare cells come after the cached ones, so they are slower here.
    assert all(r["ratio"] > 1 for r in rows)
