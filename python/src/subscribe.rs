//! Subscriptions: a Python class over [`client::Subscription`] (docs/subscriptions.md).
//!
//! Waiting for a notification blocks the Python thread with the GIL released, in slices of
//! [`SLICE`]: between two slices the thread takes the GIL back to run signal handlers, so
//! Ctrl-C interrupts a `for key, value in sub:` loop within about a slice. The Rust
//! subscription sits behind an async mutex (its `next` and `unsubscribe` need it
//! exclusively); a waiting thread gives it up at the end of each slice, so `unsubscribe`
//! from another thread waits at most a slice. `close` does not wait: it raises a flag the
//! waiting thread watches, then drops the subscription, which closes its connections.

use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Duration;

use client::{ClientError, Notification};
use lattice::Blob;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PySet, PyString, PyTuple};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{as_bytes, blob, block_on, runtime, value_to_py};

/// The longest a waiting thread stays away from the GIL (signal checks, `unsubscribe`).
const SLICE: Duration = Duration::from_millis(100);

/// The keys given as one key (bytes, bytearray, str) or an iterable of keys.
fn keys_of(keys: &Bound<'_, PyAny>) -> PyResult<Vec<Vec<u8>>> {
    if keys.cast::<PyBytes>().is_ok()
        || keys.cast::<PyString>().is_ok()
        || keys.cast::<PyByteArray>().is_ok()
    {
        return Ok(vec![as_bytes(keys, "key")?]);
    }
    let iter = keys.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "keys must be a key (bytes, bytearray or str) or an iterable of keys, not {}",
            keys.get_type()
                .name()
                .map_or_else(|_| "?".into(), |n| n.to_string())
        ))
    })?;
    iter.map(|k| as_bytes(&k?, "key")).collect()
}

/// A duration in seconds given to `name`: finite and not negative.
fn seconds(value: f64, name: &str) -> PyResult<Duration> {
    if !(value.is_finite() && value >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "{name} must be a number of seconds >= 0, not {value}"
        )));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|_| PyValueError::new_err(format!("{name} is too large: {value}")))
}

/// How one slice of waiting ended.
enum Wait {
    /// A notification.
    Got(Notification),
    /// The subscription is closed or has no key left: nothing will come.
    Ended,
    /// Nothing within the slice.
    Idle,
}

/// A stream of new values of keys (`Client.subscribe(keys, period)`).
///
/// Each key's current value arrives first, then its new values, at most one per key per
/// period (a key written several times within a period arrives once, with the latest
/// value). Iterate it (`for key, value in sub:`) or call `next(timeout)`; values are
/// converted as Client.get_value converts them, None when the key is absent or deleted.
/// Closing it (close(), the end of a `with` block, or dropping it) ends the subscription.
#[pyclass(frozen, module = "latticekv")]
pub(crate) struct Subscription {
    /// None once closed.
    inner: tokio::sync::Mutex<Option<client::Subscription>>,
    /// The keys still subscribed (readable while a thread waits on `inner`); empty once
    /// closed.
    keys: Mutex<BTreeSet<Blob>>,
    /// True once closed: wakes the thread waiting in `next`.
    closed: watch::Sender<bool>,
}

impl Subscription {
    /// Subscribes `client` to `keys` (one key or an iterable of keys) with `period`
    /// seconds between two notifications of one key.
    pub(crate) fn open(
        py: Python<'_>,
        client: &client::Client,
        keys: &Bound<'_, PyAny>,
        period: f64,
    ) -> PyResult<Subscription> {
        let keys = keys_of(keys)?;
        if keys.is_empty() {
            return Err(PyValueError::new_err("subscribe needs at least one key"));
        }
        if !(period.is_finite() && period > 0.0) {
            return Err(PyValueError::new_err(format!(
                "period must be a positive number of seconds, not {period}"
            )));
        }
        // 0 ms would mean the server's default period: the shortest is 1 ms (the server
        // clamps it to 10 ms).
        let period = seconds(period, "period")?.max(Duration::from_millis(1));
        let inner = block_on(py, client.subscribe(&keys, period))?;
        let keys = inner.keys().cloned().collect();
        Ok(Subscription {
            inner: tokio::sync::Mutex::new(Some(inner)),
            keys: Mutex::new(keys),
            closed: watch::Sender::new(false),
        })
    }

