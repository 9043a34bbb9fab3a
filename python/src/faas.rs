//! The serverless layer's native pieces: the scheduler client ([`FaasClient`], over
//! [`faas::client::FaasClient`]) and an executor's link to its host ([`ExecutorLink`]).
//! `latticekv/faas/__init__.py` (the SDK) and `latticekv/faas/executor.py` build on them.
//!
//! Errors are raised as `FaasNativeError(code, message, traceback, function)`; the SDK
//! turns them into its exception classes.

use std::collections::HashMap;
use std::io::{IoSlice, Read, Write};
use std::net::TcpStream;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use faas::client::{Arg, CallOptions};
use faas::shm::Region;
use faas::{pb, FaasError};
use prost::Message;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::runtime;

pyo3::create_exception!(
    latticekv,
    FaasNativeError,
    crate::Error,
    "An error of the serverless layer: args are (code, message, traceback, function, \
     pickled exception)."
);

fn code_str(e: &FaasError) -> &'static str {
    match e {
        FaasError::Remote { code, .. } => faas::error::code_id(*code),
        FaasError::Connection { .. } => "connection",
        FaasError::Protocol(_) => "protocol",
        FaasError::Timeout => "timeout",
        FaasError::Store(_) => "store",
    }
}

fn to_py_err(e: FaasError) -> PyErr {
    let (traceback, function, exception) = match &e {
        FaasError::Remote {
            traceback,
            function,
            exception,
            ..
        } => (traceback.clone(), function.clone(), exception.to_vec()),
        _ => (String::new(), String::new(), Vec::new()),
    };
    let message = e.to_string();
    Python::attach(|py| {
        let exception = PyBytes::new(py, &exception).unbind();
        FaasNativeError::new_err((code_str(&e), message, traceback, function, exception))
    })
}

/// Runs `fut` on the shared runtime with the GIL released.
fn block_on<T: Send>(
    py: Python<'_>,
    fut: impl std::future::Future<Output = Result<T, FaasError>> + Send,
) -> PyResult<T> {
    let rt = runtime()?;
    py.detach(|| rt.block_on(fut)).map_err(to_py_err)
}

fn protocol(name: &str) -> PyResult<pb::Protocol> {
    match name.to_ascii_uppercase().as_str() {
        "" | "DEFAULT" => Ok(pb::Protocol::Default),
        "HB" => Ok(pb::Protocol::Hb),
        "CT" => Ok(pb::Protocol::Ct),
        "OPT" => Ok(pb::Protocol::Opt),
        "CON" => Ok(pb::Protocol::Con),
        other => Err(PyValueError::new_err(format!(
            "unknown protocol {other:?}: one of HB, CT, OPT, CON"
        ))),
    }
}

fn options(protocol_name: &str, timeout: Option<f64>) -> PyResult<CallOptions> {
    let timeout = match timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t)),
        Some(_) => return Err(PyValueError::new_err("timeout must be positive seconds")),
    };
    Ok(CallOptions {
        protocol: protocol(protocol_name)?,
        timeout,
    })
}

/// Arguments as the SDK passes them: (is_ref, bytes) — a key reference, or pickled bytes.
fn args(raw: Vec<(bool, Vec<u8>)>) -> Vec<Arg> {
    raw.into_iter()
        .map(|(is_ref, b)| if is_ref { Arg::Ref(b) } else { Arg::Value(b) })
        .collect()
}

/// A connection to a scheduler (the SDK's `Cloud` wraps it).
#[pyclass(module = "latticekv._native", frozen)]
pub struct FaasClient {
    inner: faas::client::FaasClient,
}

#[pymethods]
impl FaasClient {
    /// Connects to the scheduler at `addr`.
    #[staticmethod]
    fn connect(py: Python<'_>, addr: String) -> PyResult<FaasClient> {
        let inner = block_on(
            py,
            async move { faas::client::FaasClient::connect(&addr).await },
        )?;
        Ok(FaasClient { inner })
    }

    /// Connects to a scheduler published in the store at `store_addr`.
    #[staticmethod]
    fn discover(py: Python<'_>, store_addr: String) -> PyResult<FaasClient> {
        let inner = block_on(py, async move {
            faas::client::FaasClient::discover(&store_addr).await
        })?;
        Ok(FaasClient { inner })
    }

    /// The scheduler's address.
    #[getter]
    fn address(&self) -> String {
        self.inner.addr().to_string()
    }

