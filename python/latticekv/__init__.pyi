"""Type stubs of the latticekv package (the compiled Client and the asyncio wrapper)."""
from typing import Any, Optional, Union

Key = Union[bytes, bytearray, str]
"""Keys, values and set members: bytes, bytearray or str (encoded as UTF-8)."""

class Error(Exception):
    """Base class of every latticekv error."""

class ConnectionError(Error):
    """A node could not be reached, or the connection broke during a request."""

class TimeoutError(Error):
    """No answer within the client's timeout."""

class ProtocolError(Error):
    """The node sent something that is not a valid answer."""

class WrongTypeError(Error):
    """The key holds another lattice type than the operation needs."""

class UnavailableError(Error):
    """The worker holding the key is unavailable or shutting down; retrying may succeed."""

class StorageError(Error):
    """The node's durable storage refused the write."""

class MemoryLimitError(Error):
    """The node's memory budget is used up."""

class InvalidArgumentError(Error):
    """The request was refused as invalid (sizes, reserved keys, bad arguments)."""

class InvalidUseError(Error):
    """The call does not fit the session or transaction it was made on: a transaction on a
    level without transactions, an operation on a committed or aborted transaction."""

class ServerError(Error):
    """Any other error the node answered with."""

class Client:
    """A blocking connection to a latticekv node; safe to share between threads."""

    @property
    def address(self) -> str:
        """The address this client connected to."""
    def get(self, key: Key) -> Optional[bytes]:
        """Reads an LWW register: its bytes, or None if absent. WrongTypeError otherwise."""
    def get_value(self, key: Key) -> Any:
        """Reads a key of any lattice type as a Python object (None if absent).

        LWW -> bytes, counter/max/min -> int, bool -> bool, set/OR-set -> set[bytes],
        ordered set -> list[bytes], map -> dict[bytes, Any], priority -> (float, bytes),
        causal registers -> list[bytes].
        """
    def put(self, key: Key, value: Key) -> None:
        """Sets an LWW register."""
    def merge(self, key: Key, kind: str, value: Any) -> None:
        """Merges a value of another lattice type into key, creating it.

        kind: "max"/"min" (int), "bool" (bool), "set"/"ordered-set" (iterable of members),
        "priority" ((float, bytes|str), lowest wins), "lww" (bytes|str, stamped by this
        client's clock), "map" (dict of field -> value merged field by field; a value is a
        (kind, value) tuple, or bytes/str -> lww, bool -> bool, int -> max, dict -> map,
        set -> set).
        """
    def delete(self, key: Key) -> bool:
        """Deletes a key of any type; True if it existed."""
    def incr(self, key: Key, delta: int = 1) -> int:
        """Adds delta to a counter, creating it; returns the new value."""
    def counter(self, key: Key) -> int:
        """A counter's value (0 if absent)."""
    def sadd(self, key: Key, *members: Key) -> int:
        """Adds members to an add-wins set; returns how many were new."""
    def srem(self, key: Key, *members: Key) -> int:
        """Removes members from an add-wins set; returns how many were present."""
    def smembers(self, key: Key) -> set[bytes]:
        """The members of a set (empty if absent)."""
    def ping(self) -> None:
        """Round trip to the node."""
    def status(self) -> dict[str, Any]:
        """The node's statistics (node_id, version, uptime_seconds, workers, ...)."""

def connect(
    addr: str = "127.0.0.1:7700",
    timeout: float = 10.0,
    ack_replicas: int = 0,
    durable: bool = False,
) -> Client:
    """Connects to a node's native port; timeout (seconds) bounds every request.

    ack_replicas: replicas that must hold each write before it is acknowledged;
    durable: acknowledge writes only once they are on disk.
    """

class AsyncClient:
    """The asyncio face of Client: the same methods, awaitable."""

    client: Client
    def __init__(self, client: Client) -> None: ...
    @property
    def address(self) -> str: ...
    async def get(self, key: Key) -> Optional[bytes]: ...
    async def get_value(self, key: Key) -> Any: ...
    async def put(self, key: Key, value: Key) -> None: ...
    async def merge(self, key: Key, kind: str, value: Any) -> None: ...
    async def delete(self, key: Key) -> bool: ...
    async def incr(self, key: Key, delta: int = 1) -> int: ...
    async def counter(self, key: Key) -> int: ...
    async def sadd(self, key: Key, *members: Key) -> int: ...
    async def srem(self, key: Key, *members: Key) -> int: ...
    async def smembers(self, key: Key) -> set[bytes]: ...
    async def ping(self) -> None: ...
    async def status(self) -> dict[str, Any]: ...

async def connect_async(
    addr: str = "127.0.0.1:7700",
    timeout: float = 10.0,
    ack_replicas: int = 0,
    durable: bool = False,
) -> AsyncClient:
    """Connects without blocking the event loop."""
