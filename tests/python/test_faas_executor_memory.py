"""An executor process keeps the memory of freed payloads for its next task.

A function's values arrive as Python `bytes` objects. Under glibc's default policy each
512 KB value of each task faulted its pages in again (a fresh mmap, or a heap trimmed as
soon as it was freed); `ExecutorLink.connect` sets the allocator so that they reuse the
pages the previous task freed. Counted in page faults (`ru_minflt`), not time.
"""
from __future__ import annotations

import subprocess
import sys

import pytest

# In a fresh interpreter: optionally connect an ExecutorLink (to a listening socket that
# never answers: the hello waits in its buffer), then run "tasks" that each copy two
# 512 KB values into new bytes objects and free them; print the page faults per task.
PROBE = r"""
import resource, socket, sys
from latticekv._native import ExecutorLink

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(1)
if sys.argv[1] == "link":
    link = ExecutorLink.connect("127.0.0.1:%d" % srv.getsockname()[1], 0)
src = memoryview(bytearray(b"v" * (512 * 1024)))

def task():
    a = bytes(src)
    b = bytes(src)
    return len(a) + len(b)

for _ in range(5):
    task()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(50):
    task()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50)
"""


def faults_per_task(mode: str) -> float:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True,
                         text=True, timeout=60, check=True)
    return float(out.stdout.strip())


def test_an_executor_reuses_the_pages_of_freed_payloads():
    # Two 512 KB values are 256 pages: without the link's setting they fault in again.
    plain = faults_per_task("plain")
    if plain < 64:
        pytest.skip(f"this C library keeps freed memory by itself ({plain} faults per task)")
    linked = faults_per_task("link")
    assert linked < 8, f"{linked} page faults per task after ExecutorLink.connect (without: {plain})"