    /// Registers function `name` (cloudpickle bytes).
    fn register_function(&self, py: Python<'_>, name: String, code: Vec<u8>) -> PyResult<()> {
        let c = self.inner.clone();
        block_on(py, async move { c.register_function(&name, code).await })
    }

    /// Registers DAG `name`.
    fn register_dag(
        &self,
        py: Python<'_>,
        name: String,
        functions: Vec<String>,
        edges: Vec<(String, String)>,
    ) -> PyResult<()> {
        let c = self.inner.clone();
        block_on(py, async move {
            c.register_dag(&name, &functions, &edges).await
        })
    }

    /// Calls function `name`; the pickled result.
    #[pyo3(signature = (name, call_args, protocol = "", timeout = None))]
    fn call<'py>(
        &self,
        py: Python<'py>,
        name: String,
        call_args: Vec<(bool, Vec<u8>)>,
        protocol: &str,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let (c, o, a) = (
            self.inner.clone(),
            options(protocol, timeout)?,
            args(call_args),
        );
        let v = block_on(py, async move { c.call(&name, a, o).await })?;
        Ok(PyBytes::new(py, &v))
    }

    /// Calls DAG `name` with each function's arguments; the sink's pickled result.
    #[pyo3(signature = (name, call_args, protocol = "", timeout = None))]
    fn call_dag<'py>(
        &self,
        py: Python<'py>,
        name: String,
        call_args: HashMap<String, Vec<(bool, Vec<u8>)>>,
        protocol: &str,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let c = self.inner.clone();
        let o = options(protocol, timeout)?;
        let a = call_args.into_iter().map(|(f, x)| (f, args(x))).collect();
        let v = block_on(py, async move { c.call_dag(&name, a, o).await })?;
        Ok(PyBytes::new(py, &v))
    }

    /// `call_dag`, with how the scheduler ran the call: (the sink's pickled result, a dict
    /// of `protocol` (its name), `attempts`, `aborts`, `early_aborts`, `meta_bytes`).
    #[pyo3(signature = (name, call_args, protocol = "", timeout = None))]
    fn call_dag_stats<'py>(
        &self,
        py: Python<'py>,
        name: String,
        call_args: HashMap<String, Vec<(bool, Vec<u8>)>>,
        protocol: &str,
        timeout: Option<f64>,
    ) -> PyResult<(Bound<'py, PyBytes>, Bound<'py, PyDict>)> {
        let c = self.inner.clone();
        let o = options(protocol, timeout)?;
        let a = call_args.into_iter().map(|(f, x)| (f, args(x))).collect();
        let (v, st) = block_on(py, async move { c.call_dag_with_stats(&name, a, o).await })?;
        let stats = PyDict::new(py);
        let protocol = pb::Protocol::try_from(st.protocol).map_or("", |p| p.as_str_name());
        stats.set_item("protocol", protocol)?;
        stats.set_item("attempts", st.attempts)?;
        stats.set_item("aborts", st.aborts)?;
        stats.set_item("early_aborts", st.early_aborts)?;
        stats.set_item("meta_bytes", st.meta_bytes)?;
        Ok((PyBytes::new(py, &v), stats))
    }
}

/// An executor's connection to its host: blocking, one task at a time. Large tasks and
/// results cross the shared region the host handed this process (`faas::shm`), if any.
#[pyclass(module = "latticekv._native", frozen)]
pub struct ExecutorLink {
    stream: Mutex<TcpStream>,
    shm: Option<Arc<Region>>,
}

/// The shared region the host handed this process (its descriptor in
/// `faas::shm::FD_ENV`), mapped; `None` without one, or if it cannot be mapped (the
/// socket then carries everything).
fn inherited_region() -> Option<Arc<Region>> {
    let raw: RawFd = std::env::var(faas::shm::FD_ENV).ok()?.trim().parse().ok()?;
    if raw < 3 {
        return None;
    }
    // SAFETY: the host made `raw` for this process alone and nothing else in it owns the
    // descriptor; `Region::map` checks it is a sealed region before using it (and makes
    // it close-on-exec: a process a function starts does not inherit it, and if it reads
    // the variable, the number names nothing of ours or something that is refused).
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    match Region::map(fd) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            eprintln!("latticekv executor: no shared region ({e}); using the socket");
            None
        }
    }
}

/// Heap memory an executor keeps after its payloads are freed: up to this much at the top
/// of glibc's heap is not given back to the system (`M_TRIM_THRESHOLD`).
const KEPT_FREE: usize = 2 * faas::conn::MAX_FRAME;

