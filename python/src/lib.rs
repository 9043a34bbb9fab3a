//! Python bindings of the latticekv client: the compiled module `latticekv._native`.
//!
//! Wraps [`client::Client`] (async, tokio) in a blocking Python class. One shared
//! multi-threaded tokio runtime (two workers) runs every client's connections; each call
//! blocks its Python thread on the runtime with the GIL released, so other Python threads
//! (and the asyncio wrapper in `latticekv/__init__.py`, which runs calls in an executor)
//! keep going meanwhile.
//!
//! Errors become Python exceptions, all subclasses of `latticekv.Error` (see [`to_py_err`]).
//!
//! [`faas`] holds the serverless layer's scheduler client and executor link.
//!
//! [`session`] wraps sessions and transactions ([`client::Session`], [`client::Transaction`]),
//! [`subscribe`] subscriptions ([`client::Subscription`]).

mod faas;
mod session;
mod subscribe;

use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use client::{ClientError, ClientOptions};
use lattice::{Blob, Bool, Hlc, Lww, Map, Max, Min, OrderedSet, Priority, Set, Timestamp, Value};
use pyo3::exceptions::{PyException, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFrozenSet, PyInt, PyList, PySet, PyString, PyTuple,
};
use wire::pb::ErrorCode;

pyo3::create_exception!(
    latticekv,
    Error,
    PyException,
    "Base class of every latticekv error."
);
pyo3::create_exception!(
    latticekv,
    ConnectionError,
    Error,
    "A node could not be reached, or the connection broke during a request."
);
pyo3::create_exception!(
    latticekv,
    TimeoutError,
    Error,
    "No answer within the client's timeout."
);
pyo3::create_exception!(
    latticekv,
    ProtocolError,
    Error,
    "The node sent something that is not a valid answer."
);
pyo3::create_exception!(
    latticekv,
    WrongTypeError,
    Error,
    "The key holds another lattice type than the operation needs (server WRONG_TYPE)."
);
pyo3::create_exception!(
    latticekv,
    UnavailableError,
    Error,
    "The worker holding the key is unavailable or shutting down; retrying may succeed."
);
pyo3::create_exception!(
    latticekv,
    StorageError,
    Error,
    "The node's durable storage refused the write (disk full, read-only, failing)."
);
pyo3::create_exception!(
    latticekv,
    MemoryLimitError,
    Error,
    "The node's memory budget is used up: writes that add data are refused."
);
pyo3::create_exception!(
    latticekv,
    InvalidArgumentError,
    Error,
    "The request was refused as invalid: key or value too large, reserved key, bad argument."
);
pyo3::create_exception!(
    latticekv,
    InvalidUseError,
    Error,
    "The call does not fit the session or transaction it was made on: a transaction on a \
     level without transactions, an operation on a committed or aborted transaction."
);
pyo3::create_exception!(
    latticekv,
    AuthenticationError,
    Error,
    "The node requires authentication, or refused the user or password (server \
     UNAUTHENTICATED)."
);
pyo3::create_exception!(
    latticekv,
    PermissionDeniedError,
    Error,
    "The user lacks the permission the call needs, or a key is outside the user's key \
     patterns (server PERMISSION_DENIED)."
);
pyo3::create_exception!(
    latticekv,
    ServerError,
    Error,
    "Any other error the node answered with."
);

/// The runtime every client shares, started on first use.
pub(crate) fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("latticekv-io")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| PyRuntimeError::new_err(format!("cannot start the tokio runtime: {e}")))
}

/// Runs `fut` to completion on the shared runtime with the GIL released.
pub(crate) fn block_on<T, F>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = Result<T, ClientError>> + Send,
    T: Send,
{
    let rt = runtime()?;
    py.detach(|| rt.block_on(fut)).map_err(to_py_err)
}

