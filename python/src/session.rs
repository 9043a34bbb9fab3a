//! Sessions and transactions: Python classes over [`client::Session`] and
//! [`client::Transaction`] (the consistency levels of `crates/client/src/session.rs`).
//!
//! A [`Session`] holds a clone of the Rust session (clones share its clock and what it has
//! seen), so one Python `Session` object may be used from several threads at once. A
//! [`Transaction`] holds its Rust transaction behind an async mutex: its operations run one
//! at a time, and `commit`/`abort` take it out, after which every call raises
//! `InvalidUseError`.

use client::{ClientError, Level, SessionOptions};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

use crate::{as_bytes, blob, block_on, to_py_err, value_from_py, value_to_py, Stamper};

/// Every level name, for error messages.
fn level_names() -> String {
    Level::ALL.map(Level::name).join(", ")
}

/// The level named `name`, or a ValueError listing the valid names.
fn parse_level(name: &str) -> PyResult<Level> {
    Level::from_name(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "unknown consistency level {name:?}; valid levels: {} (short names: ryw, mr, mw, \
             wfr, ru, rc)",
            level_names()
        ))
    })
}

/// The error of an operation on a committed or aborted transaction.
fn finished() -> ClientError {
    ClientError::InvalidUse("the transaction has already committed or aborted".into())
}

/// Python list of register values.
fn blob_list<'py>(py: Python<'py>, values: &[lattice::Blob]) -> PyResult<Bound<'py, PyList>> {
    PyList::new(py, values.iter().map(|v| blob(py, v)))
}

/// A session at one consistency level (`Client.session(level)`).
///
/// Reads and writes go through the session's state (its clock, the versions it has read and
/// written), which is what the level is made of. Safe to share between threads: every
/// thread using it is the same session.
#[pyclass(frozen, module = "latticekv")]
pub(crate) struct Session {
    inner: client::Session,
    stamper: Stamper,
}

impl Session {
    /// A new session of `client` at the level named `level`.
    pub(crate) fn new(
        client: &client::Client,
        level: &str,
        max_keys: Option<usize>,
        stamper: Stamper,
    ) -> PyResult<Session> {
        let level = parse_level(level)?;
        let mut options = SessionOptions::default();
        if let Some(max_keys) = max_keys {
            if max_keys == 0 {
                return Err(PyValueError::new_err("max_keys must be at least 1"));
            }
            options.max_keys = max_keys;
        }
        Ok(Session {
            inner: client.session_with(level, options),
            stamper,
        })
    }
}

#[pymethods]
impl Session {
    /// The session's level, by its canonical name (e.g. "read-your-writes").
    #[getter]
    fn level(&self) -> &'static str {
        self.inner.level().name()
    }

    /// The session's actor id (its entry in vector clocks).
    #[getter]
    fn actor(&self) -> u64 {
        self.inner.actor()
    }

    /// Keys whose versions the session currently tracks.
    #[getter]
    fn tracked_keys(&self) -> usize {
        self.inner.tracked_keys()
    }

    /// Reads `key` at the session's level as a Python object (None if absent), converted as
    /// Client.get_value does: an LWW register is its bytes, a causal register the list of
    /// its concurrent values, and so on.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = as_bytes(key, "key")?;
        let s = &self.inner;
        let v = block_on(py, async move { s.get(&key).await })?;
        v.map(|v| value_to_py(py, &v)).transpose()
    }

    /// Reads a register at the session's level: [value] for an LWW register, the
    /// concurrent values (siblings) of a causal register, [] if absent. WrongTypeError for
    /// other lattice types.
    fn read<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let key = as_bytes(key, "key")?;
        let s = &self.inner;
        let values = block_on(py, async move { s.read(&key).await })?;
        blob_list(py, &values)
    }

    /// Writes a register (bytes or str) as the level says: an LWW register stamped by the
    /// replica or the session's clock, or on "causal"/"multi-key-causal" a causal register
    /// that overwrites the versions the session has seen (concurrent ones stay siblings).
    fn write(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = as_bytes(value, "value")?;
        let s = &self.inner;
        block_on(py, async move { s.write(&key, &value).await })
    }

    /// The same as write (the session's counterpart of Client.put).
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.write(py, key, value)
    }

    /// Merges a lattice value into `key` through the session (kinds as Client.merge); later
    /// reads of the session see it on the levels that read their own writes. On the
    /// transactional levels it is a transaction of its own.
    fn merge(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        kind: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = value_from_py(kind, value, &self.stamper)?;
        let s = &self.inner;
        block_on(py, async move { s.put(&key, value).await })
    }

    /// Starts a transaction (levels "read-uncommitted", "read-committed", "item-cut";
    /// InvalidUseError on the others). Use it as a context manager to commit on normal exit
    /// and abort on an exception.
    fn begin(&self) -> PyResult<Transaction> {
        let txn = self.inner.begin().map_err(to_py_err)?;
        Ok(Transaction {
            level: self.inner.level(),
            inner: tokio::sync::Mutex::new(Some(txn)),
            stamper: self.stamper.clone(),
        })
    }

    fn __repr__(&self) -> String {
        // Level names are plain ASCII words: quote them as Python's repr of a str does.
        format!("latticekv.Session(level='{}')", self.inner.level().name())
    }
}

