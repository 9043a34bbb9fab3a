"""Type stubs of the latticekv package (the compiled Client, Session, Transaction and
Subscription, and the asyncio wrappers)."""
from types import TracebackType
from typing import Any, Iterable, Iterator, Literal, Optional, Tuple, Type, Union

Key = Union[bytes, bytearray, str]
"""Keys, values and set members: bytes, bytearray or str (encoded as UTF-8)."""

Keys = Union[Key, Iterable[Key]]
"""One key, or an iterable of keys (subscribe, unsubscribe)."""

Notification = Tuple[bytes, Any]
"""A subscription's (key, value): value as Client.get_value returns it, None if absent."""

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

class AuthenticationError(Error):
    """The node requires authentication, or refused the user or password."""

class PermissionDeniedError(Error):
    """The user lacks the call's permission, or a key is outside its key patterns."""

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
    def session(self, level: str = "eventual", max_keys: Optional[int] = None) -> Session:
        """A new session at a consistency level (ValueError for an unknown name).

        Levels: "eventual", "read-your-writes", "monotonic-reads", "monotonic-writes",
        "writes-follow-reads", "pram", "causal", "multi-key-causal", "read-uncommitted",
        "read-committed", "item-cut" (case-insensitive, "_" for "-"; short names ryw, mr,
        mw, wfr, ru, rc). max_keys bounds the keys the session tracks (default 100,000).
        """
    def subscribe(self, keys: Keys, period: float = 0.1) -> Subscription:
        """Subscribes to keys: each key's current value first, then its new values, at most
        one per key every period seconds (clamped by the node to [0.01, 60]).

        ValueError for no key or a period <= 0; InvalidArgumentError for a key the node
        refuses.
        """

class Subscription:
    """A stream of (key, value) notifications; iterable, and a context manager (closes on
    exit). Waiting releases the GIL and is interrupted by Ctrl-C."""

    @property
    def keys(self) -> set[bytes]:
        """The keys still subscribed (empty once closed)."""
    @property
    def closed(self) -> bool:
        """True once close() was called."""
    def next(self, timeout: Optional[float] = None) -> Optional[Notification]:
        """The next (key, value); None on timeout, or at once when closed or no key is left."""
    def unsubscribe(self, keys: Keys) -> None:
        """Ends the subscription of keys (others stay); keys not subscribed are ignored."""
    def close(self) -> None:
        """Ends the subscription and closes its connections; closing twice does nothing."""
    def __iter__(self) -> Iterator[Notification]: ...
    def __next__(self) -> Notification: ...
    def __enter__(self) -> Subscription: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

Level = Literal[
    "eventual",
    "read-your-writes",
    "monotonic-reads",
    "monotonic-writes",
    "writes-follow-reads",
    "pram",
    "causal",
    "multi-key-causal",
    "read-uncommitted",
    "read-committed",
    "item-cut",
]
"""The canonical level names (Session.level returns one of them)."""

class Session:
    """A session at one consistency level; safe to share between threads."""

    @property
    def level(self) -> Level:
        """The session's level, by its canonical name."""
    @property
    def actor(self) -> int:
        """The session's actor id (its entry in vector clocks)."""
    @property
    def tracked_keys(self) -> int:
        """Keys whose versions the session currently tracks."""
    def get(self, key: Key) -> Any:
        """Reads a key at the session's level, converted as Client.get_value (None if absent)."""
    def read(self, key: Key) -> list[bytes]:
        """Reads a register: [value] (LWW), the siblings (causal), [] if absent."""
    def write(self, key: Key, value: Key) -> None:
        """Writes a register as the level says (LWW, or a causal register on the causal levels)."""
    def put(self, key: Key, value: Key) -> None:
        """The same as write."""
    def merge(self, key: Key, kind: str, value: Any) -> None:
        """Merges a lattice value through the session (kinds as Client.merge)."""
    def begin(self) -> Transaction:
        """Starts a transaction (read-uncommitted, read-committed, item-cut; else InvalidUseError)."""