/// Maps a client error onto the Python exception hierarchy.
pub(crate) fn to_py_err(e: ClientError) -> PyErr {
    let msg = e.to_string();
    match &e {
        ClientError::Connect { .. }
        | ClientError::ConnectionLost { .. }
        | ClientError::Tls { .. } => ConnectionError::new_err(msg),
        ClientError::Timeout => TimeoutError::new_err(msg),
        ClientError::Protocol(_) => ProtocolError::new_err(msg),
        ClientError::UnexpectedType { .. } => WrongTypeError::new_err(msg),
        ClientError::InvalidUse(_) => InvalidUseError::new_err(msg),
        // Replicas unreachable: retrying later may succeed.
        ClientError::SessionFull { .. } => UnavailableError::new_err(msg),
        ClientError::Server { code, .. } => match code {
            ErrorCode::WrongType => WrongTypeError::new_err(msg),
            ErrorCode::Unavailable | ErrorCode::ShuttingDown | ErrorCode::TooManyConnections => {
                UnavailableError::new_err(msg)
            }
            ErrorCode::Storage => StorageError::new_err(msg),
            ErrorCode::MemoryLimit => MemoryLimitError::new_err(msg),
            ErrorCode::BadRequest
            | ErrorCode::KeyTooLarge
            | ErrorCode::ValueTooLarge
            | ErrorCode::FrameTooLarge
            | ErrorCode::ReservedKey
            | ErrorCode::Overflow
            | ErrorCode::InvalidArgument => InvalidArgumentError::new_err(msg),
            ErrorCode::Unauthenticated => AuthenticationError::new_err(msg),
            ErrorCode::PermissionDenied => PermissionDeniedError::new_err(msg),
            _ => ServerError::new_err(msg),
        },
    }
}

/// The bytes of a key, value or member given as `bytes`, `bytearray` or `str` (UTF-8).
pub(crate) fn as_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        Ok(b.as_bytes().to_vec())
    } else if let Ok(s) = obj.cast::<PyString>() {
        Ok(s.to_cow()?.as_bytes().to_vec())
    } else if let Ok(b) = obj.cast::<PyByteArray>() {
        Ok(b.to_vec())
    } else {
        Err(PyTypeError::new_err(format!(
            "{what} must be bytes, bytearray or str, not {}",
            obj.get_type().name()?
        )))
    }
}

/// Python bytes of a blob.
pub(crate) fn blob<'py>(py: Python<'py>, b: &Blob) -> Bound<'py, PyAny> {
    PyBytes::new(py, b).into_any()
}

/// A Python set of blobs.
fn blob_set<'py, 'a>(
    py: Python<'py>,
    members: impl Iterator<Item = &'a Blob>,
) -> PyResult<Bound<'py, PyAny>> {
    let set = PySet::empty(py)?;
    for m in members {
        set.add(PyBytes::new(py, m))?;
    }
    Ok(set.into_any())
}

/// A lattice value as a Python object (the mapping is documented in docs/python.md):
/// LWW and priority registers → `bytes` / `(float, bytes)`, sets → `set[bytes]` (ordered
/// sets → sorted `list[bytes]`), counters, max and min → `int`, bool → `bool`, maps →
/// `dict[bytes, value]`, causal registers → `list[bytes]` of their concurrent values, lists →
/// `list[bytes]` in order, Redis hashes → `dict[bytes, bytes]`, sorted sets →
/// `list[(bytes, float)]` in score order.
pub(crate) fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Lww(l) => blob(py, &l.value),
        Value::Set(s) => blob_set(py, s.iter())?,
        Value::OrSet(s) => blob_set(py, s.iter())?,
        Value::OrderedSet(s) => PyList::new(py, s.iter().map(|m| PyBytes::new(py, m)))?.into_any(),
        Value::Max(m) => m.0.into_pyobject(py)?.into_any(),
        Value::Min(m) => m.0.into_pyobject(py)?.into_any(),
        Value::Bool(b) => PyBool::new(py, b.0).to_owned().into_any(),
        Value::Counter(c) => c.value().into_pyobject(py)?.into_any(),
        Value::Map(m) => {
            let dict = PyDict::new(py);
            for (k, v) in m.iter() {
                dict.set_item(PyBytes::new(py, k), value_to_py(py, v)?)?;
            }
            dict.into_any()
        }
        Value::Priority(p) => PyTuple::new(
            py,
            [p.priority.into_pyobject(py)?.into_any(), blob(py, &p.value)],
        )?
        .into_any(),
        Value::SingleKeyCausal(c) => {
            PyList::new(py, c.values().map(|v| PyBytes::new(py, v)))?.into_any()
        }
        Value::MultiKeyCausal(c) => {
            PyList::new(py, c.values().map(|v| PyBytes::new(py, v)))?.into_any()
        }
        // ---- lists (helper B) ----
        Value::List(l) => PyList::new(py, l.values().map(|v| PyBytes::new(py, v)))?.into_any(),
        // Redis hashes and sorted sets: a dict of the live fields; a list of (member,
        // score) in score order.
        Value::Hash(h) => {
            let dict = PyDict::new(py);
            for (f, v) in h.iter() {
                dict.set_item(PyBytes::new(py, f), PyBytes::new(py, v))?;
            }
            dict.into_any()
        }
        Value::SortedSet(z) => {
            let mut pairs = Vec::with_capacity(z.len());
            for (m, s) in z.iter() {
                let score = s.into_pyobject(py)?.into_any();
                pairs.push(PyTuple::new(py, [blob(py, m), score])?);
            }
            PyList::new(py, pairs)?.into_any()
        }
    })
}

