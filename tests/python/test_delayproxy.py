"""bench/delayproxy.py, the delaying TCP proxy bench/serverless puts between the compute
hosts and the store: bytes arrive intact and in order, a round trip takes at least twice
the one-way delay, large transfers pay the configured rate, and a latticekv node behind
it (`--advertise 127.0.0.2`) is reached only through it."""
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time

from conftest import binary, free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
PROXY = ROOT / "bench" / "delayproxy.py"


def start_proxy(*args):
    proc = subprocess.Popen([sys.executable, str(PROXY), *args], stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def stop_proxy(proc):
    """Stops it; the bytes it forwarded per listening address."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0
    return {line.split()[1]: int(line.split()[2]) for line in out.splitlines()
            if line.startswith("forwarded ")}


def echo_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(4)

    def echo(conn):
        while data := conn.recv(1 << 20):
            conn.sendall(data)
        conn.close()

    def serve():
        while True:
            conn, _ = srv.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1]


def roundtrips(port, n, size):
    s = socket.create_connection(("127.0.0.2", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    payload = bytes(i % 251 for i in range(size))
    times = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(payload)
        got = b""
        while len(got) < size:
            chunk = s.recv(1 << 20)
            assert chunk, "the proxy closed the connection"
            got += chunk
        times.append(time.perf_counter() - t)
        assert got == payload
    s.close()
    return sorted(times)


def test_round_trips_take_twice_the_delay_and_bytes_arrive_intact():
    target, port = echo_server(), free_port()
    proc = start_proxy("--delay-ms", "2", "--rate-gbit", "0",
                       f"127.0.0.2:{port}=127.0.0.1:{target}")
    try:
        small = roundtrips(port, 20, 100)
        big = roundtrips(port, 2, 4 << 20)
    finally:
        forwarded = stop_proxy(proc)
    assert small[0] >= 0.004, small  # never faster than 2 × 2 ms
    assert big[0] >= 0.004, big
    assert forwarded == {f"127.0.0.2:{port}": 2 * (20 * 100 + 2 * (4 << 20))}


def test_the_rate_limits_large_transfers():
    target, port = echo_server(), free_port()
    proc = start_proxy("--delay-ms", "0", "--rate-gbit", "0.5",
                       f"127.0.0.2:{port}=127.0.0.1:{target}")
    try:
        t = roundtrips(port, 1, 8 << 20)
    finally:
        stop_proxy(proc)
    # 8 MiB at 0.5 Gbit/s: 134 ms each way (the echo streams back while the rest
    # arrives, so the round trip takes about one way's time).
    assert t[0] >= 8 * 2**20 * 8 / 0.5e9 * 0.95, t


def test_a_node_advertising_the_proxy_host_is_reached_through_it(tmp_path):
    import latticekv

    front, worker = free_port(), free_port()
    proc = start_proxy("--delay-ms", "0.5",
                       *(f"127.0.0.2:{p}=127.0.0.1:{p}" for p in (front, worker)))
    node = subprocess.Popen(
        [binary(), "local", "--listen", f"127.0.0.1:{front}", "--worker-listen",
         f"127.0.0.1:{worker}", "--peer-listen", "127.0.0.1:0", "--advertise", "127.0.0.2",
         "--resp", "127.0.0.1:0", "--http", "127.0.0.1:0", "--workers", "1",
         "--disk-nodes", "0", "--data-dir", str(tmp_path)],
        stdout=subprocess.PIPE, text=True)
    try:
        native = None
        for line in node.stdout:
            if line.startswith("native "):
                native = line.split()[1]
            if line.startswith("press"):
                break
        assert native == f"127.0.0.2:{front}"
        client = latticekv.connect(native)
        client.put("k", b"v" * 10_000)
        assert client.get("k") == b"v" * 10_000
    finally:
        node.send_signal(signal.SIGTERM)
        node.wait(15)
        forwarded = stop_proxy(proc)
    # The key's reads and writes went to the worker's advertised address: the proxy's.
    assert forwarded[f"127.0.0.2:{worker}"] >= 20_000, forwarded
