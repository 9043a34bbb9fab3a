"""latticekv: Python client of latticekv, a coordination-free key-value store of lattices.

Blocking use::

    import latticekv
    c = latticekv.connect("127.0.0.1:7700")
    c.put("k", b"v")
    print(c.get("k"))          # b'v'

Sessions and transactions at a consistency level::

    s = c.session("read-your-writes")
    s.write("k", b"v")
    assert s.read("k") == [b"v"]
    with c.session("read-committed").begin() as t:
        t.write("a", b"1")
        t.write("b", b"2")          # both visible at commit, together

Subscriptions: new values of keys, pushed by their replicas::

    with c.subscribe(["config", "leader"], period=0.2) as sub:
        for key, value in sub:      # first the current values, then each change
            print(key, value)       # value None: absent or deleted

Asyncio use::

    c = await latticekv.connect_async("127.0.0.1:7700")
    await c.put("k", b"v")
    s = c.session("causal")
    await s.write("k", b"w")
    async with await c.subscribe(["k"]) as sub:
        async for key, value in sub:
            ...

The blocking client is compiled Rust (the project's own client, on a shared tokio
runtime); every call releases the GIL while it waits. The asyncio client runs the blocking
calls in the event loop's default executor. All errors derive from :class:`Error`.
"""
from __future__ import annotations

import asyncio
import functools
from types import TracebackType
from typing import Any, Callable, Iterable, Optional, Tuple, Type, TypeVar, Union

from ._native import (
    AuthenticationError,
    Client,
    ConnectionError,
    Error,
    InvalidArgumentError,
    InvalidUseError,
    MemoryLimitError,
    PermissionDeniedError,
    ProtocolError,
    ServerError,
    Session,
    StorageError,
    Subscription,
    TimeoutError,
    Transaction,
    UnavailableError,
    WrongTypeError,
    connect,
)

__all__ = [
    "AsyncClient",
    "AsyncSession",
    "AsyncSubscription",
    "AsyncTransaction",
    "AuthenticationError",
    "Client",
    "ConnectionError",
    "Error",
    "InvalidArgumentError",
    "InvalidUseError",
    "MemoryLimitError",
    "PermissionDeniedError",
    "ProtocolError",
    "ServerError",
    "Session",
    "StorageError",
    "Subscription",
    "TimeoutError",
    "Transaction",
    "UnavailableError",
    "WrongTypeError",
    "connect",
    "connect_async",
]

T = TypeVar("T")

_Keys = Union[bytes, bytearray, str, Iterable[Union[bytes, bytearray, str]]]

# How long one executor call of AsyncSubscription.next waits at most (seconds): a
# cancelled `await sub.next()` leaves its executor thread busy this long at most.
_ASYNC_SLICE = 0.1