/// Milliseconds since the Unix epoch (0 if the system clock is before it).
fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The clock that timestamps LWW registers written through `merge` (kind "lww", and the
/// LWW entries of maps): one per connected client, shared by its sessions, with a random
/// writer id so two clients' timestamps never tie.
#[derive(Clone)]
pub(crate) struct Stamper(Arc<Mutex<Hlc>>);

impl Stamper {
    fn new() -> Self {
        Stamper(Arc::new(Mutex::new(Hlc::new(fastrand::u64(1..)))))
    }

    /// The next timestamp.
    fn tick(&self) -> Timestamp {
        // A poisoned clock is still a valid clock: a panic cannot leave an Hlc half-updated.
        let mut hlc = self.0.lock().unwrap_or_else(|p| p.into_inner());
        hlc.tick(now_ms())
    }
}

/// The kinds `merge` accepts.
const MERGE_KINDS: &str = "lww, max, min, bool, set, ordered-set, priority or map";

/// The lattice value `merge` writes: `kind` names the type, `value` its Python form. LWW
/// registers (kind "lww", map entries) are stamped by `stamper`.
pub(crate) fn value_from_py(
    kind: &str,
    value: &Bound<'_, PyAny>,
    stamper: &Stamper,
) -> PyResult<Value> {
    let blobs = |what: &str| -> PyResult<Vec<Blob>> {
        if value.cast::<PyBytes>().is_ok() || value.cast::<PyString>().is_ok() {
            return Err(PyTypeError::new_err(format!(
                "a {what} is given as an iterable of members, not one bytes or str"
            )));
        }
        value
            .try_iter()?
            .map(|m| Ok(as_bytes(&m?, "a member")?.into_boxed_slice()))
            .collect()
    };
    Ok(match kind {
        "lww" => Value::Lww(Lww::new(
            stamper.tick(),
            as_bytes(value, "value")?.into_boxed_slice(),
        )),
        "max" => Value::Max(Max(value.extract()?)),
        "min" => Value::Min(Min(value.extract()?)),
        "bool" => Value::Bool(Bool(value.extract()?)),
        "set" => Value::Set(blobs("set")?.into_iter().collect::<Set<Blob>>()),
        "ordered-set" => Value::OrderedSet(
            blobs("ordered set")?
                .into_iter()
                .collect::<OrderedSet<Blob>>(),
        ),
        "priority" => {
            let (priority, v): (f64, Bound<'_, PyAny>) = value.extract()?;
            Value::Priority(Priority::new(
                priority,
                as_bytes(&v, "value")?.into_boxed_slice(),
            ))
        }
        "map" => {
            let dict = value
                .cast::<PyDict>()
                .map_err(|_| PyTypeError::new_err("a map is given as a dict of field -> value"))?;
            let mut map = Map::new();
            for (field, v) in dict.iter() {
                let field = as_bytes(&field, "a map field")?.into_boxed_slice();
                map.insert_merge(field, map_entry_from_py(&v, stamper)?);
            }
            Value::Map(map)
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "merge writes {MERGE_KINDS}, not {other:?} (incr writes counters, sadd/srem \
                 add-wins sets)"
            )))
        }
    })
}

