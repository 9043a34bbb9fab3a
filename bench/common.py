"""Helpers shared by the benchmark scripts (bench/cluster, bench/durability): pinning,
ports, starting `latticekv server` processes, running `latticekv bench`, describing the
machine and rewriting a section of docs/benchmarks.md."""
import json
import os
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import sys
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
    """One `latticekv server` process (one worker, pinned to CPU 0) and its addresses."""

    def __init__(self, binary, node_id, host="127.0.0.1", seed=None, flags=()):
        args = pin(0) + [binary, "server", "--no-leave", "--node-id", node_id,
                         "--listen", f"{host}:0", "--resp", f"{host}:0", "--workers", "1"]
        if seed:
            args += ["--seeds", seed]
        args += list(flags)
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "LATTICEKV_LOG": "warn"})
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
        elif parts[:1] == ["worker"]:
            section = "workers"
        elif not parts:
            section = None
        elif section == "members" and len(parts) > 2 and parts[2] == "alive":
            alive += 1
        elif section == "workers" and len(parts) > 2:
            keys += int(parts[2])
    return alive, keys


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


def write_section(begin, end, heading, text):
    """Replaces the text between the `begin` and `end` markers of docs/benchmarks.md, or
    appends a section `heading` holding it."""
    doc = ROOT / "docs" / "benchmarks.md"
    body = doc.read_text()
    if begin in body and end in body:
        head, rest = body.split(begin, 1)
        _, tail = rest.split(end, 1)
        body = head + begin + "\n" + text + "\n" + end + tail
    else:
        body += f"\n## {heading}\n\n{begin}\n{text}\n{end}\n"
    doc.write_text(body)
    log(f"wrote {doc}")
