"""Runs the examples of the README and docs/ against a fresh `latticekv local`, so a doc that
drifts from the code fails `make test`.

What runs:

- Fenced blocks whose info string is `console`: shell sessions. Each line starting with `$ `
  is a command (run by bash in a scratch directory, with a `latticekv`, `python` and
  `redis-cli` of the test's choosing first on `PATH`); the lines after it, up to the next
  command, are its expected output (stdout and stderr together). A line `...` matches any
  number of lines, and `...` inside a line matches any text; trailing blanks are ignored.
  A command with no expected lines must print nothing.
- Fenced blocks whose info string is `pycon`: Python interactive sessions, run by doctest
  (ELLIPSIS and NORMALIZE_WHITESPACE) in one namespace per file.

Blocks of one file share one node, in order, as a reader following the page would. The
examples are written for the defaults (`127.0.0.1:7700`, Redis on `6380`); the harness
starts its node on free ports and rewrites those addresses in commands and outputs.
`redis-cli` runs with `--no-raw`, its output at a terminal, since its output here is a
pipe.

An HTML comment right before a block's fence directs it:
`<!-- docs-test: skip, REASON -->` does not run it (a reason is required), and
`<!-- docs-test: local ARGS -->` runs the page's blocks from there on against a node
started with `latticekv local ARGS` (e.g. `--faas`).
"""
from __future__ import annotations

import dataclasses
import doctest
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

from conftest import Node

DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->")
FENCE = re.compile(r"^(`{3,})\s*([\w-]*)")
COMMAND_TIMEOUT_S = 60


@dataclasses.dataclass
class Block:
    """One fenced block to run."""

    path: pathlib.Path
    line: int
    kind: str
    text: str
    local_args: tuple[str, ...]


@dataclasses.dataclass
class Failure:
    """An example whose output differs from the doc."""

    where: str
    command: str
    expected: str
    got: str

    def __str__(self) -> str:
        return (f"{self.where}: {self.command}\n--- the doc says\n{self.expected}\n"
                f"--- it printed\n{self.got}")


def blocks(path: pathlib.Path) -> list[Block]:
    """The runnable blocks of a markdown file, with the node arguments each needs."""
    lines = path.read_text().splitlines()
    out: list[Block] = []
    local_args: tuple[str, ...] = ()
    pending: tuple[str, str] | None = None
    i = 0
    while i < len(lines):
        m = DIRECTIVE.search(lines[i])
        if m:
            pending = (m.group(1), m.group(2))
            if pending[0] == "local":
                local_args = tuple(pending[1].split())
            elif pending[0] == "skip" and not pending[1].strip(", "):
                raise ValueError(f"{path}:{i + 1}: a skip needs a reason")
            elif pending[0] not in ("local", "skip"):
                raise ValueError(f"{path}:{i + 1}: unknown directive {pending[0]!r}")
            i += 1
            continue
        f = FENCE.match(lines[i])
        if not f:
            if lines[i].strip():
                pending = None
            i += 1
            continue
        fence, kind = f.group(1), f.group(2)
        start = i
        i += 1
        body = []
        while i < len(lines) and not lines[i].startswith(fence):
            body.append(lines[i])
            i += 1
        i += 1
        skip = pending is not None and pending[0] == "skip"
        pending = None
        if kind in ("console", "pycon") and not skip:
            out.append(Block(path, start + 1, kind, "\n".join(body), local_args))
    return out


def matches(expected: list[str], got: list[str]) -> bool:
    """Line-wise match with `...` wildcards (a whole line: any lines; inside: any text)."""
    if not expected:
        return not got
    head, rest = expected[0], expected[1:]
    if head == "...":
        return any(matches(rest, got[k:]) for k in range(len(got) + 1))
    if not got:
        return False
    pattern = ".*".join(re.escape(p) for p in head.split("..."))
    return re.fullmatch(pattern, got[0]) is not None and matches(rest, got[1:])


