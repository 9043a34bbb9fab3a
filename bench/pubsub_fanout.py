#!/usr/bin/env python3
"""PUBLISH fan-out subscribers for bench/redis-families: opens N RESP2 connections to
127.0.0.1:PORT, SUBSCRIBEs each to one channel, prints `ready`, then counts the messages
delivered on all of them (one thread, non-blocking sockets; a message is counted by its
`message` frame header, so parsing costs little). On a line `expect TOTAL` on stdin it
keeps reading until TOTAL messages arrived or none came for 2 s, then prints
`COUNT SECONDS` (from the first message to the last) and exits.

    pubsub_fanout.py --port PORT --subscribers N --channel CH
"""
import argparse
import selectors
import socket
import sys
import time

MARKER = b"$7\r\nmessage\r\n"
QUIET = 2.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--subscribers", type=int, required=True)
    ap.add_argument("--channel", default="bench.fanout")
    args = ap.parse_args()
    sel = selectors.DefaultSelector()
    socks = []
    for _ in range(args.subscribers):
        s = socket.create_connection(("127.0.0.1", args.port))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        ch = args.channel.encode()
        s.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(ch), ch))
        # The confirmation: *3 $9 subscribe $len ch :1 (six lines)
        got = b""
        while got.count(b"\r\n") < 6:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("subscriber connection closed")
            got += chunk
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, [b""])
        socks.append(s)
    sel.register(sys.stdin, selectors.EVENT_READ, None)
    print("ready", flush=True)
    count, first, last, expect, expect_at = 0, None, None, None, 0.0
    while True:
        events = sel.select(timeout=0.2)
        now = time.monotonic()
        for key, _ in events:
            if key.data is None:
                line = sys.stdin.readline()
                if line.startswith("expect"):
                    expect, expect_at = int(line.split()[1]), time.monotonic()
                sel.unregister(sys.stdin)
                continue
            try:
                chunk = key.fileobj.recv(1 << 18)
            except BlockingIOError:
                continue
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            # Count markers in the previous chunk's tail + this one (a marker split across
            # reads is counted once: the tail is shorter than a marker).
            data = key.data[0] + chunk
            n = data.count(MARKER)
            key.data[0] = data[-(len(MARKER) - 1):]
            if n:
                count += n
                first = first or now
                last = now
        if expect is not None:
            idle_since = max(last or 0.0, expect_at)
            if count >= expect or now - idle_since > QUIET:
                break
    seconds = (last - first) if first and last and last > first else 0.0
    print(f"{count} {seconds:.6f}", flush=True)


if __name__ == "__main__":
    main()
