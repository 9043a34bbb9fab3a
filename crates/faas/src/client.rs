//! The Rust client of a scheduler: one connection, many calls in flight on it (each
//! request has an id, echoed in its response).
//!
//! ```no_run
//! # async fn demo() -> Result<(), faas::FaasError> {
//! use faas::client::{Arg, FaasClient};
//! let cloud = FaasClient::discover("127.0.0.1:7700").await?; // via the store
//! cloud.register_function("incr", b"<cloudpickle bytes>".to_vec()).await?;
//! let pickled = cloud.call("incr", vec![Arg::Value(b"<pickled 1>".to_vec())], Default::default()).await?;
//! # Ok(()) }
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};

use crate::conn;
use crate::error::FaasError;
use crate::pb;

/// An argument of a call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arg {
    /// A pickled value.
    Value(Vec<u8>),
    /// A key, read for the function (it receives the value).
    Ref(Vec<u8>),
}

impl Arg {
    fn to_pb(&self) -> pb::Arg {
        pb::Arg {
            kind: Some(match self {
                Arg::Value(v) => pb::arg::Kind::Value(Bytes::copy_from_slice(v)),
                Arg::Ref(k) => pb::arg::Kind::KeyRef(Bytes::copy_from_slice(k)),
            }),
        }
    }
}

fn args_pb(args: &[Arg]) -> pb::Args {
    pb::Args {
        args: args.iter().map(Arg::to_pb).collect(),
    }
}