/// The lattice value of one map entry: `(kind, value)` as for `merge`, or by its Python
/// type: bytes/bytearray/str → lww, bool → bool, int → max, dict → map, set/frozenset → set.
fn map_entry_from_py(v: &Bound<'_, PyAny>, stamper: &Stamper) -> PyResult<Value> {
    let kind = if let Ok(t) = v.cast::<PyTuple>() {
        if t.len() == 2 {
            if let Ok(kind) = t.get_item(0)?.cast::<PyString>() {
                return value_from_py(&kind.to_cow()?, &t.get_item(1)?, stamper);
            }
        }
        None
    } else if v.cast::<PyBytes>().is_ok()
        || v.cast::<PyByteArray>().is_ok()
        || v.cast::<PyString>().is_ok()
    {
        Some("lww")
    } else if v.cast::<PyBool>().is_ok() {
        Some("bool")
    } else if v.cast::<PyInt>().is_ok() {
        Some("max")
    } else if v.cast::<PyDict>().is_ok() {
        Some("map")
    } else if v.cast::<PySet>().is_ok() || v.cast::<PyFrozenSet>().is_ok() {
        Some("set")
    } else {
        None
    };
    match kind {
        Some(kind) => value_from_py(kind, v, stamper),
        None => Err(PyTypeError::new_err(format!(
            "a map value is bytes/str (lww), bool, int (max), dict (map), set, or a \
             (kind, value) tuple with kind one of {MERGE_KINDS}; not {}",
            v.get_type().name()?
        ))),
    }
}

/// The key and the (non-empty) members of a set command named `command`.
fn key_and_members(
    key: &Bound<'_, PyAny>,
    members: &Bound<'_, PyTuple>,
    command: &str,
) -> PyResult<(Vec<u8>, Vec<Vec<u8>>)> {
    let key = as_bytes(key, "key")?;
    let members = members_of(members)?;
    if members.is_empty() {
        return Err(PyValueError::new_err(format!(
            "{command} needs at least one member"
        )));
    }
    Ok((key, members))
}

/// The members given to `sadd`/`srem` as bytes.
fn members_of(members: &Bound<'_, PyTuple>) -> PyResult<Vec<Vec<u8>>> {
    members.iter().map(|m| as_bytes(&m, "a member")).collect()
}

/// A blocking connection to a latticekv node (and through it, its cluster).
///
/// Requests go straight to a worker holding the key; the client follows redirects and
/// retries other replicas. Safe to share between threads.
#[pyclass(frozen, module = "latticekv")]
struct Client {
    inner: client::Client,
    addr: String,
    stamper: Stamper,
}