class Runner:
    """Runs blocks; one node per distinct `local` arguments, started on first use."""

    def __init__(self, binary: str):
        self.binary = binary
        self.nodes: dict[tuple[str, ...], Node] = {}
        self.bin_dir = tempfile.mkdtemp(prefix="lkv-docs-bin-")
        self.cwd = tempfile.mkdtemp(prefix="lkv-docs-cwd-")
        os.symlink(binary, os.path.join(self.bin_dir, "latticekv"))
        # Wrappers, not symlinks: a virtual environment's interpreter finds its packages
        # from the path it was started by.
        self.wrapper("python", f'exec "{sys.executable}" "$@"')
        real_cli = shutil.which("redis-cli")
        if real_cli:
            self.wrapper("redis-cli", f'exec "{real_cli}" --no-raw "$@"')
        self.globs: dict[pathlib.Path, dict] = {}

    def wrapper(self, name: str, line: str) -> None:
        path = os.path.join(self.bin_dir, name)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\n{line}\n")
        os.chmod(path, 0o755)

    def node(self, args: tuple[str, ...]) -> Node:
        if args not in self.nodes:
            extra = args
            if "--faas" in args and "--faas-python" not in args:
                # Executors run in this interpreter, which has the package under test.
                extra = (*args, "--faas-python", sys.executable)
            self.nodes[args] = Node("--workers", "2", *extra)
        return self.nodes[args]

    def close(self) -> None:
        for n in self.nodes.values():
            n.stop()
        shutil.rmtree(self.bin_dir, ignore_errors=True)
        shutil.rmtree(self.cwd, ignore_errors=True)

    def rewrite(self, node: Node, text: str) -> str:
        """The doc's default addresses replaced by the test node's."""
        resp_port = str(node.resp_port)
        text = text.replace("127.0.0.1:7700", node.native)
        text = text.replace("127.0.0.1:6380", f"{node.resp_host}:{resp_port}")
        return re.sub(r"(-p\s+)6380\b", rf"\g<1>{resp_port}", text)

    def unrewrite(self, node: Node, text: str) -> str:
        """The test node's addresses shown as the doc's defaults (for comparing output)."""
        text = text.replace(node.native, "127.0.0.1:7700")
        return text.replace(f"{node.resp_host}:{node.resp_port}", "127.0.0.1:6380")

    def run(self, block: Block) -> list[Failure]:
        node = self.node(block.local_args)
        if block.kind == "console":
            return self.run_console(node, block)
        return self.run_pycon(node, block)

    def run_console(self, node: Node, block: Block) -> list[Failure]:
        env = {**os.environ, "PATH": f"{self.bin_dir}:{os.environ['PATH']}",
               "LATTICEKV_ADDR": node.native, "LATTICEKV_LOG": "warn"}
        failures = []
        steps: list[tuple[int, str, list[str]]] = []
        for n, line in enumerate(block.text.splitlines()):
            if line.startswith("$ "):
                steps.append((block.line + 1 + n, line[2:], []))
            elif steps:
                steps[-1][2].append(line.rstrip())
            elif line.strip():
                raise ValueError(f"{block.path}:{block.line}: output before any `$ ` command")
        for line, command, expected in steps:
            while expected and not expected[-1]:
                expected.pop()
            try:
                done = subprocess.run(
                    ["bash", "-c", self.rewrite(node, command)], cwd=self.cwd, env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                    timeout=COMMAND_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                failures.append(Failure(f"{block.path}:{line}", command, "\n".join(expected),
                                        f"(still running after {COMMAND_TIMEOUT_S} s)"))
                continue
            got = [ln.rstrip() for ln in self.unrewrite(node, done.stdout).splitlines()]
            while got and not got[-1]:
                got.pop()
            if not matches(expected, got):
                failures.append(Failure(f"{block.path}:{line}", command, "\n".join(expected),
                                        "\n".join(got) + f"\n(exit status {done.returncode})"))
        return failures

    def run_pycon(self, node: Node, block: Block) -> list[Failure]:
        globs = self.globs.setdefault(block.path, {"__name__": "__docs__"})
        text = self.rewrite(node, block.text)
        test = doctest.DocTestParser().get_doctest(text, globs, str(block.path),
                                                   str(block.path), block.line)
        report: list[str] = []
        runner = doctest.DocTestRunner(
            optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
        runner.run(test, out=report.append, clear_globs=False)
        globs.update(test.globs)  # DocTest ran on a copy: later blocks see these names
        if runner.failures:
            return [Failure(f"{block.path}:{block.line}", "python session", "",
                            "".join(report))]
        return []