    /// The keys still subscribed.
    fn keys_guard(&self) -> std::sync::MutexGuard<'_, BTreeSet<Blob>> {
        // A poisoned set of keys is still a set of keys.
        self.keys.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits up to `slice` for a notification, with the GIL released.
    fn wait(&self, py: Python<'_>, slice: Duration) -> PyResult<Wait> {
        let rt = runtime()?;
        let mut closed = self.closed.subscribe();
        Ok(py.detach(|| {
            rt.block_on(async {
                let deadline = Instant::now() + slice;
                let mut guard = tokio::select! {
                    biased;
                    g = self.inner.lock() => g,
                    _ = closed.wait_for(|c| *c) => return Wait::Ended,
                    _ = tokio::time::sleep_until(deadline) => return Wait::Idle,
                };
                let Some(sub) = guard.as_mut() else {
                    return Wait::Ended;
                };
                // Subscription::next is cancel-safe: a slice that ends loses nothing.
                tokio::select! {
                    biased;
                    n = sub.next() => n.map_or(Wait::Ended, Wait::Got),
                    _ = closed.wait_for(|c| *c) => Wait::Ended,
                    _ = tokio::time::sleep_until(deadline) => Wait::Idle,
                }
            })
        }))
    }

    /// The next notification as `(key, value)`, None if the subscription ended or (with a
    /// timeout) nothing came in time.
    fn next_within<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            let slice = match deadline {
                None => SLICE,
                Some(d) => d.saturating_duration_since(Instant::now()).min(SLICE),
            };
            match self.wait(py, slice)? {
                Wait::Got(n) => {
                    let value = match &n.value {
                        Some(v) => value_to_py(py, v)?,
                        None => py.None().into_bound(py),
                    };
                    return Ok(Some(PyTuple::new(py, [blob(py, &n.key), value])?));
                }
                Wait::Ended => return Ok(None),
                Wait::Idle => {
                    // Ctrl-C (and any other signal handler) runs here.
                    py.check_signals()?;
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }
}

#[pymethods]
impl Subscription {
    /// The next notification as a `(key, value)` tuple: key is bytes, value as
    /// Client.get_value returns it (None: absent or deleted). Blocks until one arrives,
    /// at most `timeout` seconds if given; returns None on timeout, and at once when the
    /// subscription is closed or has no key left.
    #[pyo3(signature = (timeout = None))]
    fn next<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let timeout = timeout.map(|t| seconds(t, "timeout")).transpose()?;
        self.next_within(py, timeout)
    }

    /// Ends the subscription of `keys` (one key or an iterable of keys; others stay). No
    /// notification of them is returned after this. Keys not subscribed are ignored.
    fn unsubscribe(&self, py: Python<'_>, keys: &Bound<'_, PyAny>) -> PyResult<()> {
        let keys = keys_of(keys)?;
        block_on(py, async {
            if let Some(sub) = self.inner.lock().await.as_mut() {
                sub.unsubscribe(&keys).await?;
            }
            Ok::<_, ClientError>(())
        })?;
        let mut subscribed = self.keys_guard();
        for key in &keys {
            subscribed.remove(&key[..]);
        }
        Ok(())
    }

    /// The keys still subscribed (empty once closed).
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PySet>> {
        let set = PySet::empty(py)?;
        for k in self.keys_guard().iter() {
            set.add(PyBytes::new(py, k))?;
        }
        Ok(set)
    }

    /// True once close() was called (or the `with` block ended).
    #[getter]
    fn closed(&self) -> bool {
        *self.closed.borrow()
    }

    /// Ends the subscription and closes its connections; iteration stops and next()
    /// returns None. Closing twice does nothing.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.closed.send_replace(true);
        self.keys_guard().clear();
        // A thread waiting in next() lets go of the subscription as soon as it sees the
        // flag. Dropping it aborts its task, which closes its connections.
        let sub = block_on(py, async { Ok(self.inner.lock().await.take()) })?;
        drop(sub);
        Ok(())
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// The next `(key, value)`; the iteration ends when the subscription is closed or has
    /// no key left.
    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        self.next_within(py, None)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Closes the subscription; never swallows the block's exception.
    #[pyo3(signature = (_exc_type, _exc_value, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc_value: Option<&Bound<'_, PyAny>>,
        _traceback: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        if self.closed() {
            "latticekv.Subscription(closed)".to_string()
        } else {
            format!("latticekv.Subscription(keys={})", self.keys_guard().len())
        }
    }
}