/// Options of one call.
#[derive(Clone, Copy, Debug, Default)]
pub struct CallOptions {
    /// The consistency protocol ([`pb::Protocol::Default`]: the scheduler's choice).
    pub protocol: pb::Protocol,
    /// The call's timeout (`None`: the scheduler's default, 60 s).
    pub timeout: Option<Duration>,
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<pb::ClientResponse>>>>;

/// A connection to a scheduler. Cheap to clone; clones share the connection.
#[derive(Clone)]
pub struct FaasClient {
    addr: String,
    out: mpsc::Sender<pb::ToScheduler>,
    pending: Pending,
    next_id: Arc<AtomicU64>,
}

/// How long a registration may take.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// Margin over a call's timeout before the client gives up on the scheduler's answer.
const GRACE: Duration = Duration::from_secs(5);
/// The scheduler's default call timeout (see `SchedulerConfig`).
const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl FaasClient {
    /// Connects to the scheduler at `addr`.
    ///
    /// # Errors
    /// [`FaasError::Connection`] if it cannot be reached.
    pub async fn connect(addr: &str) -> Result<FaasClient, FaasError> {
        let stream = tokio::time::timeout(Duration::from_secs(10), TcpStream::connect(addr))
            .await
            .map_err(|_| FaasError::Timeout)?
            .map_err(|e| FaasError::Connection {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let _ = stream.set_nodelay(true);
        let (mut r, w) = stream.into_split();
        let out = conn::writer::<pb::ToScheduler, _>(w, 1024);
        let pending: Pending = Arc::default();
        let reader_pending = pending.clone();
        tokio::spawn(async move {
            while let Ok(Some(msg)) = conn::read::<pb::FromScheduler, _>(&mut r).await {
                if let Some(pb::from_scheduler::Msg::Response(resp)) = msg.msg {
                    let waiter = reader_pending
                        .lock()
                        .ok()
                        .and_then(|mut p| p.remove(&resp.id));
                    if let Some(w) = waiter {
                        let _ = w.send(resp);
                    }
                }
            }
            // Dropping the waiters fails their calls with a connection error.
            if let Ok(mut p) = reader_pending.lock() {
                p.clear();
            }
        });
        Ok(FaasClient {
            addr: addr.to_string(),
            out,
            pending,
            next_id: Arc::new(AtomicU64::new(1)),
        })
    }

    /// The schedulers published in the store at `store_addr` (the node's front address).
    ///
    /// # Errors
    /// The store's errors.
    pub async fn schedulers(store_addr: &str) -> Result<Vec<String>, FaasError> {
        let store = client::Client::connect(store_addr).await?;
        let mut found: Vec<String> = store
            .set_members(crate::SCHEDULERS_KEY)
            .await?
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        fastrand::shuffle(&mut found);
        Ok(found)
    }

    /// Connects to a scheduler found in the store at `store_addr` (tried in random order;
    /// the first that answers).
    ///
    /// # Errors
    /// None published, or none reachable.
    pub async fn discover(store_addr: &str) -> Result<FaasClient, FaasError> {
        let found = Self::schedulers(store_addr).await?;
        let mut last = FaasError::Connection {
            addr: store_addr.to_string(),
            reason: format!(
                "no scheduler is published under {:?} in the store (start one: \
                 `latticekv faas scheduler` or `latticekv local --faas`)",
                crate::SCHEDULERS_KEY
            ),
        };
        for addr in found {
            match Self::connect(&addr).await {
                Ok(c) => return Ok(c),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The scheduler's address.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn request(
        &self,
        op: pb::client_request::Op,
        timeout: Duration,
    ) -> Result<pb::client_response::Result, FaasError> {
        self.request_stats(op, timeout).await.map(|(r, _)| r)
    }

    /// [`request`](Self::request), with the call's stats (default if the scheduler sent
    /// none).
    async fn request_stats(
        &self,
        op: pb::client_request::Op,
        timeout: Duration,
    ) -> Result<(pb::client_response::Result, pb::CallStats), FaasError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut p) = self.pending.lock() {
            p.insert(id, tx);
        }
        let lost = || FaasError::Connection {
            addr: self.addr.clone(),
            reason: "connection lost".into(),
        };
        let req = pb::ToScheduler {
            msg: Some(pb::to_scheduler::Msg::Request(pb::ClientRequest {
                id,
                op: Some(op),
            })),
        };
        if self.out.send(req).await.is_err() {
            self.forget(id);
            return Err(lost());
        }
        match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(resp)) => match resp.result {
                Some(pb::client_response::Result::Error(e)) => Err(FaasError::from_pb(e)),
                Some(r) => Ok((r, resp.stats.unwrap_or_default())),
                None => Err(FaasError::Protocol("an empty response".into())),
            },
            Ok(Err(_)) => Err(lost()),
            Err(_) => {
                self.forget(id);
                Err(FaasError::Timeout)
            }
        }
    }

    fn forget(&self, id: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&id);
        }
    }

    /// Registers (or replaces) function `name` with its cloudpickle bytes.
    ///
    /// # Errors
    /// BAD_REQUEST for a bad name or empty code; connection and store errors.
    pub async fn register_function(&self, name: &str, code: Vec<u8>) -> Result<(), FaasError> {
        let op = pb::client_request::Op::RegisterFunction(pb::RegisterFunction {
            name: name.to_string(),
            code: code.into(),
        });
        self.request(op, REGISTER_TIMEOUT).await.map(|_| ())
    }

    /// Registers (or replaces) a DAG: `edges` are (upstream, downstream) pairs.
    ///
    /// # Errors
    /// BAD_REQUEST for an invalid DAG, NOT_FOUND for an unregistered function.
    pub async fn register_dag(
        &self,
        name: &str,
        functions: &[String],
        edges: &[(String, String)],
    ) -> Result<(), FaasError> {
        let dag = pb::Dag {
            name: name.to_string(),
            functions: functions.to_vec(),
            edges: edges
                .iter()
                .map(|(from, to)| pb::Edge {
                    from: from.clone(),
                    to: to.clone(),
                })
                .collect(),
        };
        let op = pb::client_request::Op::RegisterDag(pb::RegisterDag { dag: Some(dag) });
        self.request(op, REGISTER_TIMEOUT).await.map(|_| ())
    }

    fn timeout_ms(options: &CallOptions) -> (u32, Duration) {
        let t = options.timeout.unwrap_or(DEFAULT_CALL_TIMEOUT);
        let ms = u32::try_from(t.as_millis()).unwrap_or(u32::MAX).max(1);
        (ms, t + GRACE)
    }

    /// Calls function `name`; its pickled result.
    ///
    /// # Errors
    /// The scheduler's errors ([`FaasError::Remote`]: FUNCTION_RAISED with the traceback,
    /// NOT_FOUND, TIMEOUT, …), connection errors.
    pub async fn call(
        &self,
        name: &str,
        args: Vec<Arg>,
        options: CallOptions,
    ) -> Result<Bytes, FaasError> {
        let (timeout_ms, wait) = Self::timeout_ms(&options);
        let op = pb::client_request::Op::Call(pb::Call {
            function: name.to_string(),
            args: Some(args_pb(&args)),
            protocol: options.protocol as i32,
            timeout_ms,
        });
        value(self.request(op, wait).await?)
    }

    /// Calls DAG `name` with each function's own arguments; the sink's pickled result.
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn call_dag(
        &self,
        name: &str,
        args: BTreeMap<String, Vec<Arg>>,
        options: CallOptions,
    ) -> Result<Bytes, FaasError> {
        self.call_dag_with_stats(name, args, options)
            .await
            .map(|(v, _)| v)
    }

    /// [`call_dag`](Self::call_dag), with how the scheduler ran the call: the protocol,
    /// attempts, aborts and causal metadata bytes (bench/serverless measures them).
    ///
    /// # Errors
    /// As [`call`](Self::call).
    pub async fn call_dag_with_stats(
        &self,
        name: &str,
        args: BTreeMap<String, Vec<Arg>>,
        options: CallOptions,
    ) -> Result<(Bytes, pb::CallStats), FaasError> {
        let (timeout_ms, wait) = Self::timeout_ms(&options);
        let op = pb::client_request::Op::CallDag(pb::CallDag {
            dag: name.to_string(),
            args: args.iter().map(|(f, a)| (f.clone(), args_pb(a))).collect(),
            protocol: options.protocol as i32,
            timeout_ms,
        });
        let (r, stats) = self.request_stats(op, wait).await?;
        Ok((value(r)?, stats))
    }
}

fn value(r: pb::client_response::Result) -> Result<Bytes, FaasError> {
    match r {
        pb::client_response::Result::Value(v) => Ok(v),
        _ => Err(FaasError::Protocol(
            "a call answered without a value".into(),
        )),
    }
}
