"""Helpers shared by the benchmark scripts (bench/cluster, bench/durability, ...): pinning,
ports, starting `latticekv server` processes, running `latticekv bench`, describing the
machine, rewriting a section of docs/benchmarks.md, and the Markdown tables and bar charts
the sections hold (parsed back from the page by each script's `--replot`)."""
import json
import os
import re
import string
import textwrap
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def pin(cpu):
    """A command prefix pinning to `cpu`, if the machine allows it."""
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def target_dir():
    return pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


class Server:
    """One `latticekv server` process (`workers` workers, default one, pinned to `cpu`,
    default CPU 0; e.g. "0,1") and its addresses. `log_level` and `stderr` (a file) let a
    benchmark read the node's log."""

    def __init__(self, binary, node_id, host="127.0.0.1", seed=None, flags=(),
                 log_level="warn", stderr=None, cpu=0, workers=1):
        args = pin(cpu) + [binary, "server", "--no-leave", "--node-id", node_id,
                           "--listen", f"{host}:0", "--resp", f"{host}:0",
                           "--workers", str(workers)]
        if seed:
            args += ["--seeds", seed]
        args += list(flags)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                     env={**os.environ, "LATTICEKV_LOG": log_level})
        self.native = self.resp = None
        for line in self.proc.stdout:
            parts = line.split()
            if parts[:1] == ["native"]:
                self.native = parts[1]
            elif parts[:1] == ["resp"]:
                self.resp = parts[1]
            elif parts[:1] == ["press"]:
                break
        if not (self.native and self.resp):
            self.stop()
            raise RuntimeError(f"{node_id} did not start")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout=120):
        """Stops the node cleanly (SIGTERM: its log is flushed and closed), else kills it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.stop()


def status(binary, addr):
    """(alive members, live keys held by the node's workers) from `latticekv status`."""
    out = subprocess.run([binary, "status", "--addr", addr], capture_output=True, text=True,
                         timeout=20)
    if out.returncode != 0:
        return 0, 0
    alive, keys, section = 0, 0, None
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["member"]:
            section = "members"
        elif parts[:2] == ["worker", "address"]:  # not the statistics table's header
            section = "workers"
        elif parts[:1] == ["worker"]:
            section = None
        elif not parts:
            section = None
        elif section == "members" and len(parts) > 2 and parts[2] == "alive":
            alive += 1
        elif section == "workers" and len(parts) > 2:
            keys += int(parts[2])
    return alive, keys


def member_keys(binary, addr, timeout=20):
    """{node id: live keys} of every alive storage member, from one `latticekv status` of
    the node at `addr` (it asks each member); a member that did not answer is left out.
    Pinned to CPU 1 with the load generator, so polling takes no time from the servers'
    core. None if the node did not answer within `timeout` seconds (a stalled node)."""
    try:
        out = subprocess.run(pin(1) + [binary, "status", "--addr", addr], capture_output=True,
                             text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    keys, members = {}, False
    for line in out.stdout.splitlines():
        parts = line.split()
        if parts[:1] == ["member"]:
            members = True
        elif not parts:
            members = False
        elif members and len(parts) > 5 and parts[2] == "alive" and parts[5].isdigit():
            keys[parts[0]] = int(parts[5])
    return keys


def cluster(binary, n, flags=(), data_dir=None):
    """`n` servers on 127.0.0.1..n joined through the first, once all see each other.
    With `data_dir`, each node keeps its state under data_dir/<node id>."""
    def node_flags(node_id):
        extra = list(flags)
        if data_dir:
            extra += ["--data-dir", os.path.join(data_dir, node_id)]
        return extra

    nodes = [Server(binary, "n1", flags=node_flags("n1"))]
    try:
        for i in range(2, n + 1):
            nodes.append(Server(binary, f"n{i}", f"127.0.0.{i}", seed=nodes[0].native,
                                flags=node_flags(f"n{i}")))
        deadline = time.time() + 30
        while any(status(binary, x.native)[0] != n for x in nodes):
            if time.time() > deadline:
                raise RuntimeError(f"{n} nodes did not see each other")
            time.sleep(0.2)
    except Exception:
        for x in nodes:
            x.stop()
        raise
    return nodes


def run_bench(binary, args):
    """Runs `latticekv bench` (pinned to CPU 1) and returns its JSON report."""
    cmd = pin(1) + [binary, "bench", "--json", "--quiet"] + args
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout)


def spawn_bench(binary, args):
    """Starts `latticekv bench` (pinned to CPU 1) in the background; `bench_report` waits
    for it and returns its JSON report."""
    cmd = pin(1) + [binary, "bench", "--json", "--quiet"] + args
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.cmd = cmd
    return proc


def bench_report(proc):
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(proc.cmd)} failed:\n{err}")
    return json.loads(out)


