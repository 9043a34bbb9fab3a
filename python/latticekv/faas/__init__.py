"""latticekv.faas: Python functions and DAGs of them, run beside latticekv.

::

    from latticekv import faas
    cloud = faas.connect("127.0.0.1:7700")        # the store's address (or scheduler=...)
    cloud.register(lambda x: x + 1, "incr")
    cloud.call("incr", 1)                         # -> 2
    cloud.register(lambda x: x * x, "square")
    cloud.register_dag("pipe", ["incr", "square"], [("incr", "square")])
    cloud.call_dag("pipe", {"incr": [1]})         # -> 4
    fut = cloud.call_async("incr", 1)             # a concurrent.futures.Future
    fut.result(timeout=5)                         # -> 2
    cloud.call("f", faas.Ref("some-key"))         # f receives the key's value

Inside a function, :func:`put` writes a key; the writes of every function of a call are
applied together after its sink returns (and not at all if a function raises).

Functions are pickled with cloudpickle, arguments and results with pickle. A function's
exception is raised again in the caller, as concurrent.futures' process pool does: the
same exception, whose ``__cause__`` is a :class:`RemoteTraceback` holding the remote
traceback text (and with ``remote_traceback`` and ``function`` attributes where the
exception allows). An exception that cannot be pickled arrives as :class:`FunctionError`.
A :class:`Ref` argument is read for the function: it receives the key's bytes (``None`` if
the key is absent; a tuple of bytes if the key holds concurrent versions).

See docs/serverless.md.
"""
from __future__ import annotations

import concurrent.futures
import pickle
import threading
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .._native import Error, FaasClient, FaasNativeError

__all__ = [
    "BadRequestError",
    "Cloud",
    "ConnectionError",
    "FaasError",
    "FunctionError",
    "NoExecutorsError",
    "NotFoundError",
    "NotImplementedYetError",
    "Ref",
    "RemoteTraceback",
    "TimeoutError",
    "UnavailableError",
    "connect",
    "put",
]

PROTOCOLS = ("CT", "HB", "OPT", "CON")


class FaasError(Error):
    """Base class of the serverless layer's errors (a :class:`latticekv.Error`)."""

    code = "error"


class RemoteTraceback(Exception):
    """The ``__cause__`` of an exception raised again in the caller: the remote traceback
    text."""

    def __init__(self, traceback: str) -> None:
        super().__init__(traceback)
        self.traceback = traceback

    def __str__(self) -> str:
        return f"\n\nRemote traceback:\n{self.traceback}"


class FunctionError(FaasError):
    """A function raised an exception that could not be sent back as itself.
    ``traceback`` is the remote traceback text, ``function`` the function's name."""

    code = "function_raised"

    def __init__(self, message: str, traceback: str = "", function: str = "") -> None:
        super().__init__(message if not traceback else f"{message}\n\nRemote traceback:\n{traceback}")
        self.traceback = traceback
        self.function = function


class NotFoundError(FaasError, LookupError):
    """No such function or DAG is registered."""

    code = "not_found"


class BadRequestError(FaasError, ValueError):
    """The request is invalid: a bad name, an invalid DAG, arguments for no function."""

    code = "bad_request"


class NoExecutorsError(FaasError):
    """No compute host was connected to the scheduler within the call's time."""

    code = "no_executors"


class UnavailableError(FaasError):
    """A compute host, its executors or the store failed (after the allowed retries)."""

    code = "unavailable"


class TimeoutError(FaasError):
    """The call did not finish within its timeout."""

    code = "timeout"


class NotImplementedYetError(FaasError, NotImplementedError):
    """The protocol asked for is not implemented by the scheduler (older schedulers: every protocol is now)."""

    code = "not_implemented"


class ConnectionError(FaasError):
    """The scheduler could not be reached, or the connection broke."""

    code = "connection"


_BY_CODE = {
    c.code: c
    for c in (
        NotFoundError,
        BadRequestError,
        NoExecutorsError,
        UnavailableError,
        TimeoutError,
        NotImplementedYetError,
        ConnectionError,
    )
}


def _translate(e: FaasNativeError) -> BaseException:
    code, message, traceback, function, exception = e.args
    if code == "function_raised":
        if exception:
            try:
                original = pickle.loads(exception)
            except Exception:  # noqa: BLE001 — fall back to FunctionError
                original = None
            if isinstance(original, BaseException):
                original.__cause__ = RemoteTraceback(traceback)
                try:
                    original.remote_traceback = traceback
                    original.function = function
                except Exception:  # noqa: BLE001 — a read-only exception type
                    pass
                return original
        return FunctionError(message, traceback, function)
    return _BY_CODE.get(code, FaasError)(message)


def _raise(e: FaasNativeError) -> None:
    err = _translate(e)
    raise err from err.__cause__