class Transaction:
    """A transaction of a Session; a context manager (commit on exit, abort on exception).

    After commit or abort every call raises InvalidUseError.
    """

    @property
    def level(self) -> Level:
        """The level of the transaction's session."""
    @property
    def finished(self) -> bool:
        """True once the transaction has committed or aborted."""
    @property
    def buffered(self) -> int:
        """The writes buffered so far (read-committed, item-cut)."""
    def get(self, key: Key) -> Any:
        """Reads a key in the transaction (own writes; item-cut: the first read of the key)."""
    def read(self, key: Key) -> list[bytes]:
        """Reads a register in the transaction: [value], the siblings, or []."""
    def write(self, key: Key, value: Key) -> None:
        """Writes an LWW register in the transaction, stamped with its timestamp."""
    def put(self, key: Key, value: Key) -> None:
        """The same as write."""
    def merge(self, key: Key, kind: str, value: Any) -> None:
        """Merges a lattice value in the transaction (kinds as Client.merge)."""
    def commit(self) -> None:
        """Commits: buffered writes are sent as one batch."""
    def abort(self) -> None:
        """Aborts: buffered writes are dropped (read-uncommitted: sent writes stay)."""
    def __enter__(self) -> Transaction: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc_value: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> bool: ...

def connect(
    addr: str = "127.0.0.1:7700",
    timeout: float = 10.0,
    ack_replicas: int = 0,
    durable: bool = False,
    user: Optional[str] = None,
    password: Optional[str] = None,
    tls: bool = False,
    tls_ca: Optional[str] = None,
    tls_server_name: Optional[str] = None,
) -> Client:
    """Connects to a node's native port; timeout (seconds) bounds every request.

    ack_replicas: replicas that must hold each write before it is acknowledged;
    durable: acknowledge writes only once they are on disk; password (and user, default
    "default"): credentials sent on every connection, for a node with users; tls: connect
    with TLS trusting the system's CAs, or tls_ca (a PEM file of CA certificates, implies
    tls); tls_server_name: the name the node's certificate must hold, if not the
    address's host.
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
    def session(self, level: str = "eventual", max_keys: Optional[int] = None) -> AsyncSession:
        """A new session (not a coroutine: nothing is sent)."""
    async def subscribe(self, keys: Keys, period: float = 0.1) -> AsyncSubscription:
        """Subscribes to keys (see Client.subscribe)."""

class AsyncSubscription:
    """The asyncio face of Subscription: ``async for``, ``async with``, awaitable next."""

    subscription: Subscription
    def __init__(self, subscription: Subscription) -> None: ...
    @property
    def keys(self) -> set[bytes]: ...
    @property
    def closed(self) -> bool: ...
    async def next(self, timeout: Optional[float] = None) -> Optional[Notification]: ...
    async def unsubscribe(self, keys: Keys) -> None: ...
    def close(self) -> None:
        """Ends the subscription (not a coroutine)."""
    def __aiter__(self) -> AsyncSubscription: ...
    async def __anext__(self) -> Notification: ...
    async def __aenter__(self) -> AsyncSubscription: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class AsyncSession:
    """The asyncio face of Session: the same methods, awaitable."""

    session: Session
    def __init__(self, session: Session) -> None: ...
    @property
    def level(self) -> Level: ...
    @property
    def actor(self) -> int: ...
    async def get(self, key: Key) -> Any: ...
    async def read(self, key: Key) -> list[bytes]: ...
    async def write(self, key: Key, value: Key) -> None: ...
    async def put(self, key: Key, value: Key) -> None: ...
    async def merge(self, key: Key, kind: str, value: Any) -> None: ...
    def begin(self) -> AsyncTransaction:
        """Starts a transaction (not a coroutine); use ``async with``."""

class AsyncTransaction:
    """The asyncio face of Transaction; ``async with`` commits or aborts."""

    transaction: Transaction
    def __init__(self, transaction: Transaction) -> None: ...
    @property
    def level(self) -> Level: ...
    @property
    def finished(self) -> bool: ...
    @property
    def buffered(self) -> int: ...
    async def get(self, key: Key) -> Any: ...
    async def read(self, key: Key) -> list[bytes]: ...
    async def write(self, key: Key, value: Key) -> None: ...
    async def put(self, key: Key, value: Key) -> None: ...
    async def merge(self, key: Key, kind: str, value: Any) -> None: ...
    async def commit(self) -> None: ...
    async def abort(self) -> None: ...
    async def __aenter__(self) -> AsyncTransaction: ...
    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

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
    """Connects without blocking the event loop."""