def stop_bench(proc):
    if proc.poll() is None:
        proc.kill()
        proc.wait()


class Probe:
    """A stall detector beside `latticekv bench`: one more RESP connection to `addr` that
    sends a request every `period` seconds — GET and SET (100 bytes) in turn, of keys
    spread over 0..keys, named as `latticekv bench` names them at its default --key-size
    16 — one at a time, and times each from when it was *due*, not from
    when it was sent. A closed-loop load generator sends nothing while the server stalls,
    so its histogram holds one slow request per connection however long the stall; here
    every request due during a stall counts, with the time it waited (no coordinated
    omission). Runs in a thread pinned to CPU 1 (with the load generator)."""

    def __init__(self, addr, keys, period=0.01):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.keys, self.period = keys, period
        self.samples = []  # (due, seconds from due to reply), in time.monotonic()
        self.errors = 0  # error replies
        self.first_error = None  # the text of the first
        self.error = None  # what stopped the probe
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _reply(self, buf):
        """Reads one RESP reply (simple string, error, integer or bulk string)."""
        while True:
            end = buf.find(b"\r\n")
            if end >= 0:
                if buf[:1] == b"-":
                    self.errors += 1
                    if self.first_error is None:
                        self.first_error = buf[1:end].decode(errors="replace")
                if buf[:1] != b"$" or int(buf[1:end]) < 0:
                    return buf[end + 2:]
                need = end + 2 + int(buf[1:end]) + 2
                if len(buf) >= need:
                    return buf[need:]
            chunk = self.sock.recv(65536)
            if not chunk:
                raise RuntimeError("the probe's connection was closed")
            buf += chunk

    def _run(self):
        try:
            if pin(1):
                os.sched_setaffinity(0, {1})
            value = b"p" * 100
            due = time.monotonic()
            i, buf = 0, b""
            while not self.done.is_set():
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                key = b"key:%012d" % ((i * 7919) % self.keys)
                if i % 2:
                    req = b"*3\r\n$3\r\nSET\r\n$16\r\n%s\r\n$100\r\n%s\r\n" % (key, value)
                else:
                    req = b"*2\r\n$3\r\nGET\r\n$16\r\n%s\r\n" % key
                self.sock.sendall(req)
                buf = self._reply(buf)
                self.samples.append((due, time.monotonic() - due))
                i += 1
                due += self.period
        except Exception as e:  # reported by stop()
            self.error = e

    def stop(self):
        """Stops the probe; returns its samples [(due, latency s)]."""
        self.done.set()
        self.thread.join()
        self.sock.close()
        if self.error:
            raise RuntimeError(f"probe failed: {self.error}")
        return self.samples


def probe_summary(samples, begin=None, end=None):
    """p50, p99, max latency in µs of the probe samples due in [begin, end] (monotonic), and
    the seconds during which a due request waited over 100 ms (stalled time)."""
    inside = [(t, d) for t, d in samples
              if (begin is None or t >= begin) and (end is None or t <= end)]
    lat = sorted(d for _, d in inside)
    if not lat:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0, "stalled_s": 0.0, "n": 0}

    def pct(q):
        return lat[min(len(lat) - 1, int(q * len(lat)))] * 1e6

    stalled, last = 0.0, None
    for t, d in inside:
        if d <= 0.1:
            continue
        lo, hi = t + 0.1, t + d  # the part of this wait beyond 100 ms
        if last is not None and lo < last:
            lo = last
        if hi > lo:
            stalled += hi - lo
            last = hi
    return {"p50": pct(0.5), "p99": pct(0.99), "max": lat[-1] * 1e6,
            "stalled_s": stalled, "n": len(lat)}