#[pymethods]
impl Client {
    /// Reads an LWW register: its bytes, or None if the key does not exist.
    ///
    /// Raises WrongTypeError if the key holds another lattice type (see get_value).
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        let v = block_on(py, async move { c.get_lww(&key).await })?;
        Ok(v.map(|b| blob(py, &b)))
    }

    /// Reads a key of any lattice type as a Python object, or None if it does not exist.
    ///
    /// LWW → bytes, counter/max/min → int, bool → bool, set and OR-set → set[bytes],
    /// ordered set → list[bytes] (sorted), map → dict[bytes, value], priority →
    /// (float, bytes), causal registers → list[bytes] of the concurrent values.
    fn get_value<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        let v = block_on(py, async move { c.get(&key).await })?;
        v.map(|v| value_to_py(py, &v)).transpose()
    }

    /// Sets an LWW register (the node's clock timestamps the write). `value` is bytes or
    /// str (stored as UTF-8).
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = as_bytes(value, "value")?;
        let c = &self.inner;
        block_on(py, async move { c.assign(&key, &value).await })
    }

    /// Merges a value of another lattice type into `key`, creating it: `kind` is "max" or
    /// "min" (value: int), "bool" (bool), "set" or "ordered-set" (iterable of bytes/str),
    /// "priority" ((float, bytes|str): lowest priority wins), "lww" (bytes|str, stamped by
    /// this client's clock) or "map" (dict of field -> value, merged field by field; a value
    /// is a (kind, value) tuple, or bytes/str → lww, bool → bool, int → max, dict → map,
    /// set → set). Merging into a key of another type raises WrongTypeError.
    fn merge(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        kind: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = value_from_py(kind, value, &self.stamper)?;
        let c = &self.inner;
        block_on(py, async move { c.put(&key, value).await })
    }

    /// A new session at consistency `level` (see docs/python.md): "eventual",
    /// "read-your-writes", "monotonic-reads", "monotonic-writes", "writes-follow-reads",
    /// "pram", "causal", "multi-key-causal", "read-uncommitted", "read-committed" or
    /// "item-cut" (case-insensitive, "_" for "-"; short names ryw, mr, mw, wfr, ru, rc).
    ///
    /// `max_keys` bounds the keys whose versions the session tracks (default 100,000).
    /// Raises ValueError for an unknown level.
    #[pyo3(signature = (level = "eventual", max_keys = None))]
    fn session(&self, level: &str, max_keys: Option<usize>) -> PyResult<session::Session> {
        session::Session::new(&self.inner, level, max_keys, self.stamper.clone())
    }

    /// Subscribes to `keys` (one key, or an iterable of bytes/str keys): each key's current
    /// value arrives first, then its new values, at most one per key every `period`
    /// seconds (the node clamps it to [0.01, 60]). Returns a Subscription: iterate it for
    /// `(key, value)` tuples, or call its next(timeout).
    ///
    /// Raises ValueError for no key or a period that is not positive, InvalidArgumentError
    /// for a key the node refuses (too long, reserved).
    #[pyo3(signature = (keys, period = 0.1))]
    fn subscribe(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        period: f64,
    ) -> PyResult<subscribe::Subscription> {
        subscribe::Subscription::open(py, &self.inner, keys, period)
    }

    /// Deletes a key of any type; True if it existed.
    fn delete(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        block_on(py, async move { c.delete(&key).await })
    }

    /// Adds `delta` (may be negative) to a counter, creating it; returns the new value.
    #[pyo3(signature = (key, delta = 1))]
    fn incr(&self, py: Python<'_>, key: &Bound<'_, PyAny>, delta: i64) -> PyResult<i64> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        block_on(py, async move { c.counter_add(&key, delta).await })
    }

    /// A counter's value (0 if the key does not exist).
    fn counter(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<i64> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        block_on(py, async move { c.counter_get(&key).await })
    }

    /// Adds members (bytes or str) to an add-wins set; returns how many were new.
    #[pyo3(signature = (key, *members))]
    fn sadd(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        members: &Bound<'_, PyTuple>,
    ) -> PyResult<u64> {
        let (key, members) = key_and_members(key, members, "sadd")?;
        let c = &self.inner;
        block_on(py, async move { c.set_add(&key, &members).await })
    }

    /// Removes members from an add-wins set; returns how many were present.
    #[pyo3(signature = (key, *members))]
    fn srem(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        members: &Bound<'_, PyTuple>,
    ) -> PyResult<u64> {
        let (key, members) = key_and_members(key, members, "srem")?;
        let c = &self.inner;
        block_on(py, async move { c.set_remove(&key, &members).await })
    }

    /// The members of a set (empty if the key does not exist).
    fn smembers<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = as_bytes(key, "key")?;
        let c = &self.inner;
        let members = block_on(py, async move { c.set_members(&key).await })?;
        blob_set(py, members.iter())
    }

    /// Round trip to the node; raises if it does not answer.
    fn ping(&self, py: Python<'_>) -> PyResult<()> {
        let c = &self.inner;
        block_on(py, async move { c.ping().await })
    }

    /// The node's statistics: node_id, version, uptime_seconds, memory_budget_bytes,
    /// front_address, resp_address and workers (a list of dicts: worker, address, keys,
    /// memory_bytes, requests, connections, storage_errors).
    fn status<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.inner;
        let s = block_on(py, async move { c.status().await })?;
        let d = PyDict::new(py);
        d.set_item("node_id", &s.node_id)?;
        d.set_item("version", &s.version)?;
        d.set_item("uptime_seconds", s.uptime_seconds)?;
        d.set_item("memory_budget_bytes", s.memory_budget_bytes)?;
        d.set_item("front_address", &s.front_address)?;
        d.set_item("resp_address", &s.resp_address)?;
        let workers = PyList::empty(py);
        for w in &s.workers {
            let wd = PyDict::new(py);
            wd.set_item("worker", w.worker)?;
            wd.set_item("address", &w.address)?;
            wd.set_item("keys", w.keys)?;
            wd.set_item("memory_bytes", w.memory_bytes)?;
            wd.set_item("requests", w.requests)?;
            wd.set_item("connections", w.connections)?;
            wd.set_item("storage_errors", w.storage_errors)?;
            workers.append(wd)?;
        }
        d.set_item("workers", workers)?;
        Ok(d)
    }

    /// The address this client connected to.
    #[getter]
    fn address(&self) -> &str {
        &self.addr
    }

    fn __repr__(&self) -> String {
        format!("latticekv.Client({:?})", self.addr)
    }
}

