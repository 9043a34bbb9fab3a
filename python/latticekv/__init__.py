"""latticekv: Python client of latticekv, a coordination-free key-value store of lattices.

Blocking use::

    import latticekv
    c = latticekv.connect("127.0.0.1:7700")
    c.put("k", b"v")
    print(c.get("k"))          # b'v'

Asyncio use::

    c = await latticekv.connect_async("127.0.0.1:7700")
    await c.put("k", b"v")

The blocking client is compiled Rust (the project's own client, on a shared tokio
runtime); every call releases the GIL while it waits. The asyncio client runs the blocking
calls in the event loop's default executor. All errors derive from :class:`Error`.
"""
from __future__ import annotations

import asyncio
import functools
from typing import Any, Callable, Optional, TypeVar

from ._native import (
    Client,
    ConnectionError,
    Error,
    InvalidArgumentError,
    InvalidUseError,
    MemoryLimitError,
    ProtocolError,
    ServerError,
    StorageError,
    TimeoutError,
    UnavailableError,
    WrongTypeError,
    connect,
)

__all__ = [
    "AsyncClient",
    "Client",
    "ConnectionError",
    "Error",
    "InvalidArgumentError",
    "InvalidUseError",
    "MemoryLimitError",
    "ProtocolError",
    "ServerError",
    "StorageError",
    "TimeoutError",
    "UnavailableError",
    "WrongTypeError",
    "connect",
    "connect_async",
]

T = TypeVar("T")


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

    async def status(self) -> dict[str, Any]:
        """The node's statistics; see :meth:`Client.status`."""
        return await _run(self.client.status)

    def __repr__(self) -> str:
        return f"latticekv.AsyncClient({self.client.address!r})"


async def connect_async(
    addr: str = "127.0.0.1:7700",
    timeout: float = 10.0,
    ack_replicas: int = 0,
    durable: bool = False,
) -> AsyncClient:
    """Connects without blocking the event loop; see :func:`connect`."""
    return AsyncClient(await _run(connect, addr, timeout, ack_replicas, durable))