async def _run(fn: Callable[..., T], *args: Any) -> T:
    """Runs a blocking call in the running loop's default executor."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(fn, *args))


class AsyncClient:
    """The asyncio face of :class:`Client`: the same methods, awaitable.

    Obtain one with :func:`connect_async`, or wrap a connected client:
    ``AsyncClient(latticekv.connect(addr))``.
    """

    def __init__(self, client: Client) -> None:
        self.client = client

    @property
    def address(self) -> str:
        """The address this client connected to."""
        return self.client.address

    async def get(self, key: bytes | str) -> Optional[bytes]:
        """Reads an LWW register (None if absent); see :meth:`Client.get`."""
        return await _run(self.client.get, key)

    async def get_value(self, key: bytes | str) -> Any:
        """Reads a key of any lattice type; see :meth:`Client.get_value`."""
        return await _run(self.client.get_value, key)

    async def put(self, key: bytes | str, value: bytes | str) -> None:
        """Sets an LWW register; see :meth:`Client.put`."""
        await _run(self.client.put, key, value)

    async def merge(self, key: bytes | str, kind: str, value: Any) -> None:
        """Merges a value of another lattice type; see :meth:`Client.merge`."""
        await _run(self.client.merge, key, kind, value)

    async def delete(self, key: bytes | str) -> bool:
        """Deletes a key; True if it existed."""
        return await _run(self.client.delete, key)

    async def incr(self, key: bytes | str, delta: int = 1) -> int:
        """Adds to a counter; returns the new value."""
        return await _run(self.client.incr, key, delta)

    async def counter(self, key: bytes | str) -> int:
        """A counter's value (0 if absent)."""
        return await _run(self.client.counter, key)

    async def sadd(self, key: bytes | str, *members: bytes | str) -> int:
        """Adds members to a set; returns how many were new."""
        return await _run(self.client.sadd, key, *members)

    async def srem(self, key: bytes | str, *members: bytes | str) -> int:
        """Removes members from a set; returns how many were present."""
        return await _run(self.client.srem, key, *members)

    async def smembers(self, key: bytes | str) -> set[bytes]:
        """The members of a set (empty if absent)."""
        return await _run(self.client.smembers, key)

    async def ping(self) -> None:
        """Round trip to the node."""
        await _run(self.client.ping)

    def session(self, level: str = "eventual", max_keys: Optional[int] = None) -> AsyncSession:
        """A new session at a consistency level; see :meth:`Client.session`.

        Not a coroutine: creating a session sends nothing.
        """
        return AsyncSession(self.client.session(level, max_keys))

    async def status(self) -> dict[str, Any]:
        """The node's statistics; see :meth:`Client.status`."""
        return await _run(self.client.status)

    async def subscribe(self, keys: _Keys, period: float = 0.1) -> AsyncSubscription:
        """Subscribes to keys; see :meth:`Client.subscribe`.

        ``async for key, value in sub`` yields the notifications; ``async with`` closes
        the subscription at the end of the block.
        """
        return AsyncSubscription(await _run(self.client.subscribe, keys, period))

    def __repr__(self) -> str:
        return f"latticekv.AsyncClient({self.client.address!r})"


class AsyncSession:
    """The asyncio face of :class:`Session`: the same methods, awaitable.

    Obtain one with :meth:`AsyncClient.session`, or wrap a session:
    ``AsyncSession(client.session("causal"))``. Concurrent calls share the one session.
    """

    def __init__(self, session: Session) -> None:
        self.session = session

    @property
    def level(self) -> str:
        """The session's level (its canonical name)."""
        return self.session.level

    @property
    def actor(self) -> int:
        """The session's actor id."""
        return self.session.actor

    async def get(self, key: bytes | str) -> Any:
        """Reads a key at the session's level; see :meth:`Session.get`."""
        return await _run(self.session.get, key)

    async def read(self, key: bytes | str) -> list[bytes]:
        """Reads a register's value or causal siblings; see :meth:`Session.read`."""
        return await _run(self.session.read, key)

    async def write(self, key: bytes | str, value: bytes | str) -> None:
        """Writes a register at the session's level; see :meth:`Session.write`."""
        await _run(self.session.write, key, value)

    async def put(self, key: bytes | str, value: bytes | str) -> None:
        """The same as :meth:`write`."""
        await _run(self.session.put, key, value)

    async def merge(self, key: bytes | str, kind: str, value: Any) -> None:
        """Merges a lattice value through the session; see :meth:`Session.merge`."""
        await _run(self.session.merge, key, kind, value)

    def begin(self) -> AsyncTransaction:
        """Starts a transaction; see :meth:`Session.begin`. Use ``async with``.

        Not a coroutine: starting a transaction sends nothing.
        """
        return AsyncTransaction(self.session.begin())

    def __repr__(self) -> str:
        return f"latticekv.AsyncSession(level={self.session.level!r})"