def machine():
    model = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def write_section(begin, end, heading, text, doc="benchmarks.md"):
    """Replaces the text between the `begin` and `end` markers of docs/`doc` (default
    docs/benchmarks.md), or appends a section `heading` holding it."""
    doc = ROOT / "docs" / doc
    body = doc.read_text()
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        _, tail = rest.split(end, 1)
        body = head + begin + "\n" + text + "\n" + end + tail
    else:
        body += f"\n## {heading}\n\n{begin}\n{text}\n{end}\n"
    doc.write_text(body)
    log(f"wrote {doc}")


def read_section(begin, end, doc="benchmarks.md"):
    """The text between the `begin` and `end` markers of docs/`doc`, as `write_section`
    writes it (so writing it back changes nothing); None if the markers are missing."""
    body = (ROOT / "docs" / doc).read_text()
    if begin not in body or end not in body:
        return None
    text = body.split(begin, 1)[1].split(end, 1)[0]
    return text[1:-1] if text.startswith("\n") and text.endswith("\n") else text


class Table:
    """A Markdown table whose cells are rendered from, and parsed back into, rows of
    values (dicts). `columns` are (header, align, template): align "l" or "r"; the
    template a `str.format` pattern over the row's keys, e.g.
    "{ops:,.0f} ({ratio:.2f}×), p99 {p99:g}", or a list of them, the first whose fields
    the row has (not None) being used ("–" for a cell without values). Fields with a
    format spec hold numbers (parsed as float), fields without one text."""

    def __init__(self, columns):
        self.columns = [(h, a, [t] if isinstance(t, str) else list(t)) for h, a, t in columns]
        self._patterns = [[self._pattern(t) for t in ts] for _, _, ts in self.columns]

    @staticmethod
    def _pattern(template):
        regex, fields = "", {}
        for literal, name, spec, _ in string.Formatter().parse(template):
            regex += re.escape(literal)
            if name is not None:
                fields[name] = bool(spec)
                regex += (fr"(?P<{name}>-?[\d,]*\.?\d+(?:e[-+]?\d+)?)" if spec
                          else fr"(?P<{name}>.+?)")
        return re.compile(regex), fields

    def header(self):
        """The header and separator lines."""
        return ("| " + " | ".join(h for h, _, _ in self.columns) + " |\n|"
                + "".join("---:|" if a == "r" else "---|" for _, a, _ in self.columns))

    def render(self, rows):
        """The table as Markdown (no trailing newline)."""
        lines = [self.header()]
        for row in rows:
            cells = []
            for (_, _, templates), patterns in zip(self.columns, self._patterns):
                for template, (_, fields) in zip(templates, patterns):
                    if all(row.get(f) is not None for f in fields):
                        cells.append(template.format(**row))
                        break
                else:
                    raise ValueError(f"no template of {templates} fits {row}")
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def parse(self, text):
        """The rows of this table (found by its header) in `text`: a list of dicts, the
        fields of the template that matched each cell (those of its column's other
        templates None). Raises ValueError if the table is
        missing or a cell matches none of its column's templates."""
        lines = text.split("\n")
        head = self.header().split("\n")
        for i in range(len(lines) - 1):
            if lines[i:i + 2] == head:
                break
        else:
            raise ValueError(f"no table with the header {head[0]!r}")
        rows = []
        for line in lines[i + 2:]:
            if not line.startswith("|"):
                break
            cells = [c.strip() for c in line.strip()[1:-1].split(" | ")]
            if len(cells) != len(self.columns):
                raise ValueError(f"{len(cells)} cells, expected {len(self.columns)}: {line!r}")
            row = {}
            for cell, patterns in zip(cells, self._patterns):
                row.update({k: None for _, fields in patterns for k in fields})
                for regex, fields in patterns:
                    m = regex.fullmatch(cell)
                    if m:
                        row.update({k: float(v.replace(",", "")) if fields[k] else v
                                    for k, v in m.groupdict().items()})
                        break
                else:
                    raise ValueError(f"cannot parse the cell {cell!r} of {line!r}")
            rows.append(row)
        return rows


