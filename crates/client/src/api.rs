//! The typed client API.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use bytes::Bytes;
use lattice::{Blob, Value};
use wire::convert::{value_from_pb, value_to_pb};
use wire::pb::{self, request::Op as ReqOp, response::Result as RespResult};

use crate::connection::{Connection, Credentials};
use crate::error::ClientError;
use crate::routing::Layout;

/// Client settings.
#[derive(Clone, Debug)]
pub struct ClientOptions {
    /// Time allowed for one request, including redirects. Default: 10 s.
    pub timeout: Duration,
    /// Most redirects (and retries at other replicas) for one request before giving up.
    /// Default: 10.
    pub max_redirects: usize,
    /// Replicas that must hold each write before it is acknowledged (0 or 1: the replica
    /// receiving it; others then get it by gossip). Default: 0.
    pub ack_replicas: u32,
    /// Acknowledge writes only once they are on disk at the replicas counted (the durable
    /// level, see docs/durability.md). Default: false (the node's default level).
    pub durable: bool,
    /// A user and password sent on every connection the client opens (to the front port,
    /// to workers, to nodes it is redirected to). Default: none (a node without users).
    pub credentials: Option<Credentials>,
    /// TLS on every connection the client opens. Default: none (plain TCP).
    pub tls: Option<crate::connection::ClientTls>,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            timeout: Duration::from_secs(10),
            max_redirects: 10,
            ack_replicas: 0,
            durable: false,
            credentials: None,
            tls: None,
        }
    }
}

/// The answer to [`Client::get_delta`].
#[derive(Clone, Debug, PartialEq)]
pub enum Delta {
    /// The caller's version is current.
    Unchanged,
    /// The key's value (or `None`: it does not exist) and its version.
    Changed {
        /// The value.
        value: Option<Value>,
        /// Its version, for the next call.
        version: u64,
    },
}

/// When an LWW assignment applies (as judged by the replica receiving it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Condition {
    /// Always.
    Always,
    /// Only if the key does not exist (Redis `SET NX`).
    IfAbsent,
    /// Only if the key exists (Redis `SET XX`).
    IfPresent,
}

struct Inner {
    /// The node's front address (topology, status, fallback).
    front: String,
    options: ClientOptions,
    layout: RwLock<Arc<Layout>>,
    /// Open connections by address. The lock is never held across an `.await`.
    connections: Mutex<HashMap<String, Connection>>,
    next_id: AtomicU64,
}

/// A latticekv client. Cheap to clone; clones share connections and the layout.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

fn bytes_of(b: impl AsRef<[u8]>) -> Bytes {
    Bytes::copy_from_slice(b.as_ref())
}

impl Client {
    /// Connects to a node's front address (`host:port`) with default options.
    pub async fn connect(addr: &str) -> Result<Client, ClientError> {
        Self::connect_with(addr, ClientOptions::default()).await
    }

    /// Connects with explicit options.
    pub async fn connect_with(addr: &str, options: ClientOptions) -> Result<Client, ClientError> {
        let inner = Arc::new(Inner {
            front: addr.to_string(),
            options,
            layout: RwLock::new(Arc::new(Layout::from_topology(&pb::Topology::default()))),
            connections: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
        });
        let client = Client { inner };
        client.refresh_topology().await?;
        Ok(client)
    }

    /// TLS of every new connection, if configured.
    pub(crate) fn tls(&self) -> Option<&crate::connection::ClientTls> {
        self.inner.options.tls.as_ref()
    }

    /// The credentials sent on every new connection.
    pub(crate) fn credentials(&self) -> Option<&Credentials> {
        self.inner.options.credentials.as_ref()
    }

    /// The node's front address the client connected to.
    pub(crate) fn front(&self) -> &str {
        &self.inner.front
    }