/// Makes this process's allocator keep the memory of freed payloads for the next task.
///
/// A function's values arrive as Python `bytes` objects, which glibc's malloc serves from
/// fresh `mmap`s above its (adaptive) threshold and, below it, from a heap it trims as soon
/// as its free top exceeds twice that: either way each 512 KB value of each task faulted
/// its 128 pages in again (about 200 page faults per task with two such values, most of
/// the executor's time for it on this machine). With a fixed threshold at the frame limit
/// (every value a frame can carry comes from the heap) and [`KEPT_FREE`] kept, a task's
/// values reuse the pages the previous task's freed. Only glibc (other C libraries keep
/// their own policy); the executor's process only (the link is what makes a process one).
fn keep_freed_payloads() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let threshold = libc::c_int::try_from(faas::conn::MAX_FRAME).unwrap_or(libc::c_int::MAX);
        let kept = libc::c_int::try_from(KEPT_FREE).unwrap_or(libc::c_int::MAX);
        // SAFETY: mallopt only sets two of the allocator's parameters; it is safe to call
        // at any time, and a refused value leaves the default in place.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, threshold);
            libc::mallopt(libc::M_TRIM_THRESHOLD, kept);
        }
    }
}

fn io_err(e: std::io::Error) -> PyErr {
    crate::ConnectionError::new_err(format!("executor link: {e}"))
}

/// Writes `msg` as one frame, vectored (`faas::conn::frame_parts`): a large result goes to
/// the socket from the Python bytes object it was handed as, not through a copy.
fn send(stream: &mut TcpStream, msg: &pb::FromExecutor) -> std::io::Result<()> {
    let mut parts = faas::conn::frame_parts(msg)?;
    if let [one] = &parts[..] {
        return stream.write_all(one);
    }
    let mut first = 0;
    while first < parts.len() {
        let slices: Vec<IoSlice<'_>> = parts[first..].iter().map(|p| IoSlice::new(p)).collect();
        let n = match stream.write_vectored(&slices) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        faas::conn::written(&mut parts, &mut first, n);
    }
    Ok(())
}

fn bad(msg: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.to_string())
}

/// The host's next message; one sent through the shared region decoded from it in place
/// (its values are views of the region: the caller drops them before answering).
fn receive(
    stream: &mut TcpStream,
    shm: Option<&Arc<Region>>,
) -> std::io::Result<Option<pb::ToExecutor>> {
    let Some(msg) = receive_frame(stream)? else {
        return Ok(None);
    };
    let Some(pb::to_executor::Msg::Shm(f)) = &msg.msg else {
        return Ok(Some(msg));
    };
    let region = shm.ok_or_else(|| bad("a shared-region frame without a region"))?;
    let len = usize::try_from(f.len).map_err(|_| bad("a shared-region frame too long"))?;
    // SAFETY: the host does not write the region again before this executor answers, and
    // `next_task` drops the message (copied into Python objects) before it can.
    let body = unsafe { region.view(len)? };
    match pb::ToExecutor::decode(body) {
        Ok(
            inner @ pb::ToExecutor {
                msg: Some(pb::to_executor::Msg::Task(_)),
            },
        ) => Ok(Some(inner)),
        Ok(_) => Err(bad("a shared-region frame that is not a task")),
        Err(e) => Err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)),
    }
}