/// Connects to a node's native port (`host:port`) and fetches its topology.
///
/// `timeout` (seconds) bounds the connection and every later request; `ack_replicas` is
/// how many replicas must hold each write before it is acknowledged (0 or 1: the one
/// receiving it); `durable` acknowledges writes only once they are on disk. `password`
/// (and `user`, default `default`) authenticate every connection the client opens, on a
/// node with users or a `--password`. `tls` connects with TLS, trusting the system's CAs,
/// or the CA certificates of the PEM file `tls_ca` (which implies `tls`);
/// `tls_server_name` is the name the node's certificate must hold if not the address's
/// host.
#[pyfunction]
#[pyo3(signature = (
    addr = "127.0.0.1:7700",
    timeout = 10.0,
    ack_replicas = 0,
    durable = false,
    user = None,
    password = None,
    tls = false,
    tls_ca = None,
    tls_server_name = None,
))]
#[allow(clippy::too_many_arguments)]
fn connect(
    py: Python<'_>,
    addr: &str,
    timeout: f64,
    ack_replicas: u32,
    durable: bool,
    user: Option<String>,
    password: Option<String>,
    tls: bool,
    tls_ca: Option<std::path::PathBuf>,
    tls_server_name: Option<String>,
) -> PyResult<Client> {
    if user.is_some() && password.is_none() {
        return Err(PyValueError::new_err("user given without a password"));
    }
    if !(timeout.is_finite() && timeout > 0.0) {
        return Err(PyValueError::new_err(
            "timeout must be a positive number of seconds",
        ));
    }
    let timeout = Duration::from_secs_f64(timeout);
    let tls = if tls || tls_ca.is_some() || tls_server_name.is_some() {
        let mut t = client::ClientTls::new(tls_ca.as_deref())
            .map_err(|e| PyValueError::new_err(format!("TLS: {e}")))?;
        if let Some(name) = tls_server_name {
            t = t.with_server_name(name);
        }
        Some(t)
    } else {
        None
    };
    let options = ClientOptions {
        tls,
        timeout,
        ack_replicas,
        durable,
        credentials: password.map(|p| client::Credentials::new(user.unwrap_or_default(), p)),
        ..ClientOptions::default()
    };
    let owned = addr.to_string();
    let inner = block_on(py, async move {
        match tokio::time::timeout(timeout, client::Client::connect_with(&owned, options)).await {
            Ok(r) => r,
            Err(_) => Err(ClientError::Timeout),
        }
    })?;
    Ok(Client {
        inner,
        addr: addr.to_string(),
        stamper: Stamper::new(),
    })
}

/// The compiled part of the `latticekv` package.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Client>()?;
    m.add_class::<session::Session>()?;
    m.add_class::<session::Transaction>()?;
    m.add_class::<subscribe::Subscription>()?;
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add("Error", py.get_type::<Error>())?;
    m.add("ConnectionError", py.get_type::<ConnectionError>())?;
    m.add("TimeoutError", py.get_type::<TimeoutError>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add("WrongTypeError", py.get_type::<WrongTypeError>())?;
    m.add("UnavailableError", py.get_type::<UnavailableError>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add("MemoryLimitError", py.get_type::<MemoryLimitError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("InvalidUseError", py.get_type::<InvalidUseError>())?;
    m.add("AuthenticationError", py.get_type::<AuthenticationError>())?;
    m.add(
        "PermissionDeniedError",
        py.get_type::<PermissionDeniedError>(),
    )?;
    m.add("ServerError", py.get_type::<ServerError>())?;
    faas::register(m)?;
    Ok(())
}