    /// The node's layout as last fetched.
    pub fn layout(&self) -> Arc<Layout> {
        self.inner
            .layout
            .read()
            .map(|l| l.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Fetches the node's topology again (after a redirect or a replication change).
    pub async fn refresh_topology(&self) -> Result<pb::Topology, ClientError> {
        let front = self.inner.front.clone();
        let topology = match self
            .call_at(&front, ReqOp::Topology(pb::GetTopology::default()))
            .await?
        {
            RespResult::Topology(t) => t,
            other => return Err(unexpected(&other)),
        };
        let layout = Arc::new(Layout::from_topology(&topology));
        match self.inner.layout.write() {
            Ok(mut l) => *l = layout,
            Err(p) => *p.into_inner() = layout,
        }
        Ok(topology)
    }

    async fn connection(&self, addr: &str) -> Result<Connection, ClientError> {
        if let Ok(conns) = self.inner.connections.lock() {
            if let Some(c) = conns.get(addr) {
                if !c.is_broken() {
                    return Ok(c.clone());
                }
            }
        }
        let c = tokio::time::timeout(
            self.inner.options.timeout,
            Connection::open_with(addr, self.tls(), self.credentials()),
        )
        .await
        .map_err(|_| ClientError::Timeout)??;
        if let Ok(mut conns) = self.inner.connections.lock() {
            // Another task may have connected meanwhile; keep one.
            match conns.get(addr) {
                Some(existing) if !existing.is_broken() => return Ok(existing.clone()),
                _ => {
                    conns.insert(addr.to_string(), c.clone());
                }
            }
        }
        Ok(c)
    }

    /// Sends one request to `addr` and returns its result (server errors as `Err`).
    async fn call_at(&self, addr: &str, op: ReqOp) -> Result<RespResult, ClientError> {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let req = pb::Request {
            id,
            op: Some(op),
            ack_replicas: self.inner.options.ack_replicas,
            durable: self.inner.options.durable,
        };
        let conn = self.connection(addr).await?;
        let resp = tokio::time::timeout(self.inner.options.timeout, conn.call(req))
            .await
            .map_err(|_| {
                // A silent peer (partitioned away) never breaks the socket: don't reuse it.
                conn.abandon();
                ClientError::Timeout
            })??;
        match resp.result {
            Some(RespResult::Error(e)) => Err(ClientError::from_pb(e)),
            Some(r) => Ok(r),
            None => Err(ClientError::Protocol("response without a result".into())),
        }
    }

    /// Sends a single-key request to a worker holding `key`, following redirects and, when
    /// a replica cannot be reached, trying the key's other replicas (refreshing the
    /// topology, which drops dead nodes once the cluster has declared them dead).
    async fn call_key(&self, key: &[u8], op: ReqOp) -> Result<RespResult, ClientError> {
        let mut redirects = 0;
        let mut tried: Vec<String> = Vec::new();
        let mut target: Option<String> = None;
        // Retrying is safe for everything but counter increments, which are not idempotent
        // (merges, LWW writes, set adds and removes are).
        let idempotent = !matches!(
            &op,
            ReqOp::Update(pb::Update {
                op: Some(pb::update::Op::CounterAdd(_)),
                ..
            })
        );
        loop {
            let addr = match target.take() {
                Some(a) => a,
                None => self.pick_addr(key, &tried),
            };
            match self.call_at(&addr, op.clone()).await {
                Err(e) if e.is_redirect() && redirects < self.inner.options.max_redirects => {
                    redirects += 1;
                    if redirects > 1 {
                        // Nodes disagree for a moment while a membership change spreads:
                        // give the views time to converge.
                        tokio::time::sleep(Duration::from_millis(20 * redirects as u64)).await;
                    }
                    if let ClientError::Server { redirect, .. } = &e {
                        target = redirect.first().cloned();
                    }
                    // A failed refresh is not fatal: the redirect address is still good.
                    let _ = self.refresh_topology().await;
                }
                Err(e)
                    if e.is_retryable()
                        && tried.len() < self.inner.options.max_redirects
                        && (idempotent || matches!(e, ClientError::Connect { .. })) =>
                {
                    tried.push(addr);
                    let _ = self.refresh_topology().await;
                }
                other => return other,
            }
        }
    }

    /// The address for `key`: one of its replicas not in `tried`, else the front port.
    fn pick_addr(&self, key: &[u8], tried: &[String]) -> String {
        let layout = self.layout();
        if tried.is_empty() {
            if let Some(a) = layout.addr_for(key) {
                return a.to_string();
            }
        }
        layout
            .replicas(key)
            .into_iter()
            .filter_map(|r| layout.addr(r).map(str::to_string))
            .find(|a| !tried.contains(a))
            .unwrap_or_else(|| self.inner.front.clone())
    }

    // ---- generic lattice operations --------------------------------------------------------

    /// Reads `key`: its lattice value, or `None` if it does not exist.
    pub async fn get(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, ClientError> {
        let key = key.as_ref();
        let op = ReqOp::Get(pb::Get { key: bytes_of(key) });
        match self.call_key(key, op).await? {
            RespResult::Get(g) => decode_value(g),
            other => Err(unexpected(&other)),
        }
    }

    /// Reads `key` from every one of its replicas and returns the merge of what they hold:
    /// sees every write any replica acknowledged (`GetAll`).
    pub async fn get_all(&self, key: impl AsRef<[u8]>) -> Result<Option<Value>, ClientError> {
        let key = key.as_ref();
        let op = ReqOp::GetAll(pb::GetAll { key: bytes_of(key) });
        match self.call_key(key, op).await? {
            RespResult::Get(g) => decode_value(g),
            other => Err(unexpected(&other)),
        }
    }

    /// Reads `key` at one given worker address, without redirects or retries elsewhere:
    /// what that replica holds (diagnostics, tests; see [`Layout::replicas`] and
    /// [`Layout::addr`] for the addresses of a key's replicas).
    pub async fn get_at(
        &self,
        addr: &str,
        key: impl AsRef<[u8]>,
    ) -> Result<Option<Value>, ClientError> {
        let op = ReqOp::Get(pb::Get {
            key: bytes_of(key.as_ref()),
        });
        match self.call_at(addr, op).await? {
            RespResult::Get(g) => decode_value(g),
            other => Err(unexpected(&other)),
        }
    }

    /// Reads `keys` at one given worker address in one request (`GetMany`), without
    /// redirects or retries elsewhere: per key, what that replica holds or the error it
    /// answered for it (a redirect for a key it does not hold). The batched
    /// [`get_at`](Client::get_at).
    ///
    /// # Errors
    /// The request failing as a whole.
    pub async fn get_many_at<K: AsRef<[u8]>>(
        &self,
        addr: &str,
        keys: &[K],
    ) -> Result<Vec<Result<Option<Value>, ClientError>>, ClientError> {
        self.get_many_at_with(addr, keys, false).await
    }

    /// [`get_many_at`](Client::get_many_at) answering each key's causal metadata only
    /// (`GetMany.metadata_only`): causal values' versions with their clocks and
    /// dependencies and empty payloads, LWW registers with their timestamps and empty
    /// values, other types in full. A node that predates the flag answers full values, so
    /// a caller must not rely on the payloads being empty.
    ///
    /// # Errors
    /// The request failing as a whole.
    pub async fn get_many_meta_at<K: AsRef<[u8]>>(
        &self,
        addr: &str,
        keys: &[K],
    ) -> Result<Vec<Result<Option<Value>, ClientError>>, ClientError> {
        self.get_many_at_with(addr, keys, true).await
    }

    async fn get_many_at_with<K: AsRef<[u8]>>(
        &self,
        addr: &str,
        keys: &[K],
        metadata_only: bool,
    ) -> Result<Vec<Result<Option<Value>, ClientError>>, ClientError> {
        let op = ReqOp::GetMany(pb::GetMany {
            keys: keys.iter().map(|k| bytes_of(k.as_ref())).collect(),
            metadata_only,
        });
        let results = multi(self.call_at(addr, op).await?, keys.len())?;
        Ok(results
            .into_iter()
            .map(|r| match r {
                KeyOutcome::Get(g) => decode_value(g),
                KeyOutcome::Error(e) => Err(e),
                KeyOutcome::Ack => Err(ClientError::Protocol("ack to a read".into())),
            })
            .collect())
    }

    /// Merges `value` into every replica of `key` before returning (`PutAll`).
    pub async fn put_all(&self, key: impl AsRef<[u8]>, value: Value) -> Result<(), ClientError> {
        let key = key.as_ref();
        let op = ReqOp::PutAll(pb::PutAll {
            key: bytes_of(key),
            value: Some(value_to_pb(&value)),
        });
        self.call_key(key, op).await.map(|_| ())
    }

    /// Reads `key` only if its value is not the one with `version` (from an earlier
    /// [`Delta::Changed`]; 0 for none): a cache revalidating its copy (`GetDelta`).
    pub async fn get_delta(
        &self,
        key: impl AsRef<[u8]>,
        version: u64,
    ) -> Result<Delta, ClientError> {
        let key = key.as_ref();
        let op = ReqOp::GetDelta(pb::GetDelta {
            key: bytes_of(key),
            version,
        });
        match self.call_key(key, op).await? {
            RespResult::Delta(d) if !d.changed => Ok(Delta::Unchanged),
            RespResult::Delta(d) => {
                let value = decode_value(pb::GetResult { value: d.value })?;
                Ok(Delta::Changed {
                    value,
                    version: d.version,
                })
            }
            other => Err(unexpected(&other)),
        }
    }

    /// Merges `value` into `key` (creating it). Writing another type than the key holds is
    /// a `WRONG_TYPE` server error.
    pub async fn put(&self, key: impl AsRef<[u8]>, value: Value) -> Result<(), ClientError> {
        let key = key.as_ref();
        let op = ReqOp::Put(pb::Put {
            key: bytes_of(key),
            value: Some(value_to_pb(&value)),
        });
        self.call_key(key, op).await.map(|_| ())
    }

    /// Deletes `key`; true if it existed.
    pub async fn delete(&self, key: impl AsRef<[u8]>) -> Result<bool, ClientError> {
        let key = key.as_ref();
        let op = ReqOp::Delete(pb::Delete { key: bytes_of(key) });
        Ok(ack(self.call_key(key, op).await?)? > 0)
    }

    /// Reads several keys with one request per worker involved; values in key order.
    pub async fn get_many<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
    ) -> Result<Vec<Option<Value>>, ClientError> {
        let groups = self.group(keys.iter().map(|k| k.as_ref()));
        let mut out: Vec<Option<Value>> = vec![None; keys.len()];
        let calls = groups.into_iter().map(|(addr, positions)| {
            let op = ReqOp::GetMany(pb::GetMany {
                keys: positions.iter().map(|&i| bytes_of(&keys[i])).collect(),
                ..Default::default()
            });
            async move { (positions, self.call_at(&addr, op).await) }
        });
        for (positions, result) in join_all(calls).await {
            let result = match result {
                Ok(r) => r,
                Err(e) if e.is_retryable() => {
                    // That worker is unreachable: read these keys one by one, which tries
                    // their other replicas.
                    for i in positions {
                        out[i] = self.get(&keys[i]).await?;
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let results = multi(result, positions.len())?;
            for (i, r) in positions.into_iter().zip(results) {
                out[i] = match r {
                    KeyOutcome::Get(g) => decode_value(g)?,
                    KeyOutcome::Error(e) if e.is_redirect() => self.get(&keys[i]).await?,
                    KeyOutcome::Error(e) => return Err(e),
                    KeyOutcome::Ack => return Err(ClientError::Protocol("ack to a read".into())),
                };
            }
        }
        Ok(out)
    }

    /// Merges several values with one request per worker involved.
    pub async fn put_many<K: AsRef<[u8]>>(&self, items: &[(K, Value)]) -> Result<(), ClientError> {
        let groups = self.group(items.iter().map(|(k, _)| k.as_ref()));
        let calls = groups.into_iter().map(|(addr, positions)| {
            let op = ReqOp::PutMany(pb::PutMany {
                puts: positions
                    .iter()
                    .map(|&i| pb::Put {
                        key: bytes_of(&items[i].0),
                        value: Some(value_to_pb(&items[i].1)),
                    })
                    .collect(),
            });
            async move { (positions, self.call_at(&addr, op).await) }
        });
        for (positions, result) in join_all(calls).await {
            let result = match result {
                Ok(r) => r,
                Err(e) if e.is_retryable() => {
                    // Merges are idempotent: write these one by one to reachable replicas.
                    for i in positions {
                        self.put(&items[i].0, items[i].1.clone()).await?;
                    }
                    continue;
                }
                Err(e) => return Err(e),
            };
            let results = multi(result, positions.len())?;
            for (i, r) in positions.into_iter().zip(results) {
                match r {
                    KeyOutcome::Error(e) if e.is_redirect() => {
                        self.put(&items[i].0, items[i].1.clone()).await?
                    }
                    KeyOutcome::Error(e) => return Err(e),
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Merges several values with ONE request to the node's front port, which runs each
    /// write at (or forwards it to) the key's replica and answers once every write was
    /// merged there: a transaction's commit batch (see docs/consistency.md). The whole
    /// batch is retried on connection trouble (merges are idempotent) until the timeout,
    /// at the other nodes' front ports in turn when the first one does not answer.
    pub async fn put_batch(&self, items: &[(Blob, Value)]) -> Result<(), ClientError> {
        if items.is_empty() {
            return Ok(());
        }
        let op = ReqOp::PutMany(pb::PutMany {
            puts: items
                .iter()
                .map(|(k, v)| pb::Put {
                    key: bytes_of(k),
                    value: Some(value_to_pb(v)),
                })
                .collect(),
        });
        let deadline = tokio::time::Instant::now() + self.inner.options.timeout;
        let mut backoff = Duration::from_millis(10);
        let mut attempt = 0;
        loop {
            // The node the client connected to first, then the others' front ports in turn:
            // any node takes the batch and forwards each write to its replicas.
            let front = {
                let mut targets = vec![self.inner.front.clone()];
                targets.extend(
                    self.layout()
                        .fronts
                        .iter()
                        .filter(|f| **f != self.inner.front)
                        .cloned(),
                );
                targets[attempt % targets.len()].clone()
            };
            attempt += 1;
            let failure = match self.call_at(&front, op.clone()).await {
                Ok(result) => multi(result, items.len())?
                    .into_iter()
                    .find_map(|o| match o {
                        KeyOutcome::Error(e) => Some(e),
                        _ => None,
                    }),
                Err(e) => Some(e),
            };
            match failure {
                None => return Ok(()),
                Some(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_millis(500));
                }
                Some(e) => return Err(e),
            }
        }
    }

    /// The request timeout of this client.
    pub fn timeout(&self) -> Duration {
        self.inner.options.timeout
    }

    /// Groups key positions by the address of the worker holding each key.
    fn group<'a>(&self, keys: impl Iterator<Item = &'a [u8]>) -> Vec<(String, Vec<usize>)> {
        let layout = self.layout();
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, key) in keys.enumerate() {
            let addr = layout.addr_for(key).unwrap_or(&self.inner.front);
            match groups.iter_mut().find(|(a, _)| a == addr) {
                Some((_, positions)) => positions.push(i),
                None => groups.push((addr.to_string(), vec![i])),
            }
        }
        groups
    }

    // ---- typed operations --------------------------------------------------------------

    async fn update(&self, key: &[u8], op: pb::update::Op) -> Result<i64, ClientError> {
        let req = ReqOp::Update(pb::Update {
            key: bytes_of(key),
            op: Some(op),
        });
        ack(self.call_key(key, req).await?)
    }

    /// Sets an LWW register, timestamped by the worker's clock.
    pub async fn assign(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
    ) -> Result<(), ClientError> {
        self.assign_if(key, value, Condition::Always)
            .await
            .map(|_| ())
    }

    /// Sets an LWW register under a condition; true if it was written.
    pub async fn assign_if(
        &self,
        key: impl AsRef<[u8]>,
        value: impl AsRef<[u8]>,
        condition: Condition,
    ) -> Result<bool, ClientError> {
        let condition = match condition {
            Condition::Always => pb::update::Condition::Always,
            Condition::IfAbsent => pb::update::Condition::IfAbsent,
            Condition::IfPresent => pb::update::Condition::IfPresent,
        };
        let op = pb::update::Op::Assign(pb::update::Assign {
            value: bytes_of(value),
            condition: condition as i32,
        });
        Ok(self.update(key.as_ref(), op).await? > 0)
    }

    /// Reads an LWW register's bytes (`None` if absent).
    pub async fn get_lww(&self, key: impl AsRef<[u8]>) -> Result<Option<Blob>, ClientError> {
        match self.get(key).await? {
            None => Ok(None),
            Some(Value::Lww(l)) => Ok(Some(l.value)),
            Some(v) => Err(type_error("lww", &v)),
        }
    }

    /// Adds members to an OR-set; returns how many were new.
    pub async fn set_add<I, M>(&self, key: impl AsRef<[u8]>, members: I) -> Result<u64, ClientError>
    where
        I: IntoIterator<Item = M>,
        M: AsRef<[u8]>,
    {
        let op = pb::update::Op::SetAdd(pb::update::SetAdd {
            members: members.into_iter().map(bytes_of).collect(),
        });
        Ok(self.update(key.as_ref(), op).await?.max(0) as u64)
    }

    /// Removes members from an OR-set (observed-remove); returns how many were present.
    pub async fn set_remove<I, M>(
        &self,
        key: impl AsRef<[u8]>,
        members: I,
    ) -> Result<u64, ClientError>
    where
        I: IntoIterator<Item = M>,
        M: AsRef<[u8]>,
    {
        let op = pb::update::Op::SetRemove(pb::update::SetRemove {
            members: members.into_iter().map(bytes_of).collect(),
        });
        Ok(self.update(key.as_ref(), op).await?.max(0) as u64)
    }

    /// Members of a set (OR-set, grow-only set or ordered set), sorted.
    pub async fn set_members(&self, key: impl AsRef<[u8]>) -> Result<Vec<Blob>, ClientError> {
        match self.get(key).await? {
            None => Ok(Vec::new()),
            Some(Value::OrSet(s)) => Ok(s.iter().cloned().collect()),
            Some(Value::Set(s)) => Ok(s.iter().cloned().collect()),
            Some(Value::OrderedSet(s)) => Ok(s.iter().cloned().collect()),
            Some(v) => Err(type_error("a set", &v)),
        }
    }

    /// Adds `delta` to a PN-counter; returns its new value.
    pub async fn counter_add(&self, key: impl AsRef<[u8]>, delta: i64) -> Result<i64, ClientError> {
        let op = pb::update::Op::CounterAdd(pb::update::CounterAdd { delta });
        self.update(key.as_ref(), op).await
    }

    /// A PN-counter's value (0 if absent).
    pub async fn counter_get(&self, key: impl AsRef<[u8]>) -> Result<i64, ClientError> {
        match self.get(key).await? {
            None => Ok(0),
            Some(Value::Counter(c)) => i64::try_from(c.value())
                .map_err(|_| ClientError::Protocol("counter outside the i64 range".into())),
            Some(v) => Err(type_error("counter", &v)),
        }
    }

    /// Sets how many workers of each of its nodes hold `key` (its local replication),
    /// keeping the key's other factors.
    pub async fn set_replication(
        &self,
        key: impl AsRef<[u8]>,
        local: u32,
    ) -> Result<(), ClientError> {
        let mut vector = self.layout().vector(key.as_ref());
        vector.memory.local = local;
        self.set_vector(key, vector).await
    }

    /// Sets the whole replication vector of `key`: memory-tier nodes × workers and
    /// disk-tier nodes × workers. An operator's setting: the elasticity policy leaves it
    /// alone.
    pub async fn set_vector(
        &self,
        key: impl AsRef<[u8]>,
        vector: placement::ReplicationVector,
    ) -> Result<(), ClientError> {
        self.send_vector(key, vector, false).await
    }

    /// [`set_vector`](Self::set_vector) on behalf of the elasticity policy: the entry is
    /// marked as the policy's, so the policy (even a restarted monitor) may change or reset
    /// it later.
    pub async fn set_policy_vector(
        &self,
        key: impl AsRef<[u8]>,
        vector: placement::ReplicationVector,
    ) -> Result<(), ClientError> {
        self.send_vector(key, vector, true).await
    }

    async fn send_vector(
        &self,
        key: impl AsRef<[u8]>,
        vector: placement::ReplicationVector,
        by_policy: bool,
    ) -> Result<(), ClientError> {
        let op = ReqOp::Admin(pb::Admin {
            op: Some(pb::admin::Op::SetReplication(pb::SetReplication {
                key: bytes_of(key),
                global: vector.memory.global,
                local: vector.memory.local,
                disk_global: Some(vector.disk.global),
                disk_local: Some(vector.disk.local),
                reset: false,
                by_policy,
            })),
        });
        let front = self.inner.front.clone();
        self.call_at(&front, op).await?;
        self.refresh_topology().await.map(|_| ())
    }

    /// Hands the node an elasticity monitor's report of its latest rounds (shown in the
    /// node's status). Needs admin permission on a node with users.
    pub async fn policy_report(&self, report: pb::PolicyReport) -> Result<(), ClientError> {
        let op = ReqOp::Admin(pb::Admin {
            op: Some(pb::admin::Op::PolicyReport(report)),
        });
        let front = self.inner.front.clone();
        self.call_at(&front, op).await.map(|_| ())
    }

    /// Returns `key` to the cluster's default placement (drops its explicit vector).
    pub async fn reset_vector(&self, key: impl AsRef<[u8]>) -> Result<(), ClientError> {
        let op = ReqOp::Admin(pb::Admin {
            op: Some(pb::admin::Op::SetReplication(pb::SetReplication {
                key: bytes_of(key),
                reset: true,
                ..Default::default()
            })),
        });
        let front = self.inner.front.clone();
        self.call_at(&front, op).await?;
        self.refresh_topology().await.map(|_| ())
    }

    /// The node's statistics.
    pub async fn status(&self) -> Result<pb::Status, ClientError> {
        let front = self.inner.front.clone();
        match self
            .call_at(&front, ReqOp::Status(pb::GetStatus {}))
            .await?
        {
            RespResult::Status(s) => Ok(s),
            other => Err(unexpected(&other)),
        }
    }

    /// Round trip to the front port.
    pub async fn ping(&self) -> Result<(), ClientError> {
        let front = self.inner.front.clone();
        self.call_at(&front, ReqOp::Ping(pb::Ping {}))
            .await
            .map(|_| ())
    }
}

fn type_error(expected: &'static str, v: &Value) -> ClientError {
    ClientError::UnexpectedType {
        expected,
        found: v.lattice_type(),
    }
}

fn unexpected(r: &RespResult) -> ClientError {
    ClientError::Protocol(format!("unexpected response {r:?}"))
}

fn decode_value(g: pb::GetResult) -> Result<Option<Value>, ClientError> {
    g.value
        .as_ref()
        .map(value_from_pb)
        .transpose()
        .map_err(|e| ClientError::Protocol(e.to_string()))
}

fn ack(r: RespResult) -> Result<i64, ClientError> {
    match r {
        RespResult::Ack(a) => Ok(a.count),
        other => Err(unexpected(&other)),
    }
}

enum KeyOutcome {
    Get(pb::GetResult),
    Ack,
    Error(ClientError),
}

fn multi(r: RespResult, expected: usize) -> Result<Vec<KeyOutcome>, ClientError> {
    let RespResult::Multi(m) = r else {
        return Err(unexpected(&r));
    };
    if m.results.len() != expected {
        return Err(ClientError::Protocol(format!(
            "{} results for {expected} keys",
            m.results.len()
        )));
    }
    m.results
        .into_iter()
        .map(|k| match k.result {
            Some(pb::key_result::Result::Get(g)) => Ok(KeyOutcome::Get(g)),
            Some(pb::key_result::Result::Ack(_)) => Ok(KeyOutcome::Ack),
            Some(pb::key_result::Result::Error(e)) => {
                Ok(KeyOutcome::Error(ClientError::from_pb(e)))
            }
            None => Err(ClientError::Protocol("empty key result".into())),
        })
        .collect()
}

/// Runs futures concurrently on the current task and collects their outputs in order.
pub(crate) async fn join_all<F: std::future::Future>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output> {
    let futures: Vec<_> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(outputs.iter_mut()) {
            if let Some(f) = slot {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => {
                        *out = Some(v);
                        *slot = None;
                    }
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    outputs.into_iter().flatten().collect()
}