def with_image(text, table, png, alt):
    """`text` with the line `![alt](png)` right after the Markdown `table` it contains,
    replacing any line showing `png` elsewhere in it."""
    image = f"![{alt}]({png})"
    lead = text[:len(text) - len(text.lstrip("\n"))]
    trail = text[len(text.rstrip("\n")):]
    text = re.sub(r"\n*!\[[^\]]*\]\(" + re.escape(png) + r"\)\n*", "\n\n", text)
    if table not in text:
        raise ValueError(f"the table for {png} is not in the text")
    body = text.replace(table, table + "\n\n" + image, 1).strip("\n")
    return lead + body + trail


def pyplot():
    """matplotlib's pyplot with the Agg (file-only) backend, installing matplotlib with
    pip if it is missing."""
    try:
        import matplotlib
    except ImportError:
        log("matplotlib is missing: installing it with pip")
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet",
                        "--disable-pip-version-check", "matplotlib"], check=True)
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


COLORS = {"Redis": "#c44e52", "latticekv": "#4c72b0"}
PALETTE = ["#55a868", "#8172b2", "#ccb974", "#64b5cd", "#dd8452", "#937860", "#da8bc3",
           "#8c8c8c"]


def short(v):
    """A bar's default label, three significant digits: 1.26M, 146k, 11.6k, 4035, 53, 3.6."""
    if v >= 1e6:
        return f"{v / 1e6:.3g}M"
    if v >= 1e4:
        return f"{v / 1e3:.3g}k"
    if v >= 10:
        return f"{v:.0f}"
    return f"{v:.2g}"


class Panel:
    """One panel of `bar_chart`: `series` maps a legend label to one value per group (None:
    no bar); `labels` (same shape, optional) the text over each bar, by default the value
    itself; `log` a logarithmic y axis (for latencies spanning decades)."""

    def __init__(self, series, ylabel, labels=None, log=False, title=None):
        self.series, self.ylabel, self.labels = series, ylabel, labels or {}
        self.log, self.title = log, title


def bar_chart(path, title, groups, panels, note=None, dpi=100):
    """Draws grouped bars, one group per entry of `groups` (x axis), into the PNG `path`:
    one row per `Panel` (e.g. throughput, then latency percentiles). A group's bars are
    centred over it, skipping series without a value there. Colours: Redis red, latticekv
    blue (also "Redis p99", "Redis (AOF everysec)"), others from a fixed palette, the same series
    keeping its colour across panels.
    `note` is a line of small print under the title."""
    plt = pyplot()
    from matplotlib import ticker
    width = min(16.0, max(10.0, 0.75 * len(groups) + 3))
    height = 3.1 if len(panels) <= 2 else 2.6
    fig, axes = plt.subplots(len(panels), 1, figsize=(width, 1.2 + height * len(panels)),
                             sharex=True, squeeze=False)
    colors, spare = {}, iter(PALETTE * 4)
    for panel in panels:
        for name in panel.series:
            if name not in colors:
                colors[name] = next((c for k, c in COLORS.items()
                                     if re.fullmatch(re.escape(k) + r"( p[\d.]+| \(.*\))?",
                                                     name)), None) or next(spare)
    for ax, panel in zip(axes[:, 0], panels):
        names = list(panel.series)
        slot = 0.8 / max(1, len(names))
        seen = set()
        for g in range(len(groups)):
            present = [n for n in names if panel.series[n][g] is not None]
            for k, name in enumerate(present):
                x = g + (k - (len(present) - 1) / 2) * slot
                v = panel.series[name][g]
                ax.bar(x, v, width=slot * 0.95, color=colors[name],
                       label=name if name not in seen else "_nolegend_")
                seen.add(name)
                text = panel.labels.get(name, [None] * len(groups))[g]
                ax.text(x, v, short(v) if text is None else text, ha="center",
                        va="bottom", fontsize=7)
        if panel.log:
            ax.set_yscale("log")
        else:
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: short(v) if v else "0"))
        ax.margins(y=0.15)
        ax.set_ylabel(panel.ylabel)
        if panel.title:
            ax.set_title(panel.title, fontsize=10, loc="left")
        ax.grid(axis="y", alpha=0.3)
        ax.set_axisbelow(True)
        if len(names) > 1:
            ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.005, 1),
                      borderaxespad=0)
    axes[-1, 0].set_xticks(list(range(len(groups))))
    axes[-1, 0].set_xticklabels(groups, rotation=25 if len(groups) > 4 else 0,
                                ha="right" if len(groups) > 4 else "center", fontsize=8)
    fig.suptitle(textwrap.fill(title, int(width * 11)), fontsize=12)
    if note:
        fig.text(0.5, 0.005, note, ha="center", va="bottom", fontsize=7, color="#555555")
    fig.tight_layout(rect=(0, 0.02 if note else 0, 1, 1))
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    log(f"wrote {path}")


