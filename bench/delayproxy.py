#!/usr/bin/env python3
"""A delaying TCP proxy: puts a network hop between processes of one machine.

    bench/delayproxy.py --delay-ms 0.25 --rate-gbit 10 127.0.0.2:7700=127.0.0.1:7700 ...

Listens on every LISTEN address and forwards each accepted connection to its TARGET. Every
chunk of bytes, in either direction, leaves the proxy no earlier than `--delay-ms` after it
arrived (a one-way delay per segment, so a request and its answer pay twice that), and no
faster than `--rate-gbit` per connection and direction (the link's serialization time:
a chunk of n bytes takes n / rate after the previous one left). Chunks stay in order.
Used by bench/serverless to put the store a network hop away from the compute hosts
(netem is not available on every kernel; see docs/serverless.md).

On exit it prints `forwarded LISTEN BYTES` per address (both directions), so a caller
can check that the traffic it meant to delay went through it.

Bounded: at most `--max-conns` connections at once (more are refused: closed at once),
and per connection and direction at most QUEUE chunks of CHUNK bytes waiting to leave
(the reader stops reading while the queue is full, so TCP's own flow control pushes
back on the sender). Prints `ready` on stdout once every address is bound; runs until
SIGTERM or SIGINT. Threads, not asyncio: asyncio's timers round to milliseconds (epoll),
which is coarser than the delays it adds.
"""
import argparse
import queue
import signal
import socket
import sys
import threading
import time

CHUNK = 256 * 1024
QUEUE = 64


def parse_addr(text):
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"not HOST:PORT: {text!r}")
    return host.strip("[]"), int(port)


def parse_route(text):
    listen, sep, target = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"not LISTEN=TARGET: {text!r}")
    return parse_addr(listen), parse_addr(target)


class Pipe:
    """One direction of a connection: a reader thread stamps chunks, a writer thread sends
    each at its stamp plus the delay (and after the previous one's serialization time)."""

    def __init__(self, src, dst, delay, rate, done, count):
        self.src, self.dst, self.delay, self.rate, self.done = src, dst, delay, rate, done
        self.count = count
        self.q = queue.Queue(QUEUE)
        threading.Thread(target=self.read, daemon=True).start()
        threading.Thread(target=self.write, daemon=True).start()

    def read(self):
        try:
            while True:
                data = self.src.recv(CHUNK)
                if not data:
                    break
                self.q.put((time.monotonic(), data))
        except OSError:
            pass
        self.q.put(None)

    def write(self):
        last = 0.0
        try:
            while True:
                item = self.q.get()
                if item is None:
                    self.dst.shutdown(socket.SHUT_WR)
                    break
                stamp, data = item
                leave = max(stamp + self.delay, last) + (len(data) / self.rate if self.rate
                                                         else 0.0)
                wait = leave - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                last = leave
                self.dst.sendall(data)
                self.count(len(data))
        except OSError:
            pass
        self.done()


class Proxy:
    def __init__(self, routes, delay, rate, max_conns):
        self.delay, self.rate, self.max_conns = delay, rate, max_conns
        self.lock = threading.Lock()
        self.conns = 0
        self.listeners = []
        self.forwarded = {}
        for listen, target in routes:
            s = socket.socket(socket.AF_INET6 if ":" in listen[0] else socket.AF_INET)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(listen)
            s.listen(128)
            self.listeners.append((s, target))
            self.forwarded[f"{listen[0]}:{listen[1]}"] = 0

    def serve(self):
        for s, target in self.listeners:
            threading.Thread(target=self.accept, args=(s, target), daemon=True).start()

    def accept(self, lsock, target):
        host, port = lsock.getsockname()[:2]
        name = f"{host}:{port}"
        while True:
            try:
                client, _ = lsock.accept()
            except OSError:
                return
            with self.lock:
                full = self.conns >= self.max_conns
                if not full:
                    self.conns += 1
            if full:
                client.close()
                continue
            threading.Thread(target=self.connect, args=(client, target, name),
                             daemon=True).start()

    def connect(self, client, target, name):
        try:
            upstream = socket.create_connection(target, timeout=10)
            upstream.settimeout(None)
        except OSError:
            client.close()
            self.release()
            return
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        left = [2]
        lock = threading.Lock()

        def done():
            with lock:
                left[0] -= 1
                last = left[0] == 0
            if last:
                client.close()
                upstream.close()
                self.release()

        def count(n):
            with self.lock:
                self.forwarded[name] += n

        Pipe(client, upstream, self.delay, self.rate, done, count)
        Pipe(upstream, client, self.delay, self.rate, done, count)

    def release(self):
        with self.lock:
            self.conns -= 1


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("routes", nargs="+", type=parse_route, metavar="LISTEN=TARGET")
    ap.add_argument("--delay-ms", type=float, default=0.25,
                    help="one-way delay per segment (default 0.25: a 0.5 ms round trip)")
    ap.add_argument("--rate-gbit", type=float, default=10.0,
                    help="per connection and direction, Gbit/s (0: unlimited; default 10)")
    ap.add_argument("--max-conns", type=int, default=1024)
    args = ap.parse_args()
    if args.delay_ms < 0 or args.rate_gbit < 0:
        sys.exit("--delay-ms and --rate-gbit must not be negative")
    proxy = Proxy(args.routes, args.delay_ms / 1000.0, args.rate_gbit * 1e9 / 8,
                  args.max_conns)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    proxy.serve()
    print("ready", flush=True)
    stop.wait()
    with proxy.lock:
        for name, n in proxy.forwarded.items():
            print(f"forwarded {name} {n}", flush=True)


if __name__ == "__main__":
    main()