class AsyncTransaction:
    """The asyncio face of :class:`Transaction`: the same methods, awaitable.

    ``async with session.begin() as t:`` commits on normal exit and aborts on an
    exception.
    """

    def __init__(self, transaction: Transaction) -> None:
        self.transaction = transaction

    @property
    def level(self) -> str:
        """The level of the transaction's session."""
        return self.transaction.level

    @property
    def finished(self) -> bool:
        """True once the transaction has committed or aborted."""
        return self.transaction.finished

    @property
    def buffered(self) -> int:
        """The writes buffered so far."""
        return self.transaction.buffered

    async def get(self, key: bytes | str) -> Any:
        """Reads a key in the transaction; see :meth:`Transaction.get`."""
        return await _run(self.transaction.get, key)

    async def read(self, key: bytes | str) -> list[bytes]:
        """Reads a register in the transaction; see :meth:`Transaction.read`."""
        return await _run(self.transaction.read, key)

    async def write(self, key: bytes | str, value: bytes | str) -> None:
        """Writes an LWW register in the transaction; see :meth:`Transaction.write`."""
        await _run(self.transaction.write, key, value)

    async def put(self, key: bytes | str, value: bytes | str) -> None:
        """The same as :meth:`write`."""
        await _run(self.transaction.put, key, value)

    async def merge(self, key: bytes | str, kind: str, value: Any) -> None:
        """Merges a lattice value in the transaction; see :meth:`Transaction.merge`."""
        await _run(self.transaction.merge, key, kind, value)

    async def commit(self) -> None:
        """Commits; see :meth:`Transaction.commit`."""
        await _run(self.transaction.commit)

    async def abort(self) -> None:
        """Aborts; see :meth:`Transaction.abort`."""
        await _run(self.transaction.abort)

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        """Commits on normal exit, aborts on an exception (never swallows it)."""
        return await _run(self.transaction.__exit__, exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"latticekv.AsyncTransaction(level={self.transaction.level!r})"


class AsyncSubscription:
    """The asyncio face of :class:`Subscription`.

    ``async for key, value in sub`` waits for each notification without blocking the
    event loop; ``await sub.next(timeout)`` returns one or None on timeout; ``async with``
    closes the subscription at the end of the block.

    Waiting runs in the event loop's default executor, in slices of at most 0.1 s. A
    cancelled ``next()`` (e.g. under :func:`asyncio.wait_for`) loses nothing: a
    notification that arrives in the slice it left running is returned by the next call.
    """

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        # The executor call of a cancelled next(), still running or done but not taken.
        self._pending: Optional[asyncio.Future[Optional[Tuple[bytes, Any]]]] = None
        # Created on first use, inside the running loop (Python 3.9 binds it at creation).
        self._lock: Optional[asyncio.Lock] = None

    @property
    def keys(self) -> set[bytes]:
        """The keys still subscribed (empty once closed)."""
        return self.subscription.keys

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self.subscription.closed

    async def next(self, timeout: Optional[float] = None) -> Optional[Tuple[bytes, Any]]:
        """The next ``(key, value)``; see :meth:`Subscription.next`.

        None on timeout, and at once when the subscription is closed or has no key left.
        Concurrent calls each get a different notification.
        """
        if timeout is not None and not timeout >= 0:
            raise ValueError(f"timeout must be a number of seconds >= 0, not {timeout}")
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            while True:
                if self._pending is None:
                    remaining = _ASYNC_SLICE if deadline is None else deadline - loop.time()
                    wait = max(0.0, min(_ASYNC_SLICE, remaining))
                    self._pending = loop.run_in_executor(None, self.subscription.next, wait)
                # Shielded: if this call is cancelled, the executor call runs on and its
                # result stays in _pending for the next call.
                item = await asyncio.shield(self._pending)
                self._pending = None
                if item is not None:
                    return item
                if self.subscription.closed or not self.subscription.keys:
                    return None
                if deadline is not None and loop.time() >= deadline:
                    return None

    async def unsubscribe(self, keys: _Keys) -> None:
        """Ends the subscription of some keys; see :meth:`Subscription.unsubscribe`."""
        await _run(self.subscription.unsubscribe, keys)

    def close(self) -> None:
        """Ends the subscription and closes its connections (not a coroutine: it does not
        wait on the node)."""
        self.subscription.close()

    def __aiter__(self) -> AsyncSubscription:
        return self

    async def __anext__(self) -> Tuple[bytes, Any]:
        item = await self.next()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool:
        """Closes the subscription (never swallows the block's exception)."""
        self.close()
        return False

    def __repr__(self) -> str:
        return "latticekv.Async" + repr(self.subscription)[len("latticekv.") :]


async def connect_async(
    addr: str = "127.0.0.1:7700",
    timeout: float = 10.0,
    ack_replicas: int = 0,
    durable: bool = False,
    user: Optional[str] = None,
    password: Optional[str] = None,
    tls: bool = False,
    tls_ca: Optional[str] = None,
    tls_server_name: Optional[str] = None,
) -> AsyncClient:
    """Connects without blocking the event loop; see :func:`connect`."""
    return AsyncClient(
        await _run(
            connect,
            addr,
            timeout,
            ack_replicas,
            durable,
            user,
            password,
            tls,
            tls_ca,
            tls_server_name,
        )
    )