def systems_table(key, labels):
    """The redis-benchmark scripts' table: a `key` column (the case), then one column per
    system in `labels`, the first the baseline: "ops/s, p99 ms", the others "ops/s (ratio
    to the baseline×), p99 ms". Row fields: the key's (`case`), then ops<i>, ratio<i>,
    p99_<i> per system i."""
    columns = [(key, "l", "{case}"), (labels[0], "r", "{ops0:,.0f}, p99 {p99_0:g}")]
    columns += [(label, "r", f"{{ops{i}:,.0f}} ({{ratio{i}:.2f}}×), p99 {{p99_{i}:g}}")
                for i, label in enumerate(labels[1:], 1)]
    return Table(columns)


def systems_labels(text, key):
    """The system labels in the header of the first table of `text` whose first column is
    `key` (see `systems_table`)."""
    for line in text.split("\n"):
        if line.startswith(f"| {key} | "):
            return [c.strip() for c in line.strip()[1:-1].split(" | ")][1:]
    raise ValueError(f"no table with a {key!r} column")


def systems_chart(path, title, labels, rows, note=None):
    """Draws a `systems_table`'s rows: requests/s per system (labels: the baseline's value,
    the others' ratio to it), then p99 per system (log scale when it spans over 20×)."""
    ops = {label: [r[f"ops{i}"] for r in rows] for i, label in enumerate(labels)}
    p99 = {label: [r[f"p99_{i}"] for r in rows] for i, label in enumerate(labels)}
    marks = {label: [None if i == 0 else f"{r[f'ratio{i}']:.2f}×" for r in rows]
             for i, label in enumerate(labels)}
    every = [v for vs in p99.values() for v in vs]
    spread = max(every) / max(min(every), 1e-9) > 20
    bar_chart(path, title, [r["case"] for r in rows],
              [Panel(ops, "requests per second", labels=marks,
                     title=f"throughput (median of the rounds); labels: ratio to {labels[0]}"),
               Panel(p99, "p99 latency ms" + (" (log)" if spread else ""), log=spread,
                     title="p99 latency")], note=note)


def replot(begin, end, parse, draw, doc="benchmarks.md"):
    """`--replot`: parses the section between `begin` and `end` of docs/`doc` with
    `parse(text)`, draws its chart with `draw(data, text)` (which returns the section text
    with its image line, via `with_image`) and writes that text back."""
    text = read_section(begin, end, doc)
    if text is None:
        sys.exit(f"docs/{doc} has no {begin} ... {end} section to replot")
    write_section(begin, end, None, draw(parse(text), text), doc)
