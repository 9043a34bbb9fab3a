"""A latticekv.faas executor: runs functions for its compute host, one at a time.

Started by the host (``latticekv faas host`` or ``latticekv local --faas``) as::

    python3 -m latticekv.faas.executor --host 127.0.0.1:PORT --id N

It connects to the host, then loops: take a task, unpickle the function (cached by its
bytes), resolve its arguments, call it, send the pickled result (or the traceback) and the
function's writes. It exits when the host closes the link.
"""
from __future__ import annotations

import argparse
import pickle
import sys
import traceback
from typing import Any, Callable, Dict, List

from .._native import ExecutorLink
from . import _begin_writes, _end_writes

# Unpickled functions by their cloudpickle bytes (a re-registered function has new bytes).
_FUNCTIONS: Dict[bytes, Callable[..., Any]] = {}
_MAX_CACHED = 256


def _function(code: bytes) -> Callable[..., Any]:
    f = _FUNCTIONS.get(code)
    if f is None:
        import cloudpickle  # noqa: F401  (functions pickled by value need it importable)

        f = pickle.loads(code)
        if len(_FUNCTIONS) >= _MAX_CACHED:
            _FUNCTIONS.clear()
        _FUNCTIONS[code] = f
    return f


def _arg(raw: tuple) -> Any:
    kind = raw[0]
    if kind in ("value", "upstream"):
        return pickle.loads(raw[1])
    # ("key", key, found, versions)
    _, _key, found, versions = raw
    if not found:
        return None
    if len(versions) == 1:
        return versions[0]
    return tuple(versions)


def _pickled(e: BaseException) -> bytes:
    """The exception, pickled for the caller to raise again; empty if it cannot be (or
    would not unpickle)."""
    try:
        import cloudpickle

        data = cloudpickle.dumps(e)
        pickle.loads(data)
        return data
    except Exception:  # noqa: BLE001
        return b""


def serve(link: ExecutorLink) -> None:
    while True:
        task = link.next_task()
        if task is None:
            return
        task_id, _name, code, raw_args = task
        _begin_writes()
        try:
            f = _function(code)
            args: List[Any] = [_arg(a) for a in raw_args]
            result = f(*args)
            out = pickle.dumps(result)
        except BaseException as e:  # noqa: BLE001 — every failure goes back to the caller
            _end_writes()
            link.failed(task_id, traceback.format_exc(), _pickled(e))
            continue
        link.done(task_id, out, _end_writes())


def main(argv: List[str] = sys.argv[1:]) -> int:
    p = argparse.ArgumentParser(prog="latticekv.faas.executor")
    p.add_argument("--host", required=True, help="the compute host's executor address")
    p.add_argument("--id", type=int, required=True, help="this executor's slot")
    a = p.parse_args(argv)
    link = ExecutorLink.connect(a.host, a.id)
    try:
        serve(link)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