fn receive_frame(stream: &mut TcpStream) -> std::io::Result<Option<pb::ToExecutor>> {
    let mut header = [0u8; 4];
    match stream.read_exact(&mut header) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(header) as usize;
    if len > wire::frame::DEFAULT_MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("frame of {len} bytes"),
        ));
    }
    // Read into uninitialised capacity (no zeroing of a large task first), then decode
    // from `Bytes`: the values' byte fields are views of this one buffer, not copies, so a
    // value is copied once, into the Python bytes object the function receives.
    let mut body = Vec::with_capacity(len);
    let got = Read::take(&mut *stream, len as u64).read_to_end(&mut body)?;
    if got != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("frame of {len} bytes ended after {got}"),
        ));
    }
    pb::ToExecutor::decode(bytes::Bytes::from(body))
        .map(Some)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn writes(w: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<pb::Write> {
    w.into_iter()
        .map(|(k, v)| pb::Write {
            key: k.into(),
            value: v.into(),
        })
        .collect()
}

#[pymethods]
impl ExecutorLink {
    /// Connects to the host at `addr` as executor `id`. Makes this process an executor:
    /// its allocator keeps freed payload memory from then on (`keep_freed_payloads`).
    #[staticmethod]
    fn connect(py: Python<'_>, addr: String, id: u32) -> PyResult<ExecutorLink> {
        py.detach(|| {
            keep_freed_payloads();
            let shm = inherited_region();
            let mut stream = TcpStream::connect(&addr)?;
            stream.set_nodelay(true)?;
            let hello = pb::FromExecutor {
                msg: Some(pb::from_executor::Msg::Hello(pb::ExecutorHello {
                    id,
                    pid: std::process::id(),
                    shm_bytes: shm.as_ref().map_or(0, |r| r.len() as u64),
                })),
            };
            send(&mut stream, &hello)?;
            Ok(ExecutorLink {
                stream: Mutex::new(stream),
                shm,
            })
        })
        .map_err(io_err)
    }

    /// The next task, or None when the host closed the link: `(id, function, code, args)`
    /// with each arg `("value", bytes)`, `("upstream", bytes)` or
    /// `("key", key, found, [versions])`.
    fn next_task<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let msg = py
            .detach(|| {
                let mut s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
                receive(&mut s, self.shm.as_ref())
            })
            .map_err(io_err)?;
        let Some(pb::ToExecutor {
            msg: Some(pb::to_executor::Msg::Task(task)),
        }) = msg
        else {
            return Ok(None);
        };
        let args = PyList::empty(py);
        for a in task.args {
            let item = match a.kind {
                Some(pb::task_arg::Kind::Value(v)) => {
                    ("value", PyBytes::new(py, &v)).into_pyobject(py)?
                }
                Some(pb::task_arg::Kind::Upstream(v)) => {
                    ("upstream", PyBytes::new(py, &v)).into_pyobject(py)?
                }
                Some(pb::task_arg::Kind::Key(k)) => {
                    let versions = PyList::empty(py);
                    for v in &k.values {
                        versions.append(PyBytes::new(py, v))?;
                    }
                    ("key", PyBytes::new(py, &k.key), k.found, versions).into_pyobject(py)?
                }
                None => continue,
            };
            args.append(item)?;
        }
        let t = (task.id, task.function, PyBytes::new(py, &task.code), args).into_pyobject(py)?;
        Ok(Some(t))
    }

    /// Reports task `id`'s pickled result and its writes. The result is sent from the
    /// bytes object itself (no copy of it on this side).
    fn done(
        &self,
        py: Python<'_>,
        id: u64,
        value: PyBackedBytes,
        task_writes: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> PyResult<()> {
        self.finish(
            py,
            id,
            pb::task_done::Result::Value(Bytes::from_owner(value)),
            task_writes,
            Vec::new(),
        )
    }

    /// Reports that task `id` raised, with its traceback text and the pickled exception
    /// (empty if it could not be pickled).
    fn failed(
        &self,
        py: Python<'_>,
        id: u64,
        traceback: String,
        exception: Vec<u8>,
    ) -> PyResult<()> {
        self.finish(
            py,
            id,
            pb::task_done::Result::Traceback(traceback),
            Vec::new(),
            exception,
        )
    }
}

impl ExecutorLink {
    fn finish(
        &self,
        py: Python<'_>,
        id: u64,
        result: pb::task_done::Result,
        task_writes: Vec<(Vec<u8>, Vec<u8>)>,
        exception: Vec<u8>,
    ) -> PyResult<()> {
        let msg = pb::FromExecutor {
            msg: Some(pb::from_executor::Msg::Done(pb::TaskDone {
                id,
                result: Some(result),
                writes: writes(task_writes),
                exception: exception.into(),
            })),
        };
        py.detach(|| {
            let mut s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
            // A large outcome goes into the region (the task's views of it are gone).
            if let Some(region) = &self.shm {
                if msg.encoded_len() >= faas::shm::SHM_MIN {
                    if let Some(len) = region.put(&msg) {
                        let frame = pb::FromExecutor {
                            msg: Some(pb::from_executor::Msg::Shm(pb::ShmFrame {
                                len: len as u64,
                            })),
                        };
                        return send(&mut s, &frame);
                    }
                }
            }
            send(&mut s, &msg)
        })
        .map_err(io_err)
    }
}

/// Adds the module's classes.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FaasClient>()?;
    m.add_class::<ExecutorLink>()?;
    m.add("FaasNativeError", m.py().get_type::<FaasNativeError>())?;
    Ok(())
}