class Ref:
    """A reference to a key, as an argument: the function receives the key's value."""

    __slots__ = ("key",)

    def __init__(self, key: Union[bytes, str]) -> None:
        self.key = key.encode() if isinstance(key, str) else bytes(key)

    def __repr__(self) -> str:
        return f"Ref({self.key!r})"


def _args(args: Iterable[Any]) -> List[Tuple[bool, bytes]]:
    return [(True, a.key) if isinstance(a, Ref) else (False, pickle.dumps(a)) for a in args]


class Cloud:
    """A connection to a scheduler. Thread-safe: many calls may be in flight at once."""

    def __init__(self, native: FaasClient, max_async: int = 64) -> None:
        self._native = native
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_async, thread_name_prefix="latticekv-faas"
        )

    @property
    def scheduler(self) -> str:
        """The scheduler's address."""
        return self._native.address

    def register(self, function: Callable[..., Any], name: Optional[str] = None) -> str:
        """Registers (or replaces) ``function`` under ``name`` (default: its ``__name__``);
        returns the name."""
        import cloudpickle

        if name is None:
            name = getattr(function, "__name__", None)
            if not name or name == "<lambda>":
                raise BadRequestError("a lambda needs a name: register(f, name)")
        try:
            self._native.register_function(name, cloudpickle.dumps(function))
        except FaasNativeError as e:
            _raise(e)
        return name

    def register_dag(
        self, name: str, functions: Sequence[str], edges: Iterable[Tuple[str, str]]
    ) -> None:
        """Registers (or replaces) a DAG of registered functions: ``edges`` are
        ``(upstream, downstream)`` pairs; it must have exactly one sink."""
        try:
            self._native.register_dag(name, list(functions), [(a, b) for a, b in edges])
        except FaasNativeError as e:
            _raise(e)

    def call(
        self, name: str, *args: Any, protocol: str = "", timeout: Optional[float] = None
    ) -> Any:
        """Calls function ``name`` with ``args`` (values, or :class:`Ref` keys); returns
        its result."""
        try:
            out = self._native.call(name, _args(args), protocol, timeout)
        except FaasNativeError as e:
            _raise(e)
        return pickle.loads(out)

    def call_dag(
        self,
        name: str,
        args: Optional[Dict[str, Sequence[Any]]] = None,
        protocol: str = "",
        timeout: Optional[float] = None,
        stats: bool = False,
    ) -> Any:
        """Calls DAG ``name``; ``args`` maps a function to its own arguments (the results
        of its upstream functions come first). Returns the sink's result; with
        ``stats=True``, ``(result, stats)``: how the scheduler ran the call, a dict of
        ``protocol`` (the one it ended under: ``"CT"``, ``"OPT"``, ``"CON"``, ``"HB"``),
        ``attempts``, ``aborts`` (of which ``early_aborts``: HB's simulated ones) and
        ``meta_bytes`` (causal metadata that travelled through the scheduler; 0 under CT)."""
        native_args = {f: _args(a) for f, a in (args or {}).items()}
        try:
            if stats:
                out, st = self._native.call_dag_stats(name, native_args, protocol, timeout)
                return pickle.loads(out), st
            out = self._native.call_dag(name, native_args, protocol, timeout)
        except FaasNativeError as e:
            _raise(e)
        return pickle.loads(out)

    def call_async(self, name: str, *args: Any, **kw: Any) -> "concurrent.futures.Future[Any]":
        """:meth:`call`, returning a future."""
        return self._pool.submit(self.call, name, *args, **kw)

    def call_dag_async(self, name: str, *a: Any, **kw: Any) -> "concurrent.futures.Future[Any]":
        """:meth:`call_dag`, returning a future."""
        return self._pool.submit(self.call_dag, name, *a, **kw)

    def close(self) -> None:
        """Waits for calls in flight, then releases the threads of the futures."""
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "Cloud":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def connect(addr: str = "127.0.0.1:7700", scheduler: Optional[str] = None) -> Cloud:
    """Connects to a scheduler published in the store at ``addr`` (a node's native
    address), or to the scheduler at ``scheduler`` directly."""
    try:
        if scheduler is not None:
            return Cloud(FaasClient.connect(scheduler))
        return Cloud(FaasClient.discover(addr))
    except FaasNativeError as e:
        _raise(e)
        raise  # not reached: _raise raises


# ---- inside a function ---------------------------------------------------------------

_local = threading.local()


def put(key: Union[bytes, str], value: Union[bytes, str]) -> None:
    """Inside a function: writes ``value`` to ``key``, applied after the call's sink."""
    writes = getattr(_local, "writes", None)
    if writes is None:
        raise RuntimeError("faas.put is for use inside a function run by an executor")
    k = key.encode() if isinstance(key, str) else bytes(key)
    v = value.encode() if isinstance(value, str) else bytes(value)
    writes.append((k, v))


def _begin_writes() -> None:
    _local.writes = []


def _end_writes() -> List[Tuple[bytes, bytes]]:
    writes = getattr(_local, "writes", None) or []
    _local.writes = None
    return writes
