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