/// A transaction of a Session (`Session.begin()`).
///
/// "read-committed" and "item-cut" buffer writes until commit, which sends them as one
/// batch; "read-uncommitted" sends each write at once, all with the transaction's
/// timestamp. After commit or abort every call raises InvalidUseError. As a context
/// manager it commits on normal exit and aborts on an exception.
#[pyclass(frozen, module = "latticekv")]
pub(crate) struct Transaction {
    level: Level,
    /// None once committed or aborted.
    inner: tokio::sync::Mutex<Option<client::Transaction>>,
    stamper: Stamper,
}

impl Transaction {
    /// Takes the transaction out (it is finished afterwards), or the finished error.
    fn take(&self, py: Python<'_>) -> PyResult<client::Transaction> {
        block_on(py, async {
            self.inner.lock().await.take().ok_or_else(finished)
        })
    }
}

#[pymethods]
impl Transaction {
    /// The level of the transaction's session.
    #[getter]
    fn level(&self) -> &'static str {
        self.level.name()
    }

    /// True once the transaction has committed or aborted.
    #[getter]
    fn finished(&self, py: Python<'_>) -> PyResult<bool> {
        block_on(py, async { Ok(self.inner.lock().await.is_none()) })
    }

    /// The writes buffered so far ("read-committed", "item-cut"; 0 when finished).
    #[getter]
    fn buffered(&self, py: Python<'_>) -> PyResult<usize> {
        block_on(py, async {
            Ok(self
                .inner
                .lock()
                .await
                .as_ref()
                .map_or(0, client::Transaction::buffered))
        })
    }

    /// Reads `key` in the transaction as a Python object (None if absent; converted as
    /// Client.get_value): its own buffered write, the transaction's first read of the key
    /// ("item-cut"), or the store's value.
    fn get<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let key = as_bytes(key, "key")?;
        let v = block_on(py, async {
            let mut guard = self.inner.lock().await;
            let txn = guard.as_mut().ok_or_else(finished)?;
            txn.get(&key).await
        })?;
        v.map(|v| value_to_py(py, &v)).transpose()
    }

    /// Reads a register in the transaction: [value], the causal siblings, or [] if absent.
    fn read<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyList>> {
        let key = as_bytes(key, "key")?;
        let values = block_on(py, async {
            let mut guard = self.inner.lock().await;
            let txn = guard.as_mut().ok_or_else(finished)?;
            txn.read(&key).await
        })?;
        blob_list(py, &values)
    }

    /// Writes an LWW register (bytes or str) in the transaction, stamped with the
    /// transaction's timestamp; a later write of the same key in it replaces this one.
    fn write(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = as_bytes(value, "value")?;
        block_on(py, async {
            let mut guard = self.inner.lock().await;
            let txn = guard.as_mut().ok_or_else(finished)?;
            txn.write(&key, &value).await
        })
    }

    /// The same as write (the transaction's counterpart of Client.put).
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.write(py, key, value)
    }

    /// Merges a lattice value into `key` in the transaction (kinds as Client.merge);
    /// buffered writes of one key merge with each other.
    fn merge(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        kind: &str,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let key = as_bytes(key, "key")?;
        let value = value_from_py(kind, value, &self.stamper)?;
        block_on(py, async {
            let mut guard = self.inner.lock().await;
            let txn = guard.as_mut().ok_or_else(finished)?;
            txn.put(&key, value).await
        })
    }

    /// Commits: sends the buffered writes as one batch ("read-committed", "item-cut").
    /// The transaction is finished afterwards, even if the commit raised.
    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let txn = self.take(py)?;
        block_on(py, txn.commit())
    }

    /// Aborts: drops the buffered writes ("read-uncommitted": writes already sent stay).
    fn abort(&self, py: Python<'_>) -> PyResult<()> {
        self.take(py)?.abort();
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Commits if the block ended normally, aborts if it raised; does nothing if the block
    /// already committed or aborted. Never swallows the block's exception.
    #[pyo3(signature = (exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let txn = block_on(py, async { Ok(self.inner.lock().await.take()) })?;
        if let Some(txn) = txn {
            if exc_type.is_some_and(|t| !t.is_none()) {
                txn.abort();
            } else {
                block_on(py, txn.commit())?;
            }
        }
        Ok(false)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let state = if self.finished(py)? {
            "finished"
        } else {
            "open"
        };
        Ok(format!(
            "latticekv.Transaction(level='{}', {state})",
            self.level.name()
        ))
    }
}
